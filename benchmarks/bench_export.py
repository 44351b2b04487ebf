"""JSON export at base size: written matrix by matrix against the document built whole first.

Run: python benchmarks/bench_export.py [--layers N]

Each way runs in its own process (peak RSS is per process), writing the same trace to a file in a
temporary directory; both files must be byte-identical. Target (issue 13): peak RSS <= 400 MB.
"""

from __future__ import annotations

import argparse
import filecmp
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from base import host_line  # pins the BLAS threads as the children's own import of base does

HERE = Path(__file__).parent

CHILD = """
import sys, time
sys.path.insert(0, {here!r})
from base import base_config
from transformer_walkthrough.files.export import export, iter_json, trace_to_dict
from transformer_walkthrough.model.transformer import run_forward
trace = run_forward(base_config("float32", {layers}))
start = time.perf_counter()
if {streamed}:
    export(trace, __import__("pathlib").Path({path!r}), list(trace))
else:  # the document whole, then written: what export did before issue 13
    with open({path!r}, "w", encoding="utf-8") as f:
        for piece in iter_json(trace_to_dict(trace)):
            f.write(piece)
        f.write("\\n")
print(time.perf_counter() - start)
"""


def measure(streamed: bool, path: Path, layers: int) -> tuple[float, float]:
    """Seconds to write, and the child's peak RSS in MiB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    code = CHILD.format(here=str(HERE), layers=layers, streamed=streamed, path=str(path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of children is the largest of any child so far: run the small one first.
    return float(out.stdout), max(peak, before) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6, help="encoder and decoder layers (6: base)")
    args = parser.parse_args()
    print(host_line(), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        streamed, whole = Path(tmp) / "streamed.json", Path(tmp) / "whole.json"
        t_stream, rss_stream = measure(True, streamed, args.layers)  # the smaller peak first
        t_whole, rss_whole = measure(False, whole, args.layers)
        same = filecmp.cmp(streamed, whole, shallow=False)
        size = streamed.stat().st_size
    print(f"base size, {args.layers}+{args.layers} layers: {size / 2**20:,.0f} MiB of JSON")
    print(f"{'':<10}{'write (s)':>10}{'peak RSS (MiB)':>16}")
    print(f"{'streamed':<10}{t_stream:>10.2f}{rss_stream:>16,.0f}")
    print(f"{'whole':<10}{t_whole:>10.2f}{rss_whole:>16,.0f}")
    print(f"streamed / whole: time {t_stream / t_whole:.2f} x, peak RSS {rss_stream / rss_whole:.2f} x; "
          f"byte-identical: {'yes' if same else 'NO'}")  # fmt: skip
    ok = rss_stream * 2**20 / 1e6 <= 400
    print(f"peak RSS {rss_stream * 2**20 / 1e6:,.0f} MB (target <= 400 MB)  {'ok' if ok else 'OVER'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
