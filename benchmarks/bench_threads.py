"""OpenBLAS's thread policy: its default against the one `walkthrough` sets (OPENBLAS_THREAD_TIMEOUT=4).

Run: python benchmarks/bench_threads.py [--runs N]

OpenBLAS's idle threads spin for 2^28 cycles (~0.1 s) after each product before they sleep; on
two shared cores they take CPU from the main thread. Timed in turns, each in a fresh process with
the environment given: the default `walkthrough run` (printed to a pipe) and the base-size
traced forward pass (timed inside the process, 3 runs, the best). The policy must speed up the
first and not slow down the second.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from base import host_line  # its thread pinning reaches no child: env() drops OPENBLAS_* and OMP_*

PY = sys.executable
WALKTHROUGH = shutil.which("walkthrough", path=str(Path(PY).parent)) or "walkthrough"
FORWARD = f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from base import base_config
from transformer_walkthrough.model.transformer import init_weights, run_forward
config = base_config()
w = init_weights(config)
times = []
for _ in range(3):
    start = time.perf_counter(); run_forward(config, w); times.append(time.perf_counter() - start)
print(min(times))
"""
POLICIES = {"OpenBLAS default": {}, "timeout 4 (ours)": {"OPENBLAS_THREAD_TIMEOUT": "4"}}


def env(extra: dict[str, str]) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith(("OPENBLAS_", "OMP_", "GOTO_"))}
    # `walkthrough` sets the timeout itself unless it is set: "default" must say 28, OpenBLAS's own.
    return {**out, "OPENBLAS_THREAD_TIMEOUT": "28", **extra}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    threads = f"run: OpenBLAS's default ({os.cpu_count()} CPUs); base forward: 2 (base.py)"
    print(host_line(threads), flush=True)
    run: dict[str, list[float]] = {p: [] for p in POLICIES}
    forward: dict[str, list[float]] = {p: [] for p in POLICIES}
    for _ in range(args.runs):
        for name, extra in POLICIES.items():
            start = time.perf_counter()
            subprocess.run([WALKTHROUGH, "run"], env=env(extra), capture_output=True, check=True)
            run[name].append(time.perf_counter() - start)
    for _ in range(max(1, args.runs // 3)):
        for name, extra in POLICIES.items():
            out = subprocess.run(
                [PY, "-c", FORWARD], env=env(extra), capture_output=True, text=True, check=True
            )
            forward[name].append(float(out.stdout))
    print(f"cores: {os.cpu_count()}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'':<20}{'run (s)':>9}{'base forward (s)':>18}")
    for name in POLICIES:
        print(f"{name:<20}{statistics.median(run[name]):>9.3f}{statistics.median(forward[name]):>18.3f}")
    ours, theirs = "timeout 4 (ours)", "OpenBLAS default"
    r = statistics.median(run[ours]) / statistics.median(run[theirs])
    f = statistics.median(forward[ours]) / statistics.median(forward[theirs])
    print(f"ours / default: run {r:.2f} x, base forward {f:.2f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
