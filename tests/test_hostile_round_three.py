"""Issue 37: the hostile inputs of the third review, each the reproducer the review gave.

Every one ends in success or in one ``error:`` line and exit code 2: never a traceback, a hang,
gigabytes or a file left behind. The memory bombs run in a child under an address-space limit
whose peak is measured (``test_hostile_files.refused_in_child``); what would hang runs in a child
with a timeout; the rest through typer's CliRunner.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there

from tests.test_hostile_files import PEAK_RSS, child, refused_in_child
from tests.test_robustness import fails as one_line_error
from transformer_walkthrough.cli import app
from transformer_walkthrough.config import load_config
from transformer_walkthrough.errors import MAX_DECODED, ExportError, decoded
from transformer_walkthrough.files.export import write_together
from transformer_walkthrough.model.lens import FEW, top_tokens
from transformer_walkthrough.model.size import labelled_rows
from transformer_walkthrough.model.trace import top_k

ROOT = Path(__file__).resolve().parents[1]
BIG = "1" + "0" * 400  # a JSON integer past the largest float (1.8e308)


def fails(args: list[str], message: str = "", env: dict[str, str] | None = None) -> str:
    return one_line_error(CliRunner(), args, message, env)


def edited(folder: Path, to: Path, name: str = "config.json", **changes: Any) -> Path:
    """A copy of checkpoint ``folder`` whose JSON file ``name`` has ``changes``; the string "BIG"
    stands for a 401-digit integer, which Python's json writes only from text."""
    shutil.copytree(folder, to)
    data = json.loads((to / name).read_text(encoding="utf-8"))
    data.update(changes)
    (to / name).write_text(json.dumps(data).replace('"BIG"', BIG), encoding="utf-8")
    return to


# ---- 1. head sizes that overflow: checked against the tensors before anything is allocated ------


@pytest.mark.parametrize(
    "changes",
    [
        {"head_dim": 2**62},
        {"num_attention_heads": 10**30, "num_key_value_heads": 10**30},
        {"num_attention_heads": 2**58, "num_key_value_heads": 2**58},
        {"num_attention_heads": 2**40, "num_key_value_heads": 2**40},  # was "out of memory"
    ],
    ids=["head_dim 2**62", "heads 10**30", "heads 2**58", "heads 2**40"],
)
def test_overflowing_head_sizes_name_their_keys(llama_family, tmp_path, changes):
    folder = edited(llama_family["llama"], tmp_path / "m", **changes)
    line = fails(["run", "--prompt", "The cat", "--model", str(folder)], "q_proj.weight has shape [16, 16]")
    assert "(num_attention_heads × head_dim, hidden_size)" in line


@pytest.mark.parametrize(
    ("key", "names"),
    [("n_embd", "(n_embd)"), ("n_inner", "(n_embd, n_inner)")],
)
def test_gpt2_sizes_that_overflow_name_their_keys(gpt2, tmp_path, key, names):
    folder = edited(gpt2[0]["hub"], tmp_path / "m", **{key: 2**62, "n_head": 1})
    assert fails(["run", "--prompt", "hi", "--model", str(folder)], "config.json implies").endswith(names)


def test_a_bert_segment_table_of_10_30_rows_names_type_vocab_size(bert_family, tmp_path):
    folder = edited(bert_family["bert"], tmp_path / "m", type_vocab_size=10**30)
    fails(["run", "--prompt", "The cat [MASK]", "--model", str(folder)], "(type_vocab_size, hidden_size)")


# ---- 2. tokenizer_config.json with unhashable fields, for the BERT family -------------------------


def _first_added(config: dict) -> dict:
    decoder = config.setdefault("added_tokens_decoder", {"0": {"content": "[PAD]", "special": True}})
    return decoder[next(iter(decoder))]


UNHASHABLE = {
    "lstrip []": (lambda c: _first_added(c).update(lstrip=[]), "added_tokens_decoder[", ".lstrip is []"),
    "special {}": (lambda c: _first_added(c).update(special={}), "added_tokens_decoder[", ".special is {}"),
    "cls_token's lstrip []": (
        lambda c: c.update(cls_token={"content": c.get("cls_token", "[CLS]"), "lstrip": []}),
        "cls_token.lstrip is []", "",
    ),
}  # fmt: skip
LAYOUTS = {  # each family's files but one: the tokenizer is built from the rest
    "bert": ("tokenizer.json", "vocab.txt"),
    "distilbert": ("tokenizer.json", "vocab.txt"),
    "roberta": ("tokenizer.json", "vocab.json"),
}


@pytest.mark.parametrize("edit", list(UNHASHABLE))
@pytest.mark.parametrize(
    ("family", "dropped"), [(f, d) for f, files in LAYOUTS.items() for d in files], ids=lambda x: str(x)
)
def test_unhashable_token_fields_are_one_line(bert_family, tmp_path, family, dropped, edit):
    folder = shutil.copytree(bert_family[family], tmp_path / "m")
    (folder / dropped).unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    change, *said = UNHASHABLE[edit]
    change(config)
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    mask = "<mask>" if family == "roberta" else "[MASK]"
    line = fails(["run", "--prompt", f"The cat {mask}", "--model", str(folder)], "not true or false")
    assert "tokenizer_config.json" in line and all(part in line for part in said), line


# ---- 3. the lens and the documents of a wide table: a few cells' logits at a time -----------------


@pytest.fixture(scope="module")
def wide_table(tmp_path_factory) -> Path:
    """The review's checkpoint, smaller: a float16 Llama of 16 layers, d_model 2 and a tied table of
    100,000 rows (400 kB), whose whole lens (17 × 47 × 100,000 numbers, twice) peaked at 730 MB."""
    import torch
    import transformers

    from tests.tiny_tokenizers import llama3_style

    folder = tmp_path_factory.mktemp("wide")
    tok = llama3_style(folder)
    config = transformers.LlamaConfig(
        vocab_size=100_000, hidden_size=2, intermediate_size=2, num_hidden_layers=16, num_attention_heads=1,
        num_key_value_heads=1, head_dim=2, tie_word_embeddings=True, bos_token_id=tok.bos,
        eos_token_id=tok.eos,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).to(torch.float16).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "command",
    [["lens"], pytest.param(["export", "r.html"], marks=pytest.mark.slow), ["export", "r.md"]],
    ids=["lens", "report.html", "report.md"],
)
def test_the_lens_of_a_wide_table_stays_in_bounds(wide_table, tmp_path, monkeypatch, command):
    """47 positions × 17 layers × 100,000 tokens: the lens keeps each cell's top tokens only."""
    prompt = "The cat is sleeping comfortably. The cat is sleeping comfortably."
    monkeypatch.chdir(tmp_path)  # the child's too: the document is written there
    code, stderr, peak = child([*command, "--model", str(wide_table), "--prompt", prompt], timeout=120)
    assert code == 0, stderr[-2000:]
    assert peak < PEAK_RSS, f"peak RSS {peak / 2**20:.0f} MiB"
    assert [p.name for p in tmp_path.iterdir()] == command[1:]


def test_a_few_top_tokens_are_chosen_as_many_are():
    """One at a time (k up to FEW) or partitioned (more): both are ``top_k``'s choice, row by row,
    with ties, NaN (the smallest) and -inf among the numbers."""
    rng = np.random.default_rng(5)
    p = rng.choice([0.0, 0.25, 0.5, 1.0, np.nan, -np.inf, np.inf], size=(300, FEW + 8))
    for k in (1, 2, FEW, FEW + 1, FEW + 8):
        got = top_tokens(p, k)
        assert [row.tolist() for row in got] == [top_k(row, k).tolist() for row in p], k


# ---- 4. the hub cache: every file the hub client reads is checked first --------------------------

REVISION = "0123456789abcdef0123456789abcdef01234567"


def _hub(marian, tmp_path: Path, offline: bool) -> tuple[dict[str, str], Path]:
    """A hub cache holding the tiny Marian as ``org/m`` at REVISION: (environment, its repo folder)."""
    repo = tmp_path / "hub" / "models--org--m"
    shutil.copytree(marian[0], repo / "snapshots" / REVISION)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    (repo / "trees").mkdir()
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HOME": str(tmp_path / "home"),
           "HF_HUB_OFFLINE": "1" if offline else "0", "HF_TOKEN": ""}  # fmt: skip
    (tmp_path / "home").mkdir()
    return env, repo


def _from_the_hub(env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    """``walkthrough run --model org/m`` in a child: a FIFO read in-process would hang the suite."""
    code = "from transformer_walkthrough.cli import main; main()"
    try:
        return subprocess.run(
            [sys.executable, "-c", code, "run", "--model", "org/m", "--source", "the cat"],
            env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout} s: a file of the cache was waited on")


def _one_line(done: subprocess.CompletedProcess, message: str) -> None:
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    assert message in lines[0], lines[0]


def _fifo_or_zero(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("offline", [True, False], ids=["offline", "online"])
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_tree_listing_that_is_no_regular_file_is_one_line(marian, tmp_path, kind, offline):
    """Online, no request is made: the listing is refused before the hub is asked."""
    env, repo = _hub(marian, tmp_path, offline)
    _fifo_or_zero(repo / "trees" / f"{REVISION}.json", kind)
    _one_line(_from_the_hub(env), f"trees/{REVISION}.json: not a regular file")


def test_a_flood_of_a_tree_listing_is_refused_uncounted_values(marian, tmp_path):
    env, repo = _hub(marian, tmp_path, offline=True)
    (repo / "trees" / f"{REVISION}.json").write_text("[" + "{}," * 3_000_000 + "{}]")
    _one_line(_from_the_hub(env), "more than 2,000,000 JSON values")


def test_a_true_tree_listing_still_reads(marian, tmp_path):
    env, repo = _hub(marian, tmp_path, offline=True)
    files = {p.name: {"size": p.stat().st_size, "blob_id": "0" * 40} for p in marian[0].iterdir()}
    (repo / "trees" / f"{REVISION}.json").write_text(json.dumps({"format_version": 1, "files": files}))
    done = _from_the_hub(env)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("name", ["token", "stored_tokens"])
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_token_file_that_is_no_regular_file_is_one_line_online(marian, tmp_path, kind, name):
    env, _ = _hub(marian, tmp_path, offline=False)
    env.pop("HF_TOKEN")  # the token is then read from its file
    _fifo_or_zero(tmp_path / "home" / name, kind)
    _one_line(_from_the_hub(env), f"home/{name}: not a regular file")


def test_a_ref_with_a_trailing_newline_reads_offline(marian, tmp_path):
    """The hub client reads refs/main whole, newline and all, and finds no snapshot of that name."""
    env, repo = _hub(marian, tmp_path, offline=True)
    (repo / "refs" / "main").write_text(REVISION + "\n")
    done = _from_the_hub(env)
    assert done.returncode == 0, done.stderr[-2000:]


# ---- 5. floods of vocab.txt and merges.txt: lines counted before they are split ------------------


def test_a_vocab_txt_flood_is_refused_in_bounded_memory(bert_family, tmp_path):
    folder = shutil.copytree(bert_family["bert"], tmp_path / "m")
    (folder / "tokenizer.json").unlink()
    (folder / "vocab.txt").write_bytes(b"ab\n" * 33_000_000)  # 99 MB: was 2.5 GB at its peak
    refused_in_child(["run", "--prompt", "The cat [MASK]", "--model", str(folder)], "has 33,000,000 lines")


def test_a_merges_txt_flood_is_refused_in_bounded_memory(gpt2, tmp_path):
    folder = shutil.copytree(gpt2[0]["hub"], tmp_path / "m")
    tokenizer = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    (folder / "tokenizer.json").unlink()
    (folder / "vocab.json").write_text(json.dumps(tokenizer["model"]["vocab"]), encoding="utf-8")
    (folder / "merges.txt").write_bytes(b"#version: 0.2\n" + b"a b\n" * 24_900_000)  # 99.6 MB: was 1.9 GB
    refused_in_child(["run", "--prompt", "hi", "--model", str(folder)], "has 24,900,001 lines")


# ---- 6. the toy's segment table counted before it is drawn ---------------------------------------

SEGMENTS = """\
sentence: The cat is sleeping comfortably.
encoder_words: 5
blanks: [3]
model:
  num_encoder_layers: 1
  num_decoder_layers: 0
  task: fill-mask
  positional_encoding: learned
  max_positions: 16
  segments: {segments}
  embedding_norm: true
  output_transform: true
  tie_embeddings: true
"""


def test_forty_million_segments_are_refused_before_the_table_is_drawn(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(SEGMENTS.format(segments=40_000_000))  # was 4.9 GB and 14 s
    refused_in_child(["run", "-c", str(config)], "lower model.segments")


def test_the_rows_labelled_one_by_one_are_t_and_p(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(SEGMENTS.format(segments=3))
    assert labelled_rows(load_config(config).model) == 3 + 16  # T's segments, P's positions
    assert labelled_rows(load_config(ROOT / "configs" / "article.yaml").model) == 0  # sinusoids


# ---- 7. the outputs of one command: all or none ---------------------------------------------------


def _no_space(*args: object, **kwargs: object) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_worksheet_whose_key_cannot_be_written_is_not_left(tmp_path, monkeypatch):
    """The disk fills while the key is written, after the worksheet was: neither file is left."""
    from transformer_walkthrough.views.documents import writers

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(writers, "iter_key", _no_space)
    fails(["export", "ws.md", "--exercise", "2", "--answers", "key.md"], "key.md: cannot write (No space")
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.skipif(
    not os.path.isdir("/proc/self") or os.geteuid() != 0, reason="the review's case: root, and /proc"
)
def test_the_reviews_unwritable_key_and_weights_leave_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fails(["export", "ws.md", "--exercise", "2", "--answers", "/proc/k.md"], "/proc/k.md: cannot write")
    fails(["train", "--steps", "1", "--save-initial", "init.npz", "--output", "/proc/x.npz"], "/proc/x.npz")
    assert sorted(os.listdir(tmp_path)) == []


def test_training_whose_second_file_fails_leaves_neither(tmp_path, monkeypatch):
    import numpy as np

    monkeypatch.chdir(tmp_path)
    calls, real = [], np.savez

    def savez(f: Any, **arrays: Any) -> None:  # the first file written whole, the second not
        calls.append(f)
        if len(calls) == 2:
            _no_space()
        real(f, **arrays)

    monkeypatch.setattr(np, "savez", savez)
    fails(["train", "--steps", "1", "--save-initial", "init.npz", "--output", "w.npz"], "w.npz: cannot write")
    assert len(calls) == 2 and sorted(os.listdir(tmp_path)) == []


def test_a_name_taken_while_writing_removes_what_was_placed(tmp_path):
    """The second name is taken after it was checked (another export racing to it): the first
    file, already in place, is removed; the one that took the name is left as it was."""
    first, second = tmp_path / "a.md", tmp_path / "b.md"

    def write_first(f: Any) -> None:
        second.write_text("someone else's")
        f.write(b"a")

    with pytest.raises(ExportError, match=r"b\.md: already exists"):
        write_together([(first, write_first), (second, lambda f: f.write(b"b"))])
    assert sorted(os.listdir(tmp_path)) == ["b.md"] and second.read_text() == "someone else's"


def test_files_written_together_are_all_there(tmp_path):
    files = [(tmp_path / f"{k}.md", lambda f, k=k: f.write(b"x" * k)) for k in range(1, 4)]
    write_together(files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.md", "2.md", "3.md"]
    assert [p.stat().st_size for p, _ in files] == [1, 2, 3]


# ---- 8. a decoded translation is bounded on screen -----------------------------------------------


def test_decoded_text_is_cut_saying_how_much_was_left_out():
    assert decoded("die Katze\x1b") == "die Katze\\x1b"
    text = decoded("x" * (MAX_DECODED + 12_345))
    assert text == "x" * MAX_DECODED + "… (12,345 more characters not shown)"


def test_a_translation_of_huge_pieces_is_cut_on_screen(marian, tmp_path):
    folder = shutil.copytree(marian[0], tmp_path / "m")
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    huge = dict(vocab)  # a later piece of an id already taken is its label and its text
    for piece, i in vocab.items():
        if piece not in ("</s>", "<unk>", "<pad>"):
            huge[f"{piece}{'x' * 100_000}"] = i
    (folder / "vocab.json").write_text(json.dumps(huge), encoding="utf-8")
    result = CliRunner().invoke(app, ["run", "--model", str(folder), "--source", "the cat"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    line = next(x for x in result.stdout.splitlines() if x.startswith("translation (greedy): "))
    assert len(line) < MAX_DECODED + 100 and line.endswith("more characters not shown)"), line[-200:]


# ---- 9. absurd numbers name their key; the report's title is escaped -----------------------------


@pytest.mark.parametrize(
    ("name", "changes", "key"),
    [
        ("mistral", {"rope_theta": "BIG", "rope_parameters": None}, "rope_theta"),
        ("mistral", {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": "BIG"}},
         "rope_parameters.factor"),
        ("mistral", {"rms_norm_eps": "BIG"}, "rms_norm_eps"),
        ("llama3-rope", {"rope_parameters": {
            "rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": "BIG", "original_max_position_embeddings": 16}},
         "rope_parameters.high_freq_factor"),
    ],
    ids=["rope_theta", "factor", "rms_norm_eps", "high_freq_factor"],
)  # fmt: skip
def test_a_number_past_the_largest_float_names_its_key(llama_family, tmp_path, name, changes, key):
    folder = edited(llama_family[name], tmp_path / "m", **changes)
    fails(["run", "--prompt", "The cat", "--model", str(folder)], f"config.json: {key} is 1000")


@pytest.mark.parametrize("window", [64, 2**63 - 1], ids=["max_position_embeddings", "2**63 - 1"])
def test_a_window_as_long_as_the_context_is_no_window(llama_family, tmp_path, window):
    """Mistral's sliding_window at least max_position_embeddings (64): every position sees all
    before it, as with none (transformers runs such a window as none too)."""
    folder = shutil.copytree(llama_family["mistral"], tmp_path / "m")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["max_position_embeddings"] == 64
    runs = []
    for w in (window, None, 4):
        (folder / "config.json").write_text(json.dumps({**config, "sliding_window": w}))
        args = ["run", "--prompt", "The cat is sleeping comfortably.", "--model", str(folder)]
        runs.append(CliRunner().invoke(app, args))
    assert [r.exit_code for r in runs] == [0, 0, 0], [r.stderr for r in runs]
    assert runs[0].stdout == runs[1].stdout != runs[2].stdout  # the window of 4 does bite


@pytest.mark.parametrize("window", [2**63, 10**30])
def test_a_window_transformers_cannot_run_names_its_key(llama_family, tmp_path, window):
    """transformers fails on a window of 2⁶³ or more ("Overflow when unpacking long long"): refused,
    saying what a window that long would mean and how to say it."""
    folder = edited(llama_family["mistral"], tmp_path / "m", sliding_window=window)
    line = fails(["run", "--prompt", "The cat", "--model", str(folder)], "sliding_window is ")
    assert "past what transformers runs (2⁶³ − 1)" in line and "(max_position_embeddings, 64)" in line, line


def test_a_toy_window_of_10_30_names_its_key(tmp_path):
    config = tmp_path / "c.yaml"
    text = (ROOT / "configs" / "llama-style.yaml").read_text(encoding="utf-8")
    config.write_text(text.replace("model:\n", f"model:\n  sliding_window: {10**30}\n", 1), encoding="utf-8")
    fails(["run", "-c", str(config)], "model.sliding_window: must be below 2³¹")


def test_the_report_title_escapes_a_bidi_override_as_the_body(llama_family, tmp_path):
    out = tmp_path / "r.html"
    prompt = "The \u202ecat is"
    result = CliRunner().invoke(
        app, ["export", str(out), "--model", str(llama_family["llama"]), "--prompt", prompt]
    )
    assert result.exit_code == 0, (result.stderr, result.exception)
    html = out.read_text(encoding="utf-8")
    assert "\u202e" not in html
    assert "<title>transformer-walkthrough: The \\u202ecat is</title>" in html
