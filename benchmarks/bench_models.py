"""A checkpoint of opus-mt-en-de's shape, walked through (``--model``) against transformers.

Run: python benchmarks/bench_models.py [--rounds N] [--keep DIR]

The checkpoint is made here, with random weights (no network): MarianMTModel with d_model 512,
8 heads, 6 + 6 layers, d_ff 2048, a 58,101-piece vocabulary, "swish", scaled embeddings, saved by
``save_pretrained`` (about 300 MB) beside a SentencePiece model trained on a few sentences and a
vocab.json padded to 58,101 pieces. Source: a 6-word sentence; target: a 4-word one (teacher
forcing, so that every command does one pass: a random model would translate for 64 tokens).
Timed, and printed as ratios against a peer measured in the same run (the machine is shared):
  forward     run_forward with the full trace  vs  transformers' eager forward (float32, same threads)
  step        `walkthrough step --model DIR --source … --target … --stage cross-attention --layer 5`
              vs  `python -c` importing transformers, loading the checkpoint, one forward
  run         `walkthrough run --model DIR …` to a pipe (seconds)
  memory      peak RSS of that `run` vs the checkpoint's size
Targets (issue 9): forward <= 1.0x, step <= 0.5x, run <= 5 s, memory <= 1.5x.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from base import THREADS, host_line  # pins the BLAS threads, for this process and its children

SOURCE = "The cat is sleeping very comfortably."
TARGET = "Die Katze schläft bequem."
VOCAB = 58101
TEXT = [
    "the cat is sleeping very comfortably.", "die Katze schläft sehr bequem.",
    "a dog runs in the park!", "ein Hund läuft im Park!",
]  # fmt: skip


def make_checkpoint(folder: Path) -> None:
    """An opus-mt-en-de-shaped random Marian checkpoint with its tokenizer files, in ``folder``."""
    import sentencepiece as spm
    import torch
    import transformers

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXT * 8), model_prefix=str(folder / "spm"), vocab_size=60,
        model_type="unigram", character_coverage=1.0, hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    sp = spm.SentencePieceProcessor(model_file=str(folder / "spm.model"))
    pieces = ["</s>", "<unk>"] + [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]
    pieces += [f"▁filler{i}" for i in range(VOCAB - 1 - len(pieces))] + ["<pad>"]
    (folder / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}), encoding="utf-8")
    for name in ("source.spm", "target.spm"):
        (folder / name).write_bytes((folder / "spm.model").read_bytes())
    config = transformers.MarianConfig(
        vocab_size=VOCAB, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
        decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, max_position_embeddings=512,
        activation_function="swish", scale_embedding=True, pad_token_id=VOCAB - 1,
        decoder_start_token_id=VOCAB - 1, eos_token_id=0, forced_eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.MarianMTModel(config).save_pretrained(folder)


def median_time(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def command(args: list[str], peaks: list[int] | None = None) -> float:
    """Seconds of one run of ``args`` to a pipe; its own peak RSS in bytes appended to ``peaks``.

    ``os.wait4`` gives this child's peak alone (RUSAGE_CHILDREN would give the largest child so far).
    """
    start = time.perf_counter()
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    child.stdout.read()  # type: ignore[union-attr]  # drain the pipe until the child closes it
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    child.stdout.close()  # type: ignore[union-attr]
    if child.returncode != 0:
        raise subprocess.CalledProcessError(child.returncode, args)
    if peaks is not None:
        peaks.append(usage.ru_maxrss * 1024)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="make (or reuse) the checkpoint in this folder")
    parser.add_argument("--make", type=Path, help=argparse.SUPPRESS)  # the child that makes it
    args = parser.parse_args()
    if args.make is not None:
        make_checkpoint(args.make)
        return
    print(host_line(), flush=True)
    tmp = tempfile.TemporaryDirectory() if args.keep is None else None
    folder = args.keep or Path(tmp.name)  # type: ignore[union-attr]
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "model.safetensors").is_file():
        start = time.perf_counter()
        # In a child: a child's peak RSS starts from its parent's, and torch would make this one large.
        subprocess.run([sys.executable, __file__, "--make", str(folder)], check=True)
        print(f"checkpoint made in {time.perf_counter() - start:.1f} s: {folder}")
    size = (folder / "model.safetensors").stat().st_size
    walkthrough = [sys.executable, "-m", "transformer_walkthrough"]
    env_note = f"threads {THREADS}; median of {args.rounds}; a shared, noisy machine: read ratios, not times"
    print(env_note)

    run_args = [*walkthrough, "run", "--model", str(folder), "--source", SOURCE, "--target", TARGET]
    peaks: list[int] = []
    run_s = statistics.median(command(run_args, peaks) for _ in range(args.rounds))
    peak = max(peaks)
    print(f"run to a pipe:  {run_s:6.2f} s   (target <= 5 s)")
    print(f"peak RSS of run: {peak / 1e6:6.0f} MB = {peak / size:.2f} x the checkpoint ({size / 1e6:.0f} MB)"
          "   (target <= 1.5x)")  # fmt: skip

    step = [*walkthrough, "step", "--model", str(folder), "--source", SOURCE, "--target", TARGET,
            "--stage", "cross-attention", "--layer", "5"]  # fmt: skip
    load = f"transformers.MarianMTModel.from_pretrained({str(folder)!r}, attn_implementation='eager')"
    peer = (
        f"import torch, transformers; torch.set_num_threads({THREADS}); m = {load}.eval();"
        "torch.no_grad().__enter__(); m(input_ids=torch.tensor([[5, 6, 7, 8, 9, 10, 0]]),"
        f" decoder_input_ids=torch.tensor([[{VOCAB - 1}, 5, 6, 7, 0]]))"
    )
    ours_step = statistics.median(command(step) for _ in range(args.rounds))
    theirs_step = statistics.median(command([sys.executable, "-c", peer]) for _ in range(args.rounds))
    print(f"step end to end: {ours_step:6.2f} s vs python -c transformers {theirs_step:6.2f} s = "
          f"{ours_step / theirs_step:.2f}x   (target <= 0.5x)")  # fmt: skip

    import torch
    import transformers

    from transformer_walkthrough.checkpoints.run import walk
    from transformer_walkthrough.model.transformer import run_forward

    torch.set_num_threads(THREADS)
    walked = walk(str(folder), SOURCE, TARGET, dtype="float32")
    trace = walked.trace
    src, tgt = list(trace.source_ids), list(trace.target_ids)
    model = transformers.MarianMTModel.from_pretrained(folder, attn_implementation="eager").eval()
    inputs = {"input_ids": torch.tensor([src]), "decoder_input_ids": torch.tensor([tgt])}

    def theirs() -> None:
        with torch.inference_mode():
            model(**inputs)

    def ours() -> None:
        run_forward(walked.config, walked.weights, source_ids=src, target_ids=tgt)

    ours(), theirs()  # warm up
    t_ours, t_theirs = [], []
    for _ in range(args.rounds):  # in turns, so that a busy moment hurts both
        t_ours.append(median_time(ours, 1))
        t_theirs.append(median_time(theirs, 1))
    a, b = statistics.median(t_ours), statistics.median(t_theirs)
    print(f"forward, full trace: {a * 1e3:7.1f} ms vs transformers eager {b * 1e3:7.1f} ms = {a / b:.2f}x"
          f"   (target <= 1.0x; {len(src)} + {len(tgt)} tokens)")  # fmt: skip
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
