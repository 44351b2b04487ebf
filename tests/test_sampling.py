"""Sampling (model/sampling.py): temperature, top-k and top-p against transformers' own warpers on
the same logits (ties, boundaries, hypothesis-drawn logits), the draw by hand, greedy as T = 0,
and ``generate --temperature/--top-k/--top-p/--seed`` through the CLI for the toy, the tiny Marian
and the tiny GPT-2 of conftest."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from rich.console import Console

from tests.test_robustness import fails
from transformer_walkthrough.cli import app
from transformer_walkthrough.errors import WalkthroughError
from transformer_walkthrough.model import functional as F
from transformer_walkthrough.model.generation import Reading, generate, generated_ids
from transformer_walkthrough.model.sampling import (
    TIED_RUNS,
    Sampling,
    cumulative,
    draw,
    ranked,
    sample,
    temperature,
    top_k_mask,
    top_p_mask,
)
from transformer_walkthrough.views.tables import sampling_table
from transformer_walkthrough.views.widgets import View

torch = pytest.importorskip("torch")  # test dependencies: CI installs them, so these never skip there
logits_process = pytest.importorskip("transformers.generation.logits_process")

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


class Fixed:
    """A generator that hands out the given uniform numbers: a draw worked out by hand."""

    def __init__(self, *u: float) -> None:
        self.u = list(u)

    def random(self) -> float:
        return self.u.pop(0)


# --- transformers' warpers, the reference --------------------------------------------------------


def t(logits: np.ndarray):
    return torch.tensor(logits, dtype=torch.float64)[None]


def their_temperature(logits: np.ndarray, T: float) -> np.ndarray:
    return logits_process.TemperatureLogitsWarper(float(T))(None, t(logits))[0].numpy()


def their_top_k(logits: np.ndarray, k: int) -> np.ndarray:
    return logits_process.TopKLogitsWarper(k)(None, t(logits))[0].numpy() > -np.inf


def their_top_p(logits: np.ndarray, p: float) -> np.ndarray:
    return logits_process.TopPLogitsWarper(p)(None, t(logits))[0].numpy() > -np.inf


def theirs(logits: np.ndarray, s: Sampling) -> tuple[np.ndarray, np.ndarray]:
    """transformers' warpers in generate's order, then its softmax: (kept ids, their probabilities)."""
    scores = t(logits)
    scores = logits_process.TemperatureLogitsWarper(float(s.temperature))(None, scores)
    if s.top_k is not None:
        scores = logits_process.TopKLogitsWarper(s.top_k)(None, scores)
    if s.top_p is not None:
        scores = logits_process.TopPLogitsWarper(s.top_p)(None, scores)
    q = torch.softmax(scores, dim=-1)[0].numpy()
    kept = np.flatnonzero(scores[0].numpy() > -np.inf)
    return kept, q[kept]


def their_top_p_input(logits: np.ndarray, s: Sampling) -> np.ndarray:
    """The probabilities TopPLogitsWarper sums: the softmax of what temperature and top-k left."""
    scores = logits_process.TemperatureLogitsWarper(float(s.temperature))(None, t(logits))
    if s.top_k is not None:
        scores = logits_process.TopKLogitsWarper(s.top_k)(None, scores)
    return torch.softmax(scores, dim=-1)[0].numpy()


def near_top_p_boundary(logits: np.ndarray, p: float) -> bool:
    """A running sum within rounding of 1 − p: two correct implementations may round it to either
    side (their sums are added in other orders), so the case says nothing about the rule."""
    finite = np.sort(logits[logits > -np.inf])
    running = np.cumsum(F.softmax(finite)) if finite.size else np.array([])
    return bool(np.any(np.abs(running - (1 - p)) < 1e-9))


def split_tie(logits: np.ndarray, keep: np.ndarray) -> bool:
    """Some kept token has the logit of a removed one (finite): which of them a cut keeps is a
    tie rule, and torch.sort (unstable) has none."""
    removed = logits[~keep & (logits > -np.inf)]
    return bool(np.isin(logits[keep], removed).any())


# --- each warper alone ---------------------------------------------------------------------------


def test_temperature_divides_the_logits_as_transformers() -> None:
    logits = np.array([2.0, -1.5, 0.25, 7.0, -np.inf])
    for T in (0.1, 0.7, 1.0, 3.0):
        np.testing.assert_allclose(temperature(logits, T), their_temperature(logits, T), rtol=1e-15, atol=0)


def test_top_k_keeps_every_token_tied_with_the_k_th() -> None:
    logits = np.array([1.0, 3.0, 3.0, 2.0, 3.0])
    assert np.flatnonzero(top_k_mask(logits, 1)).tolist() == [1, 2, 4]  # three share the 1st place
    assert np.flatnonzero(top_k_mask(logits, 3)).tolist() == [1, 2, 4]
    assert np.flatnonzero(top_k_mask(logits, 4)).tolist() == [1, 2, 3, 4]
    for k in range(1, 8):  # past the vocabulary: all of it, as transformers' min(top_k, size)
        np.testing.assert_array_equal(top_k_mask(logits, k), their_top_k(logits, k))


def test_top_p_keeps_the_token_that_reaches_p() -> None:
    uniform = np.zeros(4)  # q = 1/4 each, exactly: every running sum is exact
    assert top_p_mask(uniform, 0.5).sum() == 2  # 1/4 + 1/4 = 0.5 ≥ 0.5: two are enough
    assert top_p_mask(uniform, 0.500001).sum() == 3  # just past a half: the third reaches it
    assert top_p_mask(uniform, 0.75).sum() == 3
    assert top_p_mask(uniform, 1.0).sum() == 4
    for p in (0.25, 0.5, 0.500001, 0.75, 0.76, 1.0):
        assert top_p_mask(uniform, p).sum() == their_top_p(uniform, p).sum(), p
    # among equal probabilities the lower id counts as the more likely, as argmax: kept first
    assert np.flatnonzero(top_p_mask(uniform, 0.5)).tolist() == [0, 1]


def test_top_p_always_keeps_the_most_likely_and_never_a_zero() -> None:
    logits = np.array([0.0, 5.0, -np.inf, 1.0, -2000.0])  # e^-2000 underflows to 0
    assert np.flatnonzero(top_p_mask(logits, 1e-9)).tolist() == [1]  # min_tokens_to_keep = 1
    assert np.flatnonzero(top_p_mask(logits, 1.0)).tolist() == [0, 1, 3]  # probability 0: removed
    for p in (1e-9, 0.5, 0.99, 1.0):
        np.testing.assert_array_equal(top_p_mask(logits, p), their_top_p(logits, p))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    logits=arrays(np.float64, st.integers(1, 300), elements=st.integers(-3, 3).map(float))
    | arrays(np.float32, st.integers(1, 300), elements=st.floats(-5, 5, width=32))
)
def test_the_ranking_is_a_stable_sort_from_the_most_likely(logits) -> None:
    """Ties in id order, as argmax picks; drawn with few values (many runs of ties) and many."""
    np.testing.assert_array_equal(ranked(logits), np.argsort(-logits, kind="stable"))


def test_the_ranking_of_many_runs_of_ties_and_of_one() -> None:
    many = np.repeat(np.arange(TIED_RUNS + 5, dtype=float), 2)[::-1].copy()  # past the limit: the stable sort
    np.testing.assert_array_equal(ranked(many), np.argsort(-many, kind="stable"))
    assert ranked(np.zeros(1000)).tolist() == list(range(1000))


# --- the whole chain, on drawn logits ------------------------------------------------------------

LOGITS = arrays(
    np.float64,
    st.integers(1, 40),
    elements=st.floats(-30, 30) | st.sampled_from([-np.inf, 0.0, 1.0, 1.0]),  # ties, banned tokens
).filter(lambda x: (x > -np.inf).any())
ROUNDED = LOGITS.map(lambda x: np.round(x, 0))  # many ties, at every place


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    logits=LOGITS | ROUNDED,
    T=st.floats(0.05, 10),
    k=st.none() | st.integers(1, 45),
    p=st.none() | st.floats(1e-6, 1.0),
)
def test_kept_candidates_and_probabilities_equal_transformers(logits, T, k, p) -> None:
    s = Sampling(T, k, p)
    z = temperature(logits, T)
    if p is not None:
        after_k = np.where(top_k_mask(z, k) if k else True, z, -np.inf)
        assume(not near_top_p_boundary(after_k, p))
    d = sample(logits, s, np.random.default_rng(0))
    kept, q = theirs(logits, s)
    ours = np.zeros(logits.size, dtype=bool)
    ours[d.kept] = True
    assert d.kept.size == kept.size
    np.testing.assert_array_equal(np.sort(z[d.kept]), np.sort(z[kept]))  # the same values kept
    if not split_tie(z, ours):  # then the same tokens, one by one
        assert sorted(d.kept.tolist()) == kept.tolist()
        np.testing.assert_allclose(d.q, q[np.searchsorted(kept, d.kept)], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.sort(d.q), np.sort(q), rtol=1e-12, atol=1e-15)
    if p is not None:  # what top-p read, shown as the p column
        np.testing.assert_allclose(d.p, their_top_p_input(logits, s), rtol=1e-12, atol=1e-15)
    else:
        assert d.p is None
    # the kept are listed most likely first, their running sums end at exactly 1, u fell in one
    assert np.all(np.diff(z[d.kept]) <= 0) and d.cumulative[-1] == 1.0
    assert (d.cumulative[d.index - 1] if d.index else 0.0) <= d.u < d.cumulative[d.index]


@settings(max_examples=200, deadline=None)
@given(logits=LOGITS | ROUNDED, k=st.integers(1, 45))
def test_top_k_alone_equals_transformers(logits, k) -> None:
    finite = logits > -np.inf  # a token at −∞ (banned) is no candidate: transformers leaves it at −∞
    np.testing.assert_array_equal(top_k_mask(logits, k) & finite, their_top_k(logits, k))


@settings(max_examples=200, deadline=None)
@given(logits=LOGITS | ROUNDED, p=st.floats(1e-6, 1.0))
def test_top_p_alone_equals_transformers(logits, p) -> None:
    assume(not near_top_p_boundary(logits, p))
    ours, them = top_p_mask(logits, p), their_top_p(logits, p)
    assert ours.sum() == them.sum()
    if not split_tie(logits, ours):
        np.testing.assert_array_equal(ours, them)


# --- the draw ------------------------------------------------------------------------------------


def test_the_draw_by_hand() -> None:
    """logits 2, 1, 0, −1 at T = 2 are z = 1, 0.5, 0, −0.5; the top 3 keep 1, 0.5, 0:
    e^1 = 2.71828, e^0.5 = 1.64872, e^0 = 1, sum 5.36700, q = 0.50648, 0.30720, 0.18632,
    running sums 0.50648, 0.81368, 1; u = 0.6 lies in [0.50648, 0.81368): the second, token 1."""
    d = sample(np.array([2.0, 1.0, 0.0, -1.0]), Sampling(2.0, top_k=3), Fixed(0.6))
    np.testing.assert_allclose(d.scaled, [1.0, 0.5, 0.0, -0.5], rtol=1e-15)
    assert d.kept.tolist() == [0, 1, 2] and d.after_top_k == 3
    np.testing.assert_allclose(d.q, [0.50648, 0.30720, 0.18632], atol=5e-6)
    np.testing.assert_allclose(d.cumulative, [0.50648, 0.81368, 1.0], atol=5e-6)
    assert (d.u, d.index, d.chosen) == (0.6, 1, 1)


def test_each_candidate_owns_a_stretch_as_long_as_its_probability() -> None:
    q = np.array([0.5, 0.25, 0.25])  # running sums 0.5, 0.75, 1: exact
    assert cumulative(q).tolist() == [0.5, 0.75, 1.0]
    for u, index in [(0.0, 0), (0.4999, 0), (0.5, 1), (0.7499, 1), (0.75, 2), (0.9999, 2)]:
        assert draw(q, Fixed(u)) == (u, index)
    assert draw(np.array([0.5, 0.0, 0.5]), Fixed(0.5)) == (0.5, 2)  # nothing falls on a zero


def test_the_same_seed_draws_the_same_numbers_on_every_machine() -> None:
    # PCG64's stream is specified: default_rng(0)'s first double is this on every platform
    assert np.random.default_rng(0).random() == 0.6369616873214543
    logits = np.random.default_rng(1).normal(size=50)

    def draws(seed: int) -> list[int]:
        rng = np.random.default_rng(seed)
        return [sample(logits, Sampling(0.9, 20, 0.95), rng).chosen for _ in range(30)]

    assert draws(5) == draws(5)
    assert draws(5) != draws(6)


def test_temperature_sharpens_below_1_and_flattens_above() -> None:
    logits = np.array([3.0, 1.0, 0.5, -2.0])
    q = {T: sample(logits, Sampling(T), Fixed(0.5)).q for T in (0.01, 0.5, 1.0, 2.0, 1e6)}
    assert q[0.01][0] > 1 - 1e-12  # T → 0: all on the largest logit, greedy's choice
    assert q[0.5][0] > q[1.0][0] > q[2.0][0] > q[1e6][0]
    np.testing.assert_allclose(q[1e6], 0.25, atol=1e-5)  # T → ∞: uniform over the kept
    np.testing.assert_allclose(q[1.0], F.softmax(logits), rtol=1e-15)  # T = 1: the model's own


# --- the table ------------------------------------------------------------------------------------


def shown(steps, sampling: Sampling, vocabulary: tuple[str, ...]) -> list[list[str]]:
    console = Console(width=80, no_color=True, record=True, file=io.StringIO())
    console.print(sampling_table(steps, vocabulary, sampling, View()))
    return [line.split() for line in console.export_text().splitlines()]


def test_the_table_of_the_hand_worked_draw() -> None:
    """test_the_draw_by_hand's numbers, as the table prints them (3 digits for q, Σ q and u)."""
    s = Sampling(2.0, top_k=3)
    steps = generate(fixed([2.0, 1.0, 0.0, -1.0]), [3], 1, sampling=s)
    steps = [steps[0]._replace(drawn=sample(steps[0].logits, s, Fixed(0.6)))]
    lines = shown(steps, s, ("a", "b", "c", "d"))
    assert lines[0] == [
        "How",
        "each",
        "token",
        "was",
        "drawn:",
        "T",
        "=",
        "2,",
        "top-k",
        "3,",
        "seed",
        "0;",
        "4",
        "tokens",
    ]
    assert lines[1] == ["step", "kept", "candidate", "logit", "logit/T", "q", "Σ", "q", "draw", "u"]
    assert lines[3:] == [
        ["0", "3", "a", "2.00", "1.00", "0.506", "0.506"],
        ["b", "1.00", "0.50", "0.307", "0.814", "◀", "0.600"],
        ["c", "0.00", "0.00", "0.186", "1.000"],
    ]


def test_the_table_shows_what_top_p_cut_and_skips_to_the_drawn() -> None:
    """p = 0.30, 0.20, 0.15, 0.10, 0.10, 0.08, 0.05, 0.02: top-p 0.9 keeps six (Σ p = 0.93; the
    five above the sixth hold 0.85 < 0.9) and cuts 0.05 first (Σ p would be 0.98). q = p / 0.93:
    0.323, 0.215, 0.161, 0.108, 0.108, 0.086, running to 0.914 before the sixth, so u = 0.95 is
    the sixth, after the ⋮ that hides the fifth."""
    s = Sampling(top_p=0.9)
    p = [0.3, 0.2, 0.15, 0.1, 0.1, 0.08, 0.05, 0.02]
    steps = generate(fixed(list(np.log(p))), [0], 1, sampling=s)
    steps = [steps[0]._replace(drawn=sample(steps[0].logits, s, Fixed(0.95)))]
    lines = shown(steps, s, tuple("abcdefgh"))
    assert lines[1] == [
        "step",
        "kept",
        "candidate",
        "logit",
        "logit/T",
        "p",
        "Σ",
        "p",
        "q",
        "Σ",
        "q",
        "draw",
        "u",
    ]
    assert lines[3:] == [
        ["0", "6", "a", "-1.20", "-1.20", "0.300", "0.300", "0.323", "0.323"],
        ["b", "-1.61", "-1.61", "0.200", "0.500", "0.215", "0.538"],
        ["c", "-1.90", "-1.90", "0.150", "0.650", "0.161", "0.699"],
        ["d", "-2.30", "-2.30", "0.100", "0.750", "0.108", "0.806"],
        ["⋮"],
        ["f", "-2.53", "-2.53", "0.080", "0.930", "0.086", "1.000", "◀", "0.950"],
        ["g", "-3.00", "-3.00", "0.050", "0.980", "cut"],
    ]


# --- the loop: greedy at T = 0 -------------------------------------------------------------------


def fixed(logits: list[float]):
    z = np.array(logits)
    return lambda sequence: Reading(tuple(sequence), tuple(range(len(sequence))), F.softmax(z), z)


def test_temperature_0_is_greedy_and_a_tiny_one_nearly() -> None:
    read = fixed([0.5, 2.0, 1.0, 1.9])
    greedy = generated_ids(generate(read, [0], 10))
    assert greedy == [0] + [1] * 10
    at_0 = generate(read, [0], 10, sampling=Sampling(0.0, seed=3))
    assert generated_ids(at_0) == greedy and all(s.drawn is None for s in at_0)  # nothing drawn
    assert generated_ids(generate(read, [0], 10, sampling=Sampling(1e-3, seed=3))) == greedy
    hot = generated_ids(generate(read, [0], 40, sampling=Sampling(5.0, seed=3)))
    assert set(hot[1:]) == {0, 1, 2, 3}  # flat enough for every token to come up


def test_banned_and_forced_tokens_are_never_candidates() -> None:
    steps = generate(
        fixed([0.5, 2.0, 1.0, 1.9]), [0], 4, sampling=Sampling(2.0), banned=lambda s: [1], forced_end=0
    )
    for s in steps[:-1]:
        assert 1 not in s.drawn.kept and s.drawn.kept.size == 3
    assert steps[-1].drawn.kept.tolist() == [0] and steps[-1].chosen == 0


def test_bad_values_are_refused() -> None:
    for kwargs, message in [
        ({"temperature": -0.1}, "--temperature: must be 0 (greedy) or more, got -0.1"),
        ({"temperature": float("nan")}, "--temperature: must be 0"),
        ({"temperature": float("inf")}, "--temperature: must be 0"),
        ({"top_k": 0}, "--top-k: must be 1 or more, got 0"),
        ({"top_p": 0.0}, "--top-p: must be more than 0 and at most 1, got 0"),
        ({"top_p": 1.01}, "--top-p: must be more than 0 and at most 1, got 1.01"),
        ({"top_p": float("nan")}, "--top-p: must be more than 0"),
    ]:
        with pytest.raises(WalkthroughError, match=re.escape(message)):
            Sampling(**kwargs)
    with pytest.raises(WalkthroughError, match="--top-k: must be 1 to 4, the vocabulary's size, got 5"):
        generate(fixed([0.0, 1.0, 2.0, 3.0]), [0], 2, sampling=Sampling(top_k=5))
    with pytest.raises(WalkthroughError, match="overflow"):  # 1e300 / 1e-10 is no number
        sample(np.array([1e300, 0.0]), Sampling(1e-10), Fixed(0.5))


# --- the command line ----------------------------------------------------------------------------


def invoke(runner, *args: str) -> str:
    """The command's output at 80 columns, plain; every line fits."""
    result = runner.invoke(app, list(args), env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    for line in result.stdout.splitlines():
        assert len(line) <= 80, line
    return result.stdout


def draw_sections(out: str) -> list[list[list[str]]]:
    """The sampling table's steps, each a list of rows split at its column gaps."""
    table = out.split("How each token was drawn:")[1].split("\nEach token ")[0]
    sections = [[re.split(r"\s{2,}", row.strip()) for row in block.splitlines() if row.strip()]
                for block in table.split("\n\n")]  # fmt: skip
    sections[0] = sections[0][3:]  # the title's end, the header, the rule
    return sections


def check_the_shown_draws(out: str, T: float, top_p: float | None = None) -> int:
    """Every step of the sampling table as printed: logit/T is the logit divided by T, each Σ q is
    the one above plus q, u lies between the Σ q above the drawn row and its own; with top-p, Σ p
    runs over p, the kept rows start below p and the cut one at p or above. Returns how many
    steps were shown."""
    close = 2e-3  # three printed digits, summed over a few rows
    sections = draw_sections(out)
    for rows in sections:
        q_before, p_before, marked, cut = 0.0, 0.0, 0, 0
        for row in rows:
            if "⋮" in row or any("more" in cell for cell in row):
                q_before = p_before = None  # type: ignore[assignment]  # rows left out: no sums to carry on
                continue
            kind = "drawn" if row[-1].startswith("◀") else "cut" if row[-1] == "cut" else "kept"
            cells = row[:-1] if kind != "kept" else row
            width = 4 if kind == "cut" else 6 if top_p is not None else 4
            numbers = [float(c) for c in cells[-width:]]
            logit, z = numbers[:2]
            assert z == pytest.approx(logit / T, abs=0.006 + 0.006 / T), row
            if top_p is not None:
                p, p_total = numbers[2:4]
                if p_before is not None:
                    assert p_total == pytest.approx(p_before + p, abs=close), rows
                if kind == "cut":  # the tokens above already reach p: top-p removed this one
                    assert p_total - p >= top_p - close, rows
                    cut += 1
                    continue
                assert p_total - p < top_p + close, rows  # kept: the ones above fell short of p
                p_before = p_total
            q, q_total = numbers[-2:]
            if q_before is not None:
                assert q_total == pytest.approx(q_before + q, abs=close), rows
            if kind == "drawn":
                u = float(row[-1][1:])
                assert (q_before or 0.0) <= u < q_total, rows
                marked += 1
            q_before = q_total
        assert marked == 1 and cut <= 1, rows
    return len(sections)


def test_toy_sampling_is_seeded_and_shows_each_draw(runner) -> None:
    args = ["generate", "--temperature", "1.5", "--top-k", "5", "--max-len", "6"]
    first = invoke(runner, *args)
    assert invoke(runner, *args) == first  # the config's seed, 42: the weights' and the draw's
    assert "How each token was drawn: T = 1.5, top-k 5, seed 42" in first
    assert "Each token drawn at temperature 1.5 from the top 5 (seed 42)" in " ".join(first.split())
    assert check_the_shown_draws(first, 1.5) >= 1


def test_the_draw_seed_changes_the_text_of_the_same_weights(runner, tmp_path) -> None:
    weights = str(tmp_path / "w.npz")
    assert runner.invoke(app, ["train", "--steps", "0", "--output", weights]).exit_code == 0
    args = ["generate", "-w", weights, "--temperature", "2"]
    said = [invoke(runner, *args, "--seed", str(s)).splitlines() for s in range(5)]
    texts = [next(line for line in lines if line.startswith("the cat is →")) for lines in said]
    assert len(set(texts)) > 1
    assert invoke(runner, *args, "--seed", "3") == invoke(runner, *args, "--seed", "3")


@pytest.mark.parametrize("config", ["gpt-style.yaml", "llama-style.yaml"])
def test_decoder_only_toys_sample_with_top_p(runner, config) -> None:
    args = ["generate", "-c", str(CONFIGS / config), "--temperature", "0.8", "--top-p", "0.9"]
    first = invoke(runner, *args)
    assert invoke(runner, *args) == first
    assert check_the_shown_draws(first, 0.8, 0.9) >= 1
    assert "Step i equals row i of one teacher-forced pass" in " ".join(first.split())


def test_temperature_0_is_greedy_and_says_so(runner) -> None:
    greedy = invoke(runner, "generate")
    at_0 = invoke(runner, "generate", "--temperature", "0")
    assert "--temperature 0 is greedy" in " ".join(at_0.split())
    assert "How each token was drawn" not in at_0

    def text(out: str) -> list[str]:
        return [line for line in out.splitlines() if line.startswith("the cat is →")]

    assert text(at_0) == text(greedy) and len(text(greedy)) == 1


def test_marian_samples_with_its_seed_and_still_equals_teacher_forcing(runner, marian) -> None:
    args = ["generate", "--model", str(marian[0]), "--source", "the cat", "--max-len", "6",
            "--temperature", "0.9", "--top-p", "0.95"]  # fmt: skip
    first = invoke(runner, *args, "--seed", "3")
    assert invoke(runner, *args, "--seed", "3") == first
    assert any(invoke(runner, *args, "--seed", str(s)) != first for s in (4, 5, 6))
    assert check_the_shown_draws(first, 0.9, 0.95) >= 1
    assert "Step i equals row i of one teacher-forced pass" in " ".join(first.split())


def test_gpt2_samples_with_its_seed_and_keeps_the_cache_display(runner, gpt2) -> None:
    args = ["generate", "--model", str(gpt2[0]["saved"]), "--prompt", "The cat is", "--max-len", "5",
            "--temperature", "0.7", "--top-k", "20", "--top-p", "0.9", "--compare",
            "--dtype", "float64"]  # fmt: skip
    first = invoke(runner, *args, "--seed", "5")
    assert invoke(runner, *args, "--seed", "5") == first
    assert any(invoke(runner, *args, "--seed", str(s)) != first for s in (6, 7, 8))
    text = " ".join(first.split())
    assert "drawn at temperature 0.7 from the top 20, then the top p = 0.9 (seed 5)" in text
    sizes = [(int(a), int(b)) for a, b in re.findall(r"\s(\d+)×(\d+)\s", first)]
    assert [rows for rows, _ in sizes] == list(range(sizes[0][0], sizes[0][0] + 5))  # a row more a step
    assert check_the_shown_draws(first, 0.7, 0.9) == 5
    assert "Step t equals row n + t − 1 of one full pass" in text


def refused(runner, args: list[str], message: str) -> None:
    """Exit 2, one line on stderr that says ``message``, nothing on stdout."""
    result = runner.invoke(app, args)
    assert result.stdout == ""
    fails(runner, args, message)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--top-p", "0"], "--top-p: must be more than 0 and at most 1, got 0"),
        (["--top-p", "1.5"], "--top-p: must be more than 0 and at most 1, got 1.5"),
        (["--top-p", "-0.2"], "--top-p: must be more than 0 and at most 1, got -0.2"),
        (["--top-p", "nan"], "--top-p: must be more than 0 and at most 1, got nan"),
        (["--temperature", "-1"], "--temperature: must be 0 (greedy) or more, got -1"),
        (["--temperature", "inf"], "--temperature: must be 0 (greedy) or more, got inf"),
        (["--top-k", "0"], "--top-k: must be 1 or more, got 0"),
        (["--top-k", "8"], "--top-k: must be 1 to 7, the vocabulary's size, got 8"),
        (["--temperature", "0", "--top-p", "0.5"], "--top-p does nothing at --temperature 0"),
        (["--temperature", "0", "--top-k", "2"], "--top-k does nothing at --temperature 0"),
    ],
)
def test_bad_sampling_options_are_one_line_exit_2(runner, args, message) -> None:
    refused(runner, ["generate", *args], message)


def test_bad_sampling_options_of_checkpoints_are_one_line_exit_2(runner, marian, gpt2) -> None:
    marian_args = ["generate", "--model", str(marian[0]), "--source", "the cat"]
    gpt2_args = ["generate", "--model", str(gpt2[0]["saved"]), "--prompt", "The cat"]
    for args in (marian_args, gpt2_args):
        refused(runner, [*args, "--top-k", "100000"], "--top-k: must be 1 to")
        refused(runner, [*args, "--seed", "1"], "--seed with --model seeds the draw: give --temperature T")
        refused(runner, [*args, "--temperature", "0", "--seed", "1"], "--seed with --model seeds the draw")
        refused(runner, [*args, "--top-p", "2"], "--top-p: must be more than 0 and at most 1, got 2")


@pytest.mark.parametrize("name", ["llama", "qwen2", "mistral"])
def test_llama_family_samples_with_its_seed(runner, llama_family, name) -> None:
    args = ["generate", "--model", str(llama_family[name]), "--prompt", "The cat is", "--max-len", "4",
            "--temperature", "1.3", "--top-p", "0.95", "--seed", "2", "--compare"]  # fmt: skip
    first = invoke(runner, *args)
    assert invoke(runner, *args) == first
    assert check_the_shown_draws(first, 1.3, 0.95) == 4
    assert "Step t equals row n + t − 1 of one full pass" in " ".join(first.split())
