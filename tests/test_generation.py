"""The one top-k and the one generation loop, on hand-made distributions (no model)."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_walkthrough.model.generation import Reading, generate, generated_ids
from transformer_walkthrough.model.sampling import Sampling
from transformer_walkthrough.model.trace import top_k


def test_top_k_keeps_the_lowest_ids_among_ties() -> None:
    p = np.array([0.1, 0.3, 0.3, 0.2, 0.3])
    assert top_k(p, 2).tolist() == [1, 2]  # three ids share 0.3: the first two in id order
    assert top_k(p, 4).tolist() == [1, 2, 4, 3]
    # A uniform row: argpartition alone may keep any three; these are argmax's and the next two.
    assert top_k(np.full(1000, 0.001), 3).tolist() == [0, 1, 2]


def test_top_k_larger_than_the_vocabulary_ranks_every_id() -> None:
    p = np.array([0.2, 0.5, 0.2, 0.1])
    assert top_k(p, 10).tolist() == [1, 0, 2, 3]
    assert top_k(p, 4).tolist() == [1, 0, 2, 3]


def test_top_k_of_one_is_argmax() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = np.round(rng.random(rng.integers(1, 40)), 1)  # rounded: many ties, at the top too
        assert top_k(p, 1).tolist() == [int(np.argmax(p))]
        assert top_k(p, 5).tolist() == np.argsort(-p, kind="stable")[:5].tolist()


def test_top_k_counts_nan_as_the_smallest() -> None:
    p = np.array([np.nan, 0.5, np.nan, 0.2])
    assert top_k(p, 2).tolist() == [1, 3]
    assert top_k(p, 3).tolist() == [1, 3, 0]


def fixed(p: list[float]):
    """A reader whose next-token distribution is always ``p``, whatever the sequence."""
    return lambda sequence: Reading(tuple(sequence), tuple(range(len(sequence))), np.array(p))


P = [0.1, 0.6, 0.2, 0.1]  # id 1 the most likely; 0 and 3 tie


def test_greedy_takes_the_most_likely_and_feeds_it_back() -> None:
    steps = generate(fixed(P), [0], 3)
    assert [s.chosen for s in steps] == [1, 1, 1]
    assert [s.ids for s in steps] == [(0,), (0, 1), (0, 1, 1)]
    assert steps[0].top == ((1, 0.6), (2, 0.2), (0, 0.1))
    assert generated_ids(steps) == [0, 1, 1, 1]
    assert [s.chosen for s in generate(fixed([0.4, 0.1, 0.4, 0.1]), [0], 1)] == [0]  # a tie: argmax's


def test_a_banned_id_is_never_chosen_even_when_most_likely() -> None:
    steps = generate(fixed(P), [0], 3, banned=lambda sequence: [1])
    assert [s.chosen for s in steps] == [2, 2, 2]
    assert steps[0].top == ((2, 0.2), (0, 0.1), (3, 0.1))  # the banned id is not among the top
    for seed in range(20):
        drawn = generate(fixed(P), [0], 5, sampling=Sampling(top_k=3, seed=seed), banned=lambda s: {1})
        assert 1 not in generated_ids(drawn)[1:]
    # a ban that depends on the sequence: 2 may not follow 2
    steps = generate(fixed(P), [0], 3, banned=lambda sequence: [1, 2] if sequence[-1] == 2 else [1])
    assert [s.chosen for s in steps] == [2, 0, 2]


def test_the_last_token_is_the_forced_end_at_the_limit() -> None:
    steps = generate(fixed(P), [0], 3, forced_end=3)
    assert [s.chosen for s in steps] == [1, 1, 3]
    assert steps[-1].top == ((3, 0.1),)  # nothing else was allowed
    assert steps[-1].probabilities.tolist() == P  # the distribution itself is shown unchanged


def test_generation_stops_after_the_end_token() -> None:
    steps = generate(fixed([0.1, 0.2, 0.1, 0.6]), [0], 5, eos_id=3)
    assert [s.chosen for s in steps] == [3]
    assert len(generate(fixed(P), [0], 5, eos_id=3)) == 5  # never chosen: runs to the limit


def test_sampling_draws_from_the_top_k_and_repeats_with_its_seed() -> None:
    def run(seed: int, k: int) -> list[int]:
        return generated_ids(generate(fixed(P), [0], 30, sampling=Sampling(top_k=k, seed=seed)))

    assert run(7, 2) == run(7, 2)
    assert set(run(7, 2)[1:]) == {1, 2}  # 30 draws from ids 1 and 2 (0.75 and 0.25) see both
    assert run(7, 1) == generated_ids(generate(fixed(P), [0], 30))  # k = 1 is greedy


@pytest.mark.parametrize("k", [1, 2, 4])
def test_sampled_steps_show_their_top_k(k: int) -> None:
    steps = generate(fixed(P), [0], 4, sampling=Sampling(top_k=k, seed=0))
    for s in steps:
        assert s.drawn is not None and len(s.drawn.kept) == k and s.chosen in s.drawn.kept
        assert s.top == ((1, 0.6), (2, 0.2), (0, 0.1))  # the model's own top 3, whatever is drawn
