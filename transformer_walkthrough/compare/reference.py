"""The reference implementation: our weights in PyTorch's own transformer layers, compared stage by stage.

The layers are ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` (inside
``nn.Transformer`` for an encoder–decoder model; encoder layers under a causal mask for a
decoder-only one), with the config's norm placement (post or pre) and activation. The embedding lookup, the
positional encoding, the final norms and the output layer are written here in torch, on leaf
tensors of our parameters, so that autograd differentiates the whole model (a tied table is one
leaf, used three times).

PyTorch stores a linear layer's weight as (d_out, d_in) and computes x·Wᵀ, and stacks W_Q, W_K, W_V
as the rows of ``in_proj_weight``; head h uses the h-th block of d_k rows, as our W_Q uses the h-th
block of d_k columns. Dropout is 0; the dtype is the config's. Only imported when asked for:
PyTorch is a test dependency, not a run-time one.
"""

from __future__ import annotations

import functools
import math
import warnings
from types import ModuleType
from typing import Any

import numpy as np

from ..config import Config
from ..model import architecture
from ..model.architecture import DECODER, ENCODER, MEMORY, OUTPUT, Place, layer_output, stacks
from ..model.trace import Trace
from ..model.weights import Weights
from .checks import Check, gap


class TorchTransformer:
    """Our model rebuilt from PyTorch's layers, holding exactly the weights ``w``."""

    def __init__(self, torch: ModuleType, config: Config, w: Weights) -> None:
        self.torch, self.config, self.w = torch, config, w
        m = self.m = config.model
        nn, F = torch.nn, torch.nn.functional
        activations = {
            "relu": "relu", "gelu": "gelu", "gelu-tanh": functools.partial(F.gelu, approximate="tanh"),
            "silu": F.silu,
        }  # fmt: skip
        if m.activation not in activations:
            raise ValueError(f"unknown activation {m.activation!r}")
        activation = activations[m.activation]
        common = dict(
            d_model=m.d_model, nhead=m.num_heads, dim_feedforward=m.d_ff, dropout=0.0, activation=activation,
            layer_norm_eps=m.layer_norm_eps, batch_first=True, norm_first=m.norm_placement == "pre",
            dtype=getattr(torch, m.dtype),
        )  # fmt: skip
        with warnings.catch_warnings():  # nested tensors are a fast path we do not use
            warnings.filterwarnings("ignore", "enable_nested_tensor is True")
            if m.decoder_only:
                self.layers = {DECODER: nn.ModuleList(nn.TransformerEncoderLayer(**common)
                                                      for _ in range(m.num_decoder_layers))}  # fmt: skip
            else:
                t = nn.Transformer(num_encoder_layers=m.num_encoder_layers,
                                   num_decoder_layers=m.num_decoder_layers, **common)  # fmt: skip
                self.layers = {ENCODER: t.encoder.layers, DECODER: t.decoder.layers}
        self.norms = {side: nn.LayerNorm(m.d_model, eps=m.layer_norm_eps, dtype=common["dtype"])
                      for side in stacks(m)} if m.has_final_norm else {}  # fmt: skip
        # Our parameter name -> (the torch tensor holding it, stored transposed?).
        self.tensors: dict[str, tuple[Any, bool]] = {}
        for name, a in w.items():
            if name.endswith(("/E", "/P")) or name.startswith(OUTPUT):  # leaves of our own
                self.tensors[name] = (torch.tensor(a, requires_grad=True), False)
        for side, layers in self.layers.items():
            for i, layer in enumerate(layers):
                self._bind_layer(side, i, layer)
        for side, norm in self.norms.items():
            for place in architecture.final_norm(side, m):
                self._bind(place.id, {"gamma": (norm.weight, False), "beta": (norm.bias, False)})
        with torch.no_grad():
            for name, (t, transposed) in self.tensors.items():
                t.copy_(torch.from_numpy(np.ascontiguousarray(w[name].T if transposed else w[name])))
            if not m.attention_bias:  # the paper's attention has no biases: PyTorch's are set to 0
                for layers in self.layers.values():
                    for mod in layers.modules():
                        if isinstance(mod, nn.MultiheadAttention):
                            mod.in_proj_bias.zero_()
                            mod.out_proj.bias.zero_()

    def _bind(self, stage: str, locals_: dict[str, tuple[Any, bool]]) -> None:
        for local, tensor in locals_.items():
            name = f"{stage}/{local}"
            if name in self.w:
                self.tensors[name] = tensor

    def _bind_layer(self, side: str, i: int, layer: Any) -> None:
        """Which of the layer's tensors holds which of our parameters: the walk's block k is
        PyTorch's sublayer k, its norm ``norm{k}`` (before it, or after the sum)."""
        for k, block in enumerate(architecture.layer(side, i, self.m), 1):
            keys = block.sublayer.keys
            if keys is None:  # the feed-forward
                self._bind(block.stage.id, {
                    "W_1": (layer.linear1.weight, True), "b_1": (layer.linear1.bias, False),
                    "W_2": (layer.linear2.weight, True), "b_2": (layer.linear2.bias, False)})  # fmt: skip
            else:
                mha = layer.multihead_attn if keys == MEMORY else layer.self_attn
                self._bind(block.stage.id, {
                    "W_QKV": (mha.in_proj_weight, True), "W_O": (mha.out_proj.weight, True),
                    "b_QKV": (mha.in_proj_bias, False), "b_O": (mha.out_proj.bias, False)})  # fmt: skip
            norm = getattr(layer, f"norm{k}")
            self._bind(
                (block.norm or block.after).id, {"gamma": (norm.weight, False), "beta": (norm.bias, False)}
            )

    def parameter(self, stage: str, local: str) -> Any:
        ref = self.w.ref(stage, local)
        t, _ = self.tensors[ref.name]
        return t.T if ref.transposed else t

    def _positions(self, place: Place, n: int) -> Any:
        """The first n rows of the positions the stage ``place`` adds."""
        torch, m = self.torch, self.m
        dtype = getattr(torch, m.dtype)
        if m.positional_encoding == "learned":
            return self.parameter(place.id, "P")[:n]
        pos = torch.arange(n, dtype=torch.float64)[:, None]
        if m.positional_encoding == "sinusoidal-halves":
            s = (m.d_model + 1) // 2
            angle = pos / 10000.0 ** (2 * torch.arange(s, dtype=torch.float64) / m.d_model)
            return torch.cat([torch.sin(angle), torch.cos(angle[:, : m.d_model - s])], dim=1).to(dtype)
        if m.positional_encoding == "sinusoidal":
            j = torch.arange(m.d_model)
            angle = pos / 10000.0 ** ((j // 2 * 2).to(torch.float64) / m.d_model)
            return torch.where(j % 2 == 0, torch.sin(angle), torch.cos(angle)).to(dtype)
        raise ValueError(f"unknown positional_encoding {m.positional_encoding!r}")

    def forward(
        self, source_ids: list[int], target_ids: list[int], outputs: dict[str, Any] | None = None
    ) -> Any:
        """The logits, (decoder tokens, vocab); ``outputs`` collects, under our stage ids, the
        embeddings plus positions, each layer's output, each final norm's and the logits."""
        torch, m = self.torch, self.m
        outputs = {} if outputs is None else outputs
        scale = math.sqrt(m.d_model) if m.scale_embeddings else 1.0
        ids = {ENCODER: source_ids, DECODER: target_ids}
        memory = None
        for side in stacks(m):  # the walk's stacks, each from its bottom stages to its final norm
            embedding, positions = architecture.bottom(side, m)  # the paper's: E, then positions added
            x = self.parameter(embedding.id, "E")[torch.tensor(ids[side])] * scale
            x = x + self._positions(positions, len(ids[side]))
            outputs[positions.id] = x
            x = x[None]
            mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1], dtype=x.dtype)
            for i, layer in enumerate(self.layers[side]):
                if side == ENCODER:
                    x = layer(x)
                else:  # PyTorch's encoder layer under a causal mask, for a decoder-only model
                    x = layer(x, src_mask=mask) if memory is None else layer(x, memory, tgt_mask=mask)
                outputs[layer_output(side, i, m)] = x[0]
            for norm in architecture.final_norm(side, m):
                x = self.norms[side](x)
                outputs[norm.id] = x[0]
            memory = x
        logits_place = next(p for p in architecture.head(m) if p.kind == "logits")
        logits = memory[0] @ self.parameter(logits_place.id, "W")  # type: ignore[index]
        if m.output_bias:
            logits = logits + self.parameter(logits_place.id, "b")
        outputs[logits_place.id] = logits
        return logits

    def gradients(self) -> dict[str, np.ndarray]:
        """After ``backward()``: dL/d(every parameter), in our layout and under our names."""
        out = {}
        for name, (t, transposed) in self.tensors.items():
            g = t.grad if t.grad is not None else self.torch.zeros_like(t)
            out[name] = (g.T if transposed else g).detach().numpy()
        return out

    def attention_modules(self) -> list[Any]:
        return [mod for layers in self.layers.values() for mod in layers.modules()
                if isinstance(mod, self.torch.nn.MultiheadAttention)]  # fmt: skip


def torch_checks(torch: ModuleType, trace: Trace, w: Weights) -> list[Check]:
    """Run the PyTorch model on the same tokens and compare: the embeddings plus positions, every
    attention stage's per-head weights (need_weights=True, average_attn_weights=False) and
    output, each layer's output, the final norms, and the logits."""
    config = trace.config
    model = TorchTransformer(torch, config, w)
    calls: list[tuple[Any, tuple, dict]] = []  # each attention module's inputs, in call order
    hooks = [
        mod.register_forward_pre_hook(
            lambda mod, args, kwargs: calls.append((mod, args, kwargs)), with_kwargs=True
        )
        for mod in model.attention_modules()
    ]
    source, target = list(trace.source_ids), list(trace.target_ids)
    checks: list[Check] = []
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # call the modules themselves, so the hooks see them
    try:
        with torch.no_grad():
            outputs: dict[str, Any] = {}
            model.forward(source, target, outputs)
            for sid, value in outputs.items():
                stage = trace[sid]
                what = "logits, by PyTorch" if sid.startswith(OUTPUT) else f"{stage.output}, by PyTorch"
                checks.append(Check(sid, what, gap(stage[stage.output], value.numpy())))
            # the walk's attention sublayers, in the order PyTorch calls its attention modules
            attention = [
                trace[p.id] for p in architecture.walk(config.model) if p.sublayer and p.sublayer.keys
            ]
            for stage, (mod, args, kwargs) in zip(attention, calls[: len(attention)], strict=True):
                kwargs = {**kwargs, "need_weights": True, "average_attn_weights": False, "is_causal": False}
                out, weights = mod(*args, **kwargs)
                heads = max(gap(stage[f"A{h + 1}"], weights[0, h].numpy()) for h in range(weights.shape[1]))
                checks.append(Check(stage.id, "A of every head, by PyTorch", heads))
                checks.append(Check(stage.id, "output, by PyTorch", gap(stage["output"], out[0].numpy())))
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
        for hook in hooks:
            hook.remove()
    order = {s.id: k for k, s in enumerate(trace)}
    return sorted(checks, key=lambda c: order[c.stage])
