"""Figure 1 described once: the stacks, the sublayers of each layer, the stage ids, the wiring.

``walk`` yields every stage of a forward pass as a ``Place``: its id, its kind, its side and
layer, its box on the map, and the stages its inputs come from (``X ← decoder.0.norm-2``,
``memory ← encoder.final-norm``). Everything that needs Figure 1 reads it here instead of wiring
the figure again: the forward pass (``transformer``), the parameters (``parameters``), the size
of a trace before it is made (``size``), the map (``views.figure``), the reference in PyTorch
and the stage names of transformers' Llama (``compare``). A convention of the config changes
the description here, and nowhere else:

- ``norm_placement``: a post-norm sublayer k is two stages, the sublayer and ``add-norm-k``
  (Norm(x + Sublayer(x)), the paper); a pre-norm one is three, ``norm-k``, the sublayer and
  ``residual-k`` (x + Sublayer(Norm(x)), GPT-2 and most models since); with norms on both sides
  four, ``norm-k``, the sublayer, ``output-norm-k`` and ``residual-k`` (x +
  Norm(Sublayer(Norm(x))), Gemma 2 and 3); with the output's norm only three, the sublayer,
  ``output-norm-k`` and ``residual-k`` (x + Norm(Sublayer(x)), OLMo 2).
- ``num_encoder_layers: 0``: no encoder stack, and decoder layers without cross-attention.
- ``num_decoder_layers: 0`` (``task: fill-mask``, BERT): the encoder stack alone, its rows read by
  the output layer; one embedding stage sums the token's, the position's and the segment's rows,
  ``embedding_norm`` puts a norm after it, ``output_transform`` a dense layer, its activation and
  a norm before the output layer (BERT's masked-language-model head).
- ``tie_embeddings``: one table E for both embeddings and the output layer (W = Eᵀ).
- ``experts``: a sparse layer (``ModelConfig.sparse``) has the stage ``experts`` (a router and its
  experts, Mixtral) where the others have ``feed-forward``.
- ``layer_types``: each decoder layer's masked attention is drawn on the map as ``sliding`` or
  ``full``, the kind of layer it is (Gemma 2 and 3); ``logit_softcap``: the output layer as
  ``linear+cap``.
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


def layer_of(stage_id: str) -> int | None:
    """The layer a stage belongs to (``decoder.3.masked-attention``: 3), or None outside the layers."""
    parts = stage_id.split(".")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


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


class Sublayer(NamedTuple):
    """A sublayer as Figure 1 wires it: the kind of its stage, its box on the map, and what it reads
    besides its input x."""

    kind: str  # "cross-attention": the kind of its stage (``kinds.KINDS``)
    box: str  # its box on the map: "cross"
    keys: str | None = None  # attention: the rows its keys and values come from, SELF or MEMORY
    causal: bool = False  # each position sees only itself and those before it (and the key/value cache)


SELF, MEMORY = "self", "memory"  # attention over its own input, or over the encoder's output
SELF_ATTENTION = Sublayer("self-attention", "self", SELF)
MASKED_ATTENTION = Sublayer("masked-attention", "masked", SELF, causal=True)
CROSS_ATTENTION = Sublayer("cross-attention", "cross", MEMORY)
FEED_FORWARD = Sublayer("feed-forward", "ffn")
EXPERTS = Sublayer("experts", "experts")  # a sparse layer's mixture of experts, in the feed-forward's place


def sublayers(side: str, m: ModelConfig, layer: int = 0) -> tuple[Sublayer, ...]:
    """The sublayers of layer ``layer``, in order; its last is the experts where the layer is sparse
    (``ModelConfig.sparse``), the feed-forward elsewhere. How many there are never depends on ``layer``."""
    last = EXPERTS if m.sparse(layer) else FEED_FORWARD
    if side == ENCODER:
        return (SELF_ATTENTION, last)
    if m.decoder_only:
        return (MASKED_ATTENTION, last)
    return (MASKED_ATTENTION, CROSS_ATTENTION, last)


class Connection(NamedTuple):
    """The stage ids around sublayer k: the norm before it, the norm of its output, the stage after it."""

    norm: str | None  # pre-norm and both: "{side}.N.norm-k", a layer-norm stage on the sublayer's input
    output_norm: str | None  # both and output: "{side}.N.output-norm-k", a layer-norm of its output
    after: str  # post-norm: "{side}.N.add-norm-k"; else "{side}.N.residual-k"


def connection(side: str, layer: int, k: int, m: ModelConfig) -> Connection:
    """Where the residual connection and the norms of sublayer k (from 1) sit under ``norm_placement``."""
    placement = m.norm_placement
    if placement == "post":
        return Connection(None, None, stage_id(side, f"add-norm-{k}", layer))
    return Connection(
        stage_id(side, f"norm-{k}", layer) if placement in ("pre", "both") else None,
        stage_id(side, f"output-norm-{k}", layer) if placement in ("both", "output") else None,
        stage_id(side, f"residual-{k}", layer),
    )


def stack_output(side: str, m: ModelConfig) -> str:
    """The stage whose output leaves the stack (the memory, for the encoder)."""
    if m.has_final_norm:
        return stage_id(side, "final-norm")
    return layer_output(side, num_layers(side, m) - 1, m)


def layer_output(side: str, layer: int, m: ModelConfig) -> str:
    """The stage whose output leaves layer ``layer``: the one after its last sublayer."""
    return connection(side, layer, len(sublayers(side, m)), m).after


# ---------------------------------------------------------------------------------------------
# The walk: every stage as a Place, with the stages its inputs come from.
# ---------------------------------------------------------------------------------------------


class Place(NamedTuple):
    """One stage of Figure 1 as the walk describes it, before anything is computed."""

    id: str  # "decoder.0.cross-attention"
    kind: str  # "cross-attention": the kind of stage that computes it (``kinds.KINDS``)
    box: str  # its box on the map of Figure 1: "cross"
    side: str  # ENCODER, DECODER or OUTPUT
    layer: int | None = None  # None outside the layers
    inputs: tuple[tuple[str, str], ...] = ()  # (input, the stage it comes from): ("X", "decoder.0.norm-2")
    sublayer: Sublayer | None = None  # a sublayer's own stage: what it reads


class Block(NamedTuple):
    """Sublayer k of a layer in its residual connection: the norm before it (pre-norm, both), the
    sublayer, the norm of its output (both, output), and the stage after it that adds the residual
    (and norms, post-norm)."""

    norm: Place | None
    stage: Place  # the sublayer's own stage
    after: Place
    output_norm: Place | None = None

    @property
    def sublayer(self) -> Sublayer:
        """Which sublayer it is, and what it reads besides x."""
        assert self.stage.sublayer is not None  # the walk gives every sublayer's stage its record
        return self.stage.sublayer

    @property
    def places(self) -> list[Place]:
        """Its stages in computing order."""
        return [p for p in (self.norm, self.stage, self.output_norm, self.after) if p is not None]


def bottom(side: str, m: ModelConfig) -> list[Place]:
    """The stages under a stack's layers: the embedding, then the positions added to it (none when
    they are applied inside attention, ``ModelConfig.adds_positions``, or summed in the embedding
    stage itself, ``sums_embeddings``), then the norm of the sum (``embedding_norm``)."""
    places = [Place(stage_id(side, "embedding"), "embedding", "embed", side)]
    if m.adds_positions and not m.sums_embeddings:
        places.append(_on_top(places[-1], side, "positional-encoding", "pos"))
    if m.embedding_norm:
        places.append(_on_top(places[-1], side, "embedding-norm", "norm"))
    return places


def _on_top(below: Place | str, side: str, name: str, box: str, kind: str | None = None) -> Place:
    """The stage ``name`` outside the layers, reading the output of the one below it as X."""
    x = below.id if isinstance(below, Place) else below
    return Place(stage_id(side, name), kind or name, box, side, None, (("X", x),))


def layer(side: str, i: int, m: ModelConfig) -> list[Block]:
    """Layer i of a stack: each sublayer in its residual connection, its norms where the config puts
    them (``connection``); the decoder's cross-attention reads the encoder stack's output."""
    x = bottom(side, m)[-1].id if i == 0 else layer_output(side, i - 1, m)  # the layer's input
    blocks = []
    for k, sub in enumerate(sublayers(side, m, i), 1):
        c = connection(side, i, k, m)
        norm = None if c.norm is None else Place(c.norm, "layer-norm", "norm", side, i, (("X", x),))
        reads = [("X", x if norm is None else norm.id)]
        if sub.keys == MEMORY:
            reads.append(("memory", stack_output(ENCODER, m)))
        box = sub.box
        if sub.causal and m.layer_types is not None:  # the map says which kind of layer it is
            box = m.layer_types[i]  # "sliding" or "full"
        if sub.keys is not None and m.attention_softcap is not None:  # its scores capped: as "linear+cap"
            box += "+cap"
        own = Place(stage_id(side, sub.kind, i), sub.kind, box, side, i, tuple(reads), sub)
        out_norm = None
        if c.output_norm is not None:
            out_norm = Place(c.output_norm, "layer-norm", "norm", side, i, (("X", own.id),))
        summed = own if out_norm is None else out_norm
        kind, box = ("add-norm", "+norm") if m.norm_placement == "post" else ("residual", "+")
        after = Place(c.after, kind, box, side, i, (("X", x), ("sublayer", summed.id)))
        blocks.append(Block(norm, own, after, out_norm))
        x = after.id
    return blocks


def final_norm(side: str, m: ModelConfig) -> list[Place]:
    """The norm on top of a stack, when the model has one (``ModelConfig.has_final_norm``)."""
    if not m.has_final_norm:
        return []
    last = layer_output(side, num_layers(side, m) - 1, m)
    return [_on_top(last, side, "final-norm", "final norm", kind="layer-norm")]


def head(m: ModelConfig) -> list[Place]:
    """The stages above the stacks: BERT's transform (``output_transform``), the output layer and
    the softmax; none when the model only encodes (``task: encode``)."""
    if m.task == "encode":
        return []
    below: Place | str = stack_output(top_stack(m), m)
    places = []
    if m.output_transform:
        places.append(below := _on_top(below, OUTPUT, "transform", "transform"))
    logits = _on_top(below, OUTPUT, "logits", "linear" if m.logit_softcap is None else "linear+cap")
    softmax = Place(stage_id(OUTPUT, "probabilities"), "probabilities", "softmax", OUTPUT, None,
                    (("logits", logits.id),))  # fmt: skip
    return [*places, logits, softmax]


def stack(side: str, m: ModelConfig) -> Iterator[Place]:
    """Every stage of one stack, bottom to top: the embedding's, the layers', the final norm."""
    yield from bottom(side, m)
    for i in range(num_layers(side, m)):
        for block in layer(side, i, m):
            yield from block.places
    yield from final_norm(side, m)


def walk(m: ModelConfig) -> Iterator[Place]:
    """Every stage of a forward pass, in computing order: Figure 1, bottom to top."""
    for side in stacks(m):
        yield from stack(side, m)
    yield from head(m)


def stage_ids(config: Config) -> list[str]:
    """Every stage id of a forward pass, in computing order (pinned by a test)."""
    return [place.id for place in walk(config.model)]


# ---------------------------------------------------------------------------------------------
# Parameters are named by the stage that uses them ("decoder.0.feed-forward/W_1"): ``parameters``
# lists them from the walk and each kind's specs. A tied table is one parameter, named by its
# first use, that later uses refer to.
# ---------------------------------------------------------------------------------------------


class Ref(NamedTuple):
    """The parameter a stage uses under a local name: its own, or a tied one (transposed for W = Eᵀ)."""

    name: str
    transposed: bool = False
