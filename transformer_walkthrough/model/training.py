"""Training with Adam and greedy generation: the toy model learns its sentence, then says it.

The article says the weights "will be nudged gradually during training" and that the decoder
predicts one word at a time until <end>. Here both happen, in numbers: ``train`` runs the forward
pass, ``backprop.backward`` and an Adam step, again and again; ``generate`` decodes from <start>.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..config import END, START, Config, masked
from ..config import answers as fill_answers
from ..errors import WalkthroughError
from . import generation
from .backprop import backward
from .generation import Step, full_passes, generated_ids
from .sampling import Sampling
from .trace import Trace
from .transformer import Weights, run_forward


def parameters(w: Weights) -> list[np.ndarray]:
    """Every parameter array of the model, each once (a tied table too), in a fixed order;
    ``parameters`` of the gradients come in the same order."""
    return list(w.values())


MAX_STEPS = 100_000  # a minute or so of training at the default size; the toy needs 150


class Adam:
    """Adam (Kingma & Ba, 2015): steps scaled by running averages of the gradient and its square.

    The moments of all parameters live in one flat array each, so that a step is a dozen NumPy
    operations however many parameters there are; each parameter is then moved by its slice.
    """

    def __init__(
        self,
        params: list[np.ndarray],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ):
        self.params, self.lr, self.betas, self.eps = params, lr, betas, eps
        sizes = np.cumsum([0, *(p.size for p in params)])
        self.slices = [slice(a, b) for a, b in itertools.pairwise(sizes)]
        self.m = np.zeros(sizes[-1], dtype=params[0].dtype)
        self.v = np.zeros_like(self.m)
        self.t = 0

    def step(self, grads: list[np.ndarray]) -> None:
        """Update every parameter in place."""
        self.t += 1
        b1, b2 = self.betas
        g = np.concatenate([x.ravel() for x in grads])
        self.m *= b1
        self.m += (1 - b1) * g
        self.v *= b2
        self.v += (1 - b2) * g * g
        # Early averages lean towards 0: divide by 1 − βᵗ (PyTorch's arrangement of the same formula).
        denominator = np.sqrt(self.v) / math.sqrt(1 - b2**self.t) + self.eps
        update = self.m / denominator * (self.lr / (1 - b1**self.t))
        for p, s in zip(self.params, self.slices, strict=True):
            p -= update[s].reshape(p.shape)


class Example(NamedTuple):
    """One input the model learns from, and what it should predict (``run_forward``'s ids)."""

    source_ids: list[int]
    target_ids: list[int]
    answer_ids: list[int] | None = None  # fill-mask: the word hidden at each row, -1 elsewhere


def examples(config: Config) -> list[Example]:
    """What training learns from: each (source, target) pair of the sentence and the dataset,
    teacher-forced; for a fill-mask model, each sentence with each of its words masked in turn
    (as BERT learns, with one blank a time: the word at that row is the answer)."""
    if not config.model.encoder_only:
        return [Example(config.token_ids(s), config.token_ids(t)) for s, t in config.pairs]
    out = []
    for words in config.sentences:
        for i in range(len(words)):
            tokens, answers = masked(words, (i,)), fill_answers(words, (i,))
            out.append(
                Example(config.token_ids(tokens), [], [-1 if a is None else config.index[a] for a in answers])
            )
    return out


class Loss(NamedTuple):
    """What training minimises, and with experts its two terms: ``total = cross_entropy +
    router_aux_loss_coef · aux``, ``aux`` the load-balancing loss E·Σ fᵢ·Pᵢ (Switch Transformer);
    without experts the total is the cross-entropy and ``aux`` is None."""

    total: float
    cross_entropy: float
    aux: float | None = None


class Losses(list[float]):
    """The loss before each step and after the last one (the totals, as floats), and ``terms``:
    each as a ``Loss``, its cross-entropy and load-balancing loss apart."""

    def __init__(self) -> None:
        super().__init__()
        self.terms: list[Loss] = []

    def add(self, loss: Loss) -> None:
        self.append(loss.total)
        self.terms.append(loss)


def loss_and_gradients(config: Config, w: Weights) -> tuple[Loss, list[np.ndarray]]:
    """Mean loss (and its terms) and gradient over the examples: the sentence and every dataset pair."""
    pairs = examples(config)
    total, aux, grads = 0.0, 0.0, [np.zeros_like(p) for p in parameters(w)]
    for source, target, answer in pairs:
        trace = run_forward(config, w, source_ids=source, target_ids=target, answer_ids=answer)
        b = backward(trace, w)
        total, aux = total + b.loss, aux + b.aux
        for acc, g in zip(grads, parameters(b.weights), strict=True):
            acc += g
    total, aux = total / len(pairs), aux / len(pairs)
    m = config.model
    loss = Loss(total, total - m.router_aux_loss_coef * aux, aux) if m.experts else Loss(total, total)
    return loss, [g / len(pairs) for g in grads]


def train(
    config: Config,
    w: Weights,
    steps: int | None = None,
    learning_rate: float | None = None,
    on_step: Callable[[int, Loss], None] | None = None,
) -> Losses:
    """Train ``w`` in place; return the loss before each step and, last, after the final one
    (0 steps: the loss of ``w`` as it is, which is left untouched); ``on_step(step, loss)`` is
    called after each step's loss is known."""
    if config.model.output_head == "flatten":
        backward(run_forward(config, w), w)  # raises the error that explains why
    steps = steps if steps is not None else config.training.steps
    lr = learning_rate if learning_rate is not None else config.training.learning_rate
    if not 0 <= steps <= MAX_STEPS:
        raise WalkthroughError(
            f"--steps: must be 0 to {MAX_STEPS:,} (the toy learns in about 150; 0 keeps the "
            f"initial weights), got {steps}"
        )
    # Each step is a pass over every pair: a 1.5 MB training.dataset of 50,000 pairs made one step
    # take 97 s. The passes are bounded as the steps of one sentence are.
    count = len(examples(config))
    passes = steps * count
    if passes > MAX_STEPS:
        raise WalkthroughError(
            f"--steps: {steps:,} steps over {count:,} examples (the sentence and "
            f"training.dataset) are {passes:,} passes; the limit is {MAX_STEPS:,}"
        )
    if not lr > 0:
        raise WalkthroughError(f"--lr: must be positive, got {lr:g}")
    if not math.isfinite(lr):
        raise WalkthroughError(f"--lr: must be a finite number, got {lr:g}")
    adam = Adam(parameters(w), lr)
    losses = Losses()
    with np.errstate(all="ignore"):  # an overflow is reported below, as the loss it spoils
        for step in range(steps):
            loss, grads = loss_and_gradients(config, w)
            _check_finite(loss.total, step, lr)
            losses.add(loss)
            if on_step:
                on_step(step, loss)
            adam.step(grads)
        losses.add(loss_and_gradients(config, w)[0])
    _check_finite(losses[-1], steps, lr)
    return losses


def training_notes(losses: list[float], lr: float, config: Config, after: Trace) -> list[str]:
    """What a learner should be told about a training that ended: a loss that rose, and what a model
    that has seen a single sentence has learned (that sentence, by heart, once it says it back)."""
    notes = []
    if losses[-1] > losses[0]:
        notes.append(
            f"The loss rose, from {losses[0]:.4g} to {losses[-1]:.4g}: the steps overshoot. "
            f"Try a smaller rate, e.g. --lr {lr / 10:g}."
        )
    checked = [p for p in after.prediction if p.expected is not None]
    wrong = sum(p.word != p.expected for p in checked)
    if wrong:
        steps = len(losses) - 1
        what = "blanks" if config.model.encoder_only else "next words"
        notes.append(
            f"{wrong} of the {len(checked)} {what} are still wrong after {steps} steps: it has not "
            f"learned the sentence yet (try --steps {max(2 * steps, config.training.steps)})."
        )
    elif len(config.pairs) == 1 and config.model.encoder_only:
        notes.append(
            "A model that has seen one sentence has memorised it: it fills any blank of this sentence "
            "with the word that was there, and knows nothing of any other."
        )
    elif len(config.pairs) == 1:
        notes.append(
            "A model that has seen one sentence has memorised it: it says this sentence back, "
            "and knows nothing of any other."
        )
    return notes


def _check_finite(loss: float, step: int, lr: float) -> None:
    """Stop a training that diverged: one line naming the step (``w`` is then half-trained: not saved)."""
    if math.isfinite(loss):
        return
    if step == 0:
        raise WalkthroughError(f"the loss is {loss} before training: the weights are too large")
    raise WalkthroughError(
        f"training diverged: the loss became {loss} at step {step}; try a smaller --lr than {lr:g}"
    )


# Random weights drawn from the seed have learned nothing: greedy decoding soon picks one token again
# and again (the default toy writes "comfortably" twenty times). Three in a row is the evidence; a
# trained model or a checkpoint runs to its end token or --max-len, as transformers' generate does.
UNTRAINED_REPEATS = 3


def generation_limit(config: Config, max_len: int) -> int:
    """How many tokens generation may add after <start>: ``max_len``, or fewer when a table of
    learned positions has no row for a longer input."""
    m = config.model
    return min(max_len, m.max_positions - 1) if m.positional_encoding == "learned" else max_len


def generate(
    config: Config,
    w: Weights,
    max_len: int = 20,
    repeats: int | None = None,
    sampling: Sampling | None = None,
) -> tuple[list[Step], Trace]:
    """Greedy decoding from <start> (or with ``sampling`` a seeded draw): feed the decoder its own
    output until it says <end> (or, with ``repeats``, has chosen one token that many times in a
    row: ``UNTRAINED_REPEATS``).

    Returns the steps (``generation.generate``, one whole pass a step) and the teacher-forced trace
    of the final decoder input, whose row i is, thanks to the causal mask, exactly step i's
    distribution. Learned positions end the decoder input at ``max_positions`` tokens, so
    generation stops there too: ``generation_limit``.
    """
    if config.model.encoder_only:
        raise generation.no_next_token(config)
    if config.model.output_head == "flatten":
        raise WalkthroughError(
            "the flatten head is sized for one decoder length and predicts once; generation needs "
            "output_head: per-position"
        )
    if max_len <= 0:
        raise WalkthroughError(f"--max-len: must be a positive integer, got {max_len}")
    source = config.token_ids(config.source_tokens)
    start, end = config.token_ids((START, END))
    read = full_passes(config, w, source)
    limit = generation_limit(config, max_len)
    steps = generation.generate(read, [start], limit, sampling=sampling, eos_id=end, repeats=repeats)
    fed = generated_ids(steps)[:-1] if steps[-1].chosen == end else generated_ids(steps)  # <end> is not
    return steps, run_forward(config, w, source_ids=source, target_ids=fed)
