"""Issue 12: no traceback, no hang, nothing lost. Each reproducer of the issue, then a fuzz test.

Every bad input must give exit code 2 and one line on stderr that starts with "error:", and
write nothing.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.compare.checks import gap
from transformer_walkthrough.compare.nonfinite import first_non_finite
from transformer_walkthrough.compare.verify import recompute
from transformer_walkthrough.config import (
    ACTIVATIONS,
    OUTPUT_HEADS,
    POSITIONAL_ENCODINGS,
    Config,
    ModelConfig,
    load_config,
)
from transformer_walkthrough.errors import ConfigError, ExportError, WalkthroughError
from transformer_walkthrough.files.export import check_target, schema, trace_to_dict, write_atomic
from transformer_walkthrough.files.export import number as export_number
from transformer_walkthrough.files.npzfile import read_npz
from transformer_walkthrough.model.size import trace_size
from transformer_walkthrough.model.transformer import init_weights, run_forward

ROOT = Path(__file__).resolve().parents[1]


def fails(runner: CliRunner, args: list[str], message: str = "", env: dict[str, str] | None = None) -> str:
    """The command exits 2 with one line on stderr, the error first; returns that line."""
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 2, (result.exit_code, result.stderr[-2000:], result.stdout[-500:])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert message in lines[0], lines[0]
    return lines[0]


def config_file(tmp_path: Path, text: str, name: str = "c.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def weights_file(tmp_path: Path, scale: float = 1.0, name: str = "w.npz") -> Path:
    arrays = {k: v * scale for k, v in init_weights(Config()).items()}
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


# ---- Divergence and extreme values ---------------------------------------------------------------


@pytest.mark.parametrize("lr", ["10", "100"])
def test_divergent_training_says_where_and_saves_nothing(runner: CliRunner, tmp_path: Path, lr: str) -> None:
    out = tmp_path / "w.npz"
    line = fails(runner, ["train", "--lr", lr, "-o", str(out)], "training diverged: the loss became")
    assert "at step " in line and "try a smaller --lr" in line
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--lr", "inf"], "--lr: must be a finite number, got inf"),
        (["train", "--lr", "nan"], "--lr: must be positive, got nan"),
    ],
)
def test_non_finite_learning_rates(runner: CliRunner, args: list[str], message: str) -> None:
    fails(runner, args, message)


def test_loss_curve_survives_nan() -> None:
    from transformer_walkthrough.views.tables import loss_curve

    text = loss_curve([2.0, 1.0, float("nan"), float("inf")]).plain
    assert "over 3 steps" in text and text.count("•") == 4


def test_explain_softmax_is_stable_for_huge_scores(runner: CliRunner, tmp_path: Path) -> None:
    w = weights_file(tmp_path, scale=1e4)
    for stage, matrix in (("output.probabilities", "probabilities"), ("decoder.0.masked-attention", "A1")):
        result = runner.invoke(app, ["explain", "-s", stage, "-m", matrix, "--cell", "0,0", "-w", str(w)])
        assert result.exit_code == 0, result.stderr
        assert "subtract the row's largest value m = " in result.stdout


def test_verify_tolerance_is_relative_to_the_magnitude() -> None:
    trace = run_forward(Config(), init_weights(Config()))
    assert all(c.ok for c in recompute(trace))
    trace["decoder.0.cross-attention"]["S1"][...] *= 1e6  # scores in the millions ...
    stage = trace["decoder.0.cross-attention"]
    checks = [c for c in recompute(trace) if c.stage == stage.id]
    assert min(c.tolerance for c in checks) >= 1e-10 * 1e5  # ... are judged relative to their size


def test_verify_after_training_with_large_scores_agrees(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "t5.npz"
    assert runner.invoke(app, ["train", "--lr", "5", "--steps", "150", "-o", str(out)]).exit_code == 0
    result = runner.invoke(app, ["verify", "-w", str(out)])
    assert result.exit_code == 0, result.stdout[-800:]


def test_a_nan_is_never_agreement() -> None:
    a = np.array([[1.0, np.nan]])
    assert gap(a, np.array([[1.0, 2.0]])) == np.inf
    assert gap(a, a) == np.inf
    assert gap(np.array([[-np.inf]]), np.array([[-np.inf]])) == 0.0


def test_the_first_non_finite_stage_is_named(runner: CliRunner, tmp_path: Path) -> None:
    trace = run_forward(Config())
    assert first_non_finite(trace) is None  # the mask's -inf is meant
    w = weights_file(tmp_path, scale=1e200)
    result = runner.invoke(app, ["run", "-w", str(w)])
    assert result.exit_code == 0
    (line,) = result.stderr.splitlines()
    assert line.startswith("warning: ") and "is the first stage whose" in line
    assert "RuntimeWarning" not in result.stderr


def test_generate_compare_with_nan_is_a_failure(runner: CliRunner, tmp_path: Path) -> None:
    w = weights_file(tmp_path, scale=1e200)
    fails(runner, ["generate", "--compare", "-w", str(w)], "generation differs from the teacher-forced pass")


# ---- Strict JSON ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["model: {layer_norm_eps: .inf}\n", "model: {layer_norm_eps: 'inf'}\n",
             "model: {layer_norm_eps: 1.0e400}\n", "training: {learning_rate: .inf}\n",
             "training: {learning_rate: .nan}\n"],
)  # fmt: skip
def test_non_finite_config_numbers_are_refused(runner: CliRunner, tmp_path: Path, text: str) -> None:
    fails(runner, ["export", "-", "-c", config_file(tmp_path, text)], "must be a finite number")


def test_non_finite_prediction_and_loss_are_strings() -> None:
    import jsonschema

    trace = run_forward(Config())
    doc = trace_to_dict(trace)
    first = trace.prediction[0]
    object.__setattr__(first, "probability", float("nan")) if hasattr(first, "__dataclass_fields__") else None
    doc["prediction"][0]["probability"] = export_number(float("nan"))
    text = json.dumps(doc, allow_nan=False)
    jsonschema.validate(json.loads(text), schema())
    assert '"probability": "nan"' in text


# ---- Weights files -------------------------------------------------------------------------------


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _npy(array: np.ndarray) -> bytes:
    f = io.BytesIO()
    np.save(f, array)
    return f.getvalue()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: (np.save(p / "w.npy", np.zeros(3)), p / "w.npy")[1], "not a weights .npz"),
        (lambda p: ((p / "w.npz").write_bytes(b"") and p / "w.npz") or p / "w.npz", "not a weights .npz"),
        (lambda p: _zip(p / "w.npz", {"a.npy": _npy(np.array(["x"]))}), "holds <U1 values"),
        (lambda p: _zip(p / "w.npz", {"a.npy": _npy(np.array([b"x"]))}), "holds |S1 values"),
        (lambda p: _zip(p / "w.npz", {"a.npy": _npy(np.zeros(2, "f8,f8"))}), "weights are real floats"),
        (lambda p: _zip(p / "w.npz", {"a.npy": _npy(np.zeros(2, complex))}), "holds complex128 values"),
        (lambda p: _zip(p / "w.npz", {"a.npy": _npy(np.zeros(2, bool))}), "holds bool values"),
        (lambda p: _zip(p / "w.npz", {"a.npy": _npy(np.zeros(2, "M8[s]"))}), "holds datetime64[s] values"),
        (lambda p: _zip(p / "w.npz", {"a.txt": b"hello"}), "which is not .npy data"),
        (lambda p: _zip(p / "w.npz", {"a.npy": b"hello"}), "a is not .npy data"),
        (
            lambda p: _zip(
                p / "w.npz", {"a.npy": _npy(np.zeros(1))[:-8].replace(b"(1,)", b"(10000000000,)"[:4])}
            ),
            "",
        ),
    ],
)
def test_bad_weights_files_get_one_line(runner: CliRunner, tmp_path: Path, make, message: str) -> None:
    path = make(tmp_path)
    fails(runner, ["run", "-w", str(path)], message)


def test_a_header_claiming_huge_arrays_is_refused_before_allocating(tmp_path: Path) -> None:
    header = {"descr": "<f8", "fortran_order": False, "shape": (100_000, 100_000)}
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, header)
    path = _zip(tmp_path / "w.npz", {"a.npy": f.getvalue() + b"\0" * 64})
    assert path.stat().st_size < 1000
    with pytest.raises(WalkthroughError, match=r"would take 74\.5 GiB or more"):
        read_npz(path)


@pytest.mark.slow
def test_a_compressed_bomb_is_refused_from_its_header(tmp_path: Path) -> None:
    path = tmp_path / "w.npz"
    np.savez_compressed(path, a=np.zeros((12_000, 12_000)))  # 1.07 GiB of zeros in a small file
    assert path.stat().st_size < 5_000_000
    started = time.perf_counter()
    with pytest.raises(WalkthroughError, match="GiB or more"):
        read_npz(path)
    assert time.perf_counter() - started < 1.0


def test_truncated_and_flipped_files_are_caught(runner: CliRunner, tmp_path: Path) -> None:
    good = weights_file(tmp_path)
    data = good.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    fails(runner, ["run", "-w", str(tmp_path / "cut.npz")], "cut.npz")
    flipped = bytearray(data)
    at = data.index(b"\x93NUMPY") + 200  # inside the first array's data
    flipped[at] ^= 0xFF
    (tmp_path / "flip.npz").write_bytes(bytes(flipped))
    fails(runner, ["run", "-w", str(tmp_path / "flip.npz")], "is damaged or truncated")


def test_nan_weights_are_refused_by_name(runner: CliRunner, tmp_path: Path) -> None:
    arrays = {k: v.copy() for k, v in init_weights(Config()).items()}
    arrays["decoder.0.feed-forward/W_1"][0, 0] = np.nan
    np.savez(tmp_path / "w.npz", **arrays)
    fails(runner, ["train", "-w", str(tmp_path / "w.npz")], "decoder.0.feed-forward/W_1 holds NaN")


def test_expected_names_and_shapes_are_checked_from_headers(tmp_path: Path) -> None:
    np.savez(tmp_path / "w.npz", a=np.zeros((2, 3)))
    assert read_npz(tmp_path / "w.npz", expected={"a": (2, 3)})["a"].shape == (2, 3)
    with pytest.raises(WalkthroughError, match="a is 2×3 in the file but 3×2"):
        read_npz(tmp_path / "w.npz", expected={"a": (3, 2)})
    with pytest.raises(WalkthroughError, match="has no b"):
        read_npz(tmp_path / "w.npz", expected={"a": (2, 3), "b": (1,)})


# ---- Sizes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model: {d_model: 1000000000, num_heads: 1}\n", "lower model.d_model"),
        (f"model: {{num_decoder_layers: {2**70}}}\n", "lower model.num_decoder_layers"),
        ("model: {d_model: 4096, num_heads: 4096}\n", "lower model.num_heads"),
        ("sentence: " + " ".join(["w"] * 20_000) + "\n", "lower sentence"),
    ],
)
def test_configs_too_large_are_refused_before_any_work(
    runner: CliRunner, tmp_path: Path, text: str, message: str
) -> None:
    started = time.perf_counter()
    line = fails(runner, ["run", "-c", config_file(tmp_path, text)], message)
    assert "this model would need" in line
    assert time.perf_counter() - started < 2.0


def test_the_size_estimate_matches_the_trace() -> None:
    for config in (
        Config(),
        Config(model=ModelConfig(d_model=16, num_heads=4, d_ff=32, num_decoder_layers=3)),
    ):
        trace = run_forward(config)
        tokens = (len(config.source_tokens), len(config.target_tokens), len(config.vocabulary or ()))
        numbers = sum(x.values.size for s in trace for x in s.matrices.values())
        tables = sum(len(s.matrices) for s in trace)
        assert trace_size(config.model, *tokens) == (numbers, tables)


def test_the_base_model_fits() -> None:
    base = ModelConfig(d_model=512, num_heads=8, d_ff=2048, num_encoder_layers=6, num_decoder_layers=6)
    words = ("<start>", "<end>", "the", "cat", "is", "sleeping", "comfortably", *map(str, range(37_000)))
    Config(model=base, vocabulary=words)  # the paper's base model, its 37,000-token vocabulary: allowed


@pytest.mark.slow
def test_a_gpt2_sized_vocabulary_loads_fast(tmp_path: Path) -> None:
    words = [
        "<start>",
        "<end>",
        "the",
        "cat",
        "is",
        "sleeping",
        "comfortably",
        *(f"w{k}" for k in range(50_250)),
    ]
    path = config_file(tmp_path, "vocabulary:\n" + "".join(f"- '{w}'\n" for w in words))
    load_config(path)  # warm: yaml's import
    started = time.perf_counter()
    config = Config(vocabulary=tuple(words))
    elapsed = time.perf_counter() - started
    # 0.2 s is the target, measured by the benchmarks; the test guards against the quadratic
    # (tens of seconds) without failing on a busy machine.
    assert len(config.vocabulary) == 50_257 and elapsed <= 1.0, elapsed
    with pytest.raises(ConfigError, match="lists 'w7' twice"):
        Config(vocabulary=(*words, "w7"))


def test_config_files_too_large_or_not_regular_are_refused(runner: CliRunner, tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * 5_000_000 + "\n")
    fails(runner, ["run", "-c", str(big)], "5,000,003 bytes is too large for a YAML config")
    fails(runner, ["run", "-c", "/dev/zero"], "not a regular file")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    fails(runner, ["run", "-c", str(fifo)], "not a regular file")  # and does not block


def test_generate_max_len_is_bounded(runner: CliRunner) -> None:
    fails(runner, ["generate", "--seed", "1", "--max-len", "100000000"], "--max-len: at most")


# ---- YAML --------------------------------------------------------------------------------------------


def test_alias_bombs_are_refused_in_one_short_line(runner: CliRunner, tmp_path: Path) -> None:
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    levels += [f"{chr(98 + k)}: &{chr(98 + k)} [{', '.join([f'*{chr(97 + k)}'] * 9)}]" for k in range(8)]
    text = "\n".join(levels) + "\nmodel: {dtype: *i}\n"
    line = fails(runner, ["run", "-c", config_file(tmp_path, text)], "aliases (*name) are not allowed")
    assert len(line) < 300


def test_values_quoted_in_messages_are_cut_short(runner: CliRunner, tmp_path: Path) -> None:
    line = fails(runner, ["run", "-c", config_file(tmp_path, f"model: {{dtype: {'x' * 100_000}}}\n")])
    assert "model.dtype" in line and len(line) < 300


# ---- Paths and output -------------------------------------------------------------------------------


def test_long_file_names_and_unsearchable_folders(runner: CliRunner, tmp_path: Path, monkeypatch) -> None:
    fails(runner, ["export", str(tmp_path / ("x" * 300 + ".json"))], "ame too long")
    fails(runner, ["train", "-o", str(tmp_path / ("x" * 300 + ".npz"))], "ame too long")

    def denied(self: Path, *args: object, **kwargs: object) -> object:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "is_dir", denied)  # what a non-root user meets in a mode-000 folder
    fails(runner, ["export", str(tmp_path / "locked" / "out.json")], "Permission denied")
    monkeypatch.undo()
    monkeypatch.setattr(Path, "is_file", denied)
    fails(runner, ["run", "-w", str(tmp_path / "locked" / "w.npz")], "Permission denied")


def test_exclusive_creation_loses_no_file(tmp_path: Path) -> None:
    target = tmp_path / "same.json"
    check_target(str(target), force=False)  # both exports passed this check ...

    def first(f) -> None:
        f.write(b"first")
        write_atomic(target, lambda g: g.write(b"second"))  # ... the other one finished meanwhile

    with pytest.raises(ExportError, match="already exists; pass --force"):
        write_atomic(target, first)
    assert target.read_bytes() == b"second" and [p.name for p in tmp_path.iterdir()] == ["same.json"]
    write_atomic(target, lambda g: g.write(b"third"), force=True)
    assert target.read_bytes() == b"third"


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP (terminal closed)"]
)
def test_sigterm_mid_export_leaves_no_temporary_file(tmp_path: Path, signum: int) -> None:
    target = tmp_path / "out.json"
    before = signal.getsignal(signum)

    def killed(f) -> None:
        f.write(b"half")
        os.kill(os.getpid(), signum)
        time.sleep(5)

    with pytest.raises(SystemExit):
        write_atomic(target, killed)
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signum) is before  # the handler put back


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGQUIT], ids=["Ctrl-C", "SIGTERM", "SIGQUIT"]
)
def test_a_signal_just_after_the_temporary_file_is_made_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    # The signal arrives the moment mkstemp has made the file, before write_together has its name:
    # CI once left `.big.html.XXXXXXXX.tmp` behind this way. The handler waits for the name.
    made = tempfile.mkstemp

    def signalled(*args: object, **kwargs: object) -> tuple[int, str]:
        fd, name = made(*args, **kwargs)
        os.kill(os.getpid(), signum)
        for _ in range(1_000):  # steps of Python at which an unheld handler would run
            pass
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", signalled)
    before = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt if signum == signal.SIGINT else SystemExit) as raised:
        write_atomic(tmp_path / "out.json", lambda f: f.write(b"never"))
    if signum != signal.SIGINT:
        assert raised.value.code == 128 + signum
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signum) is before


def test_symlinks_dangling_and_forced(runner: CliRunner, tmp_path: Path) -> None:
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "nowhere.json")
    fails(runner, ["export", str(link)], "already exists; pass --force")
    assert link.is_symlink() and not (tmp_path / "nowhere.json").exists()
    real = tmp_path / "real.json"
    real.write_text("keep")
    link.unlink()
    link.symlink_to(real)
    result = runner.invoke(app, ["export", str(link), "--force"])
    assert result.exit_code == 0, result.stderr
    # --force replaces the link itself with the new file; what it pointed to is left alone (README).
    assert not link.is_symlink() and real.read_text() == "keep"
    assert json.loads(link.read_text())["schema_version"] == 2


def _walkthrough(shell: str) -> subprocess.CompletedProcess[str]:
    command = f"{sys.executable} -m transformer_walkthrough {shell}"
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, check=False)


def test_a_full_device_and_a_closed_stdout(tmp_path: Path) -> None:
    for shell, message in (("export - > /dev/full", "No space left on device"),
                           ("run > /dev/full", "No space left on device"),
                           ("export - >&-", "standard output is closed")):  # fmt: skip
        result = _walkthrough(shell)
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [result.stderr.strip()] and message in result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--seed", "abc"], "error: Invalid value for '--seed'"),
        (["run", "--bogus"], "error: No such option: --bogus"),
        (["step"], "error: Missing option '--stage'"),
        (["bogus"], "error: No such command 'bogus'"),
    ],
)
def test_click_usage_errors_are_one_line(runner: CliRunner, args: list[str], message: str) -> None:
    assert fails(runner, args).startswith(message)


def test_control_characters_never_reach_the_terminal_or_exports(runner: CliRunner, tmp_path: Path) -> None:
    text = 'vocabulary: ["<start>", "<end>", "the", "cat", "is", "sleeping", "comfortably", "\\e[31mred"]\n'
    line = fails(runner, ["run", "-c", config_file(tmp_path, text)], "control character")
    assert "\x1b" not in line
    fails(runner, ["export", str(tmp_path / "a\x1b[2Jb.json"), "-c", "/nope\n.yaml"])
    result = runner.invoke(app, ["export", str(tmp_path / "x\x1b.json")])
    assert "\x1b" not in result.stderr and "\\x1b" in result.stderr


def test_tex_refuses_scripts_pdflatex_cannot_typeset(runner: CliRunner, tmp_path: Path) -> None:
    for sentence in ("кот спит тихо", "猫 在 睡觉", "the cat is 😺 sleeping"):
        path = config_file(tmp_path, f"sentence: '{sentence}'\nencoder_words: 1\n")
        out = tmp_path / "out.tex"
        fails(runner, ["export", str(out), "-c", path], "pdflatex cannot typeset")
        assert not out.exists()
        assert runner.invoke(app, ["export", str(tmp_path / "out.md"), "-c", path, "-f"]).exit_code == 0


@pytest.mark.parametrize("digits", ["-1", "100000000"])
def test_explain_digits_are_bounded(runner: CliRunner, digits: str) -> None:
    fails(runner, ["explain", "-s", "output.probabilities", "-m", "probabilities", "--cell", "0,0",
                   "--digits", digits], "--precision: must be 0 to 17")  # fmt: skip


# ---- Fuzz ------------------------------------------------------------------------------------------

_NUMBERS = st.one_of(
    st.integers(-3, 40), st.sampled_from([0, 2**70, 10**9, -1]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8), st.none(), st.booleans(),
    # every convention's values, and a name a checkpoint uses but the config does not ("swish")
    st.sampled_from([*ACTIVATIONS, "swish", *POSITIONAL_ENCODINGS, "auto", *OUTPUT_HEADS]),
)  # fmt: skip
_KEYS = {
    "model": ["d_model", "num_heads", "d_ff", "num_encoder_layers", "num_decoder_layers", "layer_norm_eps",
              "dtype", "output_head", "attention_bias", "scale_embeddings", "d_modle", "norm_first",
              "final_norm", "activation", "positional_encoding", "max_positions", "tie_embeddings",
              "output_bias"],
    "training": ["steps", "learning_rate", "dataset"],
    "display": ["precision"],
}  # fmt: skip
_COMMANDS = st.sampled_from(
    [["run"], ["stages"], ["config"], ["verify"], ["step", "-s", "add-norm"], ["export", "{out}.json"],
     ["export", "{out}.npz"], ["export", "{out}.md"], ["explain", "-s", "output.probabilities", "-m",
     "probabilities", "--cell", "0,0"], ["train", "--steps", "2"], ["generate", "--max-len", "3"]]
)  # fmt: skip


@st.composite
def _configs(draw: st.DrawFn) -> dict:
    doc: dict = {}
    for section, keys in _KEYS.items():
        chosen = draw(st.lists(st.sampled_from(keys), max_size=3, unique=True))
        if chosen:
            doc[section] = {k: draw(_NUMBERS) for k in chosen}
    if draw(st.booleans()):
        doc["sentence"] = draw(
            st.sampled_from(["the cat is sleeping", "a b", "x", "", "кот спит", "w " * 300])
        )
    if draw(st.booleans()):
        doc["seed"] = draw(_NUMBERS)
    return doc


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "80")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    doc=_configs(), command=_COMMANDS, weights=st.one_of(st.none(), st.binary(max_size=64), st.just("good")),
    extra=st.lists(st.sampled_from(["--seed", "-1", "abc", "--precision", "99", "--full", "--lr", "1e9"]),
                   max_size=2),
)  # fmt: skip
def test_fuzz_configs_options_and_weights(doc: dict, command: list[str], weights, extra: list[str]) -> None:
    import tempfile

    import yaml

    runner = CliRunner()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = folder / "c.yaml"
        config.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
        args = [a.format(out=folder / "out") for a in command] + ["-c", str(config)]
        if weights is not None and command[0] not in ("config", "stages"):
            path = folder / "w.npz"
            if weights == "good":
                weights_file(folder)
            else:
                path.write_bytes(weights)
            args += ["-w", str(path)]
        before = set(folder.iterdir())
        started = time.perf_counter()
        result = runner.invoke(app, args + extra)
        assert time.perf_counter() - started < 30
        allowed = {0, 2, 1} if command[0] == "verify" else {0, 2}
        assert result.exit_code in allowed, (args + extra, result.exit_code, result.stderr, result.exception)
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        if result.exit_code == 2:
            lines = result.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
            assert set(folder.iterdir()) == before  # nothing written on failure
