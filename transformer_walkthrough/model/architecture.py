"""Figure 1 described once: the stacks, the sublayers of each layer, the stage ids, the parameters.

The forward pass (``model``), the parameters (``weights``), the reference in PyTorch and the
stage list all read this description instead of wiring the figure again; the backward pass and
``verify`` walk the graph each trace records. A convention of the config changes the
description here, and nowhere else:

- ``norm_first``: a post-norm sublayer k is two stages, the sublayer and ``add-norm-k``
  (LayerNorm(x + Sublayer(x)), the paper); a pre-norm one is three, ``norm-k``, the sublayer and
  ``residual-k`` (x + Sublayer(LayerNorm(x)), GPT-2 and most models since).
- ``num_encoder_layers: 0``: no encoder stack, and decoder layers without cross-attention.
- ``num_decoder_layers: 0`` (``task: fill-mask``, BERT): the encoder stack alone, its rows read by
  the output layer; one embedding stage sums the token's, the position's and the segment's rows,
  ``embedding_norm`` puts a norm after it, ``output_transform`` a dense layer, its activation and
  a norm before the output layer (BERT's masked-language-model head).
- ``tie_embeddings``: one table E for both embeddings and the output layer (W = Eᵀ).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from ..config import Config, ModelConfig

ENCODER, DECODER, OUTPUT = "encoder", "decoder", "output"


def stage_id(side: str, name: str, layer: int | None = None) -> str:
    """The id of a stage: ``decoder.0.masked-attention``, or ``encoder.embedding`` outside layers."""
    return f"{side}.{name}" if layer is None else f"{side}.{layer}.{name}"


def side_of(stage_id: str) -> str:
    """The side a stage belongs to: ``encoder``, ``decoder`` or ``output`` (the first part of its id)."""
    return stage_id.split(".", 1)[0]


def stacks(m: ModelConfig) -> tuple[str, ...]:
    """The stacks the model has, bottom to top: both, the decoder alone, or the encoder alone."""
    if m.encoder_only:
        return (ENCODER,)
    return (DECODER,) if m.decoder_only else (ENCODER, DECODER)


def top_stack(m: ModelConfig) -> str:
    """The stack whose rows the output layer reads: the decoder's, or an encoder-only model's encoder."""
    return stacks(m)[-1]


def num_layers(side: str, m: ModelConfig) -> int:
    return m.num_encoder_layers if side == ENCODER else m.num_decoder_layers


def sublayers(side: str, m: ModelConfig) -> tuple[str, ...]:
    """The kinds of the sublayers of one layer, in order (each is the kind of its stage)."""
    if side == ENCODER:
        return ("self-attention", "feed-forward")
    if m.decoder_only:
        return ("masked-attention", "feed-forward")
    return ("masked-attention", "cross-attention", "feed-forward")


class Connection(NamedTuple):
    """The stage ids around sublayer k: the norm before it (pre-norm) and the stage after it."""

    norm: str | None  # pre-norm: "{side}.N.norm-k", a layer-norm stage; post-norm: None
    after: str  # post-norm: "{side}.N.add-norm-k"; pre-norm: "{side}.N.residual-k"


def pre_norm(side: str, layer: int, k: int) -> Connection:
    """Pre-norm's stages around sublayer k (from 1): ``norm-k`` before it, ``residual-k`` after."""
    return Connection(stage_id(side, f"norm-{k}", layer), stage_id(side, f"residual-{k}", layer))


def post_norm(side: str, layer: int, k: int) -> Connection:
    """Post-norm's stage after sublayer k (from 1): ``add-norm-k``."""
    return Connection(None, stage_id(side, f"add-norm-{k}", layer))


def connection(side: str, layer: int, k: int, m: ModelConfig) -> Connection:
    """Where the residual connection and the norm of sublayer k (from 1) sit under the config."""
    return pre_norm(side, layer, k) if m.norm_first else post_norm(side, layer, k)


def stack_output(side: str, m: ModelConfig) -> str:
    """The stage whose output leaves the stack (the memory, for the encoder)."""
    if m.has_final_norm:
        return stage_id(side, "final-norm")
    return connection(side, num_layers(side, m) - 1, len(sublayers(side, m)), m).after


def bottom(side: str, m: ModelConfig) -> list[tuple[str, str]]:
    """The stages under a stack's layers, as (id, kind): the embedding, then the positions added to
    it (none when they are applied inside attention, ``ModelConfig.adds_positions``, or summed in
    the embedding stage itself, ``sums_embeddings``), then the norm of the sum (``embedding_norm``)."""
    stages = [(stage_id(side, "embedding"), "embedding")]
    if m.adds_positions and not m.sums_embeddings:
        stages.append((stage_id(side, "positional-encoding"), "positional-encoding"))
    if m.embedding_norm:
        stages.append((stage_id(side, "embedding-norm"), "embedding-norm"))
    return stages


def head(m: ModelConfig) -> list[tuple[str, str]]:
    """The stages above the stacks, as (id, kind): BERT's transform (``output_transform``), the
    output layer and the softmax; none when the model only encodes (``task: encode``)."""
    if m.task == "encode":
        return []
    stages = [(stage_id(OUTPUT, "transform"), "transform")] if m.output_transform else []
    return [
        *stages,
        (stage_id(OUTPUT, "logits"), "logits"),
        (stage_id(OUTPUT, "probabilities"), "probabilities"),
    ]


def walk(m: ModelConfig) -> Iterator[tuple[str, str]]:
    """Every stage of a forward pass as (id, kind), in computing order: Figure 1, bottom to top."""
    for side in stacks(m):
        yield from bottom(side, m)
        for i in range(num_layers(side, m)):
            for k, kind in enumerate(sublayers(side, m), 1):
                c = connection(side, i, k, m)
                if c.norm:
                    yield c.norm, "layer-norm"
                yield stage_id(side, kind, i), kind
                yield c.after, "residual" if c.norm else "add-norm"
        if m.has_final_norm:
            yield stage_id(side, "final-norm"), "layer-norm"
    yield from head(m)


def stage_ids(config: Config) -> list[str]:
    """Every stage id of a forward pass, in computing order (pinned by a test)."""
    return [sid for sid, _ in walk(config.model)]


# ---------------------------------------------------------------------------------------------
# Parameters: named by the stage that uses them ("decoder.0.feed-forward/W_1"); a tied table is
# one parameter, named by its first use, that later uses refer to.
# ---------------------------------------------------------------------------------------------


class Ref(NamedTuple):
    """The parameter a stage uses under a local name: its own, or a tied one (transposed for W = Eᵀ)."""

    name: str
    transposed: bool = False


class Spec(NamedTuple):
    """A parameter's shape and how it is first drawn (an ``init`` of ``weights``)."""

    shape: tuple[int, ...]
    init: str  # "embedding", "xavier", "xavier-qkv", "bias", "zeros", "ones", "positions"
    fan_in: int = 0  # for "bias": the layer's input width
    blocks: tuple[int, ...] = ()  # for "xavier-qkv": the widths of the column blocks, each drawn alone


def parameters(config: Config) -> tuple[dict[str, Spec], dict[str, Ref]]:
    """Every parameter of the model in a fixed order, and every use of a parameter by a stage.

    Returns ``specs`` (parameter name -> Spec) and ``uses`` ("stage id/local name" -> Ref).
    With ``tie_embeddings`` the first stack's E is the only table: the other embedding and the
    output layer's W use it (W as Eᵀ). A table has a row for each piece of its side's vocabulary
    (``config.vocabulary_of``): a checkpoint's encoder may read a vocabulary of its own.
    """
    from .kinds import KINDS, Sizes  # the kinds record into traces, and traces read this module

    m = config.model
    head_in = m.d_model * (len(config.target_tokens) if m.output_head == "flatten" else 1)
    specs: dict[str, Spec] = {}
    uses: dict[str, Ref] = {}
    shared: Ref | None = None  # the tied table: the first embedding's E
    for sid, kind in walk(m):
        sizes = Sizes(len(config.vocabulary_of(side_of(sid))), head_in)
        for local, spec in KINDS[kind].params(m, sizes).items():
            name = f"{sid}/{local}"
            if m.tie_embeddings and local in ("E", "W") and shared is not None:
                uses[name] = shared if local == "E" else shared._replace(transposed=True)
                continue
            specs[name], uses[name] = spec, Ref(name)
            if m.tie_embeddings and local == "E":
                shared = Ref(name)
    return specs, uses
