"""No false sentence (issue 22, point 4): every stage's text, under every shipped config and every
checkpoint family, says only what is true of what was run.

Each statement that depends on the run is checked against the fact it states: a tied table, the
flatten head, the article's cross-attention mistake (the toy's business, not a checkpoint's), the
seed (only weights drawn from one have it), "random until trained" (said of nothing: the header
says where the weights came from).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_walkthrough.config import load_config
from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.documents.markdown import to_markdown
from transformer_walkthrough.views.explain import explain

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def _texts(trace: Trace) -> dict[str, str]:
    return {sid: f"{stage.explanation}\n{stage.formula}" for sid, stage in trace.stages.items()}


def _check(trace: Trace, checkpoint: bool) -> None:
    m = trace.config.model
    texts = _texts(trace)
    every = "\n".join(texts.values())
    assert "random until the model is trained" not in every
    one_stack = m.decoder_only or m.encoder_only
    both = "one table of both stacks"
    assert (both in every) == (m.tie_embeddings and not one_stack), both
    if m.tie_embeddings and one_stack:
        assert "E is also the output layer's table" in every
    logits = texts["output.logits"]
    assert ("laid end to end" in logits) == (m.output_head == "flatten")
    assert ("each decoder position's vector" in logits) == (m.output_head != "flatten" and not m.encoder_only)
    assert ("at a blank ([MASK])" in logits) == m.encoder_only  # BERT predicts the hidden word, no next one
    attention = [t for sid, t in texts.items() if sid.endswith("self-attention")]
    assert all(("No mask: every token sees every token" in t) == m.encoder_only for t in attention)
    # Where the toy departs from the article, its stage says so (issue 36, point 11); a checkpoint
    # is not the article's toy.
    departs = {
        "cross-attention": True,  # the article swaps the queries and the keys
        "masked-attention": True,  # the article feeds one token at a time
        "feed-forward": m.feed_forward != "gated",  # the article draws one layer
        "logits": m.output_head == "per-position" and not m.encoder_only,  # the article flattens
        "probabilities": not m.encoder_only,  # the article's 0.42, from weights it does not give
    }
    noted = {sid for sid, t in texts.items() if "(The article" in t}
    assert noted == (
        {sid for sid, s in trace.stages.items() if departs.get(s.kind)} if not checkpoint else set()
    )
    header = to_markdown(trace, list(trace), 2).split("\n\n", 2)[1]
    assert ("seed" in header) == (trace.weights_source is None), header


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_shipped_config_says_only_what_is_true(path: Path) -> None:
    trace = run_forward(load_config(path))
    _check(trace, checkpoint=False)
    said = " ".join(explain(trace, "output.logits", "W", "0,0"))
    if trace.config.model.tie_embeddings:  # W is Eᵀ: its cell is E's, drawn as the word's row
        word = trace.config.vocabulary[0]
        assert (
            "W is Eᵀ" in said and "row 0 of E from a stream of its own" in said and f"word {word!r}" in said
        )
    else:
        assert "no output layer of its own" in said and "as nn.Transformer uses" not in said


def test_the_paper_config_is_the_papers() -> None:
    m = load_config(Path(__file__).resolve().parents[1] / "configs" / "standard.yaml").model
    assert m.tie_embeddings and m.scale_embeddings and not m.norm_first  # §3.4 and Figure 1


def test_every_checkpoint_family_says_only_what_is_true(marian, gpt2, llama_family) -> None:
    from transformer_walkthrough.checkpoints.run import walk, walk_prompt

    traces = [walk(str(marian[0]), "the cat is sleeping", "die Katze schläft").trace,
              walk_prompt(str(gpt2[0]["saved"]), "The cat is").trace,
              *(walk_prompt(str(f), "The cat is").trace for f in llama_family.values())]  # fmt: skip
    for trace in traces:
        assert trace.weights_source is not None
        _check(trace, checkpoint=True)
