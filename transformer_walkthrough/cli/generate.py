"""``generate``: one token at a time (greedy, or a seeded draw) from the toy, a translation
model or a decoder-only model's prompt, each step checked against one full pass."""

import dataclasses
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ..errors import WalkthroughError, decoded, printable
from ..session import ModelArgs, no_toy_options, toy
from ..views.terminal import Terminal
from .app import app, user_errors
from .options import TOY, ConfigOption, ModelOptions, WeightsOption, model_options

if TYPE_CHECKING:
    from ..model.generation import Step
    from ..model.sampling import Sampling
    from ..views.widgets import View


MAX_GENERATED = 512  # tokens: a model that never says <end> stops here
GenerateSeedOption = Annotated[
    Optional[int],
    typer.Option(
        help="Seed for the draw of --temperature, --top-k, --top-p; for the toy also of its weights.",
        show_default=False,
    ),
]


def _sampling(
    temperature: float | None, top_k: int | None, top_p: float | None, seed: int | None
) -> "Sampling | None":
    """The draw that --temperature, --top-k and --top-p ask for (None: greedy, the default); an
    option that would change nothing is refused, so that no one believes it did something."""
    from ..model.sampling import Sampling

    if temperature is None and top_k is None and top_p is None:
        return None
    sampling = Sampling(1.0 if temperature is None else temperature, top_k, top_p, seed or 0)
    cuts = [name for name, value in (("--top-k", top_k), ("--top-p", top_p)) if value is not None]
    if sampling.greedy and cuts:
        raise WalkthroughError(
            f"{cuts[0]} does nothing at --temperature 0: greedy takes the most likely token; drop one"
        )
    return sampling


def _draw_seed(sampling: "Sampling | None", seed: int | None) -> None:
    """A checkpoint's --seed seeds the draw alone: refused when nothing is drawn."""
    if seed is not None and (sampling is None or sampling.greedy):
        raise WalkthroughError(
            "--seed with --model seeds the draw: give --temperature T (above 0), --top-k K or --top-p P too"
        )


@app.command()
@user_errors
@model_options("model", "source", "dtype", "prompt")  # no --target: generation makes its own
def generate(
    config: ConfigOption = None,
    seed: GenerateSeedOption = None,
    weights: WeightsOption = None,
    max_len: Annotated[int, typer.Option(help="Stop after this many tokens if <end> never comes.")] = 20,
    compare: Annotated[
        bool, typer.Option("--compare", help="Show each step beside the same row of one teacher-forced pass.")
    ] = False,
    checkpoint: ModelOptions = TOY,
    temperature: Annotated[
        Optional[float],
        typer.Option(
            help="Draw each token from softmax(logits / T): below 1 sharper, above 1 flatter; 0 is greedy.",
            show_default=False,
        ),
    ] = None,
    top_k: Annotated[
        Optional[int],
        typer.Option(
            "--top-k",
            help="Draw from the K most likely tokens (and any tied with the K-th).",
            show_default=False,
        ),
    ] = None,
    top_p: Annotated[
        Optional[float],
        typer.Option(
            "--top-p",
            help="Draw from the fewest most likely tokens whose probabilities add up to P or more.",
            show_default=False,
        ),
    ] = None,
    layer: Annotated[
        Optional[int],
        typer.Option(help="With --prompt: the layer whose attention over the cache is shown (default: last)"),
    ] = None,
    head: Annotated[
        int, typer.Option(help="With --prompt: the head whose attention over the cache is shown (1 is A1).")
    ] = 1,
) -> None:
    """Greedy decoding from <start>, one token at a time, until <end> (or a seeded draw: --temperature,
    --top-k, --top-p); with --prompt, a decoder-only checkpoint's continuation, its key/value cache
    growing by one row a step.

    It keeps the cache (layers × 2 × key/value heads × d_k × positions), each step's distribution
    and each layer's attention row for the token read last (not the prompt's n × n), and while the
    prompt is read its largest stage; --compare adds one full pass, every stage. Too much is refused
    before the prompt is read, part by part, naming what keeps less (--max-len, a shorter prompt)."""
    from ..compare.checks import TOLERANCE
    from ..config import END
    from ..model.generation import repeated
    from ..model.trace import weights_origin
    from ..model.training import UNTRAINED_REPEATS, generation_limit
    from ..model.training import generate as decode
    from ..views.tables import comparison_table, generation_table
    from ..views.widgets import View, label

    if max_len > MAX_GENERATED:
        raise WalkthroughError(f"--max-len: at most {MAX_GENERATED}, got {max_len}")
    if max_len <= 0:
        raise WalkthroughError(f"--max-len: must be a positive integer, got {max_len}")
    sampling = _sampling(temperature, top_k, top_p, seed)
    model = checkpoint.checked() if checkpoint.model or checkpoint.prompt or checkpoint.dtype else None
    if checkpoint.model is None and checkpoint.source is not None:
        raise WalkthroughError(
            "--source on generate needs --model; the toy generates from its config's source "
            "(walkthrough config > mine.yaml, edit the sentence, generate -c mine.yaml)"
        )
    if model is not None and model.prompt is not None:
        no_toy_options(config, None, weights)
        _draw_seed(sampling, seed)
        _continue(model, max_len, sampling, layer, head, compare)
        return
    if layer is not None or head != 1:
        option = "--layer" if layer is not None else "--head"
        raise WalkthroughError(f"{option} is for --model with --prompt (the key/value cache)")
    if model is not None:
        from ..checkpoints.run import translate

        no_toy_options(config, None, weights)
        _draw_seed(sampling, seed)
        translation = translate(model.model, model.source, model.dtype, max_len, sampling)
        steps, teacher_forced = translation.steps, translation.teacher_forced
        settings = teacher_forced.config
        said = f"{printable(translation.source)} → {decoded(translation.text)}"
    else:
        settings, w = toy(config, seed, weights=weights)
        repeats = UNTRAINED_REPEATS if weights is None else None  # the seed's random weights only
        if sampling is not None:  # the toy's one seed: its weights' (unless --weights) and the draw's
            sampling = dataclasses.replace(sampling, seed=settings.seed)
        steps, teacher_forced = decode(settings, w, max_len, repeats, sampling)
        words = teacher_forced.vocabulary
        prompt = " ".join(settings.source_tokens) or words[steps[0].ids[0]]  # decoder-only: <start>
        said = f"{prompt} → {' '.join(words[s.chosen] for s in steps)}"
    vocabulary = teacher_forced.vocabulary
    out = Terminal()
    view = View(precision=settings.display.precision)
    if model is not None:
        origin = teacher_forced.weights_origin  # as `run` says it
    else:
        origin = weights_origin(settings.seed, None if weights is None else printable(str(weights)))
    out.note(f"weights: {origin}")
    out.show(generation_table(steps, vocabulary, view))
    _show_routes(out, steps, vocabulary, view)
    _show_sampling(out, steps, vocabulary, sampling, view)
    out.paragraph(said)
    limit = generation_limit(settings, max_len)
    if model is None and weights is None and repeated(steps) == UNTRAINED_REPEATS and len(steps) < limit:
        out.line(
            f"(stopped after {len(steps)} tokens: {label(vocabulary[steps[-1].chosen])} was chosen "
            f"{UNTRAINED_REPEATS} times in a row, and untrained weights repeat themselves: random ones stop "
            "there, trained ones (--weights) run to <end> or --max-len)"
        )
    elif model is None and vocabulary[steps[-1].chosen] != END and len(steps) == limit < max_len:
        out.line(
            f"(stopped after {len(steps)} tokens: the learned position table has "
            f"{settings.model.max_positions} rows, model.max_positions)"
        )
    table, worst = comparison_table(steps, teacher_forced)
    if compare:
        out.show(table)
    # float32 sums in a different order for a longer input: rows agree to float32's rounding
    tolerance = 1e-9 if settings.model.dtype == "float64" else TOLERANCE["float32"]
    if not worst <= tolerance:  # NaN included: a comparison with NaN is a failure, not agreement
        raise WalkthroughError(
            f"generation differs from the teacher-forced pass (max |diff| {worst:.1e}): "
            "the numbers overflowed; try smaller weights"
        )
    out.paragraph(
        f"Step i equals row i of one teacher-forced pass over the final input (max |diff| {worst:.1e}): "
        "the causal mask keeps row i from seeing anything after position i."
    )


def _show_routes(out: Terminal, steps: "list[Step]", vocabulary: tuple[str, ...], view: "View") -> None:
    """After the generation table, with experts: where each sparse layer sent each token read."""
    from ..views.experts import generation_routes

    if steps[0].routes:
        out.show(generation_routes(steps, vocabulary, max(view.precision, 2)))


def _show_sampling(
    out: Terminal, steps: "list[Step]", vocabulary: tuple[str, ...], sampling: "Sampling | None", view: "View"
) -> None:
    """After the generation table: each draw's arithmetic, or why --temperature 0 drew nothing."""
    from ..views.tables import sampling_note, sampling_table

    if sampling is None:
        return
    if sampling.greedy:
        out.line(
            "--temperature 0 is greedy: as T → 0, softmax(logits / T) puts all the probability on the "
            "largest logit, so each step takes the most likely token and nothing is drawn."
        )
        return
    out.show(sampling_table(steps, vocabulary, sampling, view))
    out.line(sampling_note(sampling))


def _continue(
    checkpoint: ModelArgs,
    max_len: int,
    sampling: "Sampling | None",
    layer: int | None,
    head: int,
    compare: bool,
) -> None:
    """``generate --prompt``: the continuation step by step, and with ``compare`` each step against
    the same row of one full pass (``generation.compare``)."""
    from ..checkpoints.run import continue_prompt, load
    from ..compare.checks import TOLERANCE
    from ..model.generation import compare as against_full_pass
    from ..model.generation import generated_ids
    from ..model.trace import token_labels, weights_origin
    from ..views.tables import cache_comparison_table, cached_generation_table, how_drawn
    from ..views.widgets import View

    loaded = load(checkpoint.model, checkpoint.prompt or "", checkpoint.dtype, prompt=True)
    m = loaded.config.model
    if m.encoder_only:  # said before --layer is checked: it counts decoder layers, of which BERT has none
        from ..model.generation import no_next_token

        raise no_next_token(loaded.config)
    layer = m.num_decoder_layers - 1 if layer is None else layer
    if not 0 <= layer < m.num_decoder_layers:
        raise WalkthroughError(f"--layer: this model has layers 0 to {m.num_decoder_layers - 1}, got {layer}")
    if not 1 <= head <= m.num_heads:
        raise WalkthroughError(f"--head: this model has heads 1 to {m.num_heads}, got {head}")
    done = continue_prompt(loaded, max_len, sampling, compare)
    vocabulary = done.config.vocabulary or ()
    ids = generated_ids(done.steps)
    rows = token_labels([vocabulary[i] for i in ids])
    out = Terminal()
    origin = weights_origin(done.config.seed, printable(done.checkpoint.source), checkpoint=True)
    out.note(f"weights: {origin}")
    view = View(precision=done.config.display.precision)
    drawn = sampling is not None and not sampling.greedy
    out.show(cached_generation_table(done.steps, vocabulary, rows, layer, head, view, drawn))
    _show_routes(out, done.steps, vocabulary, view)
    _show_sampling(out, done.steps, vocabulary, sampling, view)
    n, fed = len(done.prompt_ids), len(ids) - 1
    continuation = done.checkpoint.tokenizer.decode(ids[n:])
    out.continuation(checkpoint.prompt or "", continuation)
    how = "greedy" if sampling is None else how_drawn(sampling)
    heads = (
        "head" if m.kv_heads == m.num_heads
        else f"key/value head ({m.kv_heads}, each read by {m.num_heads // m.kv_heads} query heads)"
    )  # fmt: skip
    out.line(
        f"{len(done.steps)} tokens after a prompt of {n}, {how}; the cache holds {fed} keys and values "
        f"per {heads} and layer, d_k = {m.d_k}."
    )
    if done.cut:
        key = done.config.context_key  # config.json's: max_position_embeddings, GPT-2's n_positions
        if m.adds_positions:
            out.line(f"(stopped: the learned position table has {m.max_positions:,} rows: {key})")
        else:
            out.line(f"(stopped: this model reads at most {m.max_positions:,} positions: {key})")
    if not compare:
        return
    gaps = against_full_pass(done.config, done.weights, done.steps)
    out.show(cache_comparison_table(gaps, routed=bool(done.steps[0].routes)))
    scale = max(1.0, max(float(abs(s.logits).max()) for s in done.steps))
    tolerance = 1e-9 if m.dtype == "float64" else TOLERANCE["float32"] * scale
    worst = max(gaps)
    if not worst <= tolerance:  # NaN included
        raise WalkthroughError(f"the cached steps differ from the full pass (max |diff| {worst:.1e})")
    out.line(
        f"Step t equals row n + t − 1 of one full pass over the {fed} tokens fed (max |diff| {worst:.1e}): "
        "the causal mask keeps row i from seeing anything after position i, so the cached keys and "
        "values are all a new row needs."
    )
