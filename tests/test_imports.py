"""Imports flow one way, and the contracts of ``[tool.importlinter]`` in pyproject.toml keep it so.

``lint-imports`` checks the package against them (``make test`` runs it too); a copy of the package
given an upward import, a circle or a module with no place in the layers is shown to break them, so
that a contract that checks nothing cannot pass. import-linter looks at modules, not at names: that
no module takes another's private name is checked here, by walking the package's syntax trees.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = "transformer_walkthrough"


def lint_imports(where: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with this project's contracts, on the package found first in ``where``."""
    pytest.importorskip("importlinter")  # a test dependency: CI installs it, so this never skips there
    command = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(where), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", command, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=where, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_package_keeps_its_import_contracts() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("change", "file", "line", "broken"),
    [
        ("an upward import", "model/trace.py", "from ..views import render", "layers below it BROKEN"),
        ("an upward import", "model/weights.py", "from ..files import npzfile", "the model imports nothing"),
        ("a circle inside a layer", "model/functional.py", "from . import transformer", "no circle"),
        ("a module with no place", "newcomer.py", "from . import errors", "layers below it BROKEN"),
    ],
)
def test_the_contracts_break_on(change: str, file: str, line: str, broken: str, tmp_path: Path) -> None:
    shutil.copytree(ROOT / PACKAGE, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    with (tmp_path / PACKAGE / file).open("a", encoding="utf-8") as f:
        f.write(f"\n{line}\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, f"{change} went unnoticed:\n{result.stdout}"
    assert broken in " ".join(result.stdout.split()), result.stdout


# ---------------------------------------------------------------------------------------------
# Private names stay in their module.
# ---------------------------------------------------------------------------------------------

# Taken today, each until the change named beside it lands; the test fails when one is no longer
# taken, so that this list only shrinks.
PENDING: set[tuple[str, str, str]] = set()


def _modules() -> dict[str, Path]:
    """Every module of the package, by its dotted name below the package (``views.render``)."""
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT / PACKAGE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The dotted name (below the package) that ``from {'.' * level}{name} import …`` reads in ``module``."""
    if not level:
        return (name or "").removeprefix(PACKAGE).lstrip(".")
    base = module.split(".") if module else []
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([name] if name else [])])


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_names_taken() -> set[tuple[str, str, str]]:
    """(importer, module, name) for every private name a module takes from another: imported by name
    (``from .documents import _STEPS``) or read from a module it imported (``d._CSS``)."""
    modules = _modules()
    taken = set()
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases: dict[str, str] = {}  # a name bound to one of our modules -> that module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _absolute(module, path.name == "__init__.py", node.level, node.module)
                for alias in node.names:
                    inner = f"{source}.{alias.name}".lstrip(".")
                    if inner in modules:
                        aliases[alias.asname or alias.name] = inner
                    elif _private(alias.name) and source != module:
                        taken.add((module, source, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    inner = _absolute(module, False, 0, alias.name)
                    if alias.asname and alias.name.startswith(PACKAGE) and inner in modules:
                        aliases[alias.asname] = inner
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
                source = aliases.get(node.value.id)
                if source is not None and source != module:
                    taken.add((module, source, node.attr))
    return taken


def test_no_module_takes_another_module_s_private_name() -> None:
    taken = private_names_taken()
    assert taken - PENDING == set(), "a private name taken from another module: make it public there"
    assert PENDING - taken == set(), "no longer taken: delete it from PENDING"
