"""Rendering `walkthrough run` at base size: the matrix blocks against the Rich-table renderer they
replaced (kept, frozen, in tests/table_renderer.py), in one process, in turns.

Run: python benchmarks/bench_render.py [--rounds N] [--width W]

Timed, each the median of its rounds: the forward pass; every stage printed to a pipe (no
colour) by each renderer; the same on a true-colour terminal. Target (issue 13): the whole of
`run` (forward + printing) <= 0.4 x what it was with the table renderer.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]

from base import THREADS, base_config, host_line  # noqa: E402  (pins the BLAS threads first)
from rich.console import Console  # noqa: E402

from tests import table_renderer  # noqa: E402
from transformer_walkthrough.model.transformer import run_forward  # noqa: E402
from transformer_walkthrough.views import stages as stage_layout  # noqa: E402
from transformer_walkthrough.views.blocks import print_all  # noqa: E402
from transformer_walkthrough.views.widgets import View  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=100)
    args = parser.parse_args()
    print(host_line(), flush=True)
    config = base_config()
    start = time.perf_counter()
    trace = run_forward(config)
    forward = time.perf_counter() - start
    stages = list(trace)
    view = View(width=args.width)

    def show(module: object, colour: bool) -> str:
        terminal = {"force_terminal": True, "color_system": "truecolor"} if colour else {}
        console = Console(width=args.width, file=io.StringIO(), highlight=False, **terminal)
        print_all(console, module.render_trace(console, trace, stages, view))
        return console.file.getvalue()

    runs = {
        "blocks, pipe": lambda: show(stage_layout, False),
        "table, pipe": lambda: show(table_renderer, False),
        "blocks, colour": lambda: show(stage_layout, True),
        "table, colour": lambda: show(table_renderer, True),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    outputs = {}
    for _ in range(args.rounds):
        for name, fn in runs.items():
            start = time.perf_counter()
            outputs[name] = fn()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    same = (
        outputs["blocks, pipe"] == outputs["table, pipe"]
        and outputs["blocks, colour"] == outputs["table, colour"]
    )
    n = sum(len(s.matrices) for s in stages)
    print(f"base size: {len(stages)} stages, {n} matrices, width {args.width}, BLAS threads {THREADS}, "
          f"median of {args.rounds}")  # fmt: skip
    print(f"{'':<16}{'seconds':>9}{'per matrix (ms)':>17}")
    print(f"{'forward':<16}{forward:>9.3f}")
    for name, t in median.items():
        print(f"{name:<16}{t:>9.3f}{t / n * 1e3:>17.3f}")
    if same:
        print("output byte-identical, plain and colour: yes")
    else:  # issue 11 changed the page on purpose: matrices grouped by meaning, lines trimmed
        print(
            "whole output not byte-identical: the page changed on purpose (matrices grouped by "
            "meaning, lines trimmed); each matrix block is pinned byte for byte by tests/test_render.py"
        )
    for kind in ("pipe", "colour"):
        ratio = median[f"blocks, {kind}"] / median[f"table, {kind}"]
        whole = (forward + median[f"blocks, {kind}"]) / (forward + median[f"table, {kind}"])
        ok = whole <= 0.4
        print(f"{kind:<7} rendering {ratio:.3f} x the table renderer; forward + rendering {whole:.2f} x "
              f"(target <= 0.4)  {'ok' if ok else 'OVER'}")  # fmt: skip
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
