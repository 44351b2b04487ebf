"""The paper's base size (Table 3), shared by the benchmarks: d_model 512, 8 heads, d_ff 2048,
6 + 6 layers, 64 source and 64 target tokens; 1,708 matrices in its trace.

Importing this module pins NumPy's BLAS threads (and PyTorch's, through ``THREADS``) to the same
number, unless the caller already chose one: ratios between libraries mean nothing otherwise.
``host_line()`` is every benchmark's first line of output: the CPU, whether it has AVX-512 and AVX2,
NumPy's BLAS and the kernel OpenBLAS picked on it, and the threads: a ratio holds for one host.
"""

from __future__ import annotations

import os

THREADS = int(os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "2")))
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))

from transformer_walkthrough.config import Config, ModelConfig  # noqa: E402  (after the threads)

N_TOKENS = 64
VOCAB = 1000
WORDS = [f"w{i}" for i in range(VOCAB - 2)]


def base_config(dtype: str = "float32", layers: int = 6) -> Config:
    """Base size, with a 64 + 64-token sentence of made-up words."""
    model = ModelConfig(d_model=512, num_heads=8, d_ff=2048, num_encoder_layers=layers,
                        num_decoder_layers=layers, scale_embeddings=True, dtype=dtype)  # fmt: skip
    sentence = " ".join(WORDS[: 2 * N_TOKENS - 1])  # 64 for the encoder, 63 + <start> for the decoder
    return Config(
        sentence=sentence, encoder_words=N_TOKENS, vocabulary=("<start>", "<end>", *WORDS), model=model
    )


def _cpu_info() -> tuple[str, set[str]]:
    """The CPU's model name (with its family and model numbers: a virtual machine's name is often
    generic) and its flags, from /proc/cpuinfo; elsewhere platform's word and no flags."""
    import platform

    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
                if not line.strip():  # the first CPU's block is enough
                    break
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or "unknown CPU"
    if "cpu family" in fields and "model" in fields:
        name += f", family {fields['cpu family']} model {fields['model']}"
    return name, set(fields.get("flags", "").split())


# Run in a child with OPENBLAS_VERBOSE=2: OpenBLAS prints "Core: SkylakeX" to stderr as NumPy loads it.
_BLAS_PROBE = """
import numpy as np
try:
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    print(blas.get("name", "BLAS"), blas.get("version", "?"))
except Exception:
    print("BLAS ?")
try:
    import threadpoolctl
    pools = threadpoolctl.threadpool_info()
    print(*(p.get("architecture") for p in pools if p.get("internal_api") == "openblas"))
except ImportError:
    print()
"""


def blas_info() -> tuple[str, str]:
    """NumPy's BLAS and the kernel it picked on this CPU: ("scipy-openblas 0.3.31", "SkylakeX").

    Asked of a child with this process's environment (an OPENBLAS_CORETYPE set here counts), so
    that this process need not load NumPy: OpenBLAS's own "Core:" line (``OPENBLAS_VERBOSE=2``),
    else threadpoolctl's "architecture" if it is installed, else "unknown"."""
    import subprocess
    import sys

    try:
        out = subprocess.run(
            [sys.executable, "-c", _BLAS_PROBE], env={**os.environ, "OPENBLAS_VERBOSE": "2"},
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "BLAS ?", "unknown"
    lines = [*out.stdout.splitlines(), "", ""]
    said = [line.partition(":")[2].strip() for line in out.stderr.splitlines() if line.startswith("Core:")]
    core = said[0] if said else ""
    return lines[0] or "BLAS ?", core or lines[1].strip() or "unknown"


def host_line(threads: object = None) -> str:
    """One line naming the host, first in every benchmark's output: numbers from another machine,
    or from another OpenBLAS kernel, are not comparable. ``threads``: what the timed code runs on,
    when it is not ``THREADS`` (a benchmark whose children keep OpenBLAS's default, say)."""
    name, flags = _cpu_info()
    yes = {True: "yes", False: "no"}
    simd = f"AVX-512 {yes['avx512f' in flags]}, AVX2 {yes['avx2' in flags]}" if flags else "flags unknown"
    blas, core = blas_info()
    threads = THREADS if threads is None else threads
    return f"host: {name}; {os.cpu_count()} CPUs; {simd}; {blas}, core {core}; threads {threads}"
