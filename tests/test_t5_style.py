"""T5's conventions (configs/t5-style.yaml: relative position buckets, no 1/√d_k, pre-norm RMSNorm,
gated GELU, no biases, the tied output scaled by d_model^-0.5) against the canonical implementation,
transformers' own ``T5ForConditionalGeneration`` (eager), loaded with the same weights.

transformers' T5 computes its RMSNorm's mean square in float32 even when the model is float64; the
float64 comparison removes that cast (``tests/exact_t5.py``), and nothing else. The buckets are
float32 arithmetic in T5 by design, and so are ours: they are compared with transformers' own
``_relative_position_bucket`` over thousands of distances, on a bucket's edge too.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers.models.t5.modeling_t5 import T5Attention

from transformer_walkthrough.checkpoints.family import convert, model_keys
from transformer_walkthrough.checkpoints.t5 import T5
from transformer_walkthrough.checkpoints.tensors import Taker
from transformer_walkthrough.compare.t5 import t5_with
from transformer_walkthrough.compare.verify import recompute
from transformer_walkthrough.config import Config, load_config
from transformer_walkthrough.model import functional as F
from transformer_walkthrough.model.backprop import backward, next_tokens
from transformer_walkthrough.model.generation import compare, generate_cached
from transformer_walkthrough.model.kinds import KINDS
from transformer_walkthrough.model.transformer import Weights, init_weights, run_forward
from transformer_walkthrough.views.documents.formulas import latex_lines
from transformer_walkthrough.views.explain import explain, explainable

from . import exact_t5

T5_PATH = Path(__file__).resolve().parents[1] / "configs" / "t5-style.yaml"
T5_STYLE = load_config(T5_PATH)


def _with(
    config: Config, sentence: str | None = None, encoder_words: int | None = None, **model: object
) -> Config:
    more = {"sentence": sentence, "encoder_words": encoder_words, "vocabulary": None} if sentence else {}
    return dataclasses.replace(config, **more, model=dataclasses.replace(config.model, **model))


# T5 v1.0's feed-forward (ReLU) with an output layer of its own (Flan-T5's untied head, unscaled);
# and a longer sentence with heads of their own width (d_kv 3, not d_model / num_heads) and three
# layers, where both stacks reach the log-spaced buckets and the last bucket's cap.
UNTIED = _with(
    T5_STYLE, feed_forward="standard", activation="relu", tie_embeddings=False, scale_tied_output=False
)
LONG = _with(
    T5_STYLE, "The old cat on the mat is now sleeping very comfortably.", 6,
    head_dim=3, num_encoder_layers=3, num_decoder_layers=3,
)  # fmt: skip
CONFIGS = {"t5-style": T5_STYLE, "relu, untied": UNTIED, "long, d_kv 3": LONG}
ATTENTIONS = ("self-attention", "masked-attention", "cross-attention")


def _trained_looking(config: Config) -> Weights:
    """The seed's weights with norms that are not all 1: a gamma of ones would hide a swapped norm."""
    w = init_weights(config)
    rng = np.random.default_rng(7)
    for name in w:
        if name.endswith("/gamma"):
            w[name][:] = rng.uniform(0.5, 1.5, size=w[name].shape)
    return w


def _t5_forward(config: Config, trace, model) -> object:
    with torch.no_grad():
        return model(
            input_ids=torch.tensor([list(trace.source_ids)]),
            decoder_input_ids=torch.tensor([list(trace.target_ids)]),
            output_attentions=True, output_hidden_states=True,
        )  # fmt: skip


@pytest.mark.parametrize("name", CONFIGS)
def test_the_forward_equals_t5_for_conditional_generation_in_float64(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    exact_t5.float64(monkeypatch)
    config = CONFIGS[name]
    w = _trained_looking(config)
    trace = run_forward(config, w)
    model = t5_with(config, w, torch.float64)
    biases: dict[str, torch.Tensor] = {}  # the bias each stack's first layer computes and hands up
    for side in ("encoder", "decoder"):
        attention = getattr(model, side).block[0].layer[0].SelfAttention
        attention.register_forward_hook(lambda mod, args, out, side=side: biases.__setitem__(side, out[1]))
    out = _t5_forward(config, trace, model)
    m = config.model
    theirs = {"self-attention": out.encoder_attentions, "masked-attention": out.decoder_attentions,
              "cross-attention": out.cross_attentions}  # fmt: skip
    for kind in ATTENTIONS:
        side = "encoder" if kind == "self-attention" else "decoder"
        for i in range(m.num_encoder_layers if side == "encoder" else m.num_decoder_layers):
            stage = trace[f"{side}.{i}.{kind}"]
            for h in range(1, m.num_heads + 1):
                assert np.max(np.abs(stage[f"A{h}"] - theirs[kind][i][0, h - 1].numpy())) <= 1e-12, (
                    kind,
                    i,
                    h,
                )
                if kind != "cross-attention":  # every layer adds the first layer's bias
                    assert np.max(np.abs(stage[f"B{h}"] - biases[side][0, h - 1].numpy())) == 0.0, (
                        kind,
                        i,
                        h,
                    )
            assert ("B1" in stage) == (kind != "cross-attention")
    for i in range(m.num_encoder_layers - 1):  # the residual stream after each layer but the last
        stream = trace[f"encoder.{i}.residual-2"]["output"]
        assert np.max(np.abs(stream - out.encoder_hidden_states[i + 1][0].numpy())) <= 1e-12
    assert (
        np.max(np.abs(trace["encoder.final-norm"]["output"] - out.encoder_last_hidden_state[0].numpy()))
        <= 1e-12
    )
    assert np.max(np.abs(trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-10


@pytest.mark.parametrize("name", CONFIGS)
def test_every_gradient_equals_t5_autograd(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The bias tables' gradients gather every layer's (the first layer's R is every layer's)."""
    exact_t5.float64(monkeypatch)
    config = CONFIGS[name]
    w = _trained_looking(config)
    trace = run_forward(config, w)
    ours = backward(trace, w)
    model = t5_with(config, w, torch.float64)
    logits = model(
        input_ids=torch.tensor([list(trace.source_ids)]),
        decoder_input_ids=torch.tensor([list(trace.target_ids)]),
    ).logits[0]
    targets = next_tokens(trace)
    loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(targets[:-1]))
    loss.backward()
    assert ours.loss == pytest.approx(loss.item(), abs=1e-12)
    # Their gradients mapped onto our parameters: the family's name map walked forward, as the
    # converter maps their weights.
    g = {name: p.grad.numpy() for name, p in model.named_parameters()}
    theirs = convert(T5.rows(model_keys(config.model)), Taker(g, "their gradients"), np.dtype(np.float64))
    theirs["encoder.embedding/E"] = g["shared.weight"]
    if not config.model.tie_embeddings:
        theirs |= {
            "decoder.embedding/E": g["decoder.embed_tokens.weight"],
            "output.logits/W": g["lm_head.weight"].T,
        }
    assert set(theirs) == set(w)  # every parameter, each once
    assert np.abs(theirs["encoder.0.self-attention/R"]).max() > 1e-6  # a gradient that could be wrong
    for name, grad in ours.weights.items():
        assert np.max(np.abs(grad - theirs[name])) <= 1e-8, name


def test_float32_equals_t5_as_shipped() -> None:
    config = _with(T5_STYLE, dtype="float32")
    w = _trained_looking(config)
    trace = run_forward(config, w)
    out = _t5_forward(config, trace, t5_with(config, w, torch.float32))
    for h in range(1, 3):
        for stage, theirs in (("encoder.1.self-attention", out.encoder_attentions[1]),
                              ("decoder.1.cross-attention", out.cross_attentions[1])):  # fmt: skip
            assert np.max(np.abs(trace[stage][f"A{h}"] - theirs[0, h - 1].numpy())) <= 1e-5
    logits = trace["output.logits"]["logits"]
    assert np.max(np.abs(logits - out.logits[0].numpy())) <= 1e-4 * max(1.0, float(np.max(np.abs(logits))))


# ---------------------------------------------------------------------------------------------
# The buckets
# ---------------------------------------------------------------------------------------------


def _bucket(distance: int, bidirectional: bool, buckets: int = 32, reach: int = 128) -> int:
    return int(F.relative_buckets(np.array([0]), np.array([distance]), bidirectional, buckets, reach)[0, 0])


@pytest.mark.parametrize(
    ("distance", "bidirectional", "bucket"),
    [
        # T5's 32 buckets up to 128. Bidirectional: 16 each way, 8 exact, then 8 + ⌊ln(d/8)/ln 16 · 8⌋.
        (0, True, 0), (-1, True, 1), (-7, True, 7), (+1, True, 17), (+7, True, 23),
        (-8, True, 8),  # ln(1) = 0: the first log bucket
        (-20, True, 10),  # ln(2.5)/ln(16)·8 = 2.64
        (+20, True, 26),  # the same, in the upper half (16 + 10)
        (-127, True, 15), (-500, True, 15), (+500, True, 31),  # capped at the last bucket
        # Causal: all 32 for keys before, 16 exact, then 16 + ⌊ln(d/16)/ln 8 · 16⌋; keys after are 0.
        (+5, False, 0), (-15, False, 15), (-16, False, 16),
        (-20, False, 17),  # ln(1.25)/ln(8)·16 = 1.72
        (-127, False, 31),  # ln(127/16)/ln(8)·16 = 15.96
        (-10_000, False, 31),
    ],
)  # fmt: skip
def test_t5_buckets_by_hand(distance: int, bidirectional: bool, bucket: int) -> None:
    assert _bucket(distance, bidirectional) == bucket


@pytest.mark.parametrize(
    ("buckets", "reach"), [(32, 128), (32, 64), (6, 4), (8, 5), (64, 256), (4, 3), (7, 10)]
)
def test_the_buckets_equal_transformers_for_every_distance(buckets: int, reach: int) -> None:
    """Thousands of distances, edges of buckets included (16 and 32 of 32 up to 128 land where
    float32 puts them): the same buckets as T5's own function."""
    keys = np.arange(-3000, 3001)
    for bidirectional in (True, False):
        ours = F.relative_buckets(np.array([0]), keys, bidirectional, buckets, reach)[0]
        theirs = T5Attention._relative_position_bucket(
            torch.tensor(keys), bidirectional, buckets, reach
        ).numpy()
        assert np.array_equal(ours, theirs), (bidirectional, np.flatnonzero(ours != theirs)[:5])


def test_the_bias_table_is_the_first_layers_and_every_layer_reads_it() -> None:
    w = init_weights(LONG)
    tables = sorted(n for n in w if n.endswith("/R"))
    assert tables == ["decoder.0.masked-attention/R", "encoder.0.self-attention/R"]
    assert w["encoder.0.self-attention/R"].shape == (6, 2)  # a row per bucket, a column per head
    trace = run_forward(LONG, w)
    for i in range(3):
        assert np.array_equal(trace[f"encoder.{i}.self-attention"]["R"], w["encoder.0.self-attention/R"])
        assert np.array_equal(trace[f"decoder.{i}.masked-attention"]["R"], w["decoder.0.masked-attention/R"])
        assert (
            "R" not in trace[f"decoder.{i}.cross-attention"]
            and "buckets" not in trace[f"decoder.{i}.cross-attention"]
        )
    enc, dec = trace["encoder.0.self-attention"]["buckets"], trace["decoder.0.masked-attention"]["buckets"]
    # 6 buckets up to 4: the encoder's 3 each way (1 exact: distance 0), the decoder's 6 (3 exact)
    assert enc[0].tolist() == [0, 4, 5, 5, 5, 5] and enc[5].tolist() == [2, 2, 2, 2, 1, 0]
    assert dec[6].tolist() == [5, 5, 5, 3, 2, 1, 0] and dec[0].tolist() == [0] * 7  # a later key: 0
    B1 = trace["encoder.0.self-attention"]["B1"]
    assert (
        B1[5, 0] == w["encoder.0.self-attention/R"][2, 0]
        and B1[0, 1] == w["encoder.0.self-attention/R"][4, 0]
    )


def test_explain_says_the_distance_the_range_and_the_row() -> None:
    trace = run_forward(LONG, _trained_looking(LONG))
    stage = "decoder.1.masked-attention"
    text = "\n".join(explain(trace, stage, "B2", "6,1", digits=6))  # <end> (6) looks 5 back, at "is"
    assert "distance = key − query = 1 − 6 = −5" in text
    assert "causal" in text and "log range: 5 ≥ 3" in text
    log = math.log(5 / 3) / math.log(4 / 3) * 3  # 5.33: past the last bucket, so capped
    shown = re.search(r"= 3 \+ ⌊([\d.]+)⌋ = 8, capped at 5", text)
    assert shown and float(shown.group(1)) == pytest.approx(log, rel=1e-6)
    R = trace[stage]["R"]
    assert f"R[5, 1] = {R[5, 1]:.6f}".replace("-", "−") in text
    near = "\n".join(explain(trace, "encoder.0.self-attention", "buckets", "0,1"))
    assert "exact range" not in near and "upper half, from bucket 3" in near
    assert (
        "\n".join(explain(trace, "encoder.0.self-attention", "buckets", "1,1")).count(
            "exact range: 0 < 3 / 2 = 1"
        )
        == 1
    )
    s_plus_b = explain(trace, "encoder.0.self-attention", "S1+B", "2,3", digits=6)[-1]
    total = trace["encoder.0.self-attention"]["S1"][2, 3] + trace["encoder.0.self-attention"]["B1"][2, 3]
    assert s_plus_b.split(" = ")[-1].startswith(f"{total:.6f}".replace("-", "−"))
    table = "\n".join(explain(trace, "encoder.1.self-attention", "R", "2,0"))
    assert "shared with this stage (tied)" in table and "bucket 2 for head 1" in table


def test_every_matrix_of_t5_style_explains_and_verify_recomputes_the_buckets() -> None:
    trace = run_forward(T5_STYLE)
    checks = recompute(trace)
    assert all(c.ok for c in checks)
    assert any("buckets recomputed" in c.what and "causal" in c.what for c in checks)
    for stage_id, name in explainable(trace):
        m = trace[stage_id].matrices[name]
        assert len(explain(trace, stage_id, name, f"{m.shape[0] - 1},{m.shape[1] - 1}")) >= 2, (
            stage_id,
            name,
        )
    trace["encoder.0.self-attention"].matrices["buckets"].values[0, 1] = 5  # a wrong bucket is caught
    assert not all(c.ok for c in recompute(trace) if c.stage == "encoder.0.self-attention")


def test_the_cached_generation_gives_each_new_token_its_causal_buckets() -> None:
    """Decoder-only (the cache's models): the new token at position n reads the buckets of n − j."""
    config = dataclasses.replace(
        LONG, encoder_words=0, model=dataclasses.replace(LONG.model, num_encoder_layers=0)
    )
    w = _trained_looking(config)
    steps = generate_cached(config, w, [0, 2], 6)  # 7 positions: the cap is reached
    assert max(compare(config, w, steps)) <= 1e-12


def test_the_encoder_decoder_generates_with_its_cache_as_the_full_pass() -> None:
    """The encoder once, the decoder one token a step: each new query reads the causal buckets of its
    distance to every cached key, and the cross-attention the keys projected at step 0."""
    w = _trained_looking(LONG)
    source = LONG.token_ids(LONG.source_tokens)
    steps = generate_cached(LONG, w, LONG.token_ids(LONG.target_tokens[:1]), 9, source_ids=source)
    assert [s.positions for s in steps] == [(t,) for t in range(9)]
    assert max(compare(LONG, w, steps, source)) <= 1e-12


def test_the_formula_says_the_bias_and_typesets() -> None:
    for kind, how in (("self-attention", "bidirectional"), ("masked-attention", "causal")):
        f = KINDS[kind].formula(T5_STYLE.model)
        plain = str(f)
        assert "B_h[i, j] = R[bucket(j − i), h]" in plain and how in plain
        assert re.search(r"A_h = softmax\(S_h \+ B_h( \+ M)?\)", plain)
        assert r"B_{h}[i, j] &= R[\operatorname{bucket}(j - i), h]" in "\n".join(latex_lines(f))
    cross = str(KINDS["cross-attention"].formula(T5_STYLE.model))
    assert "B_h" not in cross and "S_h = Q_h·K_hᵀ" in cross


def test_t5_style_trains_then_translates_its_sentence(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from transformer_walkthrough.cli import app

    runner, config, weights = CliRunner(), str(T5_PATH), tmp_path / "t5.npz"
    trained = runner.invoke(app, ["train", "-c", config, "-o", str(weights)])
    assert trained.exit_code == 0, trained.output
    assert "has memorised it" in trained.output and "still wrong" not in trained.output
    generated = runner.invoke(app, ["generate", "-c", config, "-w", str(weights), "--compare"])
    assert generated.exit_code == 0, generated.output
    assert "the cat is → sleeping comfortably <end>" in generated.output
    assert runner.invoke(app, ["verify", "-c", config, "-w", str(weights)]).exit_code == 0


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("relative_buckets: 0", "model.relative_buckets: must be 4 or more"),
        ("relative_buckets: 32\n  relative_max_distance: 16",
         "model.relative_max_distance: 16 is within the exact range"),
        ("scale_tied_output: true\n  tie_embeddings: false",
         "model.scale_tied_output: rescales the rows before the tied"),
    ],
)  # fmt: skip
def test_bad_relative_settings_are_one_line_and_exit_2(tmp_path: Path, model: str, message: str) -> None:
    from typer.testing import CliRunner

    from transformer_walkthrough.cli import app

    path = tmp_path / "bad.yaml"
    path.write_text(f"model:\n  positional_encoding: relative\n  {model}\n")
    result = CliRunner().invoke(app, ["run", "-c", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.stderr
