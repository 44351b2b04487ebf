"""Shared fixtures: the default config's trace is computed once per test session; the tiny trained
checkpoints once per run, however many workers (pytest-xdist) share it."""

from __future__ import annotations

import fcntl
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from typer.testing import CliRunner

from transformer_walkthrough.config import Config
from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.model.transformer import run_forward


@pytest.fixture(autouse=True)
def plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test sees the same terminal whatever the shell running the suite has set: 80 columns,
    24 lines, colour unforced and not forbidden. A test that needs another passes its own env."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "24")
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


T = TypeVar("T")


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder of the whole run: under pytest-xdist (`make test`) each worker has a
    session of its own, in a folder of this one."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


def built_once(base: Path, name: str, build: Callable[[Path], T]) -> T:
    """``build(base / name)`` done once for the whole run, however many workers ask: the first
    builds, holding a lock; the others wait for it and read what it returned (paths: the folders
    stay)."""
    done = base / f"{name}.pickle"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if done.exists():
            return pickle.loads(done.read_bytes())
        folder = base / name
        folder.mkdir(exist_ok=True)
        value = build(folder)
        done.write_bytes(pickle.dumps(value))
        return value


@pytest.fixture(scope="session")
def trace() -> Trace:
    return run_forward(Config())


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(scope="session")
def marian(tmp_path_factory):
    """A tiny random Marian checkpoint: (safetensors folder, bin folder, float64 eager transformers model)."""
    pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
    from tests.tiny_marian import build

    return build(tmp_path_factory.mktemp("marian"))


@pytest.fixture(scope="session")
def reference_tokenizer(marian):
    """transformers' MarianTokenizer of the tiny checkpoint."""
    from tests.tiny_marian import reference_tokenizer

    return reference_tokenizer(marian[0])


@pytest.fixture(scope="session")
def t5_family(tmp_path_factory):
    """Tiny random T5 (ReLU, tied and scaled) and Flan-T5 (gated GELU, lm_head of its own) checkpoints
    (tests/tiny_t5.py), by name: (folder, float64 eager transformers model)."""
    pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
    from tests.tiny_t5 import MODELS, build

    root = tmp_path_factory.mktemp("t5")
    return {name: build(root, name) for name in MODELS}


@pytest.fixture(scope="session")
def gpt2(tmp_path_factory):
    """A tiny random GPT-2: ({"saved", "hub", "hub-bin"} folders, float64 eager transformers model)."""
    pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
    from tests.tiny_gpt2 import build

    return build(tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="session")
def llama_family(tmp_path_factory):
    """Tiny trained Llama, Qwen2, Mistral and llama3-rope checkpoints (tests/tiny_llama.py), by name."""
    pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
    from tests.tiny_llama import MODELS, build

    return built_once(
        run_folder(tmp_path_factory), "llama", lambda root: {name: build(root, name) for name in MODELS}
    )


@pytest.fixture(scope="session")
def gemma_family(tmp_path_factory):
    """Tiny trained Gemma, Gemma 2, Gemma 3 and OLMo 2 checkpoints (tests/tiny_gemma.py), by name."""
    pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
    from tests.tiny_gemma import MODELS, build

    return built_once(
        run_folder(tmp_path_factory), "gemma", lambda root: {name: build(root, name) for name in MODELS}
    )


@pytest.fixture(scope="session")
def marian_separate(tmp_path_factory):
    """Tiny random Marian checkpoints with separate source and target vocabularies of different
    sizes: {"untied", "tied-decoder", "shared"} -> (folder, float64 eager transformers model)."""
    pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
    from tests.tiny_marian import build_separate

    return build_separate(tmp_path_factory.mktemp("marian-separate"))


@pytest.fixture(scope="session")
def bert_family(tmp_path_factory):
    """Tiny BERT, RoBERTa and DistilBERT checkpoints (tests/tiny_bert.py), three trained to fill the
    blank, and bert's weights untied, as the hub's BertForPreTraining file, and as a plain BertModel."""
    pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
    from tests.tiny_bert import build_all

    return built_once(run_folder(tmp_path_factory), "bert", build_all)


@pytest.fixture(scope="session")
def moe_family(tmp_path_factory):
    """Tiny trained mixture-of-experts checkpoints (tests/tiny_moe.py), by name."""
    pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
    from tests.tiny_moe import MODELS, build

    return built_once(
        run_folder(tmp_path_factory), "moe", lambda root: {name: build(root, name) for name in MODELS}
    )


@pytest.fixture(scope="session")
def t5_tokenizers(tmp_path_factory):
    """Folders of T5 tokenizers under nmt_nfkc, by layout (spiece.model, tokenizer.json, converted):
    tests/tiny_t5.py's ``nfkc_tokenizer``."""
    pytest.importorskip("transformers")
    from tests.tiny_t5 import nfkc_tokenizer

    return nfkc_tokenizer(tmp_path_factory.mktemp("t5-tokenizers"))


@pytest.fixture(scope="session")
def moe_mixed(tmp_path_factory):
    """Tiny trained Qwen2-MoE and Qwen3-MoE checkpoints with dense layers (tests/tiny_moe.py's MIXED)."""
    pytest.importorskip("transformers")
    from tests.tiny_moe import MIXED, build

    return built_once(
        run_folder(tmp_path_factory), "moe-mixed", lambda root: {name: build(root, name) for name in MIXED}
    )
