"""A real checkpoint walked through: its Config, its Weights, its tokens, one traced forward pass.

The toy's ``Config`` describes a sentence split into words of its own vocabulary; a checkpoint's
input is text cut into pieces by the checkpoint's tokenizer. So a checkpoint gets its own config,
``CheckpointConfig``: the vocabulary is the checkpoint's pieces (id order), the model keys come
from its config.json, and the sentence checks of the toy do not apply. The tokens reach the
model as ids (``run_forward(config, w, source_ids=…, target_ids=…)``), and the trace labels each
row by its piece (``▁the``, ``▁the@4`` where a piece repeats).

A Marian checkpoint may have two vocabularies (``separate_vocabs``: ``vocab.json`` for the source,
``target_vocab.json`` for the target, often of different sizes): the encoder then reads the
source's pieces (``source_vocabulary``: its tokens, the rows of its E) and the decoder, the output
layer and generation the target's (``vocabulary``).

Without a target text, the model first translates the source greedily (``generate``; ``translate``
may sample instead), and the pass is walked on its own translation: ``decoder_start`` followed by
the tokens it chose.

A decoder-only checkpoint (GPT-2) reads a prompt instead: its ids are the decoder's input as they
are (``walk_prompt``), each row predicting the token after it; ``continue_prompt`` writes what
follows, one token at a time, with the key/value cache of ``generation``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..config import MASK, MAX_BYTES, MAX_TABLES, Config, DisplayConfig, ModelConfig
from ..errors import ConfigError
from ..model import generation
from ..model.architecture import DECODER, ENCODER
from ..model.architecture import walk as places
from ..model.generation import Step, ends, generate_cached, generated_ids
from ..model.parameters import parameters
from ..model.sampling import Sampling
from ..model.size import (
    LABEL_BYTES,
    amount,
    generation_kept,
    held_message,
    labelled_rows,
    largest_computed,
    trace_size,
)
from ..model.trace import EVERYTHING, Keep, Trace
from ..model.transformer import run_forward
from ..model.weights import Weights
from .checkpoint import Checkpoint, load_checkpoint
from .errors import CheckpointError

MAX_TRANSLATION = 64  # tokens the greedy translation of `run` may take before it is cut


@dataclass(frozen=True)
class CheckpointConfig(Config):
    """A checkpoint's config: the model from its config.json, its pieces as the vocabulary.

    ``sentence`` is the source text as given and ``target`` the decoder's text (the greedy
    translation when none was given); ``checkpoint`` says where the weights came from. The
    toy's checks of the sentence against the vocabulary do not apply: the tokenizer decides.
    ``vocabulary`` is the decoder's (and the output layer's); ``source_vocabulary`` the encoder's
    when it has one of its own, None when it reads the same pieces.
    """

    target: str = ""
    checkpoint: str = ""
    source_vocabulary: tuple[str, ...] | None = None
    mask_token: str = MASK  # a fill-mask checkpoint's blank: [MASK] (BERT), <mask> (RoBERTa)
    # config.json's key of the longest input (``Family.context_key``): None, relative positions (T5)
    context_key: str | None = "max_position_embeddings"

    def __post_init__(self) -> None:  # the toy's sentence rules are not a checkpoint's
        if not self.vocabulary or self.source_vocabulary == ():
            raise ConfigError("a checkpoint's config needs its vocabulary")
        source, target = len(self.vocabulary_of(ENCODER)), len(self.vocabulary)
        if self.model.tie_embeddings and source != target:
            raise ConfigError(
                f"tied embeddings are one table, but the source vocabulary has {source} pieces "
                f"and the target vocabulary {target}"
            )

    def vocabulary_of(self, side: str) -> tuple[str, ...]:
        """The encoder's own pieces where it has them; the decoder's and the output's otherwise."""
        own = self.source_vocabulary if side == ENCODER else None
        return own if own is not None else super().vocabulary_of(side)

    @property
    def source_tokens(self) -> tuple[str, ...]:
        raise ConfigError("a checkpoint's tokens are ids from its tokenizer: pass source_ids to run_forward")

    target_tokens = source_tokens


class Walk(NamedTuple):
    """A checkpoint's forward pass and what it was made from."""

    config: CheckpointConfig
    weights: Weights
    trace: Trace
    checkpoint: Checkpoint
    translation: list[Step] | None  # the greedy steps, when the target was not given


def checkpoint_config(
    ckpt: Checkpoint, dtype: str, source: str, target: str = "", precision: int | None = None
) -> CheckpointConfig:
    """The config of a checkpoint: its model keys (ModelConfig checks them), its pieces, its text."""
    display = DisplayConfig() if precision is None else DisplayConfig(precision=precision)
    tokenizer = ckpt.tokenizer
    own = tokenizer.source_vocabulary is not tokenizer.target_vocabulary  # one tuple when shared
    try:
        return CheckpointConfig(
            sentence=source,
            encoder_words=0,
            vocabulary=tokenizer.target_vocabulary,
            seed=0,
            model=ModelConfig(**{**ckpt.model, "dtype": dtype}),
            display=display,
            target=target,
            checkpoint=ckpt.source,
            source_vocabulary=tokenizer.source_vocabulary if own else None,
            mask_token=getattr(ckpt, "mask_token", None) or MASK,
            context_key=ckpt.family.context_key,
        )
    except ConfigError as err:
        raise CheckpointError(f"{ckpt.source}: {err}") from None


def checkpoint_weights(config: Config, ckpt: Checkpoint) -> Weights:
    """The checkpoint's arrays as ``Weights``: every parameter the config's architecture names, of
    its shape, and nothing else (a converter's mistake is caught here, not in the arithmetic)."""
    specs, uses = parameters(config)
    names, have = set(specs), set(ckpt.weights)
    if names != have:
        odd = sorted(names ^ have)[0]
        why = "missing" if odd in names else "not part of the model"
        raise CheckpointError(f"{ckpt.source}: parameter {odd} is {why}")
    for name, spec in specs.items():
        if ckpt.weights[name].shape != spec.shape:
            raise CheckpointError(
                f"{ckpt.source}: {name} has shape {ckpt.weights[name].shape}, the model needs {spec.shape}"
            )
    return Weights({name: ckpt.weights[name] for name in specs}, uses)


def _from(ckpt: Checkpoint) -> dict[str, Any]:
    """What a trace says of weights read from the checkpoint: its folder, and that it is one."""
    return {"weights_source": ckpt.source, "weights_checkpoint": True}


def check_size(config: Config, source: int, target: int, keep: Keep = EVERYTHING) -> None:
    """Refuse, before the traced pass, an input whose trace would not fit in memory or on a screen:
    what ``keep`` keeps of it is counted (``size.trace_size``), and the message says how much that
    is and which option would keep less."""
    m = config.model
    rows = m.max_positions - m.position_offset  # RoBERTa's positions start at row 2 of P
    if context_key(config) is not None and ((not m.decoder_only and source > rows) or target > rows):
        what = "the prompt" if not (source and target) else "the source" if source > rows else "the target"
        raise too_long(config, what, max(source, target))
    vocabulary = max(len(config.vocabulary_of(side)) for side in (ENCODER, DECODER))  # an upper bound
    need, tables = _needs(m, source, target, vocabulary, keep)
    if need > MAX_BYTES or tables > MAX_TABLES:
        what = (
            "the stages kept, and the largest computed on the way,"
            if keep.stream is None
            else "its largest stage"
        )
        what = "every stage" if keep.everything else what
        raise CheckpointError(
            f"{source} + {target} tokens: {what} would need about {need / 2**30:,.1f} GiB of matrices and "
            f"{tables:,} tables (limits {MAX_BYTES / 2**30:g} GiB, {MAX_TABLES:,}); "
            f"{_shrink(m, keep, source, target, vocabulary)}"
        )


def context_key(config: Config) -> str | None:
    """config.json's key of the longest input a checkpoint reads (``max_position_embeddings``,
    GPT-2's ``n_positions``), None when nothing bounds it (T5's relative positions); a toy's own
    ``model.max_positions``."""
    if isinstance(config, CheckpointConfig):
        return config.context_key
    return "model.max_positions"


def too_long(config: Config, what: str, tokens: int) -> CheckpointError:
    """The refusal of a text longer than the model reads: how long each is, and the key that says so."""
    m = config.model
    rows = m.max_positions - m.position_offset
    key = context_key(config)
    where = f"{key} = {m.max_positions:,} in config.json" if isinstance(config, CheckpointConfig) else key
    less = f", less the {m.position_offset} rows before its first position" if m.position_offset else ""
    return CheckpointError(f"{what} has {tokens:,} tokens; this model reads at most {rows:,} ({where}{less})")


def check_generation(config: Config, source: int, prompt: int, new: int, compare: bool = False) -> None:
    """Refuse, before the prompt is read, a generation whose cache and steps would not fit in
    memory (``size.generation_kept``): one line of what is kept, part by part, and which option
    keeps less."""
    m = config.model
    vocabulary = len(config.vocabulary or ())
    itemsize = np.dtype(m.dtype).itemsize
    parts = generation_kept(m, source, prompt, new, vocabulary, compare)
    need = sum(p.numbers for p in parts) * itemsize
    if need <= MAX_BYTES:
        return
    ways = ["drop --compare"] if compare else []
    ways += ["--dtype float32 halves it"] if m.dtype == "float64" else []
    ways += ["fewer new tokens (--max-len N)"] if new > 1 else []
    ways += ["a shorter prompt"]
    raise CheckpointError(
        f"generating {new:,} tokens after {prompt:,} would keep about {amount(need)} "
        f"(limit {amount(MAX_BYTES)}): {held_message(parts, itemsize)}; "
        f"{', '.join(ways[:-1])}{' or ' if len(ways) > 1 else ''}{ways[-1]}"
    )


def _needs(m: ModelConfig, source: int, target: int, vocabulary: int, keep: Keep) -> tuple[int, int]:
    """The bytes and tables a pass of so many tokens holds under ``keep``: what is kept, and beside
    a choice of stages the largest one computed on the way (a streamed pass holds the stage it
    computes and shows, counted already; a whole trace keeps them all)."""
    size = trace_size(m, source, target, vocabulary, keep)
    working = largest_computed(m, source, target, vocabulary, keep) if keep.choose is not None else 0
    return (size.numbers + working) * np.dtype(m.dtype).itemsize + labelled_rows(m) * LABEL_BYTES, size.tables


def _shrink(m: ModelConfig, keep: Keep, source: int, target: int, vocabulary: int) -> str:
    """Which option would make the trace smaller, the strongest first, and last how long a text
    fits as it is asked for (a decoder-only prompt, or an encoder-only one)."""
    ways = []
    if keep.everything:
        ways.append("show fewer stages (--stage KIND and --layer N keep only those)")
    elif keep.head is None and m.num_heads > 1 and _reads_attention(m, keep):
        ways.append(f"--head H keeps one head's attention ({m.num_heads} heads here)")
    if m.dtype == "float64":
        ways.append("--dtype float32 halves it")
    shorter = "give a shorter text"
    if not source or not target:  # one text: the longest that fits, as this command asks for it

        def fits(n: int) -> bool:
            need, tables = _needs(m, n if source else 0, n if target else 0, vocabulary, keep)
            return need <= MAX_BYTES and tables <= MAX_TABLES

        low, high = 0, max(source, target)  # the longest that fits is below the one refused
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fits(mid) else (low, mid - 1)
        shorter = f"give a text of at most {low:,} tokens" if low else shorter
    return "; ".join([*ways, f"or {shorter}" if ways else shorter])


def _reads_attention(m: ModelConfig, keep: Keep) -> bool:
    """Whether the stages ``keep`` chooses include an attention stage (of heads ``--head`` narrows)."""
    chosen = keep.ids(m)
    return any(
        p.sublayer is not None and p.sublayer.keys is not None and (chosen is None or p.id in chosen)
        for p in places(m)
    )


def banned(ckpt: Checkpoint, sequence: list[int]) -> set[int]:
    """The ids generation may not choose next: each bad word whose prefix ``sequence`` ends with
    (a one-token bad word always), as transformers' NoBadWordsLogitsProcessor."""
    out = set()
    for bad in ckpt.bad_words_ids:
        prefix = list(bad[:-1])
        if not prefix or sequence[-len(prefix) :] == prefix:
            out.add(bad[-1])
    return out


def generate(
    config: Config,
    w: Weights,
    ckpt: Checkpoint,
    source_ids: list[int],
    max_len: int,
    sampling: Sampling | None = None,
) -> tuple[list[Step], list[int]]:
    """Greedy decoding from ``decoder_start_token_id``: the most likely token, fed back, until ``</s>``;
    with ``sampling``, a seeded draw instead (``generation.generate``).

    As ``transformers``' ``generate(num_beams=1, do_sample=False)`` (or ``do_sample=True``): the
    encoder reads the source once, the decoder one token a step with its key/value cache
    (``generation.generate_cached``); the bad words of config.json are never chosen, and the
    ``max_len``-th token is ``forced_eos_token_id`` when it is set. Returns the steps and the
    decoder's full input, ``[start, t1, …, </s>]``.
    """
    steps = generate_cached(
        config, w, [ckpt.decoder_start_token_id], max_len, source_ids=source_ids, sampling=sampling,
        eos_id=ckpt.eos_token_id, banned=lambda sequence: banned(ckpt, sequence),
        forced_end=ckpt.forced_eos_token_id,
    )  # fmt: skip
    return steps, generated_ids(steps)


class Loaded(NamedTuple):
    """A checkpoint made ready: its config, its weights, the input text's ids."""

    checkpoint: Checkpoint
    config: CheckpointConfig
    weights: Weights
    ids: list[int]  # the encoder's (the source text's), or a decoder-only model's (the prompt's)


def load(
    model: str, text: str, dtype: str = "float32", precision: int | None = None, prompt: bool = False
) -> Loaded:
    """Load ``model`` (a folder or a hub id) and tokenize its input: the source text of an
    encoder-decoder model, or with ``prompt`` the prompt of a decoder-only one (the other kind is
    refused before its weights are read)."""
    ckpt = load_checkpoint(model, dtype, prompt)
    config = checkpoint_config(ckpt, dtype, text, text if prompt else "", precision)
    ids = ckpt.tokenizer.encode_target(text) if prompt else ckpt.tokenizer.encode_source(text)
    if not ids:
        option = "--prompt" if prompt else "--source"
        raise CheckpointError(f"{option}: {text!r} has no tokens; give some text")
    return Loaded(ckpt, config, checkpoint_weights(config, ckpt), ids)


def walk(
    model: str,
    source: str,
    target: str | None = None,
    dtype: str = "float32",
    precision: int | None = None,
    max_len: int = MAX_TRANSLATION,
    keep: Keep = EVERYTHING,
) -> Walk:
    """Load ``model``, translate when ``target`` is None, and trace the pass (what ``keep`` keeps of it).

    The decoder reads ``[decoder_start] + target ids`` (``</s>`` included), as transformers'
    ``shift_tokens_right`` makes of the labels: each row's next token is the one after it.
    """
    ckpt, config, w, source_ids = load(model, source, dtype, precision)
    steps = None
    if target is None:
        max_len = min(max_len, config.model.max_positions - 1)  # the decoder reads at most that many
        check_size(config, len(source_ids), max_len + 1, keep)
        steps, target_ids = generate(config, w, ckpt, source_ids, max_len)
        target = ckpt.tokenizer.decode(target_ids[1:])
    else:
        target_ids = [ckpt.decoder_start_token_id, *ckpt.tokenizer.encode_target(target)]
    config = dataclasses.replace(config, target=target)
    check_size(config, len(source_ids), len(target_ids), keep)
    trace = run_forward(
        config,
        w,
        source_ids=source_ids,
        target_ids=target_ids,
        keep=keep,
        weights_source=ckpt.source,
        weights_checkpoint=True,
    )
    return Walk(config, w, trace, ckpt, steps)


def walk_prompt(
    model: str, prompt: str, dtype: str = "float32", precision: int | None = None, keep: Keep = EVERYTHING
) -> Walk:
    """Load a decoder-only ``model`` and trace the pass over the prompt's ids, as they are: no
    start token (GPT-2 has none), so row i predicts the token after the prompt's i-th. An
    encoder-only model (BERT) reads the prompt, [CLS] … [SEP] as its tokenizer puts them, in its
    encoder, and predicts the word at each blank."""
    ckpt, config, w, ids = load(model, prompt, dtype, precision, prompt=True)
    m = config.model
    if m.encoder_only:
        if m.task == "fill-mask" and config.mask_id is None:
            raise CheckpointError(
                f"{ckpt.source}: its vocabulary has no {config.mask_token}, so it has no blank to fill"
            )
        if m.task == "fill-mask" and config.mask_id not in ids:
            raise CheckpointError(
                f"--prompt: {prompt!r} has no {config.mask_token}: a fill-mask model predicts the word "
                f"hidden behind it; write {config.mask_token} where a word should be"
            )
        pad = ckpt.pad_token_id
        if m.position_offset and pad in ids:  # RoBERTa numbers its positions past the padding
            raise CheckpointError(
                f"--prompt: {prompt!r} holds {config.vocabulary[pad]} (the pad token): RoBERTa gives a pad "
                "no position and counts the tokens after it without it; this walkthrough reads "
                "unpadded text: remove it"
            )
        check_size(config, len(ids), 0, keep)
        trace = run_forward(
            config, w, source_ids=ids, keep=keep, weights_source=ckpt.source, weights_checkpoint=True
        )
        return Walk(config, w, trace, ckpt, None)
    check_size(config, 0, len(ids), keep)
    trace = run_forward(
        config, w, target_ids=ids, keep=keep, weights_source=ckpt.source, weights_checkpoint=True
    )
    return Walk(config, w, trace, ckpt, None)


class Translation(NamedTuple):
    """Greedy (or sampled) decoding of a checkpoint, and the teacher-forced pass to compare it with."""

    steps: list[Step]
    teacher_forced: Trace  # over [start, t1, …] without the last token: row i is step i
    source: str
    text: str  # the chosen tokens decoded, special tokens skipped (not decoder_start, which is no word)
    ids: list[int]  # the decoder's input: decoder_start, then each chosen token


def translate(
    model: str,
    source: str,
    dtype: str = "float32",
    max_len: int = MAX_TRANSLATION,
    sampling: Sampling | None = None,
) -> Translation:
    """``generate`` on the source text (greedy, or drawn by ``sampling``), then one teacher-forced
    pass over what it chose."""
    ckpt, config, w, source_ids = load(model, source, dtype)
    if sampling is not None:
        sampling.check(len(config.vocabulary))  # before any pass
    max_len = min(max_len, config.model.max_positions - 1)
    check_size(config, len(source_ids), max_len + 1)
    steps, sequence = generate(config, w, ckpt, source_ids, max_len, sampling)
    text = ckpt.tokenizer.decode(sequence[1:])
    config = dataclasses.replace(config, target=text)
    trace = run_forward(config, w, source_ids=source_ids, target_ids=sequence[:-1])
    trace.weights_source, trace.weights_checkpoint = ckpt.source, True
    return Translation(steps, trace, source, text, sequence)


class Continuation(NamedTuple):
    """A decoder-only checkpoint's prompt continued with the key/value cache (``generate_cached``)."""

    steps: list[Step]  # step 0 reads the prompt; step t the token chosen at step t - 1
    config: CheckpointConfig  # its target: the prompt and the continuation, decoded
    weights: Weights
    checkpoint: Checkpoint
    prompt_ids: list[int]
    cut: bool  # stopped because the position table has no more rows, not by --max-len or eos


def continue_prompt(
    loaded: Loaded, max_len: int = 20, sampling: Sampling | None = None, compare: bool = False
) -> Continuation:
    """Up to ``max_len`` tokens after the prompt of ``loaded`` (``load(…, prompt=True)``): greedy,
    or drawn as ``sampling`` says (seeded); stops after ``<|endoftext|>`` (eos), as transformers'
    ``generate`` does, or where the position table ends. What it keeps is counted first
    (``check_generation``), with the full pass ``compare`` will run after it."""
    ckpt, config, w, ids = loaded
    m = config.model
    if m.encoder_only:
        raise generation.no_next_token(config)
    room = m.max_positions - len(ids) + 1  # the last choice is never fed back
    if room < 1:
        raise too_long(config, "the prompt", len(ids))
    new = min(max_len, room)
    check_generation(config, 0, len(ids), new, compare)
    steps = generate_cached(config, w, ids, new, sampling=sampling, eos_id=ckpt.eos_token_id)
    config = dataclasses.replace(config, target=ckpt.tokenizer.decode(generated_ids(steps)))
    cut = new < max_len and len(steps) == new and steps[-1].chosen not in ends(ckpt.eos_token_id)
    return Continuation(steps, config, w, ckpt, ids, cut)
