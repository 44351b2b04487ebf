"""Backpropagation through a trace: dL/d(every matrix of every stage), the graph walked top to bottom.

The loss is the mean cross-entropy of the next token with teacher forcing, over the decoder
positions that have one (<start> → sleeping, sleeping → comfortably, comfortably → <end>; the
<end> row has none); for a fill-mask model, of the hidden word over the blanks. Then, as
micrograd does, one loop over the stages in reverse: each stage's backward (beside its forward,
in ``kinds``) turns dL/d(its output) into dL/d(each of its matrices); the gradient of each input
goes to the stage it came from (``stage.sources``), and the gradient of each weight to the
parameter it is (``stage.params``). A stage read by two others (the residual stream: by the
sublayer and by the sum) gathers both gradients; a tied table gathers those of all its uses.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import WalkthroughError
from . import functional as F
from .kinds import KINDS
from .kinds.experts import load_balancing_grads, load_balancing_loss
from .trace import Trace
from .weights import Weights

Grads = dict[str, dict[str, np.ndarray]]  # stage id -> matrix name -> dL/d(matrix), same shape


class Backward(NamedTuple):
    loss: float  # the cross-entropy, plus router_aux_loss_coef × the load-balancing loss with experts
    weights: Weights  # dL/d(every parameter), under the parameters' names
    stages: Grads  # dL/d(every matrix of every stage), for showing and exporting
    aux: float = 0.0  # the load-balancing loss E·Σ fᵢ·Pᵢ (before its coefficient); 0 without experts


def load_balancing(trace: Trace) -> float:
    """Switch Transformer's load-balancing loss over every sparse layer (``kinds.experts``), and
    each experts stage's share of its gradient, coefficient included, set in its cache for its backward."""
    m = trace.config.model
    stages = [s for s in trace if s.kind == "experts"]
    if not stages:
        return 0.0
    probs = [s["router_probs"] for s in stages]
    chosen = [s.cache.chosen for s in stages]  # type: ignore[union-attr]
    for s, grad in zip(stages, load_balancing_grads(probs, chosen, m.experts), strict=True):
        s.cache = s.cache._replace(aux_grad=m.router_aux_loss_coef * grad)  # type: ignore[union-attr]
    return load_balancing_loss(probs, chosen, m.experts)


def next_tokens(trace: Trace) -> np.ndarray:
    """The target of each row of the logits: after each decoder position, the next token's id, or
    -1 where there is none; for a fill-mask model, the word hidden at each blank (-1 elsewhere)."""
    if trace.config.model.encoder_only:
        if not any(a >= 0 for a in trace.answer_ids):
            raise WalkthroughError("nothing to learn: no blank of this input has a known word")
        return np.array(trace.answer_ids)
    following = trace.target_ids[1:]
    return np.array([*following, -1])


def _add(into: dict[str, np.ndarray], key: str, grad: np.ndarray) -> None:
    into[key] = into[key] + grad if key in into else grad


def check_backward(trace: Trace, w: Weights) -> None:
    """Refuse, before any gradient is allocated, a backward that would not fit in memory: it keeps
    the forward pass, dL/d of its every matrix and of every parameter (``size.backward_kept``);
    one line of each part and the whole, and which option keeps less."""
    from ..config import MAX_BYTES
    from .architecture import DECODER, ENCODER
    from .size import amount, backward_kept, held_message

    config, m = trace.config, trace.config.model
    vocabulary = max(len(config.vocabulary_of(side) or ()) for side in (ENCODER, DECODER))
    parameters = sum(a.size for _, a in w.items())
    parts = backward_kept(m, len(trace.source_tokens), len(trace.target_tokens), vocabulary, parameters)
    itemsize = np.dtype(m.dtype).itemsize
    need = sum(p.numbers for p in parts) * itemsize
    if need > MAX_BYTES:
        shrink = (
            "--dtype float32 halves it, or give a shorter text"
            if m.dtype == "float64"
            else "give a shorter text"
        )
        raise WalkthroughError(
            f"the backward would keep about {amount(need)} (limit {amount(MAX_BYTES)}): "
            f"{held_message(parts, itemsize)}; {shrink}"
        )


def backward(trace: Trace, w: Weights) -> Backward:
    """The loss of the traced forward pass and its gradient with respect to everything in it."""
    m = trace.config.model
    if m.output_head == "flatten":
        raise WalkthroughError(
            "the flatten head cannot be trained to predict each next word: its one prediction sees "
            "every decoder position, future words included; use output_head: per-position"
        )
    check_backward(trace, w)
    g: Grads = {s.id: {} for s in trace}
    targets = next_tokens(trace)
    loss, d_logits = F.cross_entropy(trace["output.logits"]["logits"], targets)
    aux = load_balancing(trace)

    # Shown, not propagated: cross-entropy differentiates the softmax and the log together, from
    # the logits, which is exact where p[target] is too small for dL/dp = −1/(n·p) to be.
    probs = trace["output.probabilities"]["probabilities"]
    rows = np.flatnonzero(targets >= 0)
    d_probs = np.zeros_like(probs)  # L = −mean log p[target]: only the targets' probabilities matter
    d_probs[rows, targets[rows]] = -1.0 / (len(rows) * probs[rows, targets[rows]])
    g["output.probabilities"] = {"logits": d_logits, "probabilities": d_probs}

    d_output = {"output.logits": d_logits}  # stage id -> dL/d(its output), gathered from its readers
    d_params: dict[str, np.ndarray] = {}
    for stage in reversed(list(trace)):
        kind = KINDS[stage.kind]
        if kind.backward is None:
            continue
        d_out = d_output.pop(stage.id, None)
        if d_out is None:  # nothing above read this stage's output
            d_out = np.zeros_like(stage[stage.output])
        p = {local: w.resolve(ref) for local, ref in stage.params.items()}
        grads = kind.backward(stage, d_out, p, m)
        g[stage.id] = grads.matrices
        for name, source in stage.sources.items():
            _add(d_output, source, grads.matrices[name])
        for local, ref in stage.params.items():
            grad = grads.params[local]
            _add(d_params, ref.name, grad.T if ref.transposed else grad)
    grads = w.like({name: d_params.get(name, np.zeros_like(a)) for name, a in w.items()})
    return Backward(loss + m.router_aux_loss_coef * aux, grads, g, aux)
