"""Conventions as configuration: each switch's stages, parameters, arithmetic and messages.

Exactness against PyTorch for every combination is in test_torch_reference.py and
test_backprop.py; here are the pinned stage lists, the wiring each trace records, hand-computed
values of the new functions, the keyed weight streams that make ``diff`` meaningful, ``diff``
itself, and bad input.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.arithmetic import reads
from transformer_walkthrough.checkpoints import gpt2, marian
from transformer_walkthrough.cli import app
from transformer_walkthrough.cli.options import Dtype
from transformer_walkthrough.compare.checks import TOLERANCE
from transformer_walkthrough.compare.reference import TorchTransformer
from transformer_walkthrough.compare.verify import recompute
from transformer_walkthrough.config import (
    ACTIVATIONS,
    BIASED_POSITIONS,
    DTYPES,
    FEED_FORWARDS,
    HF_ACTIVATIONS,
    NORMS,
    OUTPUT_HEADS,
    POSITIONAL_ENCODINGS,
    ROTATED_POSITIONS,
    Config,
    ModelConfig,
    config_from_dict,
    load_config,
)
from transformer_walkthrough.errors import ConfigError, WalkthroughError
from transformer_walkthrough.files.weights import load_weights
from transformer_walkthrough.model import functional as F
from transformer_walkthrough.model.architecture import stage_ids
from transformer_walkthrough.model.kinds import ACTIVATION_PIECES, KINDS
from transformer_walkthrough.model.kinds.norms import NORM_PIECES
from transformer_walkthrough.model.training import generate, train
from transformer_walkthrough.model.transformer import init_weights, run_forward
from transformer_walkthrough.views.documents.formulas import latex_lines
from transformer_walkthrough.views.explain import explain, explainable

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PRE_NORM = Config(model=ModelConfig(norm_first=True))
GPT = load_config(CONFIGS / "gpt-style.yaml")


def test_pre_norm_stage_ids_are_pinned() -> None:
    layer = lambda side, i, subs: [  # noqa: E731
        x for k, kind in enumerate(subs, 1) for x in (f"{side}.{i}.norm-{k}", f"{side}.{i}.{kind}", f"{side}.{i}.residual-{k}")
    ]  # fmt: skip
    assert [s.id for s in run_forward(PRE_NORM)] == [
        "encoder.embedding", "encoder.positional-encoding",
        *layer("encoder", 0, ["self-attention", "feed-forward"]),
        "encoder.final-norm",
        "decoder.embedding", "decoder.positional-encoding",
        *layer("decoder", 0, ["masked-attention", "cross-attention", "feed-forward"]),
        "decoder.final-norm",
        "output.logits", "output.probabilities",
    ]  # fmt: skip
    kinds = {s.id: s.kind for s in run_forward(PRE_NORM)}
    assert kinds["encoder.0.norm-1"] == kinds["decoder.final-norm"] == "layer-norm"
    assert kinds["decoder.0.residual-3"] == "residual"


def test_decoder_only_stage_ids_are_pinned() -> None:
    post = Config(encoder_words=0, model=ModelConfig(num_encoder_layers=0))
    assert [s.id for s in run_forward(post)] == [
        "decoder.embedding", "decoder.positional-encoding",
        "decoder.0.masked-attention", "decoder.0.add-norm-1", "decoder.0.feed-forward", "decoder.0.add-norm-2",
        "output.logits", "output.probabilities",
    ]  # fmt: skip
    trace = run_forward(GPT)
    assert [s.id for s in trace] == stage_ids(GPT)
    assert [s.id for s in trace][-3:] == ["decoder.final-norm", "output.logits", "output.probabilities"]
    assert trace.source_tokens == ()
    assert trace.target_tokens == ("<start>", "the", "cat", "is", "sleeping", "comfortably", "<end>")
    assert not any("cross" in s.id or s.id.startswith("encoder") for s in trace)


def test_each_stage_records_where_its_inputs_came_from() -> None:
    trace = run_forward(PRE_NORM)
    assert trace["encoder.0.norm-1"].sources == {"X": "encoder.positional-encoding"}
    assert trace["encoder.0.self-attention"].sources == {"X": "encoder.0.norm-1"}
    # The residual stream skips the norm: X is the stream, sublayer the attention's output.
    assert trace["encoder.0.residual-1"].sources == {
        "X": "encoder.positional-encoding",
        "sublayer": "encoder.0.self-attention",
    }
    assert trace["decoder.0.cross-attention"].sources == {
        "X": "decoder.0.norm-2",
        "memory": "encoder.final-norm",
    }
    assert trace["output.logits"].sources == {"X": "decoder.final-norm"}
    post = run_forward(Config())
    assert post["decoder.0.cross-attention"].sources["memory"] == "encoder.0.add-norm-2"
    assert post["encoder.0.add-norm-1"].sources == {
        "X": "encoder.positional-encoding",
        "sublayer": "encoder.0.self-attention",
    }


def test_every_matrix_has_a_role() -> None:
    trace = run_forward(GPT)
    roles = {(s.kind, n): m.role for s in trace for n, m in s.matrices.items()}
    assert roles[("masked-attention", "A1")] == "attention"
    assert roles[("masked-attention", "M")] == "mask"
    assert roles[("masked-attention", "W_Q1")] == roles[("positional-encoding", "P")] == "weight"
    assert roles[("positional-encoding", "PE")] == "activation"  # rows of the learned P
    assert roles[("layer-norm", "X")] == roles[("residual", "sublayer")] == "input"
    assert roles[("probabilities", "probabilities")] == "probabilities"
    assert run_forward(Config())["encoder.positional-encoding"].matrices["PE"].role == "constant"


def test_tied_embeddings_are_one_array_used_three_times() -> None:
    config = load_config(CONFIGS / "marian-style.yaml")
    w = init_weights(config)
    trace = run_forward(config, w)
    E = w["encoder.embedding/E"]
    assert "decoder.embedding/E" not in w and "output.logits/W" not in w and "output.logits/b" in w
    assert trace["decoder.embedding"]["E"] is E
    assert np.shares_memory(trace["output.logits"]["W"], E)
    assert np.array_equal(trace["output.logits"]["W"], E.T)
    assert "W = Eᵀ" in str(trace["output.logits"].formula)


def test_sinusoids_in_halves_by_hand() -> None:
    pe = F.positional_encoding(3, 4, halves=True)
    # Column i and column 2 + i share the angle pos / 10000^(2i/4): i = 0 → pos, i = 1 → pos / 100.
    assert pe[1] == pytest.approx([math.sin(1), math.sin(0.01), math.cos(1), math.cos(0.01)], abs=1e-15)
    assert pe[2] == pytest.approx([math.sin(2), math.sin(0.02), math.cos(2), math.cos(0.02)], abs=1e-15)
    odd = F.positional_encoding(2, 5, halves=True)  # an odd width has one sine more
    assert odd[1] == pytest.approx([math.sin(1), math.sin(10000**-0.4), math.sin(10000**-0.8),
                                    math.cos(1), math.cos(10000**-0.4)], abs=1e-15)  # fmt: skip


def test_learned_positions_are_rows_of_P() -> None:
    trace = run_forward(GPT)
    stage = trace["decoder.positional-encoding"]
    assert stage["P"].shape == (16, 4)
    assert np.array_equal(stage["PE"], stage["P"][:7])
    assert np.array_equal(stage["output"], stage["X"] + stage["P"][:7])


BY_HAND = [
    ("relu", 1.0, 0.0),
    ("gelu", 0.8413447460685429, -0.04550026389635842),  # x·Φ(x): Φ(1) = 0.841344746…
    ("gelu-tanh", 0.8411919906082768, -0.04540230591222494),
    ("silu", 0.7310585786300049, -0.2384058440442351),  # 1/(1 + e⁻¹), −2/(1 + e²)
]


@pytest.mark.parametrize("activation, at_one, at_minus_two", BY_HAND)
def test_activations_by_hand(activation: str, at_one: float, at_minus_two: float) -> None:
    out = F.ACTIVATIONS[activation](np.array([1.0, -2.0]))
    assert out == pytest.approx([at_one, at_minus_two], abs=1e-15)
    m = ModelConfig(activation=activation)
    trace = run_forward(Config(model=m))
    ffn = trace["encoder.0.feed-forward"]
    assert np.array_equal(ffn["hidden"], F.ACTIVATIONS[activation](ffn["pre"]))


# ---- Each convention's values are defined once (config/conventions.py); everything else is held to them ----


def test_every_activation_has_a_hand_computed_value() -> None:
    assert [row[0] for row in BY_HAND] == list(ACTIVATIONS)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_every_activation_is_computed_checked_and_explained(activation: str) -> None:
    """functional has its forward and its backward, kinds its formula, verify its second
    computation and explain its arithmetic (the torch reference: test_torch_reference.py)."""
    x = np.array([[-2.0, -0.5, 0.0, 0.5, 2.0]])
    assert F.ACTIVATIONS[activation](x).shape == x.shape
    assert F.activation_backward(np.ones_like(x), x, activation).shape == x.shape
    assert activation in ACTIVATION_PIECES  # its formula, second computation, arithmetic, gated unit
    trace = run_forward(Config(model=ModelConfig(activation=activation)))
    assert all(c.ok for c in recompute(trace))
    assert len(explain(trace, "encoder.0.feed-forward", "hidden", "0,0")) >= 1


@pytest.mark.parametrize("positional_encoding", list(POSITIONAL_ENCODINGS))
def test_every_positional_encoding_is_computed_checked_and_explained(positional_encoding: str) -> None:
    trace = run_forward(Config(model=ModelConfig(positional_encoding=positional_encoding)))
    assert all(c.ok for c in recompute(trace))
    if positional_encoding in ROTATED_POSITIONS:  # applied inside self-attention, not added
        stage, table = trace["decoder.0.masked-attention"], "cos"
        assert "decoder.positional-encoding" not in trace.stages
    elif positional_encoding in BIASED_POSITIONS:  # a bias on each head's scores, by the bucket of j − i
        stage, table = trace["decoder.0.masked-attention"], "B1"
        assert "decoder.positional-encoding" not in trace.stages
    else:
        stage, table = trace["decoder.positional-encoding"], "PE"
        assert latex_lines(KINDS["positional-encoding"].formula(trace.config.model))
    assert stage.formula and len(explain(trace, stage.id, table, "1,1")) >= 2


def test_the_dispatches_on_a_value_are_the_configs_values() -> None:
    """Every table keyed by a convention's value holds exactly the config's values."""
    for table in (F.ACTIVATIONS, ACTIVATION_PIECES):  # each activation's forward, backward and piece
        assert list(table) == list(ACTIVATIONS)
    assert list(NORM_PIECES) == list(NORMS)  # each norm's arithmetic, gradient, texts (kinds/norms.py)
    assert set(HF_ACTIVATIONS.values()) == set(ACTIVATIONS)  # each of ours has a checkpoint name
    assert gpt2.HF_ACTIVATIONS is HF_ACTIVATIONS and marian.HF_ACTIVATIONS is HF_ACTIVATIONS
    assert set(TOLERANCE) == set(DTYPES) == {d.value for d in Dtype}  # verify's tolerances, --dtype


def test_walkthrough_config_comments_name_every_value() -> None:
    docs = {f.name: f.metadata["doc"] for f in dataclasses.fields(ModelConfig)}
    for key, values in (("activation", ACTIVATIONS), ("positional_encoding", POSITIONAL_ENCODINGS),
                        ("output_head", OUTPUT_HEADS), ("dtype", DTYPES), ("feed_forward", FEED_FORWARDS),
                        ("norm", NORMS)):  # fmt: skip
        words = re.findall(r"[\w-]+", docs[key])
        assert all(v in words for v in values), key


def _unknown(config: Config, key: str, value: str) -> Config:
    """``config`` holding a value ModelConfig refuses, as if one were added in one place only."""
    object.__setattr__(config.model, key, value)
    return config


def test_an_unknown_activation_raises_everywhere() -> None:
    trace = run_forward(Config())
    _unknown(trace.config, "activation", "swish")
    x = np.ones((1, 2))
    with pytest.raises(KeyError):
        F.feed_forward(x, np.ones((2, 2)), np.ones(2), np.ones((2, 2)), np.ones(2), "swish")
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        F.activation_backward(x, x, "swish")
    with pytest.raises(ValueError, match="unknown activation 'swish'"):  # the activation piece says so
        KINDS["feed-forward"].formula(trace.config.model)
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        recompute(trace)
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        explain(trace, "encoder.0.feed-forward", "hidden", "0,0")
    import torch  # a test dependency (test_torch_reference.py): never skipped

    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        TorchTransformer(torch, trace.config, init_weights(Config()))


def test_an_unknown_positional_encoding_raises_everywhere() -> None:
    with pytest.raises(ValueError, match="unknown positional_encoding 'alibi'"):
        run_forward(_unknown(Config(), "positional_encoding", "alibi"))
    trace = run_forward(Config())
    _unknown(trace.config, "positional_encoding", "alibi")
    m = trace.config.model
    with pytest.raises(ValueError, match="unknown positional_encoding 'alibi'"):
        KINDS["positional-encoding"].formula(m)
    with pytest.raises(ValueError, match="unknown positional_encoding 'alibi'"):
        recompute(trace)
    with pytest.raises(ValueError, match="unknown positional_encoding 'alibi'"):
        explain(trace, "encoder.positional-encoding", "PE", "0,0")
    import torch  # a test dependency (test_torch_reference.py): never skipped

    with pytest.raises(ValueError, match="unknown positional_encoding 'alibi'"):
        TorchTransformer(torch, trace.config, init_weights(Config()))._positions("encoder", 2)


def test_a_convention_changes_nothing_but_itself() -> None:
    """Each weight has its own stream (seed and name): the weights two configs share are equal."""
    base, pre = init_weights(Config()), init_weights(PRE_NORM)
    shared = [n for n in base if n in pre]
    assert len(shared) == 18  # all but the 5 post-norm LayerNorms' gamma and beta
    for name in shared:
        assert np.array_equal(base[name], pre[name]), name
    gelu = init_weights(Config(model=ModelConfig(activation="gelu")))
    assert all(np.array_equal(base[n], gelu[n]) for n in base)
    rms = init_weights(Config(model=ModelConfig(norm="rmsnorm")))
    assert sorted(rms) == sorted(n for n in base if not n.endswith("/beta"))  # RMSNorm has no beta
    assert all(np.array_equal(base[n], rms[n]) for n in rms)
    other_seed = init_weights(Config(seed=7))
    assert not np.array_equal(base["encoder.embedding/E"], other_seed["encoder.embedding/E"])


@pytest.mark.parametrize("name", ["pre-norm.yaml", "gpt-style.yaml", "marian-style.yaml"])
def test_every_convention_verifies_and_explains(name: str) -> None:
    trace = run_forward(load_config(CONFIGS / name))
    checks = recompute(trace)
    assert {c.stage for c in checks} == set(trace.stages)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    for stage_id, matrix in explainable(trace):
        m = trace[stage_id].matrices[matrix]
        lines = explain(trace, stage_id, matrix, f"{m.shape[0] - 1},{m.shape[1] - 1}")
        assert len(lines) >= 2, (stage_id, matrix)


def test_verify_catches_a_wrong_pre_norm_residual() -> None:
    trace = run_forward(PRE_NORM)
    trace["encoder.0.residual-2"]["output"][0, 1] += 1e-6
    bad = {(c.stage, c.what) for c in recompute(trace) if not c.ok}
    assert ("encoder.0.residual-2", "output equals X + sublayer") in bad
    assert ("encoder.final-norm", "X equals the output of encoder.0.residual-2") not in bad  # the same array


def test_explain_the_new_kinds_by_hand() -> None:
    trace = run_forward(load_config(CONFIGS / "gpt-style.yaml"))
    res = trace["decoder.0.residual-1"]
    x, s = res["X"][1, 2], res["sublayer"][1, 2]
    reads(
        "output = X + sublayer (the residual connection): {} + {} = {}",
        explain(trace, res.id, "output", "1,2", digits=4)[1],
        x,
        s,
        x + s,
    )
    pe = explain(trace, "decoder.positional-encoding", "PE", "3,1", digits=4)
    assert pe[1].startswith("PE[3, 1] = P[3, 1] = ") and "row 3" in pe[1]
    ffn = trace["decoder.0.feed-forward"]
    pre = float(ffn["pre"][0, 0])
    u = math.sqrt(2 / math.pi) * (pre + 0.044715 * pre**3)
    lines = explain(trace, ffn.id, "hidden", "0,0", digits=4)
    reads("tanh({}) = {}", lines[2], u, math.tanh(u), search=True)
    w = explain(trace, "output.logits", "W", "d1,cat", digits=4)
    assert (
        w[1]
        == "W is Eᵀ, the embedding table of decoder.embedding transposed (tied): W[d1, cat] = E[cat, d1]."
    )
    assert w[2].startswith("W is a learned weight") and len(w) == 4  # no "head's block" line for W
    x = explain(trace, res.id, "X", "0,0", digits=4)
    assert x[1] == (
        "X is the residual stream, the output of decoder.positional-encoding: the sublayer read it "
        "through a LayerNorm (pre-norm),"
    )
    norm = explain(trace, "decoder.final-norm", "output", "0,0", digits=4)
    assert "over row 0 (<start>) of X" in norm[1]


def test_explain_a_silu_cell_by_hand() -> None:
    trace = run_forward(load_config(CONFIGS / "marian-style.yaml"))
    ffn = trace["encoder.0.feed-forward"]
    pre = float(ffn["pre"][1, 3])
    lines = explain(trace, ffn.id, "hidden", "1,3", digits=4)
    sigma = 1 / (1 + math.exp(-pre))
    reads("  σ({}) = 1/(1 + e^({})) = {}", lines[2], pre, -pre, sigma)
    reads("= {}", lines[3], pre * sigma, search=True)


@pytest.mark.parametrize("name", ["pre-norm.yaml", "gpt-style.yaml"])
def test_train_then_generate_says_the_sentence(name: str) -> None:
    config = load_config(CONFIGS / name)
    w = init_weights(config)
    assert train(config, w)[-1] < 0.01
    steps, _ = generate(config, w)
    words = config.target_tokens[1:]
    assert tuple(config.vocabulary[s.chosen] for s in steps) == words


@pytest.mark.parametrize(
    "data, message",
    [
        ({"model": {"activation": "swish"}}, "model.activation: must be one of relu, gelu, gelu-tanh, silu; got 'swish'"),
        ({"model": {"feed_forward": "glu"}}, "model.feed_forward: must be one of standard, gated; got 'glu'"),
        ({"model": {"ffn_bias": "no"}}, "model.ffn_bias: expected true or false, got 'no' (str)"),
        ({"model": {"norm_first": "yes"}}, "model.norm_first: expected true or false, got 'yes' (str)"),
        ({"model": {"final_norm": 1}}, "model.final_norm: must be one of auto, true, false; got 1"),
        ({"model": {"norm": "rms"}}, "model.norm: must be one of layernorm, rmsnorm, rmsnorm-plus-one; got 'rms'"),
        ({"encoder_words": 0}, "encoder_words: must be 1 to 4"),
        ({"encoder_words": 0}, "0 needs model.num_encoder_layers: 0 (decoder-only)"),
        ({"model": {"num_encoder_layers": 0}}, "encoder_words: must be 0 when model.num_encoder_layers is 0"),
        ({"model": {"num_encoder_layers": -1}}, "model.num_encoder_layers: must be 0 (decoder-only) or more"),
        ({"model": {"positional_encoding": "learned", "max_positions": 3}},
         "model.max_positions: learned positions have 3 rows, but a sentence needs 4"),
        ({"model": {"positional_encoding": "alibi"}}, "must be one of sinusoidal, sinusoidal-halves, learned, rotary"),
        ({"model": {"tie_embeddings": True, "output_head": "flatten"}}, "model.tie_embeddings: the flatten head's W"),
    ],
)  # fmt: skip
def test_bad_conventions_are_one_clear_line(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_dict(data)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_weights_from_another_convention_name_the_mismatch(tmp_path: Path) -> None:
    np.savez(tmp_path / "pre.npz", **init_weights(PRE_NORM))
    with pytest.raises(WalkthroughError) as err:
        load_weights(Config(), tmp_path / "pre.npz")
    assert str(err.value) == (
        f"{tmp_path / 'pre.npz'}: has no encoder.0.add-norm-1/gamma, which this config's model needs "
        "(10 missing); it fits this config with model.norm_placement: pre"
    )
    assert np.array_equal(
        load_weights(PRE_NORM, tmp_path / "pre.npz")["decoder.final-norm/beta"], np.zeros(4)
    )
    np.savez(tmp_path / "tied.npz", **init_weights(Config(model=ModelConfig(tie_embeddings=True))))
    with pytest.raises(WalkthroughError, match=r"has no decoder\.embedding/E.*model\.tie_embeddings: true$"):
        load_weights(Config(), tmp_path / "tied.npz")


def test_diff_of_two_conventions(runner: CliRunner) -> None:
    result = runner.invoke(app, ["diff", str(CONFIGS / "article.yaml"), str(CONFIGS / "pre-norm.yaml")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"A = {CONFIGS / 'article.yaml'}, B = {CONFIGS / 'pre-norm.yaml'}"
    rows = {line.split()[0]: line for line in lines[3:-1] if line and not line.startswith(" ")}
    assert rows["encoder.embedding"].split()[1:] == ["0", "the", "same"]
    assert "only in B" in rows["encoder.0.norm-1"] and "only in A" in rows["encoder.0.add-norm-1"]
    assert "only in B" in rows["decoder.final-norm"]
    assert "◀ first" in rows["encoder.0.self-attention"]
    assert lines[-1] == "The outputs first differ at encoder.0.self-attention (◀)."
    # The probabilities stage holds the logits and the probabilities (≤ 1): the logits differ most.
    a, b = run_forward(load_config(CONFIGS / "article.yaml")), run_forward(PRE_NORM)
    largest = np.max(np.abs(a["output.logits"]["logits"] - b["output.logits"]["logits"]))
    assert rows["output.probabilities"].split()[1:3] == [f"{largest:.2e}", "logits;"]


def test_diff_names_its_files_whole_whatever_their_path(runner: CliRunner, tmp_path: Path) -> None:
    # A path longer than the 80-column terminal is not broken, and brackets are not read as markup.
    folder = tmp_path / ("a-folder-with-a-long-name-" * 4) / "[bold]x[/bold]"
    folder.mkdir(parents=True)
    a = folder / "article[1].yaml"
    a.write_text((CONFIGS / "article.yaml").read_text())
    result = runner.invoke(app, ["diff", str(a), str(CONFIGS / "pre-norm.yaml")])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == f"A = {a}, B = {CONFIGS / 'pre-norm.yaml'}"
    assert len(result.output.splitlines()[0]) > 160


def test_diff_of_training_and_of_one_stage(runner: CliRunner, tmp_path: Path) -> None:
    config = Config()
    before, after = init_weights(config), init_weights(config)
    train(config, after, steps=5)
    np.savez(tmp_path / "before.npz", **before)
    np.savez(tmp_path / "after.npz", **after)
    result = runner.invoke(
        app, ["diff", "-w", str(tmp_path / "before.npz"), "-w", str(tmp_path / "after.npz")]
    )
    assert result.exit_code == 0, result.output
    assert "encoder.embedding" in result.output and "◀ first" in result.output
    result = runner.invoke(app, ["diff", str(CONFIGS / "article.yaml"), str(CONFIGS / "marian-style.yaml"),
                                 "--stage", "decoder.positional-encoding"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "PE A − B" in result.output and "B computes it otherwise:" in result.output
    same = runner.invoke(
        app, ["diff", "-w", str(tmp_path / "before.npz"), "-w", str(tmp_path / "before.npz")]
    )
    assert same.output.splitlines()[-1] == "Every output is the same in A and B."


@pytest.mark.parametrize(
    "args, message",
    [
        (["diff", "configs/article.yaml"], "diff compares two runs"),
        (["diff"], "diff compares two runs"),
        (["diff", "configs/article.yaml", "configs/longer-sentence.yaml"], "the two configs have different vocabularies"),
        (["diff", "configs/article.yaml", "configs/pre-norm.yaml", "--stage", "encoder.0.norm-1"],
         "--stage encoder.0.norm-1: only B has this stage"),
        (["diff", "configs/article.yaml", "configs/pre-norm.yaml", "--stage", "nope"], "unknown stage 'nope'"),
    ],
)  # fmt: skip
def test_diff_bad_input_is_one_line(runner: CliRunner, args: list[str], message: str, monkeypatch) -> None:
    monkeypatch.chdir(CONFIGS.parent)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output and result.output.count("\n") == 1


def test_documents_write_the_formulas_of_the_config() -> None:
    from transformer_walkthrough.views.documents.latex import to_latex
    from transformer_walkthrough.views.documents.markdown import to_markdown

    trace = run_forward(GPT)
    stages = list(trace)
    tex = to_latex(trace, stages, 2)
    assert r"\tanh(\sqrt{\frac{2}{\pi}}" in tex and r"\mathrm{PE} &= \text{the first rows of }P" in tex
    assert r"$W$ = $E^{\top}$" in tex and "\\mathrm{logits} &= X\\,W\n" in tex and r"X\,W + b" not in tex
    assert r"\max(0" not in tex and r"\sin" not in tex
    md = to_markdown(trace, stages, 2)
    assert "hidden = pre·(1 + tanh(√(2/π)·(pre + 0.044715·pre³)))/2" in md
    assert "output = X + sublayer" in md and "decoder.final-norm" in md
    marian = run_forward(load_config(CONFIGS / "marian-style.yaml"))
    tex = to_latex(marian, list(marian), 2)
    assert (
        r"\mathrm{PE}[\mathrm{pos}, d_{\mathrm{model}}/2 + i] &= \cos" in tex
        and r"\sigma(\mathrm{pre})" in tex
    )


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_input_names_the_stage_it_came_from(path: Path) -> None:
    """The graph backprop, verify and explain walk: no input without its source, no source without
    an output of that very array."""
    trace = run_forward(load_config(path))
    for stage in trace:
        inputs = [n for n, m in stage.matrices.items() if m.role == "input"]
        assert sorted(inputs) == sorted(stage.sources), stage.id
        for name, source in stage.sources.items():
            assert stage[name] is trace[source][trace[source].output], (stage.id, name)


def test_generation_stops_where_the_learned_positions_end(runner: CliRunner, tmp_path: Path) -> None:
    # The seed's weights from a file: untrained ones drawn from the seed stop at their first
    # repeats (issue 22), which would end this run before the table does.
    path = CONFIGS / "gpt-style.yaml"
    np.savez(tmp_path / "w.npz", **init_weights(load_config(path)).arrays)
    result = runner.invoke(app, ["generate", "-c", str(path), "-w", str(tmp_path / "w.npz")])
    assert result.exit_code == 0, result.output
    assert "(stopped after 15 tokens: the learned position table has 16 rows" in result.output


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_the_parameter_list_is_what_the_stages_use(path: Path) -> None:
    """architecture.parameters and the forward pass describe the same model: every parameter is
    used by the stage it is named after (and a tied table by the others too), and nothing else is."""
    config = load_config(path)
    w = init_weights(config)
    trace = run_forward(config, w)
    used = {ref.name for stage in trace for ref in stage.params.values()}
    assert used == set(w)
    for stage in trace:
        for local, ref in stage.params.items():
            assert ref == w.uses[f"{stage.id}/{local}"]
            assert ref.transposed == (local == "W" and config.model.tie_embeddings)


def test_no_convention_hint_for_a_file_whose_names_fit(tmp_path: Path) -> None:
    """A NaN, or a shape from another size, is not another convention: no "it fits" then."""
    arrays = dict(init_weights(Config()))
    arrays["encoder.embedding/E"] = np.full((7, 4), np.nan)
    np.savez(tmp_path / "nan.npz", **arrays)
    with pytest.raises(WalkthroughError) as err:
        load_weights(Config(), tmp_path / "nan.npz")
    assert "holds NaN" in str(err.value) and "it fits" not in str(err.value)
    np.savez(tmp_path / "a.npz", **init_weights(Config()))
    with pytest.raises(WalkthroughError) as err:
        load_weights(load_config(CONFIGS / "article-flatten.yaml"), tmp_path / "a.npz")
    assert "output.logits/W is 4×7 in the file but 16×7" in str(err.value) and "it fits" not in str(err.value)
