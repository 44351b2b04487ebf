"""Shared fixtures: the default config's trace is computed once per test session."""

from __future__ import annotations

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

    root = tmp_path_factory.mktemp("llama")
    return {name: build(root, name) for name in MODELS}


@pytest.fixture(scope="session")
def gemma_family(tmp_path_factory):
    """Tiny trained Gemma and OLMo 2 checkpoints (tests/tiny_gemma.py), by name."""
    pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
    from tests.tiny_gemma import MODELS, build

    root = tmp_path_factory.mktemp("gemma")
    return {name: build(root, name) for name in MODELS}


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

    return build_all(tmp_path_factory.mktemp("bert"))
