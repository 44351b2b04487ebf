"""A newcomer's first ten minutes (issue 36, points 18–20): `make test` on every core without the
slow sweeps (CI runs them), the README's Quick start on a system Python that refuses pip, the
browser CI installs for the document tests, and shell completion that does not slow start-up."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import built_once, run_folder

ROOT = Path(__file__).resolve().parent.parent


def _make(*args: str, env: dict[str, str] | None = None) -> str:
    """What `make -n` would run (nothing is run), with the environment given (CI unset by default)."""
    environment = {k: v for k, v in os.environ.items() if k not in ("CI", "SLOW")} | (env or {})
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), *args], capture_output=True, text=True, env=environment, check=True
    )
    return done.stdout


def _pytest_line(made: str) -> str:
    lines = [line for line in made.splitlines() if " -m pytest" in line]
    assert len(lines) == 1, made
    return lines[0]


def test_make_test_runs_on_every_core_and_leaves_the_slow_sweeps_to_ci() -> None:
    pytest.importorskip("xdist")  # the test extra's, pinned: `make test` installs it
    quick = _pytest_line(_make("test"))
    assert "-n auto" in quick and "--dist loadfile" in quick and '-m "not slow"' in quick
    for ci in (_make("test", env={"CI": "true"}), _make("test-all")):
        line = _pytest_line(ci)
        assert "-n auto" in line and "not slow" not in line


def test_the_slow_marker_and_xdist_are_the_projects() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python ≥ 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pinned = [d for d in project["project"]["optional-dependencies"]["test"] if d.startswith("pytest-xdist")]
    assert len(pinned) == 1 and re.fullmatch(r"pytest-xdist==[\d.]+", pinned[0])
    markers = project["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("slow:") for m in markers)
    assert "--strict-markers" in project["tool"]["pytest"]["ini_options"]["addopts"]  # a typo'd mark fails


def test_a_checkpoint_built_for_one_worker_is_not_built_again_for_the_next(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers of one run ask for the same checkpoints: the second reads the first's."""
    builds: list[Path] = []

    def build(folder: Path) -> dict[str, Path]:
        builds.append(folder)
        (folder / "weights").write_text("w")
        return {"tiny": folder / "weights"}

    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        assert run_folder(tmp_path_factory) == tmp_path_factory.getbasetemp().parent  # the run's
        got = built_once(tmp_path, "tiny", build)
        assert got["tiny"].read_text() == "w"
    assert builds == [tmp_path / "tiny"]
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert run_folder(tmp_path_factory) == tmp_path_factory.getbasetemp()


def test_the_readme_says_to_use_a_venv_where_the_system_python_refuses_pip() -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Quick start")
    quick = readme[start : readme.index("\n## ", start + 1)]
    assert "python3 -m venv .venv" in quick and "externally-managed-environment" in quick
    assert quick.index("python3 -m venv") < quick.index("pip install .")  # the venv before pip
    assert "make run" in quick


def test_the_readme_installs_what_ci_installs_for_the_document_tests() -> None:
    def packages(text: str) -> set[str]:
        line = next(line for line in text.splitlines() if "apt-get install" in line)
        return {word for word in line.split() if not word.startswith("-") and word[0].isalpha()} - {
            "sudo", "apt-get", "install",
        }  # fmt: skip

    ci = packages((ROOT / ".ci" / "run").read_text().replace(">/dev/null", ""))
    assert {"chromium", "chromium-driver"} <= ci
    assert packages((ROOT / "README.md").read_text()) == ci


def _complete(*words: str) -> list[str]:
    """What the shell's Tab offers after ``walkthrough *words`` (bash's protocol, as the script
    `walkthrough --install-completion` installs asks for it)."""
    line = " ".join(["walkthrough", *words])
    env = dict(os.environ, _WALKTHROUGH_COMPLETE="complete_bash", COMP_WORDS=line, COMP_CWORD=str(len(words)))
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "transformer_walkthrough"], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_the_shell_completes_stage_ids_and_kinds_of_the_config_given(runner) -> None:
    from transformer_walkthrough.cli import app

    listed = runner.invoke(app, ["stages", "-c", "configs/bert-style.yaml"], env={"COLUMNS": "200"}).stdout
    ids = [line.split()[0] for line in listed.splitlines() if line.startswith("encoder.")]
    assert _complete("step", "-c", "configs/bert-style.yaml", "-s", "encoder.") == ids
    assert _complete("step", "-s", "decoder.0.m") == ["decoder.0.masked-attention"]
    assert "cross-attention" in _complete("export", "x.md", "-s", "cr")  # a kind, for `-s KIND`
    assert _complete("explain", "-c", "configs/no-such.yaml", "-s", "") == []  # said when it runs


def test_the_shell_completes_config_paths() -> None:
    assert _complete("run", "-c", "configs/gp") == ["configs/gpt-style.yaml"]
    shipped = sorted(f"configs/{p.name}" for p in (ROOT / "configs").glob("*.yaml"))
    assert _complete("run", "-c", "conf") == shipped  # the one folder that matches, opened


def test_completion_is_offered_and_costs_help_no_import(runner) -> None:
    from transformer_walkthrough.cli import app

    assert "--install-completion" in runner.invoke(app, ["--help"]).stdout
    code = (
        "import sys; from transformer_walkthrough.cli import app\n"
        "try:\n    app(['--help'], prog_name='walkthrough')\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('numpy', 'yaml', 'rich.table') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"
