"""Flan-T5-base's shape, ours against transformers: a step end to end, cached generation, memory.

Run: python benchmarks/bench_t5.py [--quick] [--rounds N] [--e2e-rounds N] [--folder DIR]

A random checkpoint of flan-t5-base's shape is made here with transformers (T5Config: d_model 768,
12 heads of d_kv 64, 12 encoder and 12 decoder layers, gated GELU with d_ff 2,048, a 32,128-row
``shared`` table and an ``lm_head`` of its own, 32 relative buckets up to distance 128;
``save_pretrained``, float32), in DIR or a temporary folder, with the tiny SentencePiece tokenizer
of tests/tiny_t5 (nmt_nfkc, as T5's; our tokenizer pads the table's unused rows). The source is
the article's "translate English to German: The cat is sleeping comfortably.", its target "die
Katze schläft bequem." (random weights never say </s>: the step is given the target, so that both
sides run one forward, not a 64-token translation first). One process, the
same weights, the same threads (base.py pins NumPy's and PyTorch's). Each figure is a ratio
against its peer measured in the same run, in turns (``bench_llama.best_times``):
  1 step       `walkthrough step --model DIR --source … --target … --stage cross-attention --layer 11`,
               a fresh process, stdout to a pipe (the traced pass up to that stage), vs `python -c`
               importing transformers, loading the checkpoint and its tokenizer and running one
               teacher-forced forward with output_attentions (layer 11's cross-attention)
  2 generate   20 tokens, ``run.generate`` (the encoder once, the decoder's key/value cache) vs
               generate(do_sample=False, max_new_tokens=20, min_new_tokens=20), eos off on our side
  3 memory     peak RSS (VmHWM, read by the child itself) of the `step` of 1, against
               model.safetensors
Targets: 1 <= 0.5x, 2 <= 1.0x, 3 <= 1.5x.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))  # tests.tiny_t5, and this tree's transformer_walkthrough

from base import THREADS  # noqa: E402  (first: pins the BLAS threads before NumPy loads)
from bench_forward import paired_ratio, quartiles, turn_ratios  # noqa: E402
from bench_llama import best_of, best_times, peak_rss  # noqa: E402
from harness import begin, checkpoint, options  # noqa: E402

SOURCE = "translate English to German: The cat is sleeping comfortably."
TARGET = "die Katze schläft bequem."
NEW_TOKENS = 20
LAYER = 11
SHAPE = dict(
    d_model=768, d_kv=64, num_heads=12, num_layers=12, num_decoder_layers=12, d_ff=2048,
    feed_forward_proj="gated-gelu", vocab_size=32128, tie_word_embeddings=False,
    relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.0,
    decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
)  # fmt: skip

# The peer of `walkthrough step … --stage cross-attention --layer 11`: what a learner would otherwise
# run to see the same attention (one forward over the source and the target after the decoder's start).
THEIRS = """
import sys, torch, transformers
torch.set_num_threads(int(sys.argv[3]))
tok = transformers.AutoTokenizer.from_pretrained(sys.argv[1])
T5 = transformers.T5ForConditionalGeneration
model = T5.from_pretrained(sys.argv[1], attn_implementation="eager").eval()
with torch.no_grad():
    out = model(input_ids=torch.tensor([tok(sys.argv[2])["input_ids"]]),
                decoder_input_ids=torch.tensor([[0, *tok(sys.argv[5])["input_ids"]]]), output_attentions=True)
print(out.cross_attentions[int(sys.argv[4])][0])
"""


def make_checkpoint(folder: Path) -> None:
    """A random T5ForConditionalGeneration of flan-t5-base's shape (float32, save_pretrained) and
    the tiny nmt_nfkc tokenizer (spiece.model and the hub's tokenizer.json for it)."""
    import shutil

    import torch
    import transformers

    from tests.tiny_t5 import nfkc_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = nfkc_tokenizer(Path(scratch))["spiece.model"]
        for file in tokenizer.iterdir():
            shutil.copy(file, folder / file.name)
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(**SHAPE))
    model.save_pretrained(folder)


def cli(folder: Path, command: str, *extra: str) -> list[str]:
    return ["-m", "transformer_walkthrough", command, "--model", str(folder), "--source", SOURCE,
            "--target", TARGET, *extra]  # fmt: skip


STEP = ("step", "--stage", "cross-attention", "--layer", str(LAYER))


def main() -> int:
    args = begin(options(__doc__))

    import torch
    import transformers

    from transformer_walkthrough.checkpoints.run import generate, load

    folder = checkpoint(args.folder, make_checkpoint, "a random flan-t5-base-shaped checkpoint")
    size = (folder / "model.safetensors").stat().st_size

    start = time.perf_counter()
    ckpt, config, w, ids = load(str(folder), SOURCE, "float32")
    load_time = time.perf_counter() - start
    no_eos = dataclasses.replace(ckpt, eos_token_id=None)  # both make all 20 tokens
    reference = transformers.T5ForConditionalGeneration.from_pretrained(
        folder, attn_implementation="eager"
    ).eval()
    source = torch.tensor([ids])

    def theirs_generate() -> list[int]:
        with torch.no_grad():
            out = reference.generate(
                source, do_sample=False, num_beams=1, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS
            )
        return out[0, 1:].tolist()

    def ours_generate() -> list[int]:
        return generate(config, w, no_eos, ids, NEW_TOKENS)[1][1:]

    ours_tokens, their_tokens = ours_generate(), theirs_generate()
    same = ours_tokens == their_tokens and len(ours_tokens) == NEW_TOKENS

    turns = best_times(
        {"ours generate": ours_generate, "transformers generate": theirs_generate}, args.rounds
    )
    t = {name: min(times) for name, times in turns.items()}
    r = paired_ratio(turns, "ours generate", "transformers generate")
    spread = quartiles(turn_ratios(turns, "ours generate", "transformers generate"))

    ours_step = cli(folder, *STEP)
    theirs_step = ["-c", THEIRS, str(folder), SOURCE, str(THREADS), str(LAYER), TARGET]
    e2e = best_of({"step": ours_step, "theirs": theirs_step}, args.e2e_rounds)
    step_peak = peak_rss(ours_step)

    mib = 2**20
    print(
        f"flan-t5-base's shape (d_model 768, 12 heads, 12 + 12 layers, gated-gelu d_ff 2,048, 32,128-token "
        f"vocabulary, untied head), float32, {len(ids)} source tokens, {THREADS} threads each "
        f"(NumPy's OpenBLAS, torch {torch.__version__}), {args.rounds} rounds"
    )
    print(f"checkpoint {size / mib:,.0f} MiB; load (config, weights, tokenizer) {load_time:.2f} s")
    print(f"the same {NEW_TOKENS} greedy tokens as transformers: {same}")
    s, th = min(e2e["step"]), min(e2e["theirs"])
    print(f"1 step --stage cross-attention --layer {LAYER} vs python -c transformers: "
          f"{s:.2f} s vs {th:.2f} s: {s / th:.2f}x (best of {args.e2e_rounds})  (<= 0.5)")  # fmt: skip
    ours, theirs = t["ours generate"], t["transformers generate"]
    print(f"2 generate {NEW_TOKENS}, cache vs greedy generate: best {ours * 1e3:5.0f} ms vs "
          f"{theirs * 1e3:5.0f} ms: {ours / theirs:.2f}x; paired {r:.2f}x (middle half {spread})"
          "  (<= 1.0)")  # fmt: skip
    print(f"3 peak RSS: step {step_peak / mib:,.0f} MiB = {step_peak / size:.2f}x the checkpoint  (<= 1.5)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
