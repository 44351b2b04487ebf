"""Start-up cost of the CLI against the floor: bare Python importing its four dependencies.

Run: python benchmarks/bench_startup.py [--runs N]

Each command is run N times, interleaved so that machine noise hits all alike; the script prints
medians and the ratios the walkthrough issue sets as targets:
    walkthrough run                            <= 2.0 x floor
    walkthrough step --stage masked-attention  <= 1.5 x floor
    walkthrough --help                         <= 1.2 x `python -c "import typer"`, and no NumPy
Output goes to a pipe (as `walkthrough run | less` would), so Rich renders without colour.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The commands run with the caller's environment, as before base.py (imported for the host line)
# pinned the BLAS threads in this one's.
CALLER_ENV = dict(os.environ)

from base import host_line  # noqa: E402

PY = sys.executable
WALKTHROUGH = shutil.which("walkthrough", path=str(Path(PY).parent)) or "walkthrough"

COMMANDS = {
    "floor": [PY, "-c", "import numpy, yaml, typer, rich.table, rich.console"],
    "import typer": [PY, "-c", "import typer"],
    "run": [WALKTHROUGH, "run"],
    "step": [WALKTHROUGH, "step", "--stage", "masked-attention"],
    "--help": [WALKTHROUGH, "--help"],
    # Documents of the default config, each timed whole (target: under 0.5 s).
    "export .html": [WALKTHROUGH, "export", "{tmp}/report.html", "--force"],
    "export .tex": [WALKTHROUGH, "export", "{tmp}/walkthrough.tex", "--force"],
    "export .md": [WALKTHROUGH, "export", "{tmp}/walkthrough.md", "--force"],
}
TARGETS = [("run", "floor", 2.0), ("step", "floor", 1.5), ("--help", "import typer", 1.2)]  # issue 19's bars


TMP = tempfile.mkdtemp(prefix="bench-startup-")


def time_once(argv: list[str]) -> float:
    argv = [a.replace("{tmp}", TMP) for a in argv]
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True, env=CALLER_ENV)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    blas_threads = CALLER_ENV.get("OPENBLAS_NUM_THREADS") or CALLER_ENV.get("OMP_NUM_THREADS")
    print(host_line(blas_threads or f"OpenBLAS's default ({os.cpu_count()} CPUs)"), flush=True)
    env_note = os.environ.get("NO_COLOR")
    # `pip install .` compiles the package to .pyc; an editable install under PYTHONDONTWRITEBYTECODE
    # would compile it again on every run. Measure what a user runs.
    import compileall

    import transformer_walkthrough

    compileall.compile_dir(Path(transformer_walkthrough.__file__).parent, quiet=1)
    for argv in COMMANDS.values():  # warm the file cache and the .pyc files
        time_once(argv)
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, argv in COMMANDS.items():
            samples[name].append(time_once(argv))
    medians = {name: statistics.median(s) for name, s in samples.items()}
    print(
        f"{'command':<14}{'median (s)':>12}   runs={args.runs}{'  NO_COLOR=' + env_note if env_note else ''}"
    )
    for name, m in medians.items():
        print(f"{name:<14}{m:>12.3f}")
    print()
    failed = False
    for name, base, target in TARGETS:
        ratio = medians[name] / medians[base]
        ok = ratio <= target
        failed |= not ok
        print(f"{name:<8} / {base:<13} = {ratio:.2f}x   (target <= {target}x)  {'ok' if ok else 'OVER'}")
    probe = subprocess.run(
        [PY, "-X", "importtime", "-m", "transformer_walkthrough", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env=CALLER_ENV,
    )
    numpy_loaded = any(line.rstrip().endswith("| numpy") for line in probe.stderr.splitlines())
    print(f"--help imports numpy: {'yes (OVER)' if numpy_loaded else 'no'}")
    for name in ("export .html", "export .tex", "export .md"):
        slow = medians[name] > 0.5
        failed |= slow
        print(f"{name:<13} {medians[name]:.3f} s   (target < 0.5 s)  {'OVER' if slow else 'ok'}")
    shutil.rmtree(TMP, ignore_errors=True)
    return 1 if failed or numpy_loaded else 0


if __name__ == "__main__":
    sys.exit(main())
