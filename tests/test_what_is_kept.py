"""What the cached generation and the backward keep, counted before they run and said when too
much: a one-line refusal names each part, the product it is counted by and its size, and the
option that keeps less. The sizes here are worked out by hand from the models' own shapes."""

from __future__ import annotations

import json
import re

import numpy as np
from typer.testing import CliRunner

import transformer_walkthrough.config as config_module
from tests.test_keep import LAYERS, long_checkpoint  # noqa: F401  (a 6-layer Llama, d 64, 4 heads over 2)
from transformer_walkthrough.checkpoints import run as checkpoint_run
from transformer_walkthrough.checkpoints.run import walk_prompt
from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config
from transformer_walkthrough.model.size import amount, generation_kept, trace_size
from transformer_walkthrough.model.trace import Keep
from transformer_walkthrough.model.transformer import init_weights, run_forward

PROMPT = " ".join(["The cat sat on the mat."] * 120)  # about 960 tokens
NEW = 5


def kib(numbers: int, itemsize: int = 4) -> str:
    return amount(numbers * itemsize)


def test_generate_counts_its_cache_and_steps_not_a_whole_trace(long_checkpoint, monkeypatch) -> None:  # noqa: F811
    folder = str(long_checkpoint)
    walked = walk_prompt(folder, PROMPT, keep=Keep.stages(["embedding"]))
    n, vocab = len(walked.trace.target_tokens), len(walked.config.vocabulary)
    with open(long_checkpoint / "config.json") as f:
        c = json.load(f)
    layers, heads, kv = c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"]
    d_k = c["hidden_size"] // heads
    fed = n + NEW - 1  # the last token chosen is never fed back
    cache = layers * 2 * kv * d_k * fed  # K and V of every layer, every key/value head, every position
    steps = NEW * (2 * vocab + layers * heads * (d_k + 2 * fed))  # distributions, last attention rows
    args = ["generate", "--model", folder, "--prompt", PROMPT, "--max-len", str(NEW)]

    monkeypatch.setattr(checkpoint_run, "MAX_BYTES", 1)
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and refused.stdout == "" and refused.stderr.count("\n") == 1
    line = refused.stderr
    assert line.startswith(f"error: generating {NEW} tokens after {n:,} would keep about ")
    assert (
        f"the key/value cache, {layers} layers × 2 (K and V) × {kv} key/value heads × {d_k} × "
        f"{fed:,} positions = {kib(cache)}; " in line
    )
    assert (
        f"each step's distribution and attention rows, {NEW} steps × (2 × {vocab:,} + {layers} layers × "
        f"{heads} heads × ({d_k} + 2 × {fed:,})) = {kib(steps)}; " in line
    )
    assert "the prompt's pass, its largest stage = " in line
    assert line.endswith("; fewer new tokens (--max-len N) or a shorter prompt\n")

    # what it keeps is all it is charged: at exactly that budget it runs, where a whole trace of
    # the prompt (what the budget counted before) would not fit
    parts = generation_kept(walked.config.model, 0, n, NEW, vocab)
    assert [p.numbers for p in parts[:2]] == [cache, steps]
    need = sum(p.numbers for p in parts) * 4
    assert trace_size(walked.config.model, 0, fed, vocab).numbers * 4 > 4 * need
    monkeypatch.setattr(checkpoint_run, "MAX_BYTES", need)
    ran = CliRunner().invoke(app, args)
    assert ran.exit_code == 0, ran.output
    assert f"the cache holds {fed} keys and values" in " ".join(ran.stdout.split())
    # --compare runs one full pass besides: counted, and named as what to drop
    compared = CliRunner().invoke(app, [*args, "--compare"])
    assert compared.exit_code == 2
    assert f"--compare's full pass, every stage of {fed:,} tokens = " in compared.stderr
    assert compared.stderr.endswith("; drop --compare, fewer new tokens (--max-len N) or a shorter prompt\n")


def test_the_backward_counts_the_pass_its_gradients_and_the_parameters(tmp_path, monkeypatch) -> None:
    config = Config()  # the article's toy, in float64
    trace = run_forward(config, init_weights(config))
    numbers = sum(m.values.size for s in trace for m in s.matrices.values())  # what the trace holds
    parameters = sum(a.size for a in init_weights(config).values())
    need = (2 * numbers + parameters) * 8
    target = tmp_path / "out.json"
    monkeypatch.setattr(config_module, "MAX_BYTES", need - 1)
    refused = CliRunner().invoke(app, ["export", str(target), "--backward"])
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1 and not target.exists()
    source, target_tokens = len(trace.source_tokens), len(trace.target_tokens)
    trace_kib, grads_kib = amount(numbers * 8), amount(parameters * 8)
    assert refused.stderr == (
        f"error: the backward would keep about {amount(need)} (limit {amount(need - 1)}): the forward "
        f"pass, every stage of {source} + {target_tokens} tokens = {trace_kib}; its gradients, dL/d of "
        f"every matrix of every stage = {trace_kib}; the parameters' gradients, dL/d of {parameters:,} "
        f"parameters = {grads_kib}; --dtype float32 halves it, or give a shorter text\n"
    )
    monkeypatch.setattr(config_module, "MAX_BYTES", need)
    written = CliRunner().invoke(app, ["export", str(target), "--backward"])
    assert written.exit_code == 0, written.output
    assert re.search(r'"loss": ', target.read_text())
    assert np.isfinite(json.loads(target.read_text())["loss"])
