"""Every kind's formula is data that typesets: under every shipped config, and under each of the
conventions the checkpoint families bring to it (one switched at a time), its LaTeX holds only
what pdflatex's T1 fonts have and compiles, and its MathML is written with no fallback."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

from transformer_walkthrough.config import ModelConfig, load_config
from transformer_walkthrough.errors import WalkthroughError
from transformer_walkthrough.model.architecture import walk
from transformer_walkthrough.model.kinds import KINDS
from transformer_walkthrough.views.documents.formulas import html_notes, latex_lines, latex_notes, mathml
from transformer_walkthrough.views.documents.latex import TEX_PREAMBLE

from .test_documents import compile_latex, overfull

CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))
# What the kinds' formulas depend on, with every value the families use (Llama's SwiGLU and RMSNorm,
# GPT-2's tanh GELU and learned tied table, BERT's segments, RoBERTa's offset, Marian's halves,
# Gemma's and OLMo 2's attention).
SWITCHES = {
    "activation": ["relu", "gelu", "gelu-tanh", "silu"], "feed_forward": ["standard", "gated"],
    "ffn_bias": [True, False], "norm": ["layernorm", "rmsnorm"],
    "positional_encoding": ["sinusoidal", "sinusoidal-halves", "learned", "rotary"],
    "tie_embeddings": [False, True], "output_head": ["per-position", "flatten"], "output_bias": [True, False],
    "scale_embeddings": [False, True], "position_offset": [0, 2], "segments": [0, 2],
    "num_kv_heads": [None, 1], "attention_bias": [False, True, "qkv"],
    "qk_norm": [False, "head", "whole"], "score_scale": ["d_k", "none", 256.0],
    "attention_softcap": [None, 50.0], "logit_softcap": [None, 30.0],
}  # fmt: skip


def switched(m: ModelConfig, key: str, value: object) -> ModelConfig | None:
    """The model with one convention switched; None for a combination the config refuses."""
    try:
        return dataclasses.replace(m, **{key: value})
    except WalkthroughError:
        return None


def models() -> Iterator[ModelConfig]:
    for path in CONFIGS:
        m = load_config(path).model
        yield m
        for key, values in SWITCHES.items():
            yield from filter(None, (switched(m, key, value) for value in values))


def test_every_formula_typesets_in_latex_and_mathml(tmp_path: Path) -> None:
    blocks: dict[str, str] = {}
    for m in models():
        for kind in [KINDS[k] for k in dict.fromkeys(p.kind for p in walk(m))]:  # its stages' kinds
            f = kind.formula(m)
            assert mathml(f).startswith('<math display="block">') and "<mtr>" in mathml(f)
            html_notes(f)
            tex = "\\begin{align*}\n" + " \\\\\n".join(latex_lines(f)) + "\n\\end{align*}\n" + latex_notes(f)
            assert all(ord(ch) <= 0xFF for ch in tex), tex  # files.export refuses anything else
            blocks.setdefault(tex, kind.id)
    assert len(blocks) > 60
    body = "".join(f"\\section*{{{kind}}}\n{tex}\n\n" for tex, kind in blocks.items())
    log, _ = compile_latex(f"{TEX_PREAMBLE}\\begin{{document}}\n{body}\\end{{document}}\n", tmp_path)
    assert overfull(log) == []
