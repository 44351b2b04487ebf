"""The pieces redesign changed no number: every shipped config's JSON export equals the one committed
before its first change (``tests/data/before-pieces``, written by ``walkthrough export --backward`` at
a27b4b0): the same stages in the same order, the same sources, the same matrices with the same names,
labels and shapes, values and gradients equal to 1e-15 (relative to the matrix's largest |value|)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app

ROOT = Path(__file__).resolve().parent.parent
BEFORE = Path(__file__).resolve().parent / "data" / "before-pieces"
CONFIGS = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))
TOLERANCE = 1e-15


def test_every_shipped_config_has_its_export_from_before() -> None:
    assert sorted(p.name.removesuffix(".json.gz") for p in BEFORE.glob("*.json.gz")) == CONFIGS


def _close(now: list, before: list, where: str) -> None:
    a, b = np.asarray(now, dtype=float), np.asarray(before, dtype=float)
    assert a.shape == b.shape, where
    scale = max(1.0, float(np.abs(b[np.isfinite(b)]).max(initial=0.0)))
    assert np.array_equal(np.isinf(a), np.isinf(b)), where
    assert np.array_equal(a[np.isinf(a)], b[np.isinf(b)]), where
    finite = np.isfinite(b)
    assert np.abs(a[finite] - b[finite]).max(initial=0.0) <= TOLERANCE * scale, where


@pytest.mark.parametrize("name", CONFIGS)
def test_export_equals_the_one_from_before_the_redesign(name: str, tmp_path: Path) -> None:
    with gzip.open(BEFORE / f"{name}.json.gz", "rt") as f:
        before = json.load(f)
    backward = any("gradients" in s for s in before["stages"])
    out = tmp_path / "now.json"
    config = str(ROOT / "configs" / f"{name}.yaml")
    args = ["export", str(out), "-c", config, *(["--backward"] if backward else [])]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    now = json.loads(out.read_text())
    assert [s["id"] for s in now["stages"]] == [s["id"] for s in before["stages"]]
    for s_now, s_before in zip(now["stages"], before["stages"], strict=True):
        assert s_now["kind"] == s_before["kind"]
        assert s_now["sources"] == s_before["sources"], s_now["id"]
        assert list(s_now["matrices"]) == list(s_before["matrices"]), s_now["id"]
        for key, m_before in s_before["matrices"].items():
            m_now = s_now["matrices"][key]
            where = f"{s_now['id']}/{key}"
            assert {k: v for k, v in m_now.items() if k != "values"} == {
                k: v for k, v in m_before.items() if k != "values"
            }, where
            _close(m_now["values"], m_before["values"], where)
        if "gradients" in s_before:
            assert list(s_now["gradients"]) == list(s_before["gradients"]), s_now["id"]
            for key, g_before in s_before["gradients"].items():
                g_now = s_now["gradients"][key]
                g_now = g_now["values"] if isinstance(g_now, dict) else g_now
                g_before = g_before["values"] if isinstance(g_before, dict) else g_before
                _close(g_now, g_before, f"{s_now['id']}/d{key}")
    for p_now, p_before in zip(now["prediction"], before["prediction"], strict=True):
        tops = [t["token"] for t in p_now["top"]], [t["token"] for t in p_before["top"]]
        assert (p_now["predicted"], tops[0]) == (p_before["predicted"], tops[1])
        assert p_now["probability"] == pytest.approx(p_before["probability"], abs=TOLERANCE)
