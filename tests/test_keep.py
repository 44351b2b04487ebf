"""What a trace keeps (``trace.Keep``): the stages a command shows, streamed or kept, are the very
numbers of the whole trace; the pass stops once it has them; the budget counts what is kept; and a
long prompt's ``step`` peaks with the stage it keeps, not with the pass (RSS of a child process)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from transformer_walkthrough.checkpoints import run as checkpoint_run
from transformer_walkthrough.checkpoints.errors import CheckpointError
from transformer_walkthrough.checkpoints.run import walk_prompt
from transformer_walkthrough.cli import app
from transformer_walkthrough.config import load_config
from transformer_walkthrough.errors import StageError
from transformer_walkthrough.model.size import largest_computed, trace_size
from transformer_walkthrough.model.stream import outline
from transformer_walkthrough.model.trace import EVERYTHING, Keep, Stage, Trace, top_k
from transformer_walkthrough.model.transformer import init_weights, run_forward

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


def numbers(stages: list[Stage]) -> int:
    return sum(m.values.size for s in stages for m in s.matrices.values())


def same_numbers(kept: Stage, full: Stage) -> None:
    """Every matrix of ``kept`` is ``full``'s, in the same order, with the same labels, to 1e-12."""
    assert list(kept.matrices) == list(full.matrices), kept.id
    for name, m in kept.matrices.items():
        other = full.matrices[name]
        assert (m.rows, m.cols, m.role) == (other.rows, other.cols, other.role), (kept.id, name)
        np.testing.assert_allclose(m.values, other.values, rtol=0, atol=1e-12, err_msg=f"{kept.id}/{name}")


class Streamed:
    """A stream that copies each stage as it goes by (the trace drops its matrices afterwards)."""

    def __init__(self) -> None:
        self.seen: list[Stage] = []

    def __call__(self, stage: Stage) -> None:
        copied = {n: m._replace(values=m.values.copy()) for n, m in stage.matrices.items()}
        self.seen.append(Stage(stage.id, stage.kind, stage.title, "", "", copied))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_kept_and_streamed_stages_are_the_full_traces_numbers(path: Path) -> None:
    config = load_config(path)
    assert config.model.dtype == "float64"  # the toys compute in float64: 1e-12 is a real bound
    w = init_weights(config)
    full = run_forward(config, w)
    ids = list(full.stages)
    layered = [s for s in full if s.layer is not None]
    # one stage, one kind in every layer, one whole layer, the top
    wishes = [([layered[-1].id], None), ([layered[0].kind], None), ((), layered[-1].layer), ([ids[-1]], None)]
    source, target, v = len(full.source_tokens), len(full.target_tokens), len(config.vocabulary or ())
    for names, layer in wishes:
        keep = Keep.stages(names, layer)
        kept = run_forward(config, w, keep=keep)
        held = [s for s in kept if s.matrices]
        assert [s.id for s in held] == sorted(keep.ids(config.model), key=ids.index)
        for stage in held:
            same_numbers(stage, full[stage.id])
        # the pass stopped at the last stage kept: nothing above it was computed
        assert list(kept.stages) == ids[: ids.index(held[-1].id) + 1]
        # what the budget counts is what the trace holds
        assert trace_size(config.model, source, target, v, keep).numbers == numbers(held)
    stream = Streamed()
    streamed = run_forward(config, w, keep=Keep(stream=stream))
    assert [s.id for s in stream.seen] == ids
    for stage in stream.seen:
        same_numbers(stage, full[stage.id])
    assert all(not s.matrices for s in streamed)  # each dropped once streamed
    assert streamed.prediction == full.prediction  # read from the probabilities before they went
    largest = max(numbers([s]) for s in full)
    size = trace_size(config.model, source, target, v, Keep(stream=stream))
    assert size.numbers == largest
    assert size.tables == trace_size(config.model, source, target, v, EVERYTHING).tables


# ---------------------------------------------------------------------------------------------
# The lean path: attention no stage keeps is computed in blocks of queries; --head keeps one head.
# ---------------------------------------------------------------------------------------------

KEY_HEADS = frozenset({"W_K", "W_V", "b_K", "b_V", "K", "V", "rot_K", "norm_K"})  # a key/value head's


def one_head(full: Stage, h: int, m) -> list[str]:
    """The names of ``full``'s matrices that its attention of query head h alone records: the
    stage's own (X, M, concat, W_O, output, …), query head h's and its key/value head's."""
    g = (h - 1) // (m.num_heads // m.kv_heads) + 1
    return [
        n for n, x in full.matrices.items() if x.head is None or x.head == (g if x.base in KEY_HEADS else h)
    ]


def same_values(kept: Stage, full: Stage) -> None:
    """Every matrix of ``kept`` is ``full``'s matrix of that name, labels and numbers (to 1e-12)."""
    for name, m in kept.matrices.items():
        other = full.matrices[name]
        assert (m.rows, m.cols, m.role, m.base, m.head) == (
            other.rows,
            other.cols,
            other.role,
            other.base,
            other.head,
        )
        np.testing.assert_allclose(m.values, other.values, rtol=0, atol=1e-12, err_msg=f"{kept.id}/{name}")


def test_attention_in_blocks_is_attention_whole() -> None:
    """softmax(cap(Q·Kᵀ·scale + B) + M)·V a block of queries at a time, against the same arithmetic
    on whole matrices, head by head: grouped heads or not, causal with and without a window,
    biased, capped; in blocks of one row, of a few and of all."""
    from transformer_walkthrough.model import functional as F

    rng = np.random.default_rng(5)
    n, d_k, scale = 37, 8, 0.3
    cases = [(False, None, False, None), (True, None, False, None), (True, 5, False, None),
             (False, None, True, None), (True, 4, True, 2.5)]  # fmt: skip
    for h, G in ((6, 2), (3, 3), (4, 1)):
        Q, K, V = (
            rng.standard_normal((h, n, d_k)),
            rng.standard_normal((G, n, d_k)),
            rng.standard_normal((G, n, d_k)),
        )
        B = rng.standard_normal((h, n, n))
        for causal, window, biased, cap in cases:
            whole = np.empty((h, n, d_k))
            for head in range(h):
                g = head // (h // G)
                S = Q[head] @ K[g].T * scale + (B[head] if biased else 0)
                S = S if cap is None else cap * np.tanh(S / cap)
                S = S + (F.causal_mask(n, np.float64, 0, window) if causal else 0)
                A = np.exp(S - S.max(axis=1, keepdims=True))
                whole[head] = A / A.sum(axis=1, keepdims=True) @ V[g]
            bias = (lambda rows, keys, B=B: B[:, rows, keys]) if biased else None
            for block in (1, 2 * (h // G) * n + 3, 10**9):
                got = F.attention_in_blocks(Q, K, V, scale, causal=causal, window=window, bias=bias, cap=cap,
                                            block=block)  # fmt: skip
                np.testing.assert_allclose(
                    got, whole, rtol=0, atol=1e-12, err_msg=f"{h}/{G} {causal} {window}"
                )


@pytest.mark.parametrize("at_once", [3, 60])
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_attention_in_blocks_and_of_one_head_are_the_full_traces_numbers(
    path: Path, at_once: int, monkeypatch
) -> None:
    """Every attention below the stage kept is computed in blocks (of one query row, or of a few or
    more: 3 or 60 scores at once), the stage kept records one head, or every head: the numbers
    of the whole trace. The toys have masks, a sliding window (gemma-style), a soft cap, T5's
    bias, grouped heads."""
    from transformer_walkthrough.model import functional

    monkeypatch.setattr(functional, "SCORES_AT_ONCE", at_once)
    config = load_config(path)
    m, w = config.model, init_weights(config)
    full = run_forward(config, w)
    source, target, v = len(full.source_tokens), len(full.target_tokens), len(config.vocabulary or ())
    last = {s.kind: s for s in full if "A1" in s.matrices}  # the last stage of each kind of attention
    for stage in last.values():
        for h in (None, *sorted({1, m.num_heads})):
            keep = Keep.stages([stage.id], head=h)
            kept = run_forward(config, w, keep=keep)
            (held,) = [s for s in kept if s.matrices]
            if h is None:
                assert list(held.matrices) == list(stage.matrices)
            else:  # a key/value head's right after the one query head, not after its first reader
                assert sorted(held.matrices) == sorted(one_head(stage, h, m))
            same_values(held, stage)
            assert trace_size(m, source, target, v, keep).numbers == numbers([held])


def test_a_head_is_refused_where_there_is_none() -> None:
    config = load_config(ROOT / "configs" / "llama-style.yaml")
    with pytest.raises(StageError, match=r"^--head: this model has heads 1 to 4, got 5$"):
        run_forward(config, keep=Keep.stages(["masked-attention"], 1, head=5))
    with pytest.raises(StageError, match=r"^--head 1: none of the stages chosen has heads"):
        run_forward(config, keep=Keep.stages(["feed-forward"], head=1))


def test_a_kept_stage_keeps_its_sources_for_the_map() -> None:
    config = load_config(ROOT / "configs" / "gpt-style.yaml")
    kept = run_forward(config, keep=Keep.stages(["feed-forward"], 0))
    stage = kept["decoder.0.feed-forward"]
    assert stage.sources == {"X": "decoder.0.norm-2"}
    assert kept["decoder.0.norm-2"].output == "output" and not kept["decoder.0.norm-2"].matrices


def test_an_unknown_stage_or_layer_is_refused_before_the_pass() -> None:
    config = load_config(ROOT / "configs" / "gpt-style.yaml")
    with pytest.raises(StageError, match="unknown stage 'masked-atention'; did you mean masked-attention"):
        Trace(config, (), (), keep=Keep.stages(["masked-atention"]))
    with pytest.raises(StageError, match="--layer 7: stage feed-forward has no stage in layer 7"):
        run_forward(config, keep=Keep.stages(["feed-forward"], 7))


def test_step_shows_the_same_as_the_whole_trace(runner) -> None:
    """`step` keeps the stages it shows; `run` streams: both print what the whole trace printed
    (`step` naming every kind keeps every stage, the whole trace)."""
    config = str(ROOT / "configs" / "llama-style.yaml")
    kinds = list(dict.fromkeys(s.kind for s in run_forward(load_config(config))))
    every = runner.invoke(app, ["step", "-c", config, "--no-map", *[a for k in kinds for a in ("-s", k)]])
    assert every.exit_code == 0, every.output
    streamed = runner.invoke(app, ["run", "-c", config])
    assert streamed.exit_code == 0, streamed.output
    assert streamed.stdout == every.stdout
    one = runner.invoke(app, ["step", "-c", config, "--no-map", "-s", "decoder.1.feed-forward"])
    weights, shown = one.stdout.split("\n", 1)
    assert every.stdout.startswith(weights) and len(shown) > 500 and shown in every.stdout


def test_step_and_export_of_one_head_show_the_whole_traces_head(runner) -> None:
    """`step --head 2` prints head 2's tables as `step` prints them among every head's; `export
    --head 2` writes head 2's matrices, equal to the whole trace's (and its key/value head 1's);
    `explain --head 2` explains a cell of A2 as it does with every head kept."""
    config = str(ROOT / "configs" / "llama-style.yaml")
    args = ["-c", config, "-s", "masked-attention", "--layer", "1"]
    every = runner.invoke(app, ["step", *args, "--no-map"])
    one = runner.invoke(app, ["step", *args, "--no-map", "--head", "2"])
    assert every.exit_code == 0 and one.exit_code == 0, one.output

    def tables(out: str) -> dict[str, str]:  # each table alone on its lines: its title, then its rows
        found = re.findall(
            r"^((S2|S2\+M|A2|O2|concat|output)  \(\d+×\d+\)\n(?:.+\n)+?)(?=\S+  \(|\n|\Z)", out, re.M
        )
        return {name: text for text, name in found}

    shown = tables(one.stdout)
    assert set(shown) == {"S2", "S2+M", "A2", "O2", "concat", "output"}
    assert shown == {name: text for name, text in tables(every.stdout).items() if name in shown}
    assert "A1  (" not in one.stdout and "Q3  (" not in one.stdout
    written = runner.invoke(app, ["export", "-", *args, "--head", "2"])
    assert written.exit_code == 0, written.output
    (stage,) = json.loads(written.stdout)["stages"]
    full = run_forward(load_config(config))[stage["id"]]
    m = load_config(config).model
    assert sorted(stage["matrices"]) == sorted(one_head(full, 2, m))
    assert {"K1", "V1", "A2"} <= set(stage["matrices"])
    for name, matrix in stage["matrices"].items():
        values = np.array(
            [[np.nan if v is None else v for v in row] for row in matrix["values"]], dtype=float
        )
        np.testing.assert_allclose(values, full[name], rtol=0, atol=1e-12, err_msg=name)
    cell = ["explain", "-c", config, "-s", stage["id"], "-m", "A2", "--cell", "5,3"]
    explained, alone = runner.invoke(app, cell), runner.invoke(app, [*cell, "--head", "2"])
    assert explained.exit_code == 0 and "softmax" in explained.stdout, explained.output
    assert alone.stdout == explained.stdout
    other = runner.invoke(app, [*cell[:-4], "-m", "A3", "--cell", "5,3", "--head", "2"])
    assert other.exit_code == 2 and other.stderr.count("\n") == 1 and "A3" in other.stderr
    refused = runner.invoke(app, ["step", *args, "--head", "2", "--backward"])
    assert refused.exit_code == 2 and refused.stderr.startswith("error: --head keeps one head's")
    refused = runner.invoke(app, ["step", *args, "--head", "5"])
    assert refused.exit_code == 2 and refused.stderr == "error: --head: this model has heads 1 to 4, got 5\n"


# ---------------------------------------------------------------------------------------------
# A tiny checkpoint (float64): the same numbers kept, streamed and whole; the budget's message.
# ---------------------------------------------------------------------------------------------

PROMPT = "The cat is sleeping comfortably. The dog is barking loudly."


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> str:
    """The tiny trained Llama of tests/tiny_llama.py alone (4 query heads over 2, untied, 2 layers)."""
    pytest.importorskip("transformers")
    from tests.tiny_llama import build

    return str(build(tmp_path_factory.mktemp("keep"), "llama"))


def test_a_checkpoints_kept_and_streamed_stages_are_its_full_traces(llama: str, monkeypatch) -> None:
    from transformer_walkthrough.model import functional

    folder = llama
    full = walk_prompt(folder, PROMPT, "float64").trace
    kept = walk_prompt(folder, PROMPT, "float64", keep=Keep.stages(["masked-attention"], 1)).trace
    (held,) = [s for s in kept if s.matrices]
    assert held.id == "decoder.1.masked-attention"
    same_numbers(held, full[held.id])
    monkeypatch.setattr(functional, "SCORES_AT_ONCE", 50)  # layer 0 in blocks of a few queries
    for h in (1, 4):  # query heads 1 and 4, of key/value heads 1 and 2
        kept = walk_prompt(folder, PROMPT, "float64", keep=Keep.stages(["masked-attention"], 1, h)).trace
        (held,) = [s for s in kept if s.matrices]
        m = kept.config.model
        assert sorted(held.matrices) == sorted(one_head(full[held.id], h, m))
        same_values(held, full[held.id])
    stream = Streamed()
    streamed = walk_prompt(folder, PROMPT, "float64", keep=Keep(stream=stream)).trace
    assert [s.id for s in stream.seen] == list(full.stages)
    for stage in stream.seen:
        same_numbers(stage, full[stage.id])
    assert streamed.prediction == full.prediction


def test_the_budget_counts_what_is_kept_and_says_what_shrinks_it(llama: str, runner, monkeypatch) -> None:
    folder = llama
    config = walk_prompt(folder, PROMPT).config
    full = walk_prompt(folder, PROMPT).trace
    n, stages = len(full.target_tokens), len(full)
    vocab = len(config.vocabulary)
    whole = trace_size(config.model, 0, n, vocab).numbers * 4
    one = trace_size(config.model, 0, n, vocab, Keep.stages(["masked-attention"], 1)).numbers * 4
    assert one < whole / 5
    monkeypatch.setattr(checkpoint_run, "MAX_BYTES", (one + whole) // 2)
    with pytest.raises(CheckpointError, match=r"every stage would need .*; show fewer stages \(--stage KIND"):
        walk_prompt(folder, PROMPT)
    with pytest.raises(CheckpointError, match=r"--dtype float32 halves it"):
        walk_prompt(folder, PROMPT, "float64")
    shown = runner.invoke(
        app, ["step", "--model", folder, "--prompt", PROMPT, "-s", "masked-attention", "--layer", "1"]
    )
    assert shown.exit_code == 0, shown.output
    # the whole export streams (a stage at a time: the budget counts the largest); the backward
    # reads every stage, so its export keeps them all and is refused
    streamed = runner.invoke(app, ["export", "-", "--model", folder, "--prompt", PROMPT])
    assert streamed.exit_code == 0, streamed.output
    assert len(json.loads(streamed.stdout)["stages"]) == stages
    refused = runner.invoke(app, ["export", "-", "--backward", "--model", folder, "--prompt", PROMPT])
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1
    assert "show fewer stages" in refused.stderr
    written = runner.invoke(app, ["export", "-", "--model", folder, "--prompt", PROMPT, "-s", "embedding"])
    assert written.exit_code == 0, written.output


def test_a_prompt_too_long_is_told_the_longest_that_fits(llama: str, monkeypatch) -> None:
    config = walk_prompt(llama, PROMPT).config
    keep = Keep.stages(["masked-attention"], 1)
    m, vocab = config.model, len(config.vocabulary)
    need = (trace_size(m, 0, 20, vocab, keep).numbers + largest_computed(m, 0, 20, vocab, keep)) * 4
    monkeypatch.setattr(checkpoint_run, "MAX_BYTES", need)  # 20 tokens fit, just
    said = r"; --head H keeps one head's attention \(4 heads here\); or give a text of at most 20 tokens$"
    with pytest.raises(CheckpointError, match=said):
        checkpoint_run.check_size(config, 0, 40, keep)
    checkpoint_run.check_size(config, 0, 20, keep)
    with pytest.raises(CheckpointError, match="at most 20 tokens"):
        checkpoint_run.check_size(config, 0, 21, keep)


def test_a_head_kept_shrinks_the_budget_and_the_refusal_names_it(llama: str, monkeypatch, runner) -> None:
    """One head's attention holds a quarter of four heads' scores and weights: a prompt refused
    with every head (the message naming --head) fits with one, and `step --head` shows it."""
    walked = walk_prompt(llama, PROMPT)
    m, vocab, n = walked.config.model, len(walked.config.vocabulary), len(walked.trace.target_tokens)
    every, one = Keep.stages(["masked-attention"], 1), Keep.stages(["masked-attention"], 1, head=3)

    def need(keep: Keep) -> int:
        return (trace_size(m, 0, n, vocab, keep).numbers + largest_computed(m, 0, n, vocab, keep)) * 4

    scores = 3 * n * n * 4  # S, S+M and A of one head, float32
    assert 3 * scores <= need(every) - need(one) < 4 * scores  # three heads' fewer (and their Q, K, …)
    monkeypatch.setattr(checkpoint_run, "MAX_BYTES", need(one))
    step = [
        "step",
        "--model",
        llama,
        "--prompt",
        PROMPT,
        "-s",
        "masked-attention",
        "--layer",
        "1",
        "--no-map",
    ]
    refused = runner.invoke(app, step)
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1, refused.output
    assert "; --head H keeps one head's attention (4 heads here); or give a text of at most" in refused.stderr
    shown = runner.invoke(app, [*step, "--head", "3"])
    assert shown.exit_code == 0, shown.output
    assert "A3  (" in shown.stdout and "A1  (" not in shown.stdout and "A4  (" not in shown.stdout
    with pytest.raises(CheckpointError) as longer:
        checkpoint_run.check_size(walked.config, 0, 2 * n, one)
    assert "--head" not in str(longer.value)  # one head kept already: only a shorter text helps


# ---------------------------------------------------------------------------------------------
# A long prompt in bounded memory: the peak of a child process, against a bound measured here.
# ---------------------------------------------------------------------------------------------

PEAK = """
import atexit, re, runpy, sys
def hwm():
    with open("/proc/self/status") as f:
        print("VmHWM", int(re.search(r"VmHWM:\\s+(\\d+) kB", f.read()).group(1)) * 1024, file=sys.stderr)
atexit.register(hwm)
sys.argv = ["walkthrough", *sys.argv[1:]]
runpy.run_module("transformer_walkthrough", run_name="__main__")
"""
LAYERS = 6


@pytest.fixture(scope="module")
def long_checkpoint(tmp_path_factory) -> Path:
    """A random Llama of 6 layers, d_model 64, 4 heads over 2 key/value heads, 2,048 positions."""
    transformers = pytest.importorskip("transformers")
    import torch

    from tests.tiny_tokenizers import llama3_style

    folder = tmp_path_factory.mktemp("long")
    tiny = llama3_style(folder)
    config = transformers.LlamaConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=LAYERS,
        intermediate_size=128, vocab_size=tiny.vocab_size, max_position_embeddings=2048,
        bos_token_id=tiny.bos, eos_token_id=tiny.eos, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def peak(*args: str) -> int:
    """The peak resident memory (VmHWM) of a fresh ``walkthrough`` process, read by itself as it exits."""
    if not Path("/proc/self/status").exists():
        pytest.skip("reads VmHWM from /proc")
    env = {"PYTHONPATH": str(ROOT), "COLUMNS": "80", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *args], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert done.returncode == 0, done.stderr[-500:]
    return int(re.findall(r"VmHWM (\d+)", done.stderr)[-1])


def test_a_long_prompts_step_peaks_with_the_stage_it_keeps(long_checkpoint) -> None:
    folder = str(long_checkpoint)
    short, long = "The cat sat.", " ".join(["The cat sat on the mat."] * 150)
    walked = walk_prompt(folder, long, keep=Keep.stages(["embedding"]))
    n = len(walked.trace.target_tokens)
    assert n > 900
    m, vocab = walked.config.model, len(walked.config.vocabulary)
    step = ("-s", "masked-attention", "--layer", str(LAYERS - 1))  # the top layer: the whole pass runs
    kept = trace_size(m, 0, n, vocab, Keep.stages(step[1:2], LAYERS - 1)).numbers * 4
    one = trace_size(m, 0, n, vocab, Keep.stages(step[1:2], LAYERS - 1, 1)).numbers * 4
    whole = trace_size(m, 0, n, vocab).numbers * 4
    # The bound: the short prompt's peak (the interpreter, the libraries, the weights), the stage
    # kept, and 32 MiB for the pass's own arrays: the layers below hold a block of their scores at
    # a time (attention in blocks), never a layer's every head (4 × 3 × n² float32, 66 MiB here).
    base = peak("step", "--model", folder, "--prompt", short, *step) + 32 * 2**20
    assert whole > base + kept + kept  # the whole trace would not fit under it: the bound can fail
    assert 3 * 4 * n * n * 4 > 32 * 2**20  # nor a layer's every head computed whole
    assert peak("step", "--model", folder, "--prompt", long, *step) < base + kept
    # with --head 1, the stage kept holds one head's scores and weights: the bound shrinks with it,
    # below what a layer computing every head's scores whole would take
    assert one + 32 * 2**20 < 3 * 4 * n * n * 4
    assert peak("step", "--model", folder, "--prompt", long, *step, "--head", "1") < base + one


def test_a_long_prompts_export_streams_in_the_memory_of_its_largest_stage(long_checkpoint, tmp_path) -> None:
    """`export` writes each stage as it is computed, then drops it: the whole pass's .npz peaks
    with its largest stage (a layer's attention), not with the pass."""
    folder = str(long_checkpoint)
    short, long = "The cat sat.", " ".join(["The cat sat on the mat."] * 200)
    walked = walk_prompt(folder, long, keep=Keep.stages(["embedding"]))
    n = len(walked.trace.target_tokens)
    assert n > 1200
    m, vocab = walked.config.model, len(walked.config.vocabulary)
    largest = trace_size(m, 0, n, vocab, Keep(stream=print)).numbers * 4
    whole = trace_size(m, 0, n, vocab).numbers * 4
    # The bound: the short prompt's peak (the interpreter, the libraries, the weights), the stage
    # written and as much again for the arrays it is computed from, and 32 MiB of slack.
    bound = peak("export", str(tmp_path / "short.npz"), "--model", folder, "--prompt", short) + 2 * largest
    bound += 32 * 2**20
    assert whole > bound + largest  # the whole trace would not fit under it: the bound can fail
    target = tmp_path / "long.npz"
    assert peak("export", str(target), "--model", folder, "--prompt", long) < bound
    with np.load(target) as written:  # every stage is in it
        assert {name.split("/")[0] for name in written.files} == {sid for sid, _ in outline(m)}
        assert f"decoder.{LAYERS - 1}.masked-attention/A1" in written.files


# ---------------------------------------------------------------------------------------------
# The lens keeps the top k of each cell, a few layers at a time; the whole lens is counted first.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gpt-style", "bert-style", "llama-style", "standard"])
def test_the_top_k_lens_is_the_whole_lens_top(name: str, monkeypatch) -> None:
    from transformer_walkthrough.model import lens as lens_module
    from transformer_walkthrough.model.lens import lens_stages, logit_lens

    config = load_config(ROOT / "configs" / f"{name}.yaml")
    w = init_weights(config)
    whole = logit_lens(run_forward(config, w))
    monkeypatch.setattr(lens_module, "CHUNK", 1)  # one layer at a time
    kept = run_forward(config, w, keep=Keep(lens_stages))
    assert "output.logits" not in kept.stages  # the pass stopped after the last layer: the top is the lens's
    top = logit_lens(kept, top=3, weights=w)
    assert top.logits is None and top.probabilities is None
    np.testing.assert_array_equal(top.top(3), whole.top(3))
    for layer in range(whole.layers):  # the prediction table's rule, row by row, as the reference
        for i in range(len(whole.tokens)):
            assert top.top(3)[layer, i].tolist() == top_k(whole.probabilities[layer, i], 3).tolist()
    for layer in range(whole.layers):
        for i, expected in enumerate(whole.expected):
            for t in [*whole.top(3)[layer, i].tolist(), *([] if expected is None else [expected])]:
                assert abs(top.probability(layer, i, t) - whole.probability(layer, i, t)) <= 1e-12
                assert top.rank(layer, i, t) == whole.rank(layer, i, t)
    with pytest.raises(Exception, match="kept the top 3"):
        top.top(4)


def test_the_top_tokens_of_many_rows_at_once_follow_the_prediction_tables_rule() -> None:
    from transformer_walkthrough.model.lens import top_tokens

    rng = np.random.default_rng(3)
    p = rng.random((40, 9))
    p[0] = 0.25  # a uniform row: ties everywhere, the lowest ids first
    p[1, [2, 5, 7]] = p[1].max()  # three tied at the top
    p[2, :] = np.nan
    p[2, 4] = 0.5  # one number among NaNs
    p[3, [1, 6]] = p[3, 0]  # a tie at the third place
    for k in (2, 3, 9):
        got = top_tokens(p, k)
        assert [row.tolist() for row in got] == [top_k(row, k).tolist() for row in p]


def test_the_whole_lens_is_counted_before_it_is_allocated(monkeypatch) -> None:
    from transformer_walkthrough.errors import WalkthroughError
    from transformer_walkthrough.model import lens as lens_module
    from transformer_walkthrough.model.lens import logit_lens

    trace = run_forward(load_config(ROOT / "configs" / "gpt-style.yaml"))
    layers, n, v = 2, len(trace.target_tokens), len(trace.vocabulary)
    monkeypatch.setattr(lens_module, "MAX_BYTES", 2 * layers * n * v * 8 - 1)
    with pytest.raises(WalkthroughError, match=rf"{layers} layers × {n} positions × {v} tokens.*--top-k"):
        logit_lens(trace)
    assert logit_lens(trace, top=2).best.shape == (layers, n, 2)


# ---------------------------------------------------------------------------------------------
# The lens at 80 columns: the blanks and the positions asked for stay; what is left out is said.
# ---------------------------------------------------------------------------------------------


def _lens_columns(out: str) -> list[str]:
    """The header's cells of a lens table (after "after")."""
    header = next(line for line in out.splitlines() if line.lstrip().startswith("after"))
    return header.split()[1:]


def test_the_lens_at_80_columns_keeps_the_blanks_and_the_positions_asked_for(runner) -> None:
    bert = str(ROOT / "configs" / "bert-style.yaml")
    trace = run_forward(load_config(bert))
    blank = trace.source_tokens.index("[MASK]")
    shown = runner.invoke(app, ["lens", "-c", bert])
    assert shown.exit_code == 0, shown.output
    columns = _lens_columns(shown.stdout)
    assert "[MASK]" in columns and "…" in columns
    left = [i for i, t in enumerate(trace.source_tokens) if t not in columns]
    assert blank not in left and left
    span = f"positions {left[0]} to {left[-1]} are" if len(left) > 1 else f"position {left[0]} is"
    assert f"{span} left out of {len(trace.source_tokens)}" in " ".join(shown.stdout.split())
    # a decoder keeps its last positions: what the whole prompt leads to ("is" → "sleeping")
    gpt = str(ROOT / "configs" / "gpt-style.yaml")
    tokens = run_forward(load_config(gpt)).target_tokens
    columns = _lens_columns(runner.invoke(app, ["lens", "-c", gpt]).stdout)
    assert columns[-4:] == list(tokens[-4:]) and {"is", "sleeping"} <= set(columns)
    # a position asked for is kept, and each gap is its own "…", each left-out run said
    asked = runner.invoke(app, ["lens", "-c", gpt, "--at", "1"])
    columns = _lens_columns(asked.stdout)
    assert columns[0] == "…" and columns[1] == tokens[1] and columns.count("…") == 2
    missing = [i for i, t in enumerate(tokens) if t not in columns]
    assert len(missing) == 2 and missing[1] > missing[0] + 1  # two gaps, one position each
    assert f"positions {missing[0]} and {missing[1]} are left out of 7" in " ".join(asked.stdout.split())
    bad = runner.invoke(app, ["lens", "-c", gpt, "--at", "99"])
    assert bad.exit_code == 2 and bad.stderr == "error: --at: the decoder has positions 0 to 6, got 99\n"


def test_a_long_head_is_drawn_in_blocks_of_mean_weight() -> None:
    """512 queries × 512 keys under a causal mask: 24 × 24 blocks, each the mean of its weights
    (masked ones count as their 0), a block the mask hides whole drawn as masked; each row's link
    the key its queries give the most weight on average."""
    from rich.console import Console

    from transformer_walkthrough.model.trace import ATTENTION, Matrix
    from transformer_walkthrough.views.overview import Glyphs, blocks, head_block
    from transformer_walkthrough.views.widgets import View

    n = 512
    rng = np.random.default_rng(0)
    S = rng.standard_normal((n, n))
    S[:, 7] += 3  # every query favours key 7
    hidden = np.triu(np.ones((n, n), dtype=bool), 1)
    A = np.exp(np.where(hidden, -np.inf, S))
    A /= A.sum(axis=1, keepdims=True)
    cut = blocks(A, hidden)
    assert len(cut.queries) == len(cut.keys) == 24 and sum(map(len, cut.queries)) == n
    for a, q in enumerate(cut.queries):
        for b, k in enumerate(cut.keys):
            assert abs(cut.means[a, b] - A[q.start : q.stop, k.start : k.stop].mean()) <= 1e-15
            assert cut.hidden[a, b] == hidden[q.start : q.stop, k.start : k.stop].all()
    labels = tuple(f"t{i}" for i in range(n))
    console = Console(width=120, no_color=True)
    with console.capture() as shown:
        console.print(
            head_block("A1", Matrix(A, labels, labels, ATTENTION, "A", 1), hidden, Glyphs(View(), False), 2)
        )
    lines = shown.get().splitlines()
    assert lines[0] == "head 1 · A1  (512×512 in 24×24 blocks)"
    rows = [line for line in lines if "→" in line]
    assert len(rows) == 24
    for line, q in zip(rows, cut.queries, strict=True):
        mean = A[q.start : q.stop].mean(axis=0)
        j = int(np.argmax(mean))
        assert line.startswith(f"{q.start}–{q.stop - 1} ") and line.endswith(f"→ t{j} ({j}) {mean[j]:.2f}")
    assert rows[0].split()[2] == "·"  # the first block row sees none of the second block of keys
