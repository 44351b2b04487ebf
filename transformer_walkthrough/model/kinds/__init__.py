"""Each kind of stage defined once, in its own module, owning everything about it (``base.Kind``).

A forward function reads its weights through ``Weights.take`` (which notes the parameter in the
stage), records its inputs with ``stage.input`` (which notes the stage they came from), its own
matrices with ``stage.rec`` (with the head each belongs to) and its output with ``stage.out``, and
returns the output. A backward function gets dL/d(output) and the parameters the stage used, and
returns dL/d(every matrix of the stage) and dL/d(every parameter): ``backprop`` routes the inputs'
gradients to the stages they came from and the parameters' to the parameters.

    base           what a Kind is; hand: the arithmetic verify and explain share
    embedding      embedding, positional-encoding
    attention      self-attention, masked-attention, cross-attention
    norms          add-norm, layer-norm, embedding-norm, residual
    feed_forward   feed-forward
    experts        experts: a router and its experts, in a sparse layer (mixture of experts)
    output         transform, logits, probabilities
"""

from __future__ import annotations

from .attention import CROSS_ATTENTION, MASKED_ATTENTION, SELF_ATTENTION, attend
from .base import Grads, Kind, Sizes, Spec
from .embedding import EMBEDDING, POSITIONAL_ENCODING, add_positions, embed
from .experts import EXPERTS, experts
from .feed_forward import ACTIVATION_PIECES, FEED_FORWARD, feed_forward
from .norms import ADD_NORM, EMBEDDING_NORM, LAYER_NORM, RESIDUAL, add_norm, layer_norm, residual
from .output import LOGITS, PROBABILITIES_KIND, TRANSFORM, logits, probabilities, transform

# Every kind of stage, in the order they first appear in a forward pass: the one table keyed by kind.
KINDS: dict[str, Kind] = {
    k.id: k
    for k in (
        EMBEDDING, POSITIONAL_ENCODING, EMBEDDING_NORM, LAYER_NORM, SELF_ATTENTION, ADD_NORM, RESIDUAL,
        FEED_FORWARD, EXPERTS, MASKED_ATTENTION, CROSS_ATTENTION, TRANSFORM, LOGITS, PROBABILITIES_KIND,
    )
}  # fmt: skip

__all__ = [
    "ACTIVATION_PIECES", "ADD_NORM", "CROSS_ATTENTION",
    "EMBEDDING", "EMBEDDING_NORM", "EXPERTS", "FEED_FORWARD", "KINDS", "LAYER_NORM", "LOGITS", "MASKED_ATTENTION",
    "POSITIONAL_ENCODING", "PROBABILITIES_KIND", "RESIDUAL", "SELF_ATTENTION", "TRANSFORM", "Grads",
    "Kind", "Sizes", "Spec", "add_norm", "add_positions", "attend", "embed", "experts", "feed_forward",
    "layer_norm", "logits", "probabilities", "residual", "transform",
]  # fmt: skip
