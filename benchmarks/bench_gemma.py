"""Gemma 3 270M's shape, ours against transformers: `step` end to end, memory, `run`, the forward.

Run: python benchmarks/bench_gemma.py [--quick] [--rounds N] [--e2e-rounds N] [--folder DIR]

A random checkpoint of Gemma 3 270M's shape is made here once with transformers (Gemma3TextConfig:
d_model 640, 4 query heads over 1 key/value head of head_dim 256, 18 layers in Gemma 3's pattern of
five sliding layers (window 512, θ 10,000) to one full (θ 1,000,000), GeGLU d_ff 2,048, scores
divided by √256 (query_pre_attn_scalar), norms on both sides of each sublayer, QK-norm, a
262,144-row embedding table tied to the output; ``save_pretrained``, float32, about 1 GiB) in DIR,
by default a cache folder (``$XDG_CACHE_HOME`` or ~/.cache, ``transformer-walkthrough/bench-gemma3-270m``)
kept for the next run, with the Gemma style tokenizer of tests/tiny_tokenizers (400 tokens: the
table's other rows are never read). The prompt is 32 tokens, ``<bos>`` included. One process, the
same weights, the same threads (base.py pins NumPy's and PyTorch's). Figures:
  1 step       `walkthrough step --model DIR --prompt … --stage masked-attention --layer 17` (the
               last layer, a full one), a fresh process, stdout to a pipe, vs `python -c` importing
               transformers, loading the checkpoint and its tokenizer and running one forward with
               the attentions (the peer a learner would otherwise run to see that matrix)
  2 memory     peak RSS (VmHWM, read by the child itself) of that `step` and of `run`, against
               model.safetensors
  3 run        `walkthrough run --model DIR --prompt …` to a pipe: an absolute bar
  4 forward    run_forward (every matrix recorded, weights loaded) vs Gemma3ForCausalLM, eager,
               torch.no_grad(), in turns (``bench_llama.best_times``): the best of each and the
               paired ratio; beside it the forward's matrix products alone, NumPy on our (in, out)
               weights against torch.nn.functional.linear on transformers' (out, in) ones, q/k/v
               apart as transformers runs them: how much of the gap is the BLAS, and how much of
               our forward is anything but products
Targets: 1 <= 0.5x, 2 <= 1.5x, 3 <= 5 s; 4 has none of its own here (bench_llama's is 1.0x): what is
not a matrix product must cost no more than transformers' own.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))  # tests.tiny_tokenizers, and this tree's transformer_walkthrough

from base import THREADS  # noqa: E402  (first: pins the BLAS threads before NumPy loads)
from bench_forward import paired_ratio, quartiles, turn_ratios  # noqa: E402
from bench_llama import best_of, best_times, peak_rss, product_runners  # noqa: E402
from harness import begin, checkpoint, options  # noqa: E402

PROMPT = "The cat sat on the mat. The dog ate the bone! A quick brown fox"  # 32 tokens with <bos>
N_PROMPT = 32
LAYER = 17
PATTERN = (["sliding_attention"] * 5 + ["full_attention"]) * 3  # Gemma 3: five local layers to one global
SHAPE = dict(
    hidden_size=640, num_attention_heads=4, num_key_value_heads=1, head_dim=256, num_hidden_layers=18,
    intermediate_size=2048, vocab_size=262144, tie_word_embeddings=True, query_pre_attn_scalar=256,
    sliding_window=512, layer_types=PATTERN, rms_norm_eps=1e-6, max_position_embeddings=32768,
    hidden_activation="gelu_pytorch_tanh", attn_logit_softcapping=None, final_logit_softcapping=None,
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
    },
)  # fmt: skip

# The peer of `walkthrough step … --layer 17`: what a learner would otherwise run to see the same attention.
THEIRS = """
import sys, torch, transformers
torch.set_num_threads(int(sys.argv[3]))
tok = transformers.AutoTokenizer.from_pretrained(sys.argv[1])
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], attn_implementation="eager").eval()
with torch.no_grad():
    out = model(torch.tensor([tok(sys.argv[2])["input_ids"]]), output_attentions=True)
print(out.attentions[int(sys.argv[4])][0])
"""


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "transformer-walkthrough" / "bench-gemma3-270m"


def make_checkpoint(folder: Path) -> None:
    """A random Gemma3ForCausalLM of Gemma 3 270M's shape (float32, save_pretrained) and a tokenizer."""
    import torch
    import transformers

    from tests.tiny_tokenizers import gemma_style

    folder.mkdir(parents=True, exist_ok=True)
    tiny = gemma_style(folder)
    config = transformers.Gemma3TextConfig(
        **SHAPE, bos_token_id=tiny.bos, eos_token_id=tiny.eos, pad_token_id=0
    )
    torch.manual_seed(0)
    model = transformers.Gemma3ForCausalLM(config)
    # Gemma's gammas are offsets from 1, zeros at first: moved off them, as a trained model's are.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(folder)


def cli(folder: Path, command: str, *extra: str) -> list[str]:
    return ["-m", "transformer_walkthrough", command, "--model", str(folder), "--prompt", PROMPT, *extra]


STEP = ("step", "--stage", "masked-attention", "--layer", str(LAYER))


def products(w: object, reference: object, n: int) -> tuple[object, object]:
    """The forward's matrix products on random rows of its shapes: NumPy's and torch's (see above)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    d, d_ff, heads = SHAPE["hidden_size"], SHAPE["intermediate_size"], SHAPE["num_attention_heads"]
    width = heads * SHAPE["head_dim"]  # the heads side by side: what W_O reads
    x, h, c = (rng.standard_normal((n, k)).astype(np.float32) for k in (d, d_ff, width))
    ours = []
    for i in range(SHAPE["num_hidden_layers"]):
        attn, mlp = f"decoder.{i}.masked-attention", f"decoder.{i}.feed-forward"
        ours += [(x, w[f"{attn}/W_QKV"]), (c, w[f"{attn}/W_O"]), (x, w[f"{mlp}/W_gate"])]
        ours += [(x, w[f"{mlp}/W_up"]), (h, w[f"{mlp}/W_down"])]
    ours.append((x, w["decoder.embedding/E"].T))
    xt, ht, ct = torch.from_numpy(x), torch.from_numpy(h), torch.from_numpy(c)
    theirs = []
    for layer in reference.model.layers:  # type: ignore[attr-defined]
        a, m = layer.self_attn, layer.mlp
        theirs += [(xt, a.q_proj.weight), (xt, a.k_proj.weight), (xt, a.v_proj.weight), (ct, a.o_proj.weight)]
        theirs += [(xt, m.gate_proj.weight), (xt, m.up_proj.weight), (ht, m.down_proj.weight)]
    theirs.append((xt, reference.lm_head.weight))  # type: ignore[attr-defined]

    return product_runners(ours, theirs)


def main() -> int:
    args = begin(options(__doc__, folder=cache_folder()))

    import numpy as np
    import torch
    import transformers

    from transformer_walkthrough.checkpoints.run import load
    from transformer_walkthrough.model.transformer import run_forward

    folder = checkpoint(args.folder, make_checkpoint, "a random Gemma 3 270M-shaped checkpoint")
    size = (folder / "model.safetensors").stat().st_size

    # End to end first, while this process holds nothing: the machine's memory is the children's.
    ours_step, ours_run = cli(folder, *STEP), cli(folder, "run")
    theirs_step = ["-c", THEIRS, str(folder), PROMPT, str(THREADS), str(LAYER)]
    e2e = best_of({"step": ours_step, "theirs": theirs_step, "run": ours_run}, args.e2e_rounds)
    step_peak, run_peak = peak_rss(ours_step), peak_rss(ours_run)

    start = time.perf_counter()
    loaded = load(str(folder), PROMPT, "float32", prompt=True)
    load_time = time.perf_counter() - start
    config, w, ids = loaded.config, loaded.weights, loaded.ids
    assert len(ids) == N_PROMPT, len(ids)
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    assert type(reference).__name__ == "Gemma3ForCausalLM", type(reference).__name__
    prompt = torch.tensor([ids])

    def theirs_forward() -> object:
        with torch.no_grad():
            return reference(prompt)

    trace = run_forward(config, w, target_ids=ids)
    theirs = theirs_forward().logits[0].numpy()
    gap = float(np.abs(trace["output.logits"]["logits"] - theirs).max() / np.abs(theirs).max())
    del trace
    m = config.model
    kinds = [m.layer_types.count(k) if m.layer_types else 0 for k in ("sliding", "full")]

    numpy_products, torch_products = products(w, reference, N_PROMPT)
    turns = best_times(
        {
            "NumPy products": numpy_products,
            "torch products": torch_products,
            "ours forward": lambda: run_forward(config, w, target_ids=ids),
            "transformers forward": theirs_forward,
        },
        args.rounds,
    )
    t = {name: min(times) for name, times in turns.items()}

    def ratio(ours: str, theirs: str) -> str:
        r = paired_ratio(turns, ours, theirs)
        spread = quartiles(turn_ratios(turns, ours, theirs))
        return (
            f"best {t[ours] * 1e3:5.0f} ms vs {t[theirs] * 1e3:5.0f} ms: {t[ours] / t[theirs]:.2f}x; "
            f"paired {r:.2f}x (middle half {spread})"
        )

    mib = 2**20
    print(
        f"Gemma 3 270M's shape (d_model 640, 4 heads over 1 key/value head of 256, 18 layers, 5 sliding "
        f"to 1 full, d_ff 2,048, 262,144-token vocabulary, tied), float32, {N_PROMPT}-token prompt, "
        f"{THREADS} threads each (NumPy's OpenBLAS, torch {torch.__version__}), {args.rounds} rounds"
    )
    print(f"checkpoint {size / mib:,.0f} MiB; load (config, weights, tokenizer) {load_time:.2f} s; read as "
          f"{kinds[0]} sliding layers (window {m.sliding_window}, θ {m.local_rope_theta:g}) and "
          f"{kinds[1]} full (θ {m.rope_theta:g})")  # fmt: skip
    print(f"logits: max |ours - transformers| = {gap:.1e} of the largest |logit| (float32)")
    s, th = min(e2e["step"]), min(e2e["theirs"])
    print(f"1 step --stage masked-attention --layer {LAYER} vs python -c transformers: "
          f"{s:.2f} s vs {th:.2f} s: {s / th:.2f}x (best of {args.e2e_rounds})  (<= 0.5)")  # fmt: skip
    print(f"2 peak RSS: step {step_peak / mib:,.0f} MiB = {step_peak / size:.2f}x the checkpoint, "
          f"run {run_peak / mib:,.0f} MiB = {run_peak / size:.2f}x  (<= 1.5)")  # fmt: skip
    print(f"3 run to a pipe {min(e2e['run']):.2f} s (best of {args.e2e_rounds})  (<= 5 s)")
    share = t["NumPy products"] / t["ours forward"]
    print(f"4 forward, full trace vs eager               {ratio('ours forward', 'transformers forward')}")
    print(f"  its products alone, NumPy vs torch linear  {ratio('NumPy products', 'torch products')}")
    print(f"  (the products are {share:.0%} of our traced forward, "
          f"{t['torch products'] / t['transformers forward']:.0%} of transformers')")  # fmt: skip
    return 0 if gap <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
