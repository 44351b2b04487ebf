"""What every checkpoint benchmark does before it measures: the same options, a random checkpoint of
the shape it measures (made once), and child processes that import this checkout.

bench_bert, bench_gemma, bench_gpt2, bench_lens, bench_llama, bench_moe and bench_t5 start the
same way; written once here so that they differ only in what they measure:

    args = begin(options(__doc__))
    folder = checkpoint(args.folder, make_checkpoint, "a random SmolLM2-135M-shaped checkpoint")
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def options(doc: str | None, rounds: int = 5, folder: Path | None = None) -> argparse.ArgumentParser:
    """The options every checkpoint benchmark takes (a benchmark may add its own): ``--rounds``
    of the in-process timings, ``--e2e-rounds`` of each fresh process, ``--quick`` for 2 and 1, and
    ``--folder`` where the checkpoint is kept (made once; by default ``folder``, else a temporary
    folder removed at the end)."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    parser.add_argument("--quick", action="store_true", help="2 rounds, 1 run of each process")
    parser.add_argument("--rounds", type=int, default=rounds, help="turns of 3 runs of each")
    parser.add_argument("--e2e-rounds", type=int, default=3, help="runs of each fresh process")
    where = f"; default {folder}" if folder is not None else "; default a temporary folder"
    parser.add_argument(
        "--folder", type=Path, default=folder, help=f"the checkpoint's folder (made once){where}"
    )
    return parser


def arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The parsed options, ``--quick`` turned into its rounds."""
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.e2e_rounds = 2, 1
    return args


def begin(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """A benchmark against transformers begins: its options parsed (``arguments``), the host said
    (``base.host_line``, first in every benchmark's output), torch on the threads NumPy's BLAS has
    (``base.THREADS``) and transformers' progress bars off, and the fresh processes it starts
    importing this checkout (``children_import_this_checkout``)."""
    from base import THREADS, host_line

    args = arguments(parser)
    print(host_line(), flush=True)
    import torch
    import transformers

    torch.set_num_threads(THREADS)
    transformers.utils.logging.disable_progress_bar()
    children_import_this_checkout()
    return args


def checkpoint(
    folder: Path | None, make: Callable[[Path], None], what: str, weights: str = "model.safetensors"
) -> Path:
    """The folder of the checkpoint measured: ``folder`` (made there unless its ``weights`` file is
    already there), or a temporary folder removed when the benchmark ends. ``make(folder)`` writes
    the checkpoint; ``what`` names it in the line that says it was made, and how long it took."""
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="bench-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    if not (folder / weights).is_file():
        start = time.perf_counter()
        make(folder)
        print(f"made {what} in {folder} ({time.perf_counter() - start:.1f} s)", flush=True)
    return folder


def children_import_this_checkout() -> None:
    """Fresh processes (``python -m transformer_walkthrough``) import this checkout, not an
    installed copy: its folder first on their PYTHONPATH."""
    before = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{ROOT}{os.pathsep}{before}" if before else str(ROOT)
