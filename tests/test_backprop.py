"""The whole model's gradient: against torch autograd on the same weights, and finite differences."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from transformer_walkthrough.backprop import backward, next_tokens
from transformer_walkthrough.config import Config, ModelConfig, load_config
from transformer_walkthrough.errors import WalkthroughError
from transformer_walkthrough.model import Weights, init_weights, run_forward
from transformer_walkthrough.reference import torch_transformer

from .strategies import configs

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def torch_gradients(config: Config, w: Weights) -> tuple[float, dict[str, np.ndarray]]:
    """The same loss in PyTorch, differentiated by autograd; gradients in our (d_in, d_out) layout."""
    m = config.model
    trace = run_forward(config, w)
    net = torch_transformer(torch, m, w)
    net.train(False)
    E_src = torch.tensor(w.encoder_embedding, requires_grad=True)
    E_tgt = torch.tensor(w.decoder_embedding, requires_grad=True)
    W, b = torch.tensor(w.W, requires_grad=True), torch.tensor(w.b, requires_grad=True)
    vocab = {t: i for i, t in enumerate(trace.vocabulary)}
    src = torch.tensor([vocab[t] for t in trace.source_tokens])
    tgt = torch.tensor([vocab[t] for t in trace.target_tokens])
    scale = m.d_model**0.5 if m.scale_embeddings else 1.0
    pe_src = torch.tensor(np.array(trace["encoder.positional-encoding"]["PE"]))
    pe_tgt = torch.tensor(np.array(trace["decoder.positional-encoding"]["PE"]))
    mask = torch.nn.Transformer.generate_square_subsequent_mask(len(tgt), dtype=torch.float64)
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        out = net((E_src[src] * scale + pe_src)[None], (E_tgt[tgt] * scale + pe_tgt)[None], tgt_mask=mask)[0]
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    targets = torch.tensor(next_tokens(trace)[:-1])
    loss = torch.nn.functional.cross_entropy(out[:-1] @ W + b, targets)
    loss.backward()
    grads = {"E_src": E_src.grad, "E_tgt": E_tgt.grad, "W": W.grad, "b": b.grad}
    layers = [("encoder", i, layer) for i, layer in enumerate(net.encoder.layers)]
    layers += [("decoder", i, layer) for i, layer in enumerate(net.decoder.layers)]
    for side, i, layer in layers:
        for name, p in layer.named_parameters():
            grads[f"{side}.{i}.{name}"] = p.grad.T if p.grad.ndim == 2 else p.grad
    return float(loss.detach()), {k: v.detach().numpy() for k, v in grads.items()}


def ours(config: Config, w: Weights) -> tuple[float, dict[str, np.ndarray]]:
    """Our gradients under the names torch_gradients uses."""
    b = backward(run_forward(config, w), w)
    g = b.weights
    out = {"E_src": g.encoder_embedding, "E_tgt": g.decoder_embedding, "W": g.W, "b": g.b}
    for i, lw in enumerate(g.encoder):
        out |= {
            f"encoder.{i}.self_attn.in_proj_weight": lw.self_attention.W_QKV,
            f"encoder.{i}.self_attn.out_proj.weight": lw.self_attention.W_O,
            f"encoder.{i}.linear1.weight": lw.feed_forward.W_1,
            f"encoder.{i}.linear1.bias": lw.feed_forward.b_1,
            f"encoder.{i}.linear2.weight": lw.feed_forward.W_2,
            f"encoder.{i}.linear2.bias": lw.feed_forward.b_2,
            f"encoder.{i}.norm1.weight": lw.norm_1.gamma,
            f"encoder.{i}.norm1.bias": lw.norm_1.beta,
            f"encoder.{i}.norm2.weight": lw.norm_2.gamma,
            f"encoder.{i}.norm2.bias": lw.norm_2.beta,
        }
        if lw.self_attention.b_QKV is not None:
            out[f"encoder.{i}.self_attn.in_proj_bias"] = lw.self_attention.b_QKV
            out[f"encoder.{i}.self_attn.out_proj.bias"] = lw.self_attention.b_O
    for i, lw in enumerate(g.decoder):
        out |= {
            f"decoder.{i}.self_attn.in_proj_weight": lw.masked_attention.W_QKV,
            f"decoder.{i}.self_attn.out_proj.weight": lw.masked_attention.W_O,
            f"decoder.{i}.multihead_attn.in_proj_weight": lw.cross_attention.W_QKV,
            f"decoder.{i}.multihead_attn.out_proj.weight": lw.cross_attention.W_O,
            f"decoder.{i}.linear1.weight": lw.feed_forward.W_1,
            f"decoder.{i}.linear1.bias": lw.feed_forward.b_1,
            f"decoder.{i}.linear2.weight": lw.feed_forward.W_2,
            f"decoder.{i}.linear2.bias": lw.feed_forward.b_2,
            f"decoder.{i}.norm1.weight": lw.norm_1.gamma,
            f"decoder.{i}.norm1.bias": lw.norm_1.beta,
            f"decoder.{i}.norm2.weight": lw.norm_2.gamma,
            f"decoder.{i}.norm2.bias": lw.norm_2.beta,
            f"decoder.{i}.norm3.weight": lw.norm_3.gamma,
            f"decoder.{i}.norm3.bias": lw.norm_3.beta,
        }
        if lw.masked_attention.b_QKV is not None:
            out[f"decoder.{i}.self_attn.in_proj_bias"] = lw.masked_attention.b_QKV
            out[f"decoder.{i}.self_attn.out_proj.bias"] = lw.masked_attention.b_O
            out[f"decoder.{i}.multihead_attn.in_proj_bias"] = lw.cross_attention.b_QKV
            out[f"decoder.{i}.multihead_attn.out_proj.bias"] = lw.cross_attention.b_O
    return b.loss, out


def assert_gradients_equal_torch(config: Config, w: Weights | None = None) -> None:
    w = w or init_weights(config)
    loss, mine = ours(config, w)
    torch_loss, theirs = torch_gradients(config, w)
    assert loss == pytest.approx(torch_loss, abs=1e-12)
    expected = (
        set(theirs)
        if config.model.attention_bias
        else {k for k in theirs if "in_proj_bias" not in k and "out_proj.bias" not in k}
    )
    assert set(mine) == expected
    for name, g in mine.items():
        assert np.max(np.abs(g - theirs[name])) <= 1e-8, name


@pytest.mark.parametrize("name", ["article.yaml", "standard.yaml", "longer-sentence.yaml"])
def test_every_gradient_equals_torch_autograd(name: str) -> None:
    assert_gradients_equal_torch(load_config(CONFIGS / name))


def test_gradients_with_attention_biases_equal_torch() -> None:
    config = Config(model=ModelConfig(attention_bias=True, num_decoder_layers=2))
    w = init_weights(config)
    rng = np.random.default_rng(5)
    for aw in [lw.self_attention for lw in w.encoder] + [
        a for lw in w.decoder for a in (lw.masked_attention, lw.cross_attention)
    ]:
        aw.b_QKV, aw.b_O = rng.normal(size=12), rng.normal(size=4)
    assert_gradients_equal_torch(config, w)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(heads=("per-position",)))
def test_any_shape_gradients_equal_torch(config: Config) -> None:
    assert_gradients_equal_torch(config)


def test_a_repeated_token_gathers_both_gradients() -> None:
    config = Config(sentence="the cat saw the dog", encoder_words=4)  # "the" twice in the source
    assert_gradients_equal_torch(config)


def test_loss_gradient_by_finite_differences_through_the_whole_model() -> None:
    config = Config()
    w = init_weights(config)
    b = backward(run_forward(config, w), w)
    for array, grad in ((w.decoder[0].cross_attention.W_QKV, b.weights.decoder[0].cross_attention.W_QKV),
                        (w.encoder_embedding, b.weights.encoder_embedding)):  # fmt: skip
        for index in [(0, 0), (1, 2), (3, 1)]:
            old = array[index]
            array[index] = old + 1e-6
            up = backward(run_forward(config, w), w).loss
            array[index] = old - 1e-6
            down = backward(run_forward(config, w), w).loss
            array[index] = old
            assert (up - down) / 2e-6 == pytest.approx(grad[index], rel=1e-6, abs=1e-10)


def test_every_matrix_of_every_stage_has_a_gradient_of_its_shape() -> None:
    trace = run_forward(Config(model=ModelConfig(attention_bias=True)))
    stages = backward(trace, init_weights(trace.config)).stages
    for stage in trace:
        assert list(stages[stage.id]) == list(stage.matrices), stage.id
        for name, m in stage.matrices.items():
            assert stages[stage.id][name].shape == m.shape, (stage.id, name)
    masked = stages["decoder.0.masked-attention"]
    assert (masked["A1"][np.triu_indices(4, k=1)] != 0).any()  # dL/dA above the diagonal exists...
    assert (masked["S1"][np.triu_indices(4, k=1)] == 0).all()  # ...but no gradient passes the mask
    assert (stages["output.logits"]["logits"][-1] == 0).all()  # the <end> row predicts nothing


def test_training_the_flatten_head_is_refused() -> None:
    config = Config(model=ModelConfig(output_head="flatten"))
    with pytest.raises(WalkthroughError, match="flatten head cannot be trained"):
        backward(run_forward(config), init_weights(config))
