"""The forward pass: the pinned stage list, and every stage checked against its own inputs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from transformer_walkthrough import load_config, run_forward
from transformer_walkthrough.config import Config, ModelConfig
from transformer_walkthrough.model.architecture import walk
from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.model.transformer import init_weights

from .strategies import configs

STAGE_IDS = [
    "encoder.embedding",
    "encoder.positional-encoding",
    "encoder.0.self-attention",
    "encoder.0.add-norm-1",
    "encoder.0.feed-forward",
    "encoder.0.add-norm-2",
    "decoder.embedding",
    "decoder.positional-encoding",
    "decoder.0.masked-attention",
    "decoder.0.add-norm-1",
    "decoder.0.cross-attention",
    "decoder.0.add-norm-2",
    "decoder.0.feed-forward",
    "decoder.0.add-norm-3",
    "output.logits",
    "output.probabilities",
]

MASKED_ATTENTION_MATRICES = [
    "X", "M",
    "W_Q1", "W_K1", "W_V1", "Q1", "K1", "V1", "S1", "S1+M", "A1", "O1",
    "W_Q2", "W_K2", "W_V2", "Q2", "K2", "V2", "S2", "S2+M", "A2", "O2",
    "concat", "W_O", "output",
]  # fmt: skip


def test_stage_ids_are_pinned(trace: Trace) -> None:
    assert [s.id for s in trace] == STAGE_IDS


def test_stage_ids_with_two_layers() -> None:
    trace = run_forward(Config(model=ModelConfig(num_encoder_layers=2, num_decoder_layers=2)))
    ids = [s.id for s in trace]
    assert ids[2:10] == [
        f"encoder.{i}.{k}"
        for i in (0, 1)
        for k in ("self-attention", "add-norm-1", "feed-forward", "add-norm-2")
    ]
    assert ids[-2:] == ["output.logits", "output.probabilities"]
    assert len(ids) == 2 + 8 + 2 + 12 + 2


def test_matrix_names_follow_the_article(trace: Trace) -> None:
    assert list(trace["decoder.0.masked-attention"].matrices) == MASKED_ATTENTION_MATRICES
    cross = trace["decoder.0.cross-attention"].matrices
    assert list(cross)[:3] == ["X", "memory", "W_Q1"] and "M" not in cross
    assert list(trace["encoder.0.add-norm-1"].matrices) == ["X", "sublayer", "sum", "gamma", "beta", "output"]
    assert list(trace["encoder.0.feed-forward"].matrices) == [
        "X",
        "W_1",
        "b_1",
        "pre",
        "hidden",
        "W_2",
        "b_2",
        "output",
    ]
    assert list(trace["output.logits"].matrices) == ["X", "W", "b", "logits"]
    assert list(trace["output.probabilities"].matrices) == ["logits", "probabilities"]


def test_python_api_gives_numpy_arrays() -> None:
    trace = run_forward(load_config())
    assert isinstance(trace["decoder.0.masked-attention"]["S1"], np.ndarray)
    assert trace["decoder.0.masked-attention"]["S1"].shape == (4, 4)


def test_labels_are_tokens_and_dimensions(trace: Trace) -> None:
    cross = trace["decoder.0.cross-attention"].matrices
    assert cross["S1"].rows == ("<start>", "sleeping", "comfortably", "<end>")  # queries: the decoder
    assert cross["S1"].cols == ("the", "cat", "is")  # keys: the encoder
    assert cross["K1"].rows == ("the", "cat", "is")
    assert trace["encoder.embedding"].matrices["E"].rows == trace.vocabulary


def test_labels_say_which_space(trace: Trace) -> None:
    """d0… only for d_model, k0… for a head's d_k, f0… for d_ff, h2.k1 in concat, positions in PE."""
    cross = trace["decoder.0.cross-attention"].matrices
    for name in ("Q1", "K2", "V1", "O2", "W_Q1", "W_V2"):
        assert cross[name].cols == ("k0", "k1"), name  # d_k = 2
    assert cross["W_Q1"].rows == ("d0", "d1", "d2", "d3") and cross["X"].cols == ("d0", "d1", "d2", "d3")
    assert cross["concat"].cols == ("h1.k0", "h1.k1", "h2.k0", "h2.k1") == cross["W_O"].rows
    assert cross["W_O"].cols == cross["output"].cols == ("d0", "d1", "d2", "d3")
    ffn = trace["encoder.0.feed-forward"].matrices
    assert ffn["hidden"].cols == tuple(f"f{j}" for j in range(8)) == ffn["W_2"].rows
    pe = trace["decoder.positional-encoding"].matrices
    assert pe["PE"].rows == ("pos 0 · <start>", "pos 1 · sleeping", "pos 2 · comfortably", "pos 3 · <end>")
    assert pe["X"].rows == pe["output"].rows == ("<start>", "sleeping", "comfortably", "<end>")


def check_invariants(trace: Trace) -> None:
    """What holds for every stage of every forward pass, recomputed from the stage's own matrices."""
    m = trace.config.model
    # The walk of Figure 1 is the pass: its stages, their kinds and where each input comes from.
    walked = [(p.id, p.kind, dict(p.inputs)) for p in walk(m)]
    assert walked == [(s.id, s.kind, s.sources) for s in trace]
    eps = m.layer_norm_eps
    previous = None
    for stage in trace:
        mats = stage.matrices
        for matrix in mats.values():
            assert matrix.values.shape == (len(matrix.rows), len(matrix.cols))
        if stage.kind in ("self-attention", "masked-attention", "cross-attention"):
            x = stage["X"]
            kv = stage["memory"] if stage.kind == "cross-attention" else x
            heads = []
            for h in range(1, m.num_heads + 1):
                g = (h - 1) // (m.num_heads // m.kv_heads) + 1  # the key/value head query head h reads
                Q, K, V, A = stage[f"Q{h}"], stage[f"K{g}"], stage[f"V{g}"], stage[f"A{h}"]
                b = {name: stage.get(f"b_{name}{h if name == 'Q' else g}", 0.0) for name in "QKV"}
                np.testing.assert_allclose(Q, x @ stage[f"W_Q{h}"] + b["Q"], rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(K, kv @ stage[f"W_K{g}"] + b["K"], rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(V, kv @ stage[f"W_V{g}"] + b["V"], rtol=1e-12, atol=1e-12)
                if f"rot_Q{h}" in stage:  # rotary: a rotation keeps each pair's length
                    half = m.d_k // 2
                    turned = ((stage.get(f"norm_Q{h}", Q), stage[f"rot_Q{h}"]),
                              (stage.get(f"norm_K{g}", K), stage[f"rot_K{g}"]))  # fmt: skip
                    for a, r in turned:
                        pairs = a[:, :half] ** 2 + a[:, half:] ** 2
                        np.testing.assert_allclose(
                            r[:, :half] ** 2 + r[:, half:] ** 2, pairs, rtol=1e-12, atol=1e-12
                        )
                    Q, K = stage[f"rot_Q{h}"], stage[f"rot_K{g}"]
                divisor = 1.0 if m.score_divisor is None else math.sqrt(m.score_divisor)  # √d_k, √n or none
                np.testing.assert_allclose(stage[f"S{h}"], Q @ K.T / divisor, rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(A.sum(axis=1), 1.0, rtol=0, atol=1e-12)  # softmax rows sum to 1
                assert (A >= 0).all()
                if stage.kind == "masked-attention":
                    n = len(A)
                    assert (A[np.triu_indices(n, k=1)] == 0.0).all()  # exactly 0, not small
                    assert (stage[f"S{h}+M"][np.triu_indices(n, k=1)] == -np.inf).all()
                np.testing.assert_allclose(stage[f"O{h}"], A @ V, rtol=1e-12, atol=1e-12)
                heads.append(stage[f"O{h}"])
            assert (stage["concat"] == np.hstack(heads)).all()  # the heads side by side, nothing else
            np.testing.assert_allclose(
                stage["output"],
                stage["concat"] @ stage["W_O"] + stage.get("b_O", 0.0),
                rtol=1e-12,
                atol=1e-12,
            )
        if stage.kind == "masked-attention":
            # causal, and within a sliding layer's window (gemma-style's layer 0): key j ≤ query i, i − j < w
            n, w = len(stage["X"]), m.window(stage.layer)
            seen = [[j <= i and (w is None or i - j < w) for j in range(n)] for i in range(n)]
            assert stage["M"].tolist() == [[0.0 if ok else -math.inf for ok in row] for row in seen]
        if stage.kind in ("add-norm", "residual"):
            total = stage["sum" if stage.kind == "add-norm" else "output"]
            assert (total == stage["X"] + stage["sublayer"]).all()
            assert (stage["sublayer"] == previous["output"]).all()  # the sublayer just computed
        if stage.kind in ("add-norm", "layer-norm") and m.norm != "layernorm":
            normed = stage["output"] / stage["scale" if "scale" in stage else "gamma"]  # Gemma: 1 + gamma
            ms = (stage["sum" if "sum" in stage else "X"] ** 2).mean(axis=1)
            np.testing.assert_allclose((normed**2).mean(axis=1), ms / (ms + eps), rtol=1e-10)  # 1, less eps
        elif stage.kind in ("add-norm", "layer-norm"):
            normed = (stage["output"] - stage["beta"]) / stage["gamma"]
            np.testing.assert_allclose(normed.mean(axis=1), 0.0, atol=1e-12)
            var = stage["sum" if "sum" in stage else "X"].var(axis=1)
            np.testing.assert_allclose(normed.var(axis=1), var / (var + eps), rtol=1e-10)  # 1, less eps
        act = {
            "relu": lambda x: np.maximum(x, 0),
            "gelu": lambda x: x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))) / 2,
            "gelu-tanh": lambda x: x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))) / 2,
            "silu": lambda x: x / (1 + np.exp(-x)),
        }[m.activation]
        if stage.kind == "feed-forward" and m.feed_forward == "gated":
            gate = stage["X"] @ stage["W_gate"] + stage.get("b_gate", 0.0)
            up = stage["X"] @ stage["W_up"] + stage.get("b_up", 0.0)
            np.testing.assert_allclose(stage["gate"], gate, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(stage["hidden"], act(gate) * up, rtol=1e-12, atol=1e-12)
            out = stage["hidden"] @ stage["W_down"] + stage.get("b_down", 0.0)
            np.testing.assert_allclose(stage["output"], out, rtol=1e-12, atol=1e-12)
        elif stage.kind == "feed-forward":
            pre = stage["X"] @ stage["W_1"] + stage["b_1"]
            np.testing.assert_allclose(stage["pre"], pre, rtol=1e-12, atol=1e-12)
            hidden = {
                "relu": lambda x: np.maximum(x, 0),
                "gelu": lambda x: x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))) / 2,
                "gelu-tanh": lambda x: x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))) / 2,
                "silu": lambda x: x / (1 + np.exp(-x)),
            }[m.activation](pre)
            np.testing.assert_allclose(stage["hidden"], hidden, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(
                stage["output"], hidden @ stage["W_2"] + stage["b_2"], rtol=1e-12, atol=1e-12
            )
        if stage.kind == "probabilities":
            p = stage["probabilities"]
            np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
            assert (stage["logits"] == trace["output.logits"]["logits"]).all()
        if (
            stage.kind
            in ("positional-encoding", "self-attention", "masked-attention", "feed-forward", "layer-norm")
            and previous
            and not (stage.kind == "positional-encoding" and previous.kind != "embedding")
        ):
            assert (stage["X"] == previous["output"]).all()  # each stage reads what the last one wrote
        previous = stage
    if not m.decoder_only and not m.encoder_only:
        encoder_out = [s for s in trace if s.id.startswith("encoder.")][-1]["output"]
        for stage in trace.select(["cross-attention"]):
            assert (stage["memory"] == encoder_out).all()
    if m.encoder_only:  # one prediction per blank, of the word the sentence hid there
        blanks = [i for i, t in enumerate(trace.source_tokens) if t == "[MASK]"]
        assert [p.position for p in trace.prediction] == blanks
        assert [p.expected for p in trace.prediction] == [a for a in trace.config.answers if a]
    else:
        assert len(trace.prediction) == (1 if m.output_head == "flatten" else len(trace.target_tokens))
    for pred in trace.prediction:
        probs = [q for _, q in pred.top]
        assert probs == sorted(probs, reverse=True)


def test_invariants_of_the_default_run(trace: Trace) -> None:
    check_invariants(trace)


def test_invariants_of_every_example_config() -> None:
    for path in sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml")):
        check_invariants(run_forward(load_config(path)))


def test_embedding_and_positional_encoding_by_hand(trace: Trace) -> None:
    E = trace["encoder.embedding"]["E"]
    assert (E >= 0).all() and (E < 1).all()  # uniform [0, 1), as the article
    assert (trace["encoder.embedding"]["output"] == E[[2, 3, 4]]).all()  # the, cat, is
    assert (trace["decoder.embedding"]["output"] == trace["decoder.embedding"]["E"][[0, 5, 6, 1]]).all()
    pe = trace["decoder.positional-encoding"]["PE"]
    assert pe[1].tolist() == pytest.approx(
        [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)], abs=1e-15
    )


def test_scaled_embeddings_multiply_by_sqrt_d_model() -> None:
    trace = run_forward(Config(model=ModelConfig(scale_embeddings=True)))
    stage = trace["encoder.embedding"]
    assert (stage["output"] == stage["E"][[2, 3, 4]] * 2.0).all()  # √4
    assert "√d_model" in str(stage.formula)


def test_flatten_head_is_the_articles_step() -> None:
    trace = run_forward(Config(model=ModelConfig(output_head="flatten")))
    logits = trace["output.logits"]
    flat = logits.matrices["flattened"]
    assert flat.shape == (1, 16) and flat.cols[:5] == ("p0.d0", "p0.d1", "p0.d2", "p0.d3", "p1.d0")
    assert (logits["flattened"][0] == logits["X"].reshape(-1)).all()
    assert logits["W"].shape == (16, 7)
    np.testing.assert_allclose(logits["logits"], logits["flattened"] @ logits["W"] + logits["b"], rtol=1e-12)
    assert len(trace.prediction) == 1 and trace.prediction[0].position is None
    check_invariants(trace)


def test_attention_biases_when_asked() -> None:
    trace = run_forward(Config(model=ModelConfig(attention_bias=True)))
    stage = trace["encoder.0.self-attention"]
    assert stage["b_Q1"].shape == (1, 2) and stage["b_O"].shape == (1, 4)
    assert "+ b_Qh" in str(stage.formula)
    assert "b_Q1" not in run_forward(Config())["encoder.0.self-attention"].matrices  # the article has none


def test_weights_follow_the_documented_initialisation() -> None:
    config = Config(model=ModelConfig(d_model=8, num_heads=2, d_ff=16))
    w = init_weights(config)
    bound = math.sqrt(6 / (8 + 8))  # Glorot/Xavier uniform
    W_QKV = w["encoder.0.self-attention/W_QKV"]
    assert W_QKV.shape == (8, 24)
    for block in (W_QKV[:, :8], W_QKV[:, 8:16], W_QKV[:, 16:]):  # W_Q, W_K, W_V: three d×d draws
        assert np.abs(block).max() <= bound and np.abs(block).max() > 0.8 * bound
    assert np.abs(w["encoder.0.feed-forward/W_1"]).max() <= math.sqrt(6 / (8 + 16))
    assert np.abs(w["encoder.0.feed-forward/b_1"]).max() <= 1 / math.sqrt(8)
    assert (w["encoder.0.add-norm-1/gamma"] == 1).all() and (w["encoder.0.add-norm-1/beta"] == 0).all()
    assert "encoder.0.self-attention/b_QKV" not in w
    E = w["encoder.embedding/E"]
    assert E.min() >= 0 and E.max() < 1


def test_same_seed_same_numbers_other_seed_other_numbers() -> None:
    a, b = run_forward(Config(seed=3)), run_forward(Config(seed=3))
    c = run_forward(Config(seed=4))
    for stage in a:
        for name in stage.matrices:
            assert np.array_equal(stage[name], b[stage.id][name])
    assert not np.array_equal(a["encoder.embedding"]["E"], c["encoder.embedding"]["E"])


def test_prediction_is_the_argmax_of_each_row(trace: Trace) -> None:
    probs = trace["output.probabilities"]["probabilities"]
    for i, pred in enumerate(trace.prediction):
        assert pred.word == trace.vocabulary[int(np.argmax(probs[i]))]
        assert pred.probability == probs[i].max()
        assert pred.after == trace.target_tokens[i]
    assert [p.expected for p in trace.prediction] == ["sleeping", "comfortably", "<end>", None]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs())
def test_any_sizes_and_seeds_keep_the_invariants(config: Config) -> None:
    trace = run_forward(config)
    m = config.model
    assert len(trace) == 4 + 4 * m.num_encoder_layers + 6 * m.num_decoder_layers + 2
    check_invariants(trace)


def test_float32_keeps_every_matrix_float32_and_close_to_float64() -> None:
    config32 = Config(model=ModelConfig(dtype="float32", scale_embeddings=True, attention_bias=True))
    config64 = Config(model=ModelConfig(scale_embeddings=True, attention_bias=True))
    t32, t64 = run_forward(config32), run_forward(config64)
    assert {m.values.dtype for s in t32 for m in s.matrices.values()} == {np.dtype(np.float32)}
    # the same draws, rounded: float32 weights are float64's to float32 precision
    assert (t32["encoder.embedding"]["E"] == t64["encoder.embedding"]["E"].astype(np.float32)).all()
    p32, p64 = t32["output.probabilities"]["probabilities"], t64["output.probabilities"]["probabilities"]
    np.testing.assert_allclose(p32, p64, atol=1e-5)


def test_token_ids_feed_any_input() -> None:
    config = Config()
    trace = run_forward(config, source_ids=[3, 2], target_ids=[0, 6, 6, 5, 1])
    assert trace.source_tokens == ("cat", "the") and trace.target_tokens == (
        "<start>",
        "comfortably@1",  # a repeated token is labelled by its position: each label names one row
        "comfortably@2",
        "sleeping",
        "<end>",
    )
    assert trace.target_ids == (0, 6, 6, 5, 1)
    # the prediction's expected tokens are the vocabulary's, not the labels
    assert [p.expected for p in trace.prediction] == ["comfortably", "comfortably", "sleeping", "<end>", None]
    assert trace["decoder.0.masked-attention"]["A1"].shape == (5, 5)
    assert trace["decoder.0.cross-attention"]["S2"].shape == (5, 2)
    check_invariants(trace)
    default = run_forward(config, source_ids=config.token_ids(config.source_tokens))
    assert np.array_equal(default["output.logits"]["logits"], run_forward(config)["output.logits"]["logits"])


def test_bad_token_ids_are_clean_errors() -> None:
    from transformer_walkthrough.errors import WalkthroughError

    with pytest.raises(WalkthroughError, match=r"source ids: need 1 or more ids from 0 to 6; got \[7\]"):
        run_forward(Config(), source_ids=[2, 7])
    with pytest.raises(WalkthroughError, match="source ids: need 1 or more ids"):
        run_forward(Config(), source_ids=[])
    with pytest.raises(WalkthroughError, match="flatten head is sized for 4 decoder tokens"):
        run_forward(Config(model=ModelConfig(output_head="flatten")), target_ids=[0, 1])


def test_forward_without_a_trace_gives_the_same_probabilities() -> None:
    from transformer_walkthrough.model.trace import NullTrace
    from transformer_walkthrough.model.transformer import forward

    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "standard.yaml")
    w = init_weights(config)
    traced = run_forward(config, w)["output.probabilities"]["probabilities"]
    assert np.array_equal(forward(config, w), traced)
    null = NullTrace(config, config.source_tokens, config.target_tokens)
    assert len(null) == 0 and null.stage("encoder.embedding", "embedding").rec("E", traced, (), ()) is traced
