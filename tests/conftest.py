"""Shared fixtures: the default config's trace is computed once per test session."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from transformer_walkthrough.config import Config
from transformer_walkthrough.model import run_forward
from transformer_walkthrough.trace import Trace


@pytest.fixture(scope="session")
def trace() -> Trace:
    return run_forward(Config())


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()
