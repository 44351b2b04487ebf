"""The forward pass at the paper's base size: ours, with and without the trace, against PyTorch.

Run: python benchmarks/bench_forward.py [--dtype float32|float64] [--rounds N]
                                        [--convention post|pre|decoder-only|llama]

Base size (paper, Table 3): d_model 512, 8 heads, d_ff 2048, 6 + 6 layers; 64 source and 64 target
tokens; one process, the same weights. Timed, each as the median of its runs, taken in turns:
  ours, trace   run_forward: every intermediate recorded under its name (what `walkthrough` shows)
  ours, no trace  forward: the same arithmetic, nothing kept
  peer          post, pre, decoder-only: PyTorch's own transformer layers, eager, under
                torch.inference_mode, with the same embedding lookup, positional encoding, output
                layer and softmax around them: the harness the tests use (reference.TorchTransformer);
                llama: transformers' own LlamaForCausalLM, eager attention, holding our weights
                (compare.llama.llama_with), under torch.inference_mode, use_cache=False, with the
                softmax over its logits (ours returns probabilities)
Conventions: post (the paper's post-norm), pre (pre-norm with final norms), decoder-only (pre-norm,
no encoder, 6 layers over the 64 + 64 tokens as one 128-token sequence), llama (Llama's conventions
at base size: decoder-only over one 128-token sequence, pre-norm RMSNorm (eps 1e-6), rotary
positions, 8 query heads over 2 key/value heads, SwiGLU with d_ff 1408, no biases, an untied output
layer; the same 1,000-word vocabulary).
  GEMM          one NumPy matmul of the feed-forward's shape (64×512 by 512×2048): the machine's peak
Ratios: the median over turns of ours / peer within a turn (``paired_ratio``), and the middle half
of the turns' ratios (``quartiles``): on a shared machine one run's median moves by about as much.
Targets (float32): post and pre, ours with the trace <= 1.0 x the peer, without <= 0.9 x;
decoder-only, with the trace <= 1.1 x, without <= 0.9 x; llama, with the trace <= 1.1 x.
The first line names the host (base.host_line): CPU, AVX-512/AVX2, OpenBLAS's kernel, threads.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable

# First: both libraries on the same number of threads (NumPy's BLAS reads it once, when it loads):
# the caller's OPENBLAS_NUM_THREADS or OMP_NUM_THREADS, else 2.
from base import THREADS, host_line

# isort: split
import numpy as np

from transformer_walkthrough.config import Config, ModelConfig
from transformer_walkthrough.model.training import parameters
from transformer_walkthrough.model.transformer import forward, init_weights, run_forward

N_SOURCE = N_TARGET = 64
VOCAB = 1000
CONVENTIONS = ("post", "pre", "decoder-only", "llama")
# (with the trace, without) x the peer, float32; None: none set
TARGETS = {"post": (1.0, 0.9), "pre": (1.0, 0.9), "decoder-only": (1.1, 0.9), "llama": (1.1, None)}


def block_times(
    fns: dict[str, Callable[[], object]], rounds: int, repeats: int = 3
) -> dict[str, list[float]]:
    """Seconds of each function in each of ``rounds`` turns: the median of a short block of ``repeats`` runs.

    Blocks in turns, so that slow and fast moments of the machine fall on every function alike. A
    pause before each block, because NumPy's BLAS threads (OpenBLAS waits ~0.1 s before it sleeps)
    and PyTorch's OpenMP threads spin after their work and would slow whichever library runs next.
    """
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            time.sleep(0.4)
            fn()  # warm up the thread pool
            block = []
            for _ in range(repeats):
                start = time.perf_counter()
                fn()
                block.append(time.perf_counter() - start)
            times[name].append(statistics.median(block))
    return times


def medians(turns: dict[str, list[float]]) -> dict[str, float]:
    """Each function's median over its turns (``block_times``)."""
    return {name: statistics.median(times) for name, times in turns.items()}


def paired_ratio(times: dict[str, list[float]], ours: str, theirs: str) -> float:
    """The median over turns of ours / theirs within the same turn, a second apart.

    On a shared machine a slow minute falls on both sides of a turn's ratio alike, where it would
    fall on one median or the other.
    """
    return statistics.median(turn_ratios(times, ours, theirs))


def turn_ratios(times: dict[str, list[float]], ours: str, theirs: str) -> list[float]:
    """ours / theirs in each turn: ``paired_ratio`` is their median."""
    return [a / b for a, b in zip(times[ours], times[theirs], strict=True)]


def quartiles(ratios: list[float]) -> str:
    """The middle half of the turns' ratios, "0.93–1.08": how far one run's median can be trusted."""
    if len(ratios) < 2:
        return "one turn: no spread"
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return f"{q1:.2f}–{q3:.2f}"


def flops(m: ModelConfig, n_s: int, n_t: int, vocab: int) -> int:
    """Multiply-adds × 2 of the matrix products of one forward pass (grouped-query attention's
    narrower K and V projections and the gated feed-forward's third matrix counted)."""
    d, f, kv = m.d_model, m.d_ff, m.kv_heads * m.d_k
    ffn = (3 if m.feed_forward == "gated" else 2) * 2 * d * f  # per row

    def self_attention(n: int) -> int:
        return 2 * n * d * (d + 2 * kv) + 2 * n * d * d + 2 * 2 * n * n * d

    cross = 2 * 2 * n_t * d * d + 2 * n_s * d * 2 * kv + 2 * 2 * n_t * n_s * d
    encoder = self_attention(n_s) + n_s * ffn
    decoder = self_attention(n_t) + (0 if m.decoder_only else cross) + n_t * ffn
    return m.num_encoder_layers * encoder + m.num_decoder_layers * decoder + 2 * n_t * d * vocab


def model_config(convention: str, dtype: str) -> ModelConfig:
    """Base size in the convention's wiring (the module's docstring)."""
    if convention == "llama":
        return ModelConfig(d_model=512, num_heads=8, num_kv_heads=2, d_ff=1408, num_encoder_layers=0,
                           num_decoder_layers=6, norm_first=True, norm="rmsnorm",
                           positional_encoding="rotary", feed_forward="gated", activation="silu",
                           ffn_bias=False, attention_bias=False, output_bias=False, layer_norm_eps=1e-6,
                           dtype=dtype)  # fmt: skip
    decoder_only = convention == "decoder-only"
    return ModelConfig(d_model=512, num_heads=8, d_ff=2048, num_encoder_layers=0 if decoder_only else 6,
                       num_decoder_layers=6, scale_embeddings=True, dtype=dtype,
                       norm_first=convention != "post")  # fmt: skip


def peer(config: Config, w: object, src: list[int], tgt: list[int]) -> tuple[str, Callable[[], object]]:
    """The peer's name and its forward pass to the probabilities, (target tokens, vocab) as a tensor."""
    import torch

    torch.set_num_threads(THREADS)
    torch.set_grad_enabled(False)
    if config.model.positional_encoding == "rotary":  # the llama convention
        from transformer_walkthrough.compare.llama import llama_with

        dtype = {"float32": torch.float32, "float64": torch.float64}[config.model.dtype]
        llama = llama_with(config, w, dtype)  # type: ignore[arg-type]
        ids = torch.tensor([tgt])

        def llama_forward() -> object:
            with torch.inference_mode():
                return torch.softmax(llama(ids, use_cache=False).logits[0], dim=-1)

        return "Llama eager (transformers)", llama_forward

    from transformer_walkthrough.compare.reference import TorchTransformer

    net = TorchTransformer(torch, config, w)

    def torch_forward() -> object:
        with torch.inference_mode():
            return torch.softmax(net.forward(src, tgt), dim=-1)

    return "torch eager", torch_forward


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--rounds", type=int, default=20, help="turns of 3 runs of each")
    parser.add_argument("--convention", choices=CONVENTIONS, default="post")
    args = parser.parse_args()
    print(host_line(), flush=True)

    words = [f"w{i}" for i in range(VOCAB - 2)]
    model = model_config(args.convention, args.dtype)
    decoder_only = model.decoder_only
    config = Config(sentence="w0 w1", encoder_words=0 if decoder_only else 1,
                    vocabulary=("<start>", "<end>", *words), model=model)  # fmt: skip
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(0, VOCAB, N_SOURCE).tolist(), rng.integers(0, VOCAB, N_TARGET).tolist()
    if decoder_only:
        src, tgt = [], src + tgt
    w = init_weights(config)
    peer_name, peer_forward = peer(config, w, src, tgt)

    a = rng.standard_normal((N_TARGET, 512)).astype(args.dtype)
    B = rng.standard_normal((512, 2048)).astype(args.dtype)
    turns = block_times(
        {
            "trace": lambda: run_forward(config, w, source_ids=src, target_ids=tgt),
            "plain": lambda: forward(config, w, src, tgt),
            "torch": peer_forward,
            "gemm": lambda: [a @ B for _ in range(20)],
        },
        args.rounds,
    )
    median = medians(turns)
    ours_trace, ours_plain, theirs, gemm = (median[k] for k in ("trace", "plain", "torch", "gemm"))
    ratio = {name: paired_ratio(turns, name, "torch") for name in ("trace", "plain", "torch")}
    gemm /= 20
    agree = np.max(np.abs(peer_forward().numpy() - forward(config, w, src, tgt)))  # type: ignore[attr-defined]

    peak = 2 * N_TARGET * 512 * 2048 / gemm
    work = flops(model, len(src), len(tgt), VOCAB)

    tracemalloc.start()
    trace = run_forward(config, w, source_ids=src, target_ids=tgt)
    _, peak_bytes = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    kept = {}
    for stage in trace:
        for m in stage.matrices.values():
            base = m.values if m.values.base is None else m.values.base
            kept[id(base)] = base.nbytes
    weight_bytes = sum(a.nbytes for a in parameters(w))
    n_matrices = sum(len(s.matrices) for s in trace)

    if args.convention == "llama":
        shape = (f"d_model 512, 8 heads over 2 key/value heads, SwiGLU d_ff 1408, 6 decoder layers, "
                 f"{len(tgt)} tokens, llama (RMSNorm, rotary, no biases)")  # fmt: skip
    else:
        layers = "6 decoder layers" if decoder_only else "6+6 layers"
        tokens = f"{len(src)}+{len(tgt)} tokens"
        norm = "post-norm" if args.convention == "post" else "pre-norm"
        shape = f"d_model 512, 8 heads, d_ff 2048, {layers}, {tokens}, {norm}"
    print(f"base size, {args.dtype}: {shape}, {THREADS} threads each, median of {args.rounds} x 3 runs each")
    print(f"{'':<28}{'median (ms)':>12}{'x torch':>10}{'GEMM peak':>11}   (x torch: median of turns' ratios)")
    for name, key, t in (
        ("ours, full trace", "trace", ours_trace),
        ("ours, no trace", "plain", ours_plain),
        (peer_name, "torch", theirs),
    ):
        print(f"{name:<28}{t * 1e3:>12.1f}{ratio[key]:>10.2f}{work / t / peak:>11.0%}")
    print(f"{'GEMM (64x512x2048)':<28}{gemm * 1e3:>12.3f}{'':>10}{peak / 1e9:>8.1f} GFLOP/s")
    print(f"ours vs {peer_name}, max |diff| of the probabilities: {agree:.1e}")
    held = sum(kept.values()) - weight_bytes
    print(f"trace: {len(trace)} stages, {n_matrices} matrices, {held / 1e6:.1f} MB of activations held "
          f"(weights: views); peak allocated while tracing {peak_bytes / 1e6:.1f} MB")  # fmt: skip
    spread = {name: quartiles(turn_ratios(turns, name, "torch")) for name in ("trace", "plain")}
    target = dict(zip(("trace", "plain"), TARGETS[args.convention], strict=True))

    def aim(key: str) -> str:
        return f"<= {target[key]}; " if target[key] is not None else "no target; "

    print(f"targets: with the trace {ratio['trace']:.2f} x torch ({aim('trace')}middle half of the turns "
          f"{spread['trace']}),")  # fmt: skip
    print(f"         without {ratio['plain']:.2f} x torch ({aim('plain')}{spread['plain']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
