"""Our NumPy forward pass against an independent reference: torch.nn.Transformer in float64.

Our weights are copied into PyTorch's modules (which store (d_out, d_in) and compute x·Wᵀ, with
W_Q, W_K, W_V stacked as the rows of in_proj_weight); the embeddings plus positional encoding are
fed in as src and tgt. nn.Transformer adds a final LayerNorm after each stack that the paper's post-norm
model does not have: both are removed. Everything must agree to 1e-10.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch  # a test dependency, pinned in pyproject.toml: these tests must run, never skip
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_walkthrough.config import Config, ModelConfig, load_config
from transformer_walkthrough.model import (
    AttentionWeights,
    LayerNormWeights,
    Weights,
    init_weights,
    run_forward,
)
from transformer_walkthrough.trace import Trace

pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
nn = torch.nn

TOLERANCE = 1e-10
CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


def load_attention(mha: nn.MultiheadAttention, w: AttentionWeights) -> None:
    d = w.W_Q.shape[0]
    mha.in_proj_weight.copy_(t(np.vstack([w.W_Q.T, w.W_K.T, w.W_V.T])))
    biases = [b if b is not None else np.zeros(d) for b in (w.b_Q, w.b_K, w.b_V)]
    mha.in_proj_bias.copy_(t(np.concatenate(biases)))
    mha.out_proj.weight.copy_(t(w.W_O.T))
    mha.out_proj.bias.copy_(t(w.b_O if w.b_O is not None else np.zeros(d)))


def load_norm(norm: nn.LayerNorm, w: LayerNormWeights) -> None:
    norm.weight.copy_(t(w.gamma))
    norm.bias.copy_(t(w.beta))


def load_feed_forward(layer: nn.Module, w: object) -> None:
    layer.linear1.weight.copy_(t(w.W_1.T))
    layer.linear1.bias.copy_(t(w.b_1))
    layer.linear2.weight.copy_(t(w.W_2.T))
    layer.linear2.bias.copy_(t(w.b_2))


def torch_transformer(config: Config, w: Weights) -> nn.Transformer:
    m = config.model
    model = nn.Transformer(
        d_model=m.d_model, nhead=m.num_heads, num_encoder_layers=m.num_encoder_layers,
        num_decoder_layers=m.num_decoder_layers, dim_feedforward=m.d_ff, dropout=0.0,
        layer_norm_eps=m.layer_norm_eps, batch_first=True, norm_first=False, dtype=torch.float64,
    )  # fmt: skip
    model.encoder.norm = None  # the paper's stacks end on the last add & norm, with nothing after
    model.decoder.norm = None
    with torch.no_grad():
        for layer, lw in zip(model.encoder.layers, w.encoder, strict=True):
            load_attention(layer.self_attn, lw.self_attention)
            load_norm(layer.norm1, lw.norm_1)
            load_feed_forward(layer, lw.feed_forward)
            load_norm(layer.norm2, lw.norm_2)
        for layer, lw in zip(model.decoder.layers, w.decoder, strict=True):
            load_attention(layer.self_attn, lw.masked_attention)
            load_norm(layer.norm1, lw.norm_1)
            load_attention(layer.multihead_attn, lw.cross_attention)
            load_norm(layer.norm2, lw.norm_2)
            load_feed_forward(layer, lw.feed_forward)
            load_norm(layer.norm3, lw.norm_3)
    return model.eval()


def max_diff(ours: np.ndarray, theirs: torch.Tensor) -> float:
    return float(np.max(np.abs(ours - theirs.detach().numpy())))


def compare(config: Config, weights: Weights | None = None) -> dict[str, float]:
    """Run both, layer by layer; return the max abs difference of everything compared, by name."""
    w = weights or init_weights(config)
    trace: Trace = run_forward(config, w)
    model = torch_transformer(config, w)
    # Capture what each torch attention module is called with, to ask it for its per-head weights.
    calls: list[tuple[nn.MultiheadAttention, tuple, dict]] = []
    hooks = [
        mha.register_forward_pre_hook(
            lambda mod, args, kwargs: calls.append((mod, args, kwargs)), with_kwargs=True
        )
        for mha in model.modules()
        if isinstance(mha, nn.MultiheadAttention)
    ]
    src = t(trace["encoder.positional-encoding"]["output"])[None]
    tgt = t(trace["decoder.positional-encoding"]["output"])[None]
    mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], dtype=torch.float64)
    diffs: dict[str, float] = {}
    torch.backends.mha.set_fastpath_enabled(False)  # run the modules themselves, so the hooks see them
    try:
        with torch.no_grad():
            memory = src
            for i, layer in enumerate(model.encoder.layers):
                memory = layer(memory)
                diffs[f"encoder.{i} output"] = max_diff(trace[f"encoder.{i}.add-norm-2"]["output"], memory[0])
            y = tgt
            for i, layer in enumerate(model.decoder.layers):
                y = layer(y, memory, tgt_mask=mask)
                diffs[f"decoder.{i} output"] = max_diff(trace[f"decoder.{i}.add-norm-3"]["output"], y[0])
            whole = model(src, tgt, tgt_mask=mask)  # the whole model in one call agrees with the layers
            diffs["nn.Transformer output"] = max_diff(
                trace[f"decoder.{len(w.decoder) - 1}.add-norm-3"]["output"], whole[0]
            )
            logits = whole[0] @ t(w.W) + t(w.b)
            diffs["logits"] = max_diff(trace["output.logits"]["logits"], logits)
            diffs["probabilities"] = max_diff(
                trace["output.probabilities"]["probabilities"], torch.softmax(logits, -1)
            )
            attention = [s for s in trace if s.kind.endswith("attention")]
            per_layer = [(mod, args, kwargs) for mod, args, kwargs in calls][: len(attention)]
            for stage, (mod, args, kwargs) in zip(attention, per_layer, strict=True):
                kwargs = {**kwargs, "need_weights": True, "average_attn_weights": False}
                out, weights_ = mod(*args, **kwargs)
                for h in range(config.model.num_heads):
                    diffs[f"{stage.id} A{h + 1}"] = max_diff(stage[f"A{h + 1}"], weights_[0, h])
                diffs[f"{stage.id} output"] = max_diff(stage["output"], out[0])
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
        for hook in hooks:
            hook.remove()
    return diffs


def assert_equal_to_torch(config: Config, weights: Weights | None = None) -> None:
    diffs = compare(config, weights)
    worst = max(diffs, key=lambda k: diffs[k])
    assert diffs[worst] <= TOLERANCE, f"{worst}: {diffs[worst]:.3g}"
    m = config.model
    assert sum(k.endswith(" A1") for k in diffs) == m.num_encoder_layers + 2 * m.num_decoder_layers


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(CONFIGS.glob("*.yaml")) if load_config(p).model.output_head == "per-position"],
    ids=lambda p: p.name,
)
def test_every_per_position_config_equals_torch(path: Path) -> None:
    assert_equal_to_torch(load_config(path))


def test_attention_biases_equal_torch() -> None:
    config = Config(model=ModelConfig(d_model=6, num_heads=3, attention_bias=True, num_decoder_layers=2))
    w = init_weights(config)
    rng = np.random.default_rng(1)
    for aw in [lw.self_attention for lw in w.encoder] + [
        a for lw in w.decoder for a in (lw.masked_attention, lw.cross_attention)
    ]:
        aw.b_Q, aw.b_K, aw.b_V, aw.b_O = (rng.normal(size=6) for _ in range(4))  # nonzero, to be seen
    assert_equal_to_torch(config, w)


def test_trained_looking_norms_equal_torch() -> None:
    """gamma and beta away from 1 and 0: a missing or extra LayerNorm could not hide."""
    config = load_config(CONFIGS / "standard.yaml")
    w = init_weights(config)
    rng = np.random.default_rng(2)
    norms = [n for lw in w.encoder for n in (lw.norm_1, lw.norm_2)]
    norms += [n for lw in w.decoder for n in (lw.norm_1, lw.norm_2, lw.norm_3)]
    for norm in norms:
        norm.gamma, norm.beta = rng.uniform(0.5, 2.0, size=8), rng.normal(size=8)
    assert_equal_to_torch(config, w)


WORDS = ["the", "cat", "dog", "is", "sat", "on", "mat", "sleeping", "very", "comfortably"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_heads=st.integers(1, 4),
    d_k=st.integers(1, 4),
    d_ff=st.integers(1, 12),
    layers=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    words=st.lists(st.sampled_from(WORDS), min_size=2, max_size=9),
    split=st.floats(0, 1),
    seed=st.integers(0, 2**32 - 1),
    scale=st.booleans(),
)
def test_any_shape_equals_torch(
    num_heads: int,
    d_k: int,
    d_ff: int,
    layers: tuple[int, int],
    words: list[str],
    split: float,
    seed: int,
    scale: bool,
) -> None:
    model = ModelConfig(d_model=num_heads * d_k, num_heads=num_heads, d_ff=d_ff, num_encoder_layers=layers[0],
                        num_decoder_layers=layers[1], scale_embeddings=scale)  # fmt: skip
    encoder_words = 1 + int(split * (len(words) - 2))
    assert_equal_to_torch(
        Config(sentence=" ".join(words), encoder_words=encoder_words, seed=seed, model=model)
    )


def test_the_final_norms_of_nn_transformer_would_be_caught() -> None:
    """With nn.Transformer's extra final LayerNorms left in, the logits differ well beyond tolerance."""
    config = load_config(CONFIGS / "standard.yaml")
    w = init_weights(config)
    rng = np.random.default_rng(3)
    # The last add & norm of each stack, as training leaves it: a second LayerNorm after it is no
    # longer close to the identity (with gamma 1 and beta 0 it moves the logits by only ~1e-6).
    for norm in [w.encoder[-1].norm_2, w.decoder[-1].norm_3]:
        norm.gamma, norm.beta = rng.uniform(0.5, 2.0, size=8), rng.normal(size=8)
    trace = run_forward(config, w)
    model = torch_transformer(config, w)
    model.encoder.norm = nn.LayerNorm(8, eps=config.model.layer_norm_eps, dtype=torch.float64)
    model.decoder.norm = nn.LayerNorm(8, eps=config.model.layer_norm_eps, dtype=torch.float64)
    src = t(trace["encoder.positional-encoding"]["output"])[None]
    tgt = t(trace["decoder.positional-encoding"]["output"])[None]
    mask = nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64)
    with torch.no_grad():
        logits = model(src, tgt, tgt_mask=mask)[0] @ t(w.W) + t(w.b)
    assert max_diff(trace["output.logits"]["logits"], logits) > 1e-2
