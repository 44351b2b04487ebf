"""Each kind says how a worksheet computes the cells it records (``Kind.steps``): the same Step,
for every cell of every stage of every shipped config, as the if-chain keyed by kind and base name
that ``views.documents.cell_step`` held before the kinds said it (run here with the kinds' own
steps taken away, so that the chain answers)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from transformer_walkthrough.config import Config, ModelConfig, load_config
from transformer_walkthrough.model.kinds import KINDS
from transformer_walkthrough.model.kinds.base import Step
from transformer_walkthrough.model.trace import INPUT, MASK, WEIGHT, Stage, Trace
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.documents import worksheet as documents

CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))
ATTENTION = {"self-attention", "masked-attention", "cross-attention"}  # their pieces said it first
# and the conventions no shipped config combines: a gated form with biases, RoBERTa's offset P
VARIANTS = {
    "gated-with-biases": lambda: Config(model=ModelConfig(feed_forward="gated", activation="gelu")),
    "offset-positions": lambda: _bert(positional_encoding="learned", position_offset=2),
}


def _bert(**model: object) -> Config:
    bert = load_config(CONFIGS[0].parent / "bert-style.yaml")
    return dataclasses.replace(bert, model=dataclasses.replace(bert.model, **model))


def from_the_kind(trace: Trace, stage: Stage, name: str, i: int, j: int) -> Step | None:
    """The step as the kinds alone say it: what ``cell_step`` is once the if-chain is gone."""
    m = stage.matrices[name]
    if m.role in (WEIGHT, INPUT, MASK):
        return None
    of = KINDS[stage.kind].steps.get(m.base or name)
    return None if of is None else of(stage, trace, name, i, j)


@pytest.mark.parametrize("config", [*CONFIGS, *VARIANTS], ids=lambda p: getattr(p, "stem", p))
def test_every_cells_step_is_the_one_the_documents_chain_gave(config: Path | str, monkeypatch) -> None:
    trace = run_forward(VARIANTS[config]() if isinstance(config, str) else load_config(config))
    for kind in set(KINDS) - ATTENTION:  # documents.cell_step falls through to its chain
        monkeypatch.setitem(KINDS, kind, dataclasses.replace(KINDS[kind], steps={}))
    chain = {
        (stage.id, name, i, j): documents.cell_step(trace, stage, name, i, j)
        for stage in trace
        if stage.kind not in ATTENTION
        for name, m in stage.matrices.items()
        for i in range(m.shape[0])
        for j in range(m.shape[1])
    }
    monkeypatch.undo()
    assert any(chain.values())
    for (sid, name, i, j), expected in chain.items():
        assert from_the_kind(trace, trace[sid], name, i, j) == expected, (sid, name, i, j)
