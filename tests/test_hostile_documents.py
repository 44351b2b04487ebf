"""Documents of a hostile checkpoint's vocabulary, and a hostile hub cache.

A vocabulary piece can hold anything: markup, a LaTeX command, a Markdown link. Exported, it must
stay text: no tag or attribute in the HTML, no command run, file read or layout changed in the
.tex (a piece "[1cm]" after a row's ``\\\\`` was its optional argument), no image, link or emphasis
in the .md. A hub cache's ``refs/main`` that is a FIFO, ``/dev/zero`` or no commit hash is one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.test_documents import need
from tests.test_robustness import fails
from transformer_walkthrough.cli import app

HOSTILE = [
    "</script><script>alert(1)</script>", '"onmouseover=alert(1)', "&amp;", "`code`", "*b*", "_u_",
    "[x](javascript:alert(1))", "![i](http://e/x.png)", "a|b", "\\input{/etc/passwd}",
    "\\write18{id}", "^^5c", "%c", "#1", "$x$", "{", "}", "~", "\\\\", "[9999pt]", "```",
]  # fmt: skip


@pytest.fixture(scope="module")
def hostile_marian(marian, tmp_path_factory) -> Path:
    """The tiny Marian checkpoint whose SentencePiece models cut HOSTILE's pieces whole (user
    symbols) and whose vocab.json gives them ids: they are the input's tokens and output columns."""
    import sentencepiece as spm

    from tests.tiny_marian import SOURCE_TEXT

    folder = tmp_path_factory.mktemp("hostile") / "m"
    shutil.copytree(marian[0], folder)
    for name in ("source", "target"):
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(SOURCE_TEXT * 4), model_prefix=str(folder / name), vocab_size=60,
            model_type="unigram", character_coverage=1.0, hard_vocab_limit=False, minloglevel=2,
            num_threads=1, user_defined_symbols=HOSTILE, normalization_rule_name="identity",
        )  # fmt: skip
        (folder / f"{name}.model").replace(folder / f"{name}.spm")
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    by_id = sorted(vocab, key=vocab.__getitem__)
    for k, piece in enumerate(HOSTILE):  # ids 2, 3, …: </s> and <unk> stay
        by_id[2 + k] = piece
    (folder / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(by_id)}), encoding="utf-8")
    return folder


def export(tmp_path: Path, folder: Path, suffix: str, *more: str) -> str:
    out = tmp_path / f"doc{suffix}"
    source = " ".join(HOSTILE)
    result = CliRunner().invoke(
        app, ["export", str(out), "--model", str(folder), "--source", source, "--target", source, *more]
    )
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def test_the_hostile_pieces_are_the_inputs_tokens(hostile_marian, tmp_path):
    doc = json.loads(export(tmp_path, hostile_marian, ".json"))
    assert set(HOSTILE) <= set(doc["source_tokens"]) and set(HOSTILE) <= set(doc["vocabulary"])


@pytest.mark.parametrize("more", [[], ["--exercise", "6"]])
def test_html_has_no_markup_from_labels(hostile_marian, tmp_path, more):
    page = export(tmp_path, hostile_marian, ".html", *more)
    tags, attributes, scripts = set(), set(), []

    class Parser(HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.add(tag)
            attributes.update(k for k, _ in attrs)
            if tag == "script":
                scripts.append("")

        def handle_data(self, data):
            if self.lasttag == "script" and scripts:
                scripts[-1] += data

    Parser().feed(page)
    assert not any(a.startswith("on") for a in attributes)
    assert page.count("<style>") == 1 and "&lt;/script&gt;&lt;script&gt;" in page
    if more:  # a worksheet: no click-to-explain (its arithmetic would give the answers away)
        assert "script" not in tags
        return
    # The report's one script, whole: the pieces' "</script><script>" inside its data did not end
    # it, and they read back from its JSON as themselves.
    assert len(scripts) == 1 and scripts[0].rstrip().endswith("})();")
    data = json.loads(scripts[0][len("const EXPLAINED = ") : scripts[0].index(";\n")])
    lines = "\n".join(data["lines"])
    assert "</script><script>alert(1)</script>" in lines and '"onmouseover=alert(1)' in lines
    assert "</script><script>alert(1)</script>" in data["rerun"]


@pytest.mark.parametrize("more", [[], ["--exercise", "6"]])
def test_markdown_has_no_link_image_or_emphasis_from_labels(hostile_marian, tmp_path, more):
    from markdown_it import MarkdownIt

    md = export(tmp_path, hostile_marian, ".md", *more)
    tokens = MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(md)

    def walk(ts):
        for t in ts:
            yield t
            yield from walk(t.children or [])

    found = list(walk(tokens))
    links = [t.attrs["href"] for t in found if t.type == "link_open"]
    assert all(str(h).startswith("#") for h in links), links  # the contents' anchors only
    kinds = {t.type for t in found}
    assert "image" not in kinds and "html_inline" not in kinds and "html_block" not in kinds
    facts = next(line for line in md.splitlines() if line.startswith("encoder input:"))
    rendered = MarkdownIt("commonmark").renderInline(facts)
    assert "![i](http://e/x.png)" in rendered and "[x](javascript:alert(1))" in rendered
    assert "`code`" in rendered and "*b*" in rendered and "_u_" in rendered
    # every row of a table has its header's cells: no "|" of a label split one
    widths, cells = [], 0
    for t in found:
        if t.type == "table_open":
            widths.append(set())
        cells += t.type in ("td_open", "th_open")
        if t.type == "tr_close":
            widths[-1].add(cells)
            cells = 0
    assert widths and all(len(w) == 1 for w in widths)


def test_latex_compiles_reading_no_other_file(hostile_marian, tmp_path):
    pdflatex = need("pdflatex")
    source = export(tmp_path, hostile_marian, ".tex", "--exercise", "6")
    assert "{[}9999pt{]}" in source
    result = subprocess.run(
        [pdflatex, "-no-shell-escape", "-interaction=nonstopmode", "-halt-on-error", "-recorder", "doc.tex"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:]
    opened = {
        Path(line.split(" ", 1)[1]).name
        for line in (tmp_path / "doc.fls").read_text(encoding="latin-1").splitlines()
        if line.startswith("INPUT ") and "texmf" not in line and not line.startswith("INPUT /usr/")
    }
    assert opened <= {"doc.tex", "doc.aux"}, opened
    log = (tmp_path / "doc.log").read_text(encoding="latin-1")
    assert "(/etc/passwd" not in log and "runsystem" not in log


def test_a_config_vocabulary_of_latex_and_markdown_specials(tmp_path):
    words = ["[x]", "[99pt]", "*b*", "\\input{/etc/passwd}", "%", "#", "$", "{", "}", "~", "_", "`", "|"]
    config = tmp_path / "c.yaml"
    settings = {"sentence": "the cat sleeps", "encoder_words": 1}
    settings["vocabulary"] = ["<start>", "<end>", "the", "cat", "sleeps", *words]
    config.write_text(json.dumps(settings))
    out = tmp_path / "doc.tex"
    result = CliRunner().invoke(app, ["export", str(out), "-c", str(config), "--exercise", "3"])
    assert result.exit_code == 0, result.output
    pdflatex = need("pdflatex")
    done = subprocess.run(
        [pdflatex, "-no-shell-escape", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:]


def test_tex_and_md_escapes():
    from transformer_walkthrough.views.documents.markdown import md_fence
    from transformer_walkthrough.views.documents.text import md_text, tex

    assert tex("[1cm]*") == "{[}1cm{]}{*}"
    assert md_text("![i](u) `c` *b* _u_ ~~s~~ \\ <t>") == (
        "!\\[i\\](u) \\`c\\` \\*b\\* \\_u\\_ \\~\\~s\\~\\~ \\\\ &lt;t&gt;"
    )
    assert md_fence(["a ``` b", "````"]) == "`````" and md_fence(["plain"]) == "```"


# ---------------------------------------------------------------------------------------------
# A hub cache's refs/main: read whole by the hub client, offline.

REVISION = "0123456789abcdef0123456789abcdef01234567"


def hub_cache(marian, tmp_path: Path) -> tuple[dict[str, str], Path]:
    cache = tmp_path / "hub"
    repo = cache / "models--org--m"
    shutil.copytree(marian[0], repo / "snapshots" / REVISION)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    env = {"HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    return env, repo / "refs" / "main"


@pytest.mark.parametrize("kind", ["fifo", "zero", "dotdot", "huge"])
def test_a_hostile_ref_is_one_line(marian, tmp_path, kind):

    env, ref = hub_cache(marian, tmp_path)
    ref.unlink()
    if kind == "fifo":
        os.mkfifo(ref)
    elif kind == "zero":
        ref.symlink_to("/dev/zero")
    elif kind == "dotdot":
        ref.write_text("../../../../etc")
    else:
        ref.write_text("a" * 100_000)
    done = _run_from_the_hub(env)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "refs/main" in lines[0], lines


def test_a_good_ref_still_reads(marian, tmp_path):
    env, _ = hub_cache(marian, tmp_path)
    done = _run_from_the_hub(env)
    assert done.returncode == 0, done.stderr[-2000:]


def _run_from_the_hub(env: dict[str, str]) -> subprocess.CompletedProcess:
    """``walkthrough run --model org/m`` in a child (a FIFO as refs/main would hang a test in-process)."""
    code = "from transformer_walkthrough.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, "run", "--model", "org/m", "--source", "the cat"],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=60, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize("model", ["org/m\n", "org/m\u0663", "a/b/c", "../../etc"])
def test_not_a_hub_id(runner, model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fails(runner, ["run", "--model", model, "--source", "the cat"], "not a hub id")


@pytest.mark.parametrize("name", ["tokenizer_config.json", "generation_config.json"])
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_an_optional_json_that_is_no_regular_file_is_refused(marian, tmp_path, runner, name, kind):
    """Not skipped as if absent: a FIFO tokenizer_config.json would silently drop separate_vocabs."""
    folder = shutil.copytree(marian[0], tmp_path / "m")
    (folder / name).unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(folder / name)
    else:
        (folder / name).symlink_to("/dev/zero")
    fails(runner, ["run", "--model", str(folder), "--source", "the cat"], "not a regular file")
