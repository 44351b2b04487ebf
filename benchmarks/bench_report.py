"""The HTML report with click-to-explain, against the same report without it, in the same run.

Run: python benchmarks/bench_report.py [--repeat N] [--base-layers N]

Writes each report to a file in a temporary directory through the report's writer (the export's
own loop: a piece at a time, encoded, written), best of ``--repeat``; then the whole command
``walkthrough export report.html`` in a child process (start-up and forward pass included). With
``--base-layers N`` (0: skip) it also writes the paper's base size with N + N layers, whose cells
are many more than the budget: the size and time that the budget keeps bounded.
Target (issue 23): the default report with click-to-explain <= 1 s to write and <= 10 MB.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from base import base_config, host_line

from transformer_walkthrough.config import Config
from transformer_walkthrough.model.backprop import backward
from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.model.transformer import init_weights, run_forward
from transformer_walkthrough.views import clickable
from transformer_walkthrough.views.documents.report import iter_html
from transformer_walkthrough.views.documents.shown import Options


def write(trace: Trace, path: Path, o: Options) -> float:
    """Seconds to write the report of every stage to ``path``, as ``export`` writes it."""
    start = time.perf_counter()
    with open(path, "wb") as f:
        for piece in iter_html(trace, list(trace), o):
            f.write(piece.encode("utf-8"))
    return time.perf_counter() - start


def compare(label: str, trace: Trace, grads: dict | None, folder: Path, repeat: int) -> tuple[float, int]:
    """Print one line: the report with and without click-to-explain; the first's time and bytes."""
    precision = trace.config.display.precision
    timed = {}
    for on in (False, True):
        o = Options(precision, grads=grads, clickable=on)
        path = folder / f"{label}-{on}.html"
        timed[on] = (min(write(trace, path, o) for _ in range(repeat)), path.stat().st_size)
    (t_off, b_off), (t_on, b_on) = timed[False], timed[True]
    print(
        f"{label:<22}{t_on:>9.3f}{b_on / 1e6:>9.2f}{t_off:>11.3f}{b_off / 1e6:>9.2f}"
        f"{t_on / t_off:>9.1f} x{b_on / b_off:>7.1f} x"
    )
    return t_on, b_on


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="best of this many writes")
    parser.add_argument("--base-layers", type=int, default=1, help="also base size, N+N layers (0: skip)")
    args = parser.parse_args()
    print(host_line(), flush=True)
    budget = f"{clickable.BUDGET:,} cells carried, {clickable.LINES_BUDGET / 1e6:.0f} MB of lines at most"
    print(f"budget: {budget}")
    print(f"{'':<22}{'with clicks':>18}{'without':>20}{'with / without':>20}")
    print(f"{'report':<22}{'s':>9}{'MB':>9}{'s':>11}{'MB':>9}{'time':>11}{'size':>9}")
    config = Config()
    trace = run_forward(config)
    grads = backward(trace, init_weights(config)).stages
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        folder = Path(tmp)
        t_default, b_default = compare("article (default)", trace, None, folder, args.repeat)
        compare("article --backward", trace, grads, folder, args.repeat)
        if args.base_layers:
            big = run_forward(base_config("float32", args.base_layers))
            compare(f"base, {args.base_layers}+{args.base_layers} layers", big, None, folder, 1)
        start = time.perf_counter()
        command = [sys.executable, "-m", "transformer_walkthrough", "export", str(folder / "cli.html")]
        subprocess.run(command, check=True, capture_output=True)
        whole = time.perf_counter() - start
    print(f"`walkthrough export report.html`, start-up and forward pass included: {whole:.2f} s")
    ok = t_default <= 1.0 and b_default <= 10e6
    print(
        f"default report with click-to-explain: {t_default:.3f} s (target <= 1 s), {b_default / 1e6:.2f} MB "
        f"(target <= 10 MB)  {'ok' if ok else 'OVER'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
