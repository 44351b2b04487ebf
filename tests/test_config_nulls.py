"""A ``null`` in config.json, key by key, family by family, read as transformers 5.18 reads it.

For each decoder-only family (a tiny trained checkpoint of each, ``tests/tiny_llama.py``,
``tiny_moe.py``, ``tiny_gemma.py``) and each key that its converter reads (the record's defaults,
and the rotary keys beside them), config.json is copied with that key set to null. transformers is
the reference: where it refuses the file (its config class wants a value, or its model fails on
None), ``walkthrough run`` exits 2 with one ``error:`` line that names the key and writes nothing;
where it runs, our logits equal its logits (float32 as shipped: relative 1e-4). Nothing here says
which keys are refused: transformers decides, case by case.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
import torch
import transformers
from typer.testing import CliRunner

from transformer_walkthrough.checkpoints.checkpoint import family_of
from transformer_walkthrough.checkpoints.run import walk_prompt
from transformer_walkthrough.cli import app

PROMPT = "The cat is sleeping"
# Read beside the defaults: the rotation's keys (rope_parameters, or rope_theta and rope_scaling in
# older files), Gemma 3's older bases and pattern, Qwen's switches.
ROTARY = ("rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor", "rope_local_base_freq",
          "sliding_window_pattern", "qkv_bias", "use_sliding_window", "layer_types")  # fmt: skip
# One checkpoint of each module's families runs by default; CI sweeps the others too.
QUICK = {"llama", "mixtral", "gemma2"}
CHECKPOINTS = {
    "llama_family": ("llama", "mistral", "qwen2", "qwen3"),
    "moe_family": ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe"),
    "gemma_family": ("gemma", "gemma2", "gemma3_text", "olmo2"),
}


def _with_null(folder: Path, key: str, to: Path) -> Path:
    """A copy of the checkpoint in ``folder`` (its files linked) whose config.json says ``key: null``."""
    to.mkdir()
    for f in folder.iterdir():
        if f.name != "config.json":
            (to / f.name).symlink_to(f)
    config = json.loads((folder / "config.json").read_text())
    config[key] = None
    (to / "config.json").write_text(json.dumps(config))
    return to


def _theirs(folder: Path, ids: list[int]) -> np.ndarray | None:
    """transformers' logits for ``ids`` from the checkpoint in ``folder`` (eager, float32 as shipped),
    or None when it refuses the file, or fails on it."""
    try:
        config = transformers.AutoConfig.from_pretrained(folder)
        config._experts_implementation = "eager"  # the grouped kernel wants widths of 16-byte multiples
        model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, config=config, dtype=torch.float32, attn_implementation="eager"
        )
        with torch.no_grad():
            return model.eval()(torch.tensor([ids])).logits[0].numpy()
    except Exception:  # whatever transformers raises: refused there, so it must be refused here
        return None


def _cases() -> list:
    cases = []
    for fixture, names in CHECKPOINTS.items():
        for name in names:
            marks = () if name in QUICK else (pytest.mark.slow,)
            cases.append(pytest.param(fixture, name, id=name, marks=marks))
    return cases


@pytest.mark.parametrize(("fixture", "name"), _cases())
def test_a_null_is_refused_where_transformers_refuses_it_and_read_as_it_reads_it(
    request, tmp_path, fixture, name
):
    folder = request.getfixturevalue(fixture)[name]
    family = family_of(folder)
    ids = list(walk_prompt(str(folder), PROMPT, "float32").trace.target_ids)
    keys = sorted({*family.defaults, *ROTARY} - {"model_type"})
    refused, read = [], []
    for key in keys:
        null = _with_null(folder, key, tmp_path / key)
        expected = _theirs(null, ids)
        if expected is None:
            out = tmp_path / f"{key}.json"
            result = CliRunner().invoke(app, ["export", str(out), "--model", str(null), "--prompt", PROMPT])
            assert result.exit_code == 2, (key, result.output)
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error:"), (key, result.stderr)
            assert key in lines[0], (key, lines[0])
            assert not out.exists()
            refused.append(key)
        else:
            logits = walk_prompt(str(null), PROMPT, "float32").trace["output.logits"]["logits"]
            assert np.max(np.abs(logits - expected)) <= 1e-4 * np.max(np.abs(expected)), key
            read.append(key)
    # Both sides are exercised on every checkpoint: the sizes are refused, the token ids are read.
    assert {"hidden_size", "rms_norm_eps"} <= set(refused) and "eos_token_id" in read, (refused, read)
