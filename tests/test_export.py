"""Export: strict JSON valid against the shipped schema, exact round trips, safe writing."""

from __future__ import annotations

import json
import math
import typing
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from transformer_walkthrough.config import ACTIVATIONS, FINAL_NORMS, Config, ModelConfig
from transformer_walkthrough.errors import ExportError
from transformer_walkthrough.files.export import check_target, export, schema, to_json, trace_to_dict
from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.model.transformer import run_forward


def strict_load(text: str) -> dict:
    def refuse(name: str) -> None:
        raise ValueError(f"non-standard JSON literal {name}")

    return json.loads(text, parse_constant=refuse)


def as_array(values: list[list[object]]) -> np.ndarray:
    spelled = {"-inf": -math.inf, "inf": math.inf, "nan": math.nan}
    return np.array([[spelled[v] if isinstance(v, str) else v for v in row] for row in values], dtype=float)


def test_the_schema_enums_are_the_configs_values(trace: Trace) -> None:
    """The schema lists each convention's values as config/conventions.py defines them, and refuses others."""
    model = schema()["properties"]["config"]["properties"]["model"]["properties"]
    hints = typing.get_type_hints(ModelConfig)
    literals = {n: typing.get_args(h) for n, h in hints.items() if typing.get_origin(h) is typing.Literal}
    assert {"output_head", "final_norm", "activation", "positional_encoding", "dtype"} <= set(literals)
    for name, values in literals.items():
        assert model[name]["enum"] == list(values), name
    assert literals["activation"] == tuple(ACTIVATIONS) and literals["final_norm"] == FINAL_NORMS
    doc = strict_load(to_json(trace_to_dict(trace)))
    doc["config"]["model"]["positional_encoding"] = "alibi"
    with pytest.raises(jsonschema.ValidationError, match="'alibi' is not one of"):
        jsonschema.validate(doc, schema())


def test_export_is_schema_valid_strict_json_that_reloads_exactly(trace: Trace) -> None:
    doc = strict_load(to_json(trace_to_dict(trace)))
    jsonschema.Draft202012Validator.check_schema(schema())
    jsonschema.validate(doc, schema())
    assert doc["schema_version"] == 2
    assert [s["id"] for s in doc["stages"]] == [s.id for s in trace]
    assert doc["source_tokens"] == ["the", "cat", "is"]
    assert doc["config"]["model"]["d_model"] == 4 and doc["config"]["vocabulary"] == list(trace.vocabulary)
    for exported, stage in zip(doc["stages"], trace, strict=True):
        assert list(exported["matrices"]) == list(stage.matrices)
        for name, m in stage.matrices.items():
            e = exported["matrices"][name]
            assert e["shape"] == list(m.shape) and e["rows"] == list(m.rows) and e["cols"] == list(m.cols)
            assert np.array_equal(as_array(e["values"]), m.values)  # bit for bit, -inf included
    assert doc["stages"][8]["matrices"]["M"]["values"][0][1] == "-inf"
    assert doc["prediction"][0]["after"] == "<start>" and doc["prediction"][0]["expected"] == "sleeping"


def test_every_number_can_be_recomputed_from_the_file(trace: Trace) -> None:
    """From the exported weights alone, recompute the first head of the masked attention."""
    doc = strict_load(to_json(trace_to_dict(trace)))
    stage = {s["id"]: {k: as_array(v["values"]) for k, v in s["matrices"].items()} for s in doc["stages"]}
    emb = stage["decoder.embedding"]
    x = (
        emb["E"][[doc["vocabulary"].index(t) for t in doc["target_tokens"]]]
        + stage["decoder.positional-encoding"]["PE"]
    )
    masked = stage["decoder.0.masked-attention"]
    s1 = (x @ masked["W_Q1"]) @ (x @ masked["W_K1"]).T / math.sqrt(2) + masked["M"]
    a1 = np.exp(s1 - s1.max(axis=1, keepdims=True))
    a1 /= a1.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(a1, masked["A1"], rtol=1e-12)


def test_same_seed_gives_byte_identical_exports(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    export(run_forward(Config(seed=9)), a, list(run_forward(Config(seed=9))))
    trace = run_forward(Config(seed=9))
    export(trace, b, list(trace))
    assert a.read_bytes() == b.read_bytes()
    other = run_forward(Config(seed=10))
    assert to_json(trace_to_dict(other)) != a.read_text(encoding="utf-8")


def test_flatten_and_bias_exports_are_schema_valid() -> None:
    for model in (
        ModelConfig(output_head="flatten"),
        ModelConfig(attention_bias=True, scale_embeddings=True),
    ):
        doc = strict_load(to_json(trace_to_dict(run_forward(Config(model=model)))))
        jsonschema.validate(doc, schema())


def test_npz_holds_every_matrix_under_stage_and_name(trace: Trace, tmp_path: Path) -> None:
    path = tmp_path / "trace.npz"
    export(trace, path, list(trace))
    with np.load(path) as npz:
        names = set(npz.files)
        assert names == {f"{s.id}/{n}" for s in trace for n in s.matrices}
        assert np.array_equal(
            npz["decoder.0.masked-attention/S1+M"], trace["decoder.0.masked-attention"]["S1+M"]
        )


def test_npz_with_gradients_holds_one_for_every_matrix_but_the_constants(tmp_path: Path) -> None:
    from transformer_walkthrough.model.backprop import backward
    from transformer_walkthrough.model.transformer import init_weights

    config = Config()
    w = init_weights(config)
    t = run_forward(config, w)
    grads = backward(t, w)
    path = tmp_path / "grads.npz"
    export(t, path, list(t), grads=grads)
    with np.load(path) as npz:
        gradients = {name for name in npz.files if "/dL/d" in name}
        constants = {
            f"{s.id}/dL/d{n}" for s in t for n, m in s.matrices.items() if m.role in ("mask", "constant")
        }
        assert (
            "decoder.0.masked-attention/dL/dM" in constants
            and "encoder.positional-encoding/dL/dPE" in constants
        )
        assert gradients == {f"{s.id}/dL/d{n}" for s in t for n in s.matrices} - constants
        np.testing.assert_array_equal(
            npz["decoder.0.masked-attention/dL/dS1"], grads.stages["decoder.0.masked-attention"]["S1"]
        )


def test_stage_filter(trace: Trace) -> None:
    doc = strict_load(to_json(trace_to_dict(trace, trace.select(["cross-attention"]))))
    assert [s["id"] for s in doc["stages"]] == ["decoder.0.cross-attention"]
    jsonschema.validate(doc, schema())


def test_check_target_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    existing = tmp_path / "out.json"
    existing.write_text("keep me")
    with pytest.raises(ExportError, match=r"already exists; pass --force"):
        check_target(str(existing), force=False)
    assert check_target(str(existing), force=True) == existing
    with pytest.raises(ExportError, match="is a directory"):
        check_target(str(tmp_path / "."), force=True)
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(ExportError, match="is a directory"):
        check_target(str(tmp_path / "dir.json"), force=True)
    with pytest.raises(ExportError, match=r"unknown format \.csv; use \.json, \.npz, \.html, \.md or \.tex"):
        check_target(str(tmp_path / "out.csv"), force=False)
    with pytest.raises(ExportError, match=r"unknown format \(no suffix\)"):
        check_target(str(tmp_path / "out"), force=False)
    with pytest.raises(ExportError, match="no such directory"):
        check_target(str(tmp_path / "missing" / "out.json"), force=False)
    assert check_target("-", force=False) is None
    assert existing.read_text() == "keep me"


def test_write_is_atomic_and_leaves_no_temporary_files(trace: Trace, tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    path.write_text("old")
    export(trace, path, list(trace), force=True)
    assert strict_load(path.read_text(encoding="utf-8"))["schema_version"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_no_weights_leaves_out_exactly_the_learned_parameters(trace: Trace) -> None:
    doc = strict_load(to_json(trace_to_dict(trace, weights=False)))
    jsonschema.validate(doc, schema())
    kept = {name for s in doc["stages"] for name in s["matrices"]}
    assert kept.isdisjoint(
        {"E", "W_Q1", "W_K2", "W_V1", "W_O", "gamma", "beta", "W_1", "b_1", "W_2", "b_2", "W", "b"}
    )
    assert {"X", "PE", "M", "Q1", "S1+M", "A2", "concat", "sum", "hidden", "logits", "probabilities"} <= kept


def test_exported_files_are_readable_by_others_like_any_new_file(trace: Trace, tmp_path: Path) -> None:
    import os
    import stat

    old = os.umask(0o022)
    try:
        export(trace, tmp_path / "a.json", list(trace))
        export(trace, tmp_path / "a.npz", list(trace))
    finally:
        os.umask(old)
    for name in ("a.json", "a.npz"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644


@pytest.mark.parametrize("numbers_at_once", [65_536, 5, 1])
def test_json_file_streams_the_same_bytes_as_the_whole_document(
    trace: Trace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, numbers_at_once: int
) -> None:
    """The file is written a few rows at a time; its bytes are those of the document built whole."""
    from transformer_walkthrough.files import export as module
    from transformer_walkthrough.model.backprop import backward
    from transformer_walkthrough.model.transformer import init_weights

    monkeypatch.setattr(module, "_NUMBERS_AT_ONCE", numbers_at_once)  # 5: pieces of 1 to 5 rows
    config = Config(model=ModelConfig(dtype="float32"), seed=3)
    w = init_weights(config)
    small = run_forward(config, w)
    for t, grads in ((trace, None), (small, backward(small, w))):
        path = tmp_path / f"{numbers_at_once}-{grads is None}.json"
        export(t, path, list(t), grads=grads)
        whole = to_json(trace_to_dict(t, grads=grads)) + "\n"
        assert path.read_text(encoding="utf-8") == whole
        assert "".join(export(t, None, list(t), grads=grads)) == whole  # stdout, in pieces
        assert '"-inf"' in whole and "[[" in whole
