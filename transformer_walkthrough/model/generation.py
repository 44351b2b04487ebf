"""Generation, one token at a time: one loop (``generate``) takes the next token's logits and
distribution from a reader (a whole pass over everything so far, ``full_passes``, or a key/value
cache) and applies transformers' rules: banned ids, a forced end at the limit, greedy or a seeded
draw (``sampling``: temperature, top-k, top-p), a stop at eos.

With the cache (``generate_cached``), a model computes at each step only the new token's query,
key and value.

Because of the causal mask, position i's output depends on positions 0…i alone: the keys and values
of earlier tokens never change once computed. So the loop keeps them, per layer, in a cache:

    step 0:  run the prompt (n tokens) through every layer, as the full pass does; keep K and V (n rows)
    step t:  embed the newest token at position n + t − 1; in each layer project it to q, k, v
             (under rotary, q and k turned by the angles of position n + t − 1),
             append k and v to the cache (one row more), and attend with q over the cached K, V:
             a = softmax(q·Kᵀ/√d_k), o = a·V: no mask is needed, every cached key is in the past.

An encoder–decoder model (Marian, T5) reads its source once: the encoder runs at step 0 only, and
each decoder layer's cross-attention projects the encoder's output to its keys and values once,
then reads them at every step (they never change while the decoder writes); under T5's relative
positions the new query at position n + t − 1 reads the bias of its distance to every cached key.

Step t's numbers are row n + t − 1 of the full pass on the final sequence (``compare`` checks it);
the cache turns each step's attention from O(n²) to O(n) work. The arithmetic is ``functional``'s
and the parameters are the model's ``Weights``, read under the stage ids of ``architecture``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from ..config import Config
from ..errors import WalkthroughError
from . import functional as F
from .architecture import DECODER, ENCODER, OUTPUT, stage_id
from .kinds.attention import Flow, attended
from .sampling import Draw, Sampling, sample
from .trace import TOP_K, LastRows, NullTrace, token_labels, top_k
from .transformer import ROUTING, decode, encode, routed_logits, run_forward
from .weights import Weights


class LayerStep(NamedTuple):
    """What one layer's masked attention did at one step, per head (head first): for the last
    token read, the one whose row chooses the next token. Step 0 reads the whole prompt, but keeps
    its last query's row only: a 2,048-token prompt's every row would be heads × 2,048² weights a
    layer, kept for the whole generation; the cache (K, V) is what later steps need."""

    q: np.ndarray  # (h, 1, d_k): the last token's queries
    K: np.ndarray  # (G, cached, d_k): every key so far, the new ones last (G key/value heads)
    V: np.ndarray  # (G, cached, d_k): every value so far
    scores: np.ndarray  # (h, 1, cached): q·Kᵀ/√d_k (with the causal mask at step 0)
    weights: np.ndarray  # (h, 1, cached): softmax of the scores, the row sums to 1
    cross: np.ndarray | None = None  # (h, 1, source): the cross-attention's weights (encoder–decoder)


class Route(NamedTuple):
    """Where one sparse layer's router sent the token read last: its k experts, most probable first,
    and the weight of each in the layer's output."""

    layer: int
    experts: tuple[int, ...]
    weights: tuple[float, ...]


class Reading(NamedTuple):
    """What the model read at one step, and what it makes of the next token."""

    ids: tuple[int, ...]  # the tokens fed: everything so far, or with a cache the prompt, then one
    positions: tuple[int, ...]  # their positions in the sequence
    probabilities: np.ndarray  # (vocab,): the distribution of the next token, from the last position
    logits: np.ndarray | None = None  # (vocab,): its scores, softmax(logits) = probabilities
    layers: tuple[LayerStep, ...] = ()  # each layer's attention over the cache; () without one
    routes: tuple[Route, ...] = ()  # each sparse layer's routing of the token read last; () without experts


def routes(config: Config, rows: Mapping[str, dict[str, np.ndarray]]) -> tuple[Route, ...]:
    """The decoder's sparse layers' routing of a pass's last row (``transformer.routed_logits``:
    under each experts stage's id), as ``Route``s, bottom to top."""
    m = config.model
    sparse = [(i, rows[stage_id(DECODER, "experts", i)]) for i in range(m.num_decoder_layers) if m.sparse(i)]
    return tuple(
        Route(
            i, tuple(int(e) for e in np.rint(row["chosen"])), tuple(float(x) for x in row["routing_weights"])
        )
        for i, row in sparse
    )


Reader = Callable[[list[int]], Reading]  # the sequence so far -> what the model reads of it


class Step(NamedTuple):
    """One step of generation: a ``Reading`` (its fields, in order), then the top k, the choice and
    how it was drawn."""

    index: int  # 0 for the prompt (or <start>), then 1, 2, …
    ids: tuple[int, ...]
    positions: tuple[int, ...]
    probabilities: np.ndarray
    logits: np.ndarray | None
    layers: tuple[LayerStep, ...]
    routes: tuple[Route, ...]
    top: tuple[tuple[int, float], ...]  # (id, probability), most likely first: the TOP_K allowed
    chosen: int  # the next token: the most likely allowed, or the one drawn
    drawn: Draw | None = None  # the sampling's arithmetic; None when greedy

    @property
    def cache_rows(self) -> int:
        """How many keys (and values) each layer's cache holds after this step."""
        return self.layers[0].K.shape[1]


def no_next_token(config: Config) -> WalkthroughError:
    """Why an encoder-only model cannot generate: it reads the whole text at once, so no row
    predicts what follows (its blanks are filled by ``run``)."""
    m = config.model
    what = "fills its blanks" if m.task == "fill-mask" else "encodes it (no output layer)"
    return WalkthroughError(
        f"generate: a {m.task} model (encoder-only) has no next token to choose: it sees the whole "
        f"text at once and {what}; `walkthrough run` shows its prediction for each blank"
    )


def ends(eos_id: int | Collection[int] | None) -> frozenset[int]:
    """The ids that end a generation: config.json's ``eos_token_id``, one id or a list (Llama 3's
    ``<|end_of_text|>`` and ``<|eot_id|>``), or none."""
    if eos_id is None:
        return frozenset()
    return frozenset([eos_id] if isinstance(eos_id, int) else eos_id)


def generate(
    read: Reader,
    sequence: Sequence[int],
    max_new: int,
    *,
    sampling: Sampling | None = None,
    eos_id: int | Collection[int] | None = None,
    banned: Callable[[list[int]], Iterable[int]] = lambda sequence: (),
    forced_end: int | None = None,
    repeats: int | None = None,
) -> list[Step]:
    """Up to ``max_new`` tokens after ``sequence``, each chosen from ``read``'s distribution.

    The rules of transformers' ``generate``, in its order: the ``banned`` ids of the sequence so far
    are never chosen; the last token allowed is ``forced_end`` when one is given; then the most
    likely (greedy: the first in id order on a tie, as ``argmax``), or with ``sampling`` a draw
    (``sampling.sample``: temperature, top-k, top-p, one uniform number from ``default_rng`` of its
    seed, so that a seed always gives the same tokens). Stops after ``eos_id`` (one id or several,
    ``ends``) is chosen, and with ``repeats`` once one token has been chosen that many times in a
    row (``repeated``: not transformers' rule, the toy's untrained weights' stop).
    """
    stop = ends(eos_id)
    sequence = [int(i) for i in sequence]
    drawing = sampling is not None and not sampling.greedy
    rng = np.random.default_rng(sampling.seed) if drawing else None
    steps: list[Step] = []
    for index in range(max_new):
        reading = read(sequence)
        p = reading.probabilities
        if index == 0 and sampling is not None:
            sampling.check(p.size)
        ruled_out = np.zeros(p.size, dtype=bool)
        ruled_out[list(banned(sequence))] = True
        if forced_end is not None and index == max_new - 1:
            ruled_out[np.arange(p.size) != forced_end] = True
        allowed = np.where(ruled_out, -np.inf, p)
        ranked = top_k(allowed, TOP_K)
        best = ranked[allowed[ranked] > -np.inf]
        drawn = None
        if rng is not None:
            # A reader that keeps only the distribution: log p is a set of logits of it (softmax(log p) = p).
            logits = reading.logits if reading.logits is not None else _log(p)
            drawn = sample(np.where(ruled_out, -np.inf, logits), sampling, rng)  # type: ignore[arg-type]
        chosen = int(ranked[0]) if drawn is None else drawn.chosen
        steps.append(Step(index, *reading, tuple((int(j), float(p[j])) for j in best), chosen, drawn))
        sequence.append(chosen)
        if chosen in stop or (repeats is not None and repeated(steps) >= repeats):
            break
    return steps


def _log(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):  # a probability of 0 is a logit of −∞
        return np.log(p)


def repeated(steps: Sequence[Step]) -> int:
    """How many times in a row the last choice was made (1 when the one before differs)."""
    n = 0
    for s in reversed(steps):
        if s.chosen != steps[-1].chosen:
            break
        n += 1
    return n


def full_passes(config: Config, w: Weights, source_ids: Sequence[int] = ()) -> Reader:
    """A reader without a cache: each step one whole forward pass (``routed_logits``, nothing
    recorded) over the encoder's ``source_ids`` and the sequence so far; its last row is the next
    token's logits."""

    def read(sequence: list[int]) -> Reading:
        logits, routed = routed_logits(config, w, source_ids, sequence)
        last = logits[-1]
        return Reading(tuple(sequence), tuple(range(len(sequence))), F.softmax(last), last, (),
                       routes(config, routed))  # fmt: skip

    return read


class Cache:
    """Each layer's keys and values so far, (heads, rows, d_k), in arrays allocated once for the
    whole run, and what each layer's attention did at the last step (``LayerStep``); in an
    encoder–decoder model also each layer's cross-attention keys and values, the encoder's output
    projected once (``memory``).

    The arrays take their heads, width and dtype from the first keys a layer hands over: the cache
    holds what the attention made (as many key/value heads as it has), not what the config says."""

    def __init__(self, layers: int, capacity: int):
        self.capacity = capacity
        self.K: np.ndarray | None = None  # (layers, heads, capacity, d_k) once the first keys come
        self.V: np.ndarray | None = None
        self.rows = 0  # rows every layer holds before this step
        self.seen: list[LayerStep | None] = [None] * layers
        self.memory: list[tuple[np.ndarray, np.ndarray] | None] = [None] * layers  # cross K, V
        self.crossed: list[np.ndarray | None] = [None] * layers  # the cross-attention's last weights

    def layer(self, i: int) -> LayerCache:
        """Layer i's part of the cache, handed to its masked attention (``kinds.attend``)."""
        return LayerCache(self, i)

    def memory_of(self, i: int) -> MemoryCache:
        """Layer i's cross-attention keys and values, handed to its cross-attention."""
        return MemoryCache(self, i)

    def steps(self) -> tuple[LayerStep, ...]:
        """What every layer's attention did at this step (with its cross-attention's weights)."""
        return tuple(
            step if step is None else step._replace(cross=crossed)  # type: ignore[misc]
            for step, crossed in zip(self.seen, self.crossed, strict=True)
        )


class LayerCache(NamedTuple):
    cache: Cache
    i: int

    def extend(self, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Add the new rows (heads, new, d_k) after the cached ones; return all of K and V so far (views)."""
        c, start = self.cache, self.cache.rows
        if c.K is None:
            c.K = np.zeros((len(c.seen), k.shape[0], c.capacity, k.shape[2]), dtype=k.dtype)
            c.V = np.zeros_like(c.K)
        end = start + k.shape[1]
        c.K[self.i, :, start:end] = k
        c.V[self.i, :, start:end] = v
        return c.K[self.i, :, :end], c.V[self.i, :, :end]

    def note(self, f: Flow) -> None:
        """Keep what the step's attention computed, for ``compare`` and for the learner to see."""
        scores = f.S if f.masked is None else f.masked
        self.cache.seen[self.i] = LayerStep(last_row(f.Q), f.K, f.V, last_row(scores), last_row(f.A))


class MemoryCache(NamedTuple):
    """One layer's cross-attention keys and values: memory·W_K and memory·W_V, computed at the first
    step and read at every later one (the encoder's output does not change while the decoder writes)."""

    cache: Cache
    i: int

    def keys_values(
        self, project: Callable[[], tuple[np.ndarray, np.ndarray]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The layer's K and V (heads, source, d_k): ``project()`` at the first step, kept for the rest."""
        kept = self.cache.memory[self.i]
        if kept is None:
            kept = self.cache.memory[self.i] = project()
        return kept

    def note(self, f: Flow) -> None:
        self.cache.crossed[self.i] = last_row(f.A)


def last_row(a: np.ndarray) -> np.ndarray:  # (heads, rows, n) -> (heads, 1, n)
    """Each head's last row, copied: a view would hold the whole of ``a`` (the prompt's n × n)."""
    return a[:, -1:].copy()


def generate_cached(
    config: Config,
    w: Weights,
    prompt: Sequence[int],
    max_new: int,
    *,
    source_ids: Sequence[int] = (),
    sampling: Sampling | None = None,
    eos_id: int | Collection[int] | None = None,
    banned: Callable[[list[int]], Iterable[int]] = lambda sequence: (),
    forced_end: int | None = None,
) -> list[Step]:
    """Generate up to ``max_new`` tokens after ``prompt`` (ids) with a key/value cache: greedy, or
    with ``sampling`` a seeded draw (``generate``'s rules: ``banned``, ``forced_end``); stops after
    ``eos_id``. An encoder–decoder model reads ``source_ids`` in its encoder, once, and its
    ``prompt`` is the decoder's start (``decoder_start_token_id``). Returns step 0 (the prompt) and
    one step per token.
    """
    m = config.model
    if m.encoder_only:
        raise no_next_token(config)
    if m.output_head != "per-position":
        raise WalkthroughError("generation needs output_head: per-position")
    source = _checked(config, ENCODER, "source", source_ids)
    if m.decoder_only == bool(source):
        raise WalkthroughError(
            "source ids: a decoder-only model has no encoder to feed" if source
            else "source ids: an encoder–decoder model needs 1 or more to translate"
        )  # fmt: skip
    prompt = _checked(config, DECODER, "prompt", prompt)
    if not prompt:
        raise WalkthroughError(f"prompt ids: need 1 or more ids from 0 to {len(config.vocabulary or ()) - 1}")
    if max_new < 1:
        raise WalkthroughError(f"--max-len: must be a positive integer, got {max_new}")
    if sampling is not None:
        sampling.check(len(config.vocabulary or ()))  # before the prompt's pass
    total = len(prompt) + max_new - 1  # the last choice is never fed back
    if m.positional_encoding == "learned" and total > m.max_positions:
        raise WalkthroughError(
            f"{len(prompt)} prompt tokens and {max_new} new ones need {total} positions; "
            f"the model has {m.max_positions} (max_positions)"
        )
    cache = Cache(m.num_decoder_layers, total)
    read_source = token_labels([config.vocabulary_of(ENCODER)[i] for i in source])
    memory = None
    if source:  # the encoder, once: every step's cross-attention reads its output
        memory = encode(NullTrace(config, read_source, ()), w, m, source)

    def read(sequence: list[int]) -> Reading:  # only what the cache has not seen: the prompt, then one
        start = cache.rows
        ids = sequence[start:]
        # The same Figure 1 as every pass (``transformer.decode``), recording nothing, on the new
        # tokens alone from position ``start``: each masked attention reads and extends the cache,
        # each cross-attention reads the encoder's keys and values it projected at step 0.
        labels = token_labels([str(i) for i in ids])
        null = LastRows(config, read_source, labels, kind="experts", names=ROUTING)
        logits = decode(null, w, m, source, ids, start, cache, memory)[-1]
        cache.rows += len(ids)
        positions = tuple(range(start, start + len(ids)))
        probabilities = F.softmax(logits)
        return Reading(tuple(ids), positions, probabilities, logits, cache.steps(), routes(config, null.rows))

    return generate(read, prompt, max_new, sampling=sampling, eos_id=eos_id, banned=banned,
                    forced_end=forced_end)  # fmt: skip


def _checked(config: Config, side: str, what: str, ids: Sequence[int]) -> list[int]:
    """The ids as ints, each a row of ``side``'s vocabulary (or refused, naming ``what``)."""
    ids = [int(i) for i in ids]
    rows = len(config.vocabulary_of(side) or ())
    if any(not 0 <= i < rows for i in ids):
        raise WalkthroughError(f"{what} ids: need 1 or more ids from 0 to {rows - 1}")
    return ids


def generated_ids(steps: Sequence[Step]) -> list[int]:
    """The whole sequence: what step 0 read (the prompt, or <start>), then every chosen token."""
    return [*steps[0].ids, *(s.chosen for s in steps)]


def read_so_far(steps: Sequence[Step], i: int) -> list[int]:
    """The sequence that step i read: the prompt (or <start>), then every token chosen before it.
    A step with a cache is fed only what is new (``Step.ids``); this is the whole of it."""
    return generated_ids(steps)[: len(steps[0].ids) + i]


class Comparison(NamedTuple):
    """The largest difference between the cached steps and the full pass, per quantity."""

    queries: float
    keys: float
    values: float
    attention: float  # weights of the cached row vs the same row of the full pass's A
    logits: float
    # each sparse layer's routing weights of the row read last vs the full pass's (∞ where they
    # chose other experts; 0 without experts)
    routing: float = 0.0


def compare(
    config: Config, w: Weights, steps: Sequence[Step], source_ids: Sequence[int] | None = None
) -> Comparison:
    """Check that step t equals row n + t − 1 of one full forward pass over everything fed (and
    the encoder's ``source_ids``, for an encoder–decoder model): its queries and attention weights
    (the last row of the prompt at step 0, all a step keeps), the keys and values of every row
    cached so far, and the logits.

    The full pass (``model.run_forward``) attends with an n×n causal mask; the cached step
    attends over the cache with no mask. Returns the largest absolute differences; the full
    pass's masked columns (the future) must hold weight 0 exactly, and count as differences if not.
    A cross-attention's weights count with the attention's.
    """
    fed = [i for s in steps for i in s.ids]
    trace = run_forward(config, w, source_ids=source_ids, target_ids=fed)
    worst = dict.fromkeys(Comparison._fields, 0.0)

    def note(what: str, a: np.ndarray, b: np.ndarray) -> None:
        worst[what] = max(worst[what], float(np.max(np.abs(a - b))) if a.size else 0.0)

    logits = trace[stage_id(OUTPUT, "logits")]["logits"]
    for s in steps:
        rows = list(s.positions)[-1:]  # the row a step keeps: the last token read
        cached = s.cache_rows
        for i, layer in enumerate(s.layers):
            stage = trace[stage_id(DECODER, "masked-attention", i)]
            for h in range(len(layer.q)):  # every query head
                note("queries", layer.q[h], attended(stage, "Q", h + 1)[rows])
                A = stage.of("A", h + 1)[rows]
                note("attention", layer.weights[h], A[:, :cached])
                note("attention", np.zeros_like(A[:, cached:]), A[:, cached:])
            for g in range(len(layer.K)):  # every key/value head (fewer, when query heads share them)
                note("keys", layer.K[g], attended(stage, "K", g + 1)[:cached])
                note("values", layer.V[g], stage.of("V", g + 1)[:cached])
            if layer.cross is not None:
                cross = trace[stage_id(DECODER, "cross-attention", i)]
                for h in range(len(layer.cross)):
                    note("attention", layer.cross[h], cross.of("A", h + 1)[rows])
        note("logits", s.logits, logits[rows[-1]])
        for route in s.routes:
            stage = trace[stage_id(DECODER, "experts", route.layer)]
            chosen = tuple(int(e) for e in np.rint(stage["chosen"][rows[-1]]))
            if chosen != route.experts:
                worst["routing"] = np.inf
            else:
                note("routing", np.array(route.weights), stage["routing_weights"][rows[-1]])
    return Comparison(**worst)
