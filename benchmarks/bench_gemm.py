"""float32 GEMM on real models' shapes: NumPy's OpenBLAS against PyTorch's BLAS, and the layouts.

Run: python benchmarks/bench_gemm.py [--rounds N] [--dtype float32|float64]

One process, the same threads (base.py), the same numbers. For each shape, x (n, d_in) by a weight
of d_in × d_out, timed in turns (bench_forward.block_times), each function repeating its product
often enough to run ~2 ms:
  x @ W          NumPy, the weight stored (d_in, d_out): how the model stores it (X·W, the paper)
  x @ Wt.T       NumPy, the weight stored (d_out, d_in), contiguous, multiplied as its transpose:
                 nn.Linear's layout; OpenBLAS gets it as a transposed operand, nothing copied
  (Wt @ x.T).T   NumPy, the same stored (d_out, d_in) weight on the left: Wt·xᵀ, read back as a
                 transposed view (an (n, d_out) array in column order)
  torch linear   torch.nn.functional.linear(x, Wt): what nn.Linear (and so transformers) runs
  torch x @ W    torch.matmul on the (d_in, d_out) weight
Ratios: the median over turns of the two within a turn (bench_forward.paired_ratio), with the
middle half of the turns' ratios; below 1 means the first is faster.
``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_gemm.py`` puts both libraries on one thread (base.py
pins PyTorch's to the same number): the kernels alone, without either library's threading.
"""

from __future__ import annotations

import argparse
import sys

from base import THREADS, host_line  # first: pins the BLAS threads before NumPy loads
from bench_forward import block_times, medians, paired_ratio, quartiles, turn_ratios

# isort: split
import numpy as np

# (name, n, d_in, d_out): the products of the models the benchmarks run
SHAPES = [
    ("GPT-2 c_attn, 10 tokens", 10, 768, 2304),
    ("GPT-2 c_fc, 10 tokens", 10, 768, 3072),
    ("GPT-2 c_proj mlp, 10 tok", 10, 3072, 768),
    ("base W_1, 64 tokens", 64, 512, 2048),
    ("base W_2, 64 tokens", 64, 2048, 512),
    ("llama W_QKV (8+2+2 heads)", 128, 512, 768),
    ("llama W_O", 128, 512, 512),
    ("llama W_gate, W_up", 128, 512, 1408),
    ("llama W_gate|W_up as one", 128, 512, 2816),
    ("llama W_down", 128, 1408, 512),
    ("logits, vocab 1000", 128, 512, 1000),
]
KINDS = ("x @ W", "x @ Wt.T", "(Wt @ x.T).T", "torch linear", "torch x @ W")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="turns of 3 runs of each")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = parser.parse_args()
    print(host_line(), flush=True)

    import torch

    torch.set_num_threads(THREADS)
    torch.set_grad_enabled(False)
    rng = np.random.default_rng(0)
    fns, reps = {}, {}
    for name, n, d_in, d_out in SHAPES:
        x = rng.standard_normal((n, d_in)).astype(args.dtype)
        W = rng.standard_normal((d_in, d_out)).astype(args.dtype)
        Wt = np.ascontiguousarray(W.T)  # (d_out, d_in), as nn.Linear stores it
        tx, tW, tWt = torch.from_numpy(x), torch.from_numpy(W), torch.from_numpy(Wt)
        r = reps[name] = max(1, round(2e-3 * 100e9 / (2 * n * d_in * d_out)))  # ~2 ms at 100 GFLOP/s
        assert np.allclose(x @ Wt.T, (Wt @ x.T).T, rtol=1e-4, atol=1e-3)
        assert np.allclose(x @ W, torch.nn.functional.linear(tx, tWt).numpy(), rtol=1e-4, atol=1e-3)
        products = {
            "x @ W": lambda x=x, W=W: x @ W,
            "x @ Wt.T": lambda x=x, Wt=Wt: x @ Wt.T,
            "(Wt @ x.T).T": lambda x=x, Wt=Wt: (Wt @ x.T).T,
            "torch linear": lambda tx=tx, tWt=tWt: torch.nn.functional.linear(tx, tWt),
            "torch x @ W": lambda tx=tx, tW=tW: torch.matmul(tx, tW),
        }
        for kind, product in products.items():
            fns[name, kind] = lambda product=product, r=r: [product() for _ in range(r)]
    # block_times keys by name: flatten (shape, kind) into one string and back
    turns = block_times({f"{s}|{k}": fn for (s, k), fn in fns.items()}, args.rounds)
    t = medians(turns)

    def ratio(shape: str, a: str, b: str) -> str:
        key_a, key_b = f"{shape}|{a}", f"{shape}|{b}"
        r = paired_ratio(turns, key_a, key_b)
        return f"{r:.2f} ({quartiles(turn_ratios(turns, key_a, key_b))})"

    threads = f"{THREADS} thread{'s' if THREADS > 1 else ''} each"
    print(f"{args.dtype} GEMM, {threads}, median of {args.rounds} x 3 runs each; "
          "ratios: median of the turns' ratios (middle half)")  # fmt: skip
    head = ("", "x@W µs", "GFLOP/s", "torch µs", "GFLOP/s", "x@W / torch linear", "x@Wt.T / x@W",
            "(Wt@xT)T / x@W", "torch x@W / linear")  # fmt: skip
    print(
        f"{head[0]:<41}{head[1]:>8}{head[2]:>8}{head[3]:>9}{head[4]:>8}  "
        + "  ".join(f"{h:<18}" for h in head[5:])
    )
    for name, n, d_in, d_out in SHAPES:
        work = 2 * n * d_in * d_out
        ours, theirs = t[f"{name}|x @ W"] / reps[name], t[f"{name}|torch linear"] / reps[name]
        cells = [
            ratio(name, "x @ W", "torch linear"),
            ratio(name, "x @ Wt.T", "x @ W"),
            ratio(name, "(Wt @ x.T).T", "x @ W"),
            ratio(name, "torch x @ W", "torch linear"),
        ]
        label = f"{name:<26}{n}x{d_in}x{d_out}"
        speed = f"{ours * 1e6:>8.0f}{work / ours / 1e9:>8.0f}{theirs * 1e6:>9.0f}{work / theirs / 1e9:>8.0f}"
        print(f"{label:<41}{speed}  " + "  ".join(f"{c:<18}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
