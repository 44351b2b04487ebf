"""GPT-2 small's shape, ours against transformers: the forward pass, cached generation, loading.

Run: python benchmarks/bench_gpt2.py [--rounds N] [--folder DIR]

A random GPT-2-small-shaped checkpoint is made here (d_model 768, 12 heads, 12 layers, 1,024
positions, a 50,257-token byte-level vocabulary; ``save_pretrained``, float32), in DIR or a
temporary folder. One process, the same weights, the same threads (benchmarks/base.py). Timed, each
as the median of its runs, taken in turns:
  forward     a 10-token prompt: run_forward (every matrix recorded) vs GPT2LMHeadModel, eager
  generate    20 new tokens after it: generate_cached vs transformers' greedy generate (its cache)
  sampled     the same, drawn at temperature 0.8 from the top p = 0.9 (every step's arithmetic
              kept for the table): generate_cached vs generate(do_sample=True, top_k=0), and
              against our own greedy generation (what the draw costs)
  vocabulary  ByteLevelBPETokenizer(folder): tokenizer.json's 50,257 tokens and their labels
  memory      peak RSS of a fresh process that loads the checkpoint and runs the traced forward,
              against the size of model.safetensors
  end to end  a fresh process each: `walkthrough step --model DIR --prompt … --stage
              masked-attention --layer 11` (output to a pipe) vs `python -c` importing
              transformers, loading the model and its tokenizer and running one forward; taken
              in turns, the median of --e2e-rounds
Targets: forward <= 1.0x, generate <= 1.0x, vocabulary <= 0.2 s, memory <= 1.5x the checkpoint,
end to end <= 0.5x; sampling has none (measured).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from base import THREADS, host_line  # first: pins the BLAS threads before NumPy loads
from bench_forward import block_times, medians, paired_ratio
from harness import arguments, checkpoint, options

PROMPT = "The cat is sleeping comfortably on the warm soft mat"  # 10 tokens of the vocabulary made below
NEW_TOKENS = 20
EOS = "<|endoftext|>"

# Run in a fresh process; VmHWM, not ru_maxrss, which Linux carries over from the parent through exec.
PEAK = """
import re, sys
def hwm():
    with open("/proc/self/status") as f:
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", f.read()).group(1)) * 1024
from transformer_walkthrough.checkpoints import load_gpt2, checkpoint_config, checkpoint_weights
from transformer_walkthrough.model.transformer import run_forward
before = hwm()
ckpt = load_gpt2(sys.argv[1])
config = checkpoint_config(ckpt, "float32", sys.argv[2])
w = checkpoint_weights(config, ckpt)
trace = run_forward(config, w, target_ids=ckpt.tokenizer.encode(sys.argv[2]))
print(before, hwm())
"""


# The peer of `walkthrough step … --layer 11`: what a learner would otherwise run to see the same attention.
THEIRS = """
import sys, torch, transformers
torch.set_num_threads(int(sys.argv[3]))
tok = transformers.GPT2TokenizerFast.from_pretrained(sys.argv[1])
model = transformers.GPT2LMHeadModel.from_pretrained(sys.argv[1], attn_implementation="eager").eval()
with torch.inference_mode():
    out = model(torch.tensor([tok(sys.argv[2])["input_ids"]]), output_attentions=True)
print(out.attentions[11][0])
"""


def end_to_end(folder: Path, rounds: int) -> tuple[float, float]:
    """Median seconds of the two fresh processes, run in turns (see the module's docstring)."""

    ours = [sys.executable, "-m", "transformer_walkthrough", "step", "--model", str(folder), "--prompt",
            PROMPT, "--stage", "masked-attention", "--layer", "11"]  # fmt: skip
    theirs = [sys.executable, "-c", THEIRS, str(folder), PROMPT, str(THREADS)]
    times: dict[str, list[float]] = {"ours": [], "theirs": []}
    for _ in range(rounds):
        for name, command in (("ours", ours), ("theirs", theirs)):
            start = time.perf_counter()
            subprocess.run(command, capture_output=True, check=True)
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["ours"]), statistics.median(times["theirs"])


def make_checkpoint(folder: Path) -> None:
    """A random GPT-2 small (float32, save_pretrained) and a 50,257-token byte-level tokenizer.json."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from transformer_walkthrough.checkpoints.bpe import bytes_to_unicode

    folder.mkdir(parents=True, exist_ok=True)
    alphabet = list(bytes_to_unicode().values())
    vocab = {c: i for i, c in enumerate(alphabet)}
    merges = []
    for word in PROMPT.split():  # whole words, so that the prompt is one token a word (with Ġ)
        pieces = ["Ġ" if word != "The" else "", *word]
        pieces = [p for p in pieces if p]
        while len(pieces) > 1:
            merges.append((pieces[0], pieces[1]))
            pieces = [pieces[0] + pieces[1], *pieces[2:]]
            vocab.setdefault(pieces[0], len(vocab))
    pairs = ((a, b) for a in alphabet for b in alphabet)
    while len(vocab) < 50_256:
        a, b = next(pairs)
        vocab.setdefault(a + b, len(vocab))
    vocab[EOS] = 50_256
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOS])
    tok.save(str(folder / "tokenizer.json"))
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config())  # GPT-2 small's defaults
    model.save_pretrained(folder)


def main() -> int:
    args = arguments(options(__doc__))
    print(host_line(), flush=True)

    import numpy as np
    import torch
    import transformers

    from transformer_walkthrough.checkpoints import (
        ByteLevelBPETokenizer,
        checkpoint_config,
        checkpoint_weights,
        load_gpt2,
    )
    from transformer_walkthrough.model.generation import generate_cached, generated_ids
    from transformer_walkthrough.model.sampling import Sampling
    from transformer_walkthrough.model.transformer import run_forward

    torch.set_num_threads(THREADS)
    folder = checkpoint(args.folder, make_checkpoint, "a random GPT-2 small")
    size = (folder / "model.safetensors").stat().st_size

    start = time.perf_counter()
    ckpt = load_gpt2(folder)
    config = checkpoint_config(ckpt, "float32", PROMPT)
    w = checkpoint_weights(config, ckpt)
    load = time.perf_counter() - start
    ids = ckpt.tokenizer.encode(PROMPT)
    assert len(ids) == 10, ids
    reference = transformers.GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager").eval()
    prompt = torch.tensor([ids])
    mask = torch.ones_like(prompt)

    def theirs_forward() -> object:
        with torch.inference_mode():
            return reference(prompt, output_attentions=True)

    def theirs_generate() -> list[int]:
        with torch.inference_mode():
            out = reference.generate(
                prompt, attention_mask=mask, do_sample=False, num_beams=1, max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS, pad_token_id=ckpt.eos_token_id,
            )  # fmt: skip
        return out[0].tolist()

    def ours_generate() -> list[int]:
        return generated_ids(generate_cached(config, w, ids, NEW_TOKENS))

    def theirs_sampled() -> list[int]:
        with torch.inference_mode():
            out = reference.generate(
                prompt, attention_mask=mask, do_sample=True, temperature=0.8, top_p=0.9, top_k=0, num_beams=1,
                max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=ckpt.eos_token_id,
            )  # fmt: skip
        return out[0].tolist()

    def ours_sampled() -> list[int]:
        return generated_ids(generate_cached(config, w, ids, NEW_TOKENS, sampling=Sampling(0.8, None, 0.9)))

    ours, expected = ours_generate(), theirs_generate()
    same = ours == expected
    trace = run_forward(config, w, target_ids=ids)
    gap = np.abs(trace["output.logits"]["logits"] - theirs_forward().logits[0].numpy()).max()

    turns = block_times(
        {
            "ours forward": lambda: run_forward(config, w, target_ids=ids),
            "transformers forward": theirs_forward,
            "ours generate": ours_generate,
            "transformers generate": theirs_generate,
            "ours sampled": ours_sampled,
            "transformers sampled": theirs_sampled,
            "vocabulary": lambda: ByteLevelBPETokenizer(folder),
        },
        args.rounds,
    )
    done = subprocess.run(
        [sys.executable, "-c", PEAK, str(folder), PROMPT], capture_output=True, text=True, check=True
    )
    before, peak = map(int, done.stdout.split())
    e2e_ours, e2e_theirs = end_to_end(folder, args.e2e_rounds)

    t = medians(turns)

    def ratio(ours: str, theirs: str) -> str:  # the median of each turn's ratio (bench_forward)
        return (
            f"{t[ours] * 1e3:8.1f} ms vs {t[theirs] * 1e3:8.1f} ms: {paired_ratio(turns, ours, theirs):.2f}x"
        )

    forward, generate = (
        ratio("ours forward", "transformers forward"),
        ratio("ours generate", "transformers generate"),
    )
    mib = 2**20
    print(f"GPT-2 small's shape, float32, {THREADS} threads, {args.rounds} rounds")
    print(f"checkpoint {size / mib:,.0f} MiB; load_gpt2 + config + weights {load:.2f} s")
    print(f"logits: max |ours - transformers| = {gap:.1e}; the same {NEW_TOKENS} greedy tokens: {same}")
    print(f"  forward, 10 tokens, full trace vs eager   {forward}  (<= 1.0)")
    print(f"  generate {NEW_TOKENS}, cache vs greedy generate  {generate}  (<= 1.0)")
    sampled = ratio("ours sampled", "transformers sampled")
    print(f"  sampled {NEW_TOKENS}, T 0.8 top-p 0.9, vs generate  {sampled}")
    print(f"  sampled vs our greedy (the draw's cost)   {ratio('ours sampled', 'ours generate')}")
    print(f"  vocabulary, 50,257 tokens and labels      {t['vocabulary'] * 1e3:8.1f} ms  (<= 200)")
    print(f"  peak RSS {peak / mib:,.0f} MiB = {peak / size:.2f}x the checkpoint (<= 1.5)")
    print(f"  peak RSS after the imports ({before / mib:,.0f} MiB): {(peak - before) / size:.2f}x")
    print(
        f"  end to end, step --stage masked-attention --layer 11 vs python -c transformers: "
        f"{e2e_ours:.2f} s vs {e2e_theirs:.2f} s: {e2e_ours / e2e_theirs:.2f}x  (<= 0.5)"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
