"""The size of a trace, counted before the pass from the walk of Figure 1 (``model.size``), is the
size of the trace the pass records: every matrix, its numbers, for every shipped config."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from transformer_walkthrough.config import load_config
from transformer_walkthrough.model.size import trace_size
from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.model.transformer import run_forward

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def recorded(trace: Trace) -> tuple[int, int]:
    """The numbers of every matrix the trace holds, and how many matrices."""
    return sum(x.values.size for s in trace for x in s.matrices.values()), sum(len(s.matrices) for s in trace)


def counted(trace: Trace) -> tuple[int, int]:
    config = trace.config
    return trace_size(
        config.model, len(trace.source_tokens), len(trace.target_tokens), len(config.vocabulary)
    )


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_the_count_is_the_trace(path: Path) -> None:
    trace = run_forward(load_config(path))
    assert counted(trace) == recorded(trace)


def test_the_rotary_tables_are_counted() -> None:
    """configs/llama-style.yaml turns queries and keys: each masked attention records cos and sin,
    (tokens, d_k) each, and the count holds them (the estimate before the walk left them out)."""
    trace = run_forward(load_config(Path(__file__).resolve().parents[1] / "configs" / "llama-style.yaml"))
    m = trace.config.model
    tables = [x for s in trace for name, x in s.matrices.items() if name in ("cos", "sin")]
    assert len(tables) == 2 * m.num_decoder_layers
    assert all(x.shape == (len(trace.target_tokens), m.d_k) for x in tables)
    assert counted(trace) == recorded(trace)


def test_a_layer_is_counted_once_and_multiplied() -> None:
    """2⁷⁰ layers are counted at once: the layers of a stack record the same shapes."""
    m = load_config(CONFIGS[0]).model
    one, two = (trace_size(dataclasses.replace(m, num_decoder_layers=n), 3, 4, 7) for n in (1, 2))
    huge = trace_size(dataclasses.replace(m, num_decoder_layers=2**70), 3, 4, 7)
    assert huge.numbers == one.numbers + (2**70 - 1) * (two.numbers - one.numbers)
