"""The reference implementation: our weights in ``torch.nn.Transformer``, compared stage by stage.

PyTorch stores a linear layer's weight as (d_out, d_in) and computes x·Wᵀ, and stacks W_Q, W_K, W_V
as the rows of ``in_proj_weight``; head h uses the h-th block of d_k rows, as our W_Q uses the h-th
block of d_k columns. ``nn.Transformer`` adds a final LayerNorm after each stack that the paper's
post-norm model does not have: both are removed. Dropout is 0; the dtype is the config's.
Only imported when asked for: PyTorch is a test dependency, not a run-time one.
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

import numpy as np

from .config import ModelConfig
from .model import AttentionWeights, FeedForwardWeights, LayerNormWeights, Weights
from .trace import Trace
from .verify import Check, _diff


def torch_transformer(torch: ModuleType, m: ModelConfig, w: Weights) -> Any:
    """``nn.Transformer`` holding exactly the weights ``w``, in eval mode."""
    nn = torch.nn

    def t(a: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a, dtype=m.dtype))

    def attention(mha: Any, aw: AttentionWeights) -> None:
        zeros = np.zeros(m.d_model)
        mha.in_proj_weight.copy_(t(aw.W_QKV.T))
        mha.in_proj_bias.copy_(t(aw.b_QKV if aw.b_QKV is not None else np.zeros(3 * m.d_model)))
        mha.out_proj.weight.copy_(t(aw.W_O.T))
        mha.out_proj.bias.copy_(t(aw.b_O if aw.b_O is not None else zeros))

    def norm(ln: Any, nw: LayerNormWeights) -> None:
        ln.weight.copy_(t(nw.gamma))
        ln.bias.copy_(t(nw.beta))

    def feed_forward(layer: Any, fw: FeedForwardWeights) -> None:
        layer.linear1.weight.copy_(t(fw.W_1.T))
        layer.linear1.bias.copy_(t(fw.b_1))
        layer.linear2.weight.copy_(t(fw.W_2.T))
        layer.linear2.bias.copy_(t(fw.b_2))

    with warnings.catch_warnings():  # nested tensors are a fast path we do not use
        warnings.filterwarnings("ignore", "enable_nested_tensor is True")
        model = nn.Transformer(
            d_model=m.d_model, nhead=m.num_heads, num_encoder_layers=m.num_encoder_layers,
            num_decoder_layers=m.num_decoder_layers, dim_feedforward=m.d_ff, dropout=0.0,
            layer_norm_eps=m.layer_norm_eps, batch_first=True, norm_first=False,
            dtype=getattr(torch, m.dtype),
        )  # fmt: skip
    model.encoder.norm = None  # the paper's stacks end on their last add & norm
    model.decoder.norm = None
    with torch.no_grad():
        for layer, lw in zip(model.encoder.layers, w.encoder, strict=True):
            attention(layer.self_attn, lw.self_attention)
            norm(layer.norm1, lw.norm_1)
            feed_forward(layer, lw.feed_forward)
            norm(layer.norm2, lw.norm_2)
        for layer, lw in zip(model.decoder.layers, w.decoder, strict=True):
            attention(layer.self_attn, lw.masked_attention)
            norm(layer.norm1, lw.norm_1)
            attention(layer.multihead_attn, lw.cross_attention)
            norm(layer.norm2, lw.norm_2)
            feed_forward(layer, lw.feed_forward)
            norm(layer.norm3, lw.norm_3)
    return model.eval()


def torch_checks(torch: ModuleType, trace: Trace, w: Weights) -> list[Check]:
    """Run nn.Transformer layer by layer on our embeddings + PE and compare: every attention stage's
    per-head weights (need_weights=True, average_attn_weights=False), each layer's output, the logits."""
    nn = torch.nn
    model = torch_transformer(torch, trace.config.model, w)
    calls: list[tuple[Any, tuple, dict]] = []  # each attention module's inputs, in call order
    hooks = [
        mod.register_forward_pre_hook(
            lambda mod, args, kwargs: calls.append((mod, args, kwargs)), with_kwargs=True
        )
        for mod in model.modules()
        if isinstance(mod, nn.MultiheadAttention)
    ]
    src = torch.from_numpy(np.ascontiguousarray(trace["encoder.positional-encoding"]["output"]))[None]
    tgt = torch.from_numpy(np.ascontiguousarray(trace["decoder.positional-encoding"]["output"]))[None]
    mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], dtype=tgt.dtype)
    checks: list[Check] = []
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # call the modules themselves, so the hooks see them
    try:
        with torch.no_grad():
            memory = src
            for i, layer in enumerate(model.encoder.layers):
                memory = layer(memory)
                sid = f"encoder.{i}.add-norm-2"
                checks.append(
                    Check(sid, "encoder layer output", _diff(trace[sid]["output"], memory[0].numpy()))
                )
            y = tgt
            for i, layer in enumerate(model.decoder.layers):
                y = layer(y, memory, tgt_mask=mask)
                sid = f"decoder.{i}.add-norm-3"
                checks.append(Check(sid, "decoder layer output", _diff(trace[sid]["output"], y[0].numpy())))
            attention = [s for s in trace if s.kind.endswith("attention")]
            for stage, (mod, args, kwargs) in zip(attention, calls[: len(attention)], strict=True):
                out, weights = mod(*args, **{**kwargs, "need_weights": True, "average_attn_weights": False})
                heads = max(_diff(stage[f"A{h + 1}"], weights[0, h].numpy()) for h in range(weights.shape[1]))
                checks.append(Check(stage.id, "A of every head, by torch", heads))
                checks.append(
                    Check(
                        stage.id,
                        "output, by torch",
                        _diff(stage["output"], out[0].numpy()),
                    )
                )
            whole = model(src, tgt, tgt_mask=mask)[0].numpy()  # the whole model in one call
            logits = whole @ w.W + w.b
            checks.append(
                Check(
                    "output.logits",
                    "logits, by nn.Transformer",
                    _diff(trace["output.logits"]["logits"], logits),
                )
            )
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
        for hook in hooks:
            hook.remove()
    order = {s.id: k for k, s in enumerate(trace)}
    return sorted(checks, key=lambda c: order[c.stage])
