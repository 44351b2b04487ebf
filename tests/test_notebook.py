"""In a notebook: ``walk`` in one call, and a trace, a stage and a matrix shown as the report shows
them — checked in a real Jupyter kernel (nbclient), its HTML read back to numbers and compared
with the same pass computed here."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient
from typer.testing import CliRunner

from transformer_walkthrough import walk
from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config, load_config
from transformer_walkthrough.errors import WalkthroughError
from transformer_walkthrough.files.weights import load_weights
from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.fragments import notebook_html

ROOT = Path(__file__).parents[1]
KERNEL = "walkthrough-test"


class _Figures(HTMLParser):
    """Every matrix of an HTML piece: its caption's name -> the numbers of its cells, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, list[list[float]]] = {}
        self.name: str | None = None
        self.caption = self.cell = False
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "figcaption":
            self.caption, self.text = True, ""
        elif tag == "tr" and self.name is not None:
            self.figures[self.name].append([])
        elif tag == "td" and self.name is not None:
            self.cell, self.text = True, ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "figcaption":
            self.caption = False
            self.name = self.text.split(" (")[0].strip()
            self.figures[self.name] = []
        elif tag == "td" and self.cell:
            self.cell = False
            text = self.text.replace("−", "-")
            # −∞ as itself; the "…" column and the "⋮" row of a summarised matrix as NaN
            number = -math.inf if text == "-∞" else math.nan if text in ("…", "⋮") else float(text)
            self.figures[self.name][-1].append(number)
        elif tag == "figure":
            self.figures[self.name] = [row for row in self.figures[self.name] if row]  # the header row
            self.name = None

    def handle_data(self, data: str) -> None:
        if self.caption or self.cell:
            self.text += data


def figures(html: str) -> dict[str, np.ndarray]:
    parser = _Figures()
    parser.feed(html)
    return {name: np.array(rows) for name, rows in parser.figures.items()}


def same_numbers(shown: np.ndarray, values: np.ndarray, precision: int = 2) -> bool:
    """The numbers shown are the values, rounded to ``precision`` digits (−∞ as −∞)."""
    finite = np.isfinite(values)
    return (
        shown.shape == values.shape
        and bool(np.all(shown[~finite] == values[~finite]))
        and bool(np.all(np.abs(shown[finite] - values[finite]) <= 0.5 * 10**-precision + 1e-9))
    )


# ---------------------------------------------------------------------------------------------
# walk(): the command line's pass, in one call.
# ---------------------------------------------------------------------------------------------


def _equal(a: Trace, b: Trace) -> bool:
    return list(a.stages) == list(b.stages) and all(
        np.array_equal(m.values, b[s.id].matrices[name].values) for s in a for name, m in s.matrices.items()
    )


def test_walk_runs_the_toy_as_the_command_line_does(runner: CliRunner, tmp_path: Path) -> None:
    assert _equal(walk(), run_forward(Config()))
    assert _equal(walk(seed=7), run_forward(load_config(seed=7)))
    own = walk(source="the dog is", target="barking loudly")
    assert own.source_tokens == ("the", "dog", "is") and own.target_tokens[1:3] == ("barking", "loudly")
    assert _equal(own, run_forward(load_config(sentence=("the dog is", "barking loudly"))))
    config = ROOT / "configs" / "article.yaml"
    assert _equal(walk(config), run_forward(load_config(config)))
    assert _equal(walk(Config(), seed=3), run_forward(load_config(seed=3)))
    weights = tmp_path / "w.npz"
    assert runner.invoke(app, ["train", "--steps", "3", "--output", str(weights)]).exit_code == 0
    trained = walk(weights=weights)
    assert trained.weights_source == str(weights)
    assert _equal(trained, run_forward(Config(), load_weights(Config(), weights)))
    assert not _equal(trained, walk())


def test_walk_runs_checkpoints(gpt2, marian) -> None:
    from transformer_walkthrough.checkpoints.run import walk as walk_checkpoint
    from transformer_walkthrough.checkpoints.run import walk_prompt

    saved = str(gpt2[0]["saved"])
    assert _equal(walk(model=saved, prompt="The cat is"), walk_prompt(saved, "The cat is").trace)
    translated = walk(model=str(marian[0]), source="the cat is sleeping")
    assert _equal(translated, walk_checkpoint(str(marian[0]), "the cat is sleeping").trace)
    forced = walk(model=str(marian[0]), source="the cat", target="a dog", dtype="float64")
    assert forced.config.model.dtype == "float64"
    assert _equal(forced, walk_checkpoint(str(marian[0]), "the cat", "a dog", "float64").trace)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt": "The cat"}, "--prompt needs --model"),
        ({"dtype": "float64"}, "--dtype needs --model"),
        ({"source": "the cat is"}, "the toy needs both --source"),
        ({"model": "m", "prompt": "a", "seed": 1}, "--seed does not apply to --model"),
        ({"model": "m", "source": "a", "config": "c.yaml"}, "--config does not apply to --model"),
        ({"model": "m"}, "--model needs --source"),
        ({"model": "m", "prompt": "a", "source": "b"}, "give one"),
        ({"model": "m", "prompt": "a", "dtype": "float16"}, "--dtype: one of float32, float64"),
        ({"source": "the cat", "target": "a zebra", "config": "/nowhere.yaml"}, "no such file"),
    ],
)
def test_walk_says_what_is_wrong(kwargs: dict, message: str) -> None:
    with pytest.raises(WalkthroughError, match=re.escape(message)):
        walk(**kwargs)


BERT_STYLE = str(ROOT / "configs" / "bert-style.yaml")


def _keywords(args: list[str]) -> dict[str, object]:
    """walk()'s keywords for the command line's options: ``--source X`` is ``source="X"``."""
    names = {"-c": "config", "-w": "weights"}
    pairs = zip(args[::2], args[1::2], strict=True)
    return {names.get(flag, flag[2:]): int(v) if flag == "--seed" else v for flag, v in pairs}


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--seed", "7"],
        ["--source", "the dog is", "--target", "barking loudly"],
        ["-c", BERT_STYLE, "--source", "the dog is barking"],  # an encoder-only toy: the source alone
    ],
)
def test_walk_accepts_what_the_command_line_accepts(runner: CliRunner, args: list[str]) -> None:
    """One session checks both (``session.inputs``): the same words make the same pass."""
    result = runner.invoke(app, ["export", "-", *args])
    assert result.exit_code == 0, result.output
    exported, trace = json.loads(result.stdout), walk(**_keywords(args))
    assert exported["source_tokens"] == list(trace.source_tokens)
    assert exported["target_tokens"] == list(trace.target_tokens)
    for stage in exported["stages"]:
        for name, m in stage["matrices"].items():
            values = np.array(m["values"], dtype=float)  # -∞ written as "-inf"
            assert np.allclose(values, trace[stage["id"]].matrices[name].values, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "args",
    [
        ["--prompt", "The cat"],
        ["--dtype", "float64"],
        ["--source", "the cat is"],  # an encoder-decoder toy needs a target too
        ["--source", "  ", "--target", "a dog"],
        ["--source", "!!!", "--target", "a dog"],
        ["-c", BERT_STYLE, "--source", "a cat", "--target", "a dog"],  # an encoder-only toy has no decoder
        ["--model", "m"],
        ["--model", "m", "--prompt", "a", "--source", "b"],
        ["--model", "m", "--prompt", "a", "--seed", "1"],
        ["--model", "m", "--source", "a", "-w", "w.npz"],
    ],
)
def test_walk_refuses_what_the_command_line_refuses_in_its_words(runner: CliRunner, args: list[str]) -> None:
    """The notebook's error is the command line's one line, word for word."""
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code == 2
    with pytest.raises(WalkthroughError) as refused:
        walk(**_keywords(args))
    assert result.stderr == f"error: {refused.value}\n"


def test_importing_walk_loads_nothing_heavy() -> None:
    heavy = "{'numpy', 'yaml', 'rich', 'typer'}"
    code = f"import sys; from transformer_walkthrough import walk; print(sorted({heavy} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# repr: a line, not megabytes; in Jupyter (fragments.notebook_html): the report's own pieces, self-contained.
# ---------------------------------------------------------------------------------------------


def test_reprs_are_short_and_say_what_they_are(trace: Trace, gpt2) -> None:
    assert repr(trace) == (
        "<Trace source 'the cat is', target '<start> sleeping comfortably <end>': 16 stages, d_model 4, "
        "2 heads, 1 + 1 layers; weights: random, seed 42>"
    )
    stage = trace["decoder.0.masked-attention"]
    assert repr(stage).startswith(
        "<Stage decoder.0.masked-attention (masked-attention): X 4×4, M 4×4, W_Q1 4×2"
    )
    assert repr(stage).endswith(f"… ({len(stage.matrices)} matrices)>")
    assert repr(stage.matrices["A1"]) == (
        "<Matrix A1 4×4 attention: rows <start>, sleeping, comfortably, <end>; "
        "cols <start>, sleeping, comfortably, <end>>"
    )
    big = walk(model=str(gpt2[0]["saved"]), prompt="The cat is")
    E = big["decoder.embedding"].matrices["E"]
    assert E.shape[0] > 100 and len(repr(E)) < 200 and f"E {E.shape[0]}×{E.shape[1]} weight" in repr(E)
    assert len(repr(big)) < 300 and len(repr(big["decoder.embedding"])) < 300


def test_html_pieces_are_the_report_s_and_self_contained(trace: Trace) -> None:
    from transformer_walkthrough.views.documents.report import to_html

    stage = trace["decoder.0.masked-attention"]
    report = to_html(trace, [stage], 2, clickable=False)
    section = report[report.index("<section") : report.index("</section>") + len("</section>")]
    for piece in (notebook_html(trace), notebook_html(stage), notebook_html(stage.matrices["A1"])):
        assert piece.startswith('<div class="walkthrough"><style>') and piece.endswith("</div>")
        assert "<script" not in piece and not re.search(
            r"""(src|href)=["']?(https?:)?//|@import|url\(""", piece
        )
        css = piece[piece.index("<style>") + 7 : piece.index("</style>")]
        # every rule inside the box: showing a trace does not restyle the notebook around it
        assert all(rule.startswith(".walkthrough") for rule in css.splitlines()), css
    assert section in notebook_html(stage) and section in notebook_html(trace)  # the report's own section
    assert notebook_html(trace).count("<section") == len(trace) + 1  # every stage, and the prediction
    A1 = figures(notebook_html(stage.matrices["A1"]))["A1"]
    assert same_numbers(A1, stage.matrices["A1"].values)


def test_a_stage_alone_has_no_map_once_its_trace_is_gone() -> None:
    stage = run_forward(Config())["decoder.0.masked-attention"]  # the trace is freed at once
    piece = notebook_html(stage)
    assert "<svg" not in piece  # no map without the trace, but the formula is still typeset
    assert '<pre class="formula">' not in piece and '<div class="formula"' in piece and "<math" in piece
    assert same_numbers(figures(piece)["S1+M"], stage.matrices["S1+M"].values)


# ---------------------------------------------------------------------------------------------
# A real notebook, executed in a real kernel.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory) -> Path:
    """A kernel spec that runs this interpreter (the venv's) with this checkout on its path,
    in a folder of its own: nothing of the user's Jupyter setup is read or written."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "share" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "walkthrough test",
                "language": "python",
                "env": {"PYTHONPATH": str(ROOT)},
            }
        ),
        encoding="utf-8",
    )
    return root


def test_a_notebook_shows_the_trace_s_numbers(kernel_env: Path, gpt2, monkeypatch) -> None:
    folders = {"JUPYTER_PATH": "share", "JUPYTER_RUNTIME_DIR": "runtime", "IPYTHONDIR": "ipython",
               "JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data"}  # fmt: skip
    for name, sub in folders.items():
        monkeypatch.setenv(name, str(kernel_env / sub))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    saved = str(gpt2[0]["saved"])
    cells = [
        "import sys\nfrom transformer_walkthrough import walk\ntrace = walk()\nprint(sys.executable)",
        'trace["decoder.0.masked-attention"]',
        'trace["decoder.0.masked-attention"].matrices["A1"]',
        "trace",
        f'gpt = walk(model={saved!r}, prompt="The cat is")\ngpt["decoder.0.masked-attention"]',
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    NotebookClient(
        nb, kernel_name=KERNEL, timeout=300, resources={"metadata": {"path": str(kernel_env)}}
    ).execute()
    outputs = [cell.outputs for cell in nb.cells]
    assert outputs[0][0]["text"].strip() == sys.executable  # the venv's interpreter ran it

    def display(k: int) -> dict:
        (out,) = [o for o in outputs[k] if o["output_type"] == "execute_result"]
        return out["data"]

    trace = run_forward(Config())  # the same pass, computed here
    stage = trace["decoder.0.masked-attention"]
    shown = figures(display(1)["text/html"])
    assert list(shown) == list(stage.matrices)  # every matrix of the stage, in order
    for name, numbers in shown.items():
        assert same_numbers(numbers, stage.matrices[name].values), name
    assert display(1)["text/plain"] == repr(stage)
    assert same_numbers(figures(display(2)["text/html"])["A1"], stage.matrices["A1"].values)
    assert display(2)["text/plain"] == repr(stage.matrices["A1"])
    whole = figures(display(3)["text/html"])
    probabilities = trace["output.probabilities"].matrices["probabilities"].values
    assert same_numbers(whole["probabilities"], probabilities)
    assert display(3)["text/plain"] == repr(trace)
    gpt = walk(model=saved, prompt="The cat is")["decoder.0.masked-attention"]
    for name, numbers in figures(display(4)["text/html"]).items():
        m = gpt.matrices[name]
        if numbers.shape == m.shape:  # (a wide weight is summarised, as in the report)
            assert same_numbers(numbers, m.values), name
    assert same_numbers(figures(display(4)["text/html"])["A1"], gpt.matrices["A1"].values)
    for k in (1, 2, 3, 4):
        assert "<script" not in display(k)["text/html"]
