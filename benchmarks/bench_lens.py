"""The logit lens and the attention overview: what they cost beside one traced forward pass.

Run: python benchmarks/bench_lens.py [--rounds N] [--folder DIR]

lens        A random GPT-2-small-shaped checkpoint (bench_gpt2.make_checkpoint: d_model 768, 12
            layers, a 50,257-token vocabulary, float32; made in DIR or a temporary folder), its
            10-token prompt. Timed in turns (bench_forward.block_times), each the median of its
            turns, the ratios the median of each turn's ratio:
              forward   run_forward, every matrix recorded: one traced forward
              lens      logit_lens on that trace and the top token of every cell: 12 layers × 10
                        positions through ln_f and the 768 × 50,257 output layer, and the softmax
              command   what `walkthrough lens` does once the checkpoint is loaded: the forward,
                        the lens and the table laid out (to a null console)
            And end to end, fresh processes each: `walkthrough lens --model DIR --prompt …` against
            `walkthrough stages` with the same options (the same loading and traced forward, nothing
            projected). Target: lens <= 1.5x the forward.
attention   The paper's base size (benchmarks/base.py: 6 + 6 layers, 8 heads, 64 + 64 tokens):
            the overview of all 18 attention stages' 144 heads laid out and printed to a null
            console, plain (a pipe) and coloured (truecolor); and `walkthrough attention` end to
            end in a fresh process, output to a pipe, against `walkthrough stages` (the same
            start-up and forward pass, nothing drawn). Target: the overview prints in <= 1 s.
"""

from __future__ import annotations

import io
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from base import THREADS, base_config, host_line  # first: pins the BLAS threads before NumPy loads
from bench_forward import block_times, medians, paired_ratio, quartiles, turn_ratios
from bench_gpt2 import PROMPT, make_checkpoint
from harness import arguments, checkpoint, options


def _console(coloured: bool):
    """What the commands print through, to memory: a pipe's (plain), or a truecolor terminal's."""
    from transformer_walkthrough.views.widgets import TrimmedConsole

    if coloured:
        return TrimmedConsole(file=io.StringIO(), width=100, force_terminal=True, color_system="truecolor")
    return TrimmedConsole(file=io.StringIO(), width=100, force_terminal=False, no_color=True)


def lens_turns(folder: Path, rounds: int) -> dict[str, list[float]]:
    from transformer_walkthrough.checkpoints import checkpoint_config, checkpoint_weights, load_gpt2
    from transformer_walkthrough.model.lens import logit_lens
    from transformer_walkthrough.model.transformer import run_forward
    from transformer_walkthrough.views.lens import lens_table
    from transformer_walkthrough.views.widgets import View

    ckpt = load_gpt2(folder)
    config = checkpoint_config(ckpt, "float32", PROMPT)
    w = checkpoint_weights(config, ckpt)
    ids = ckpt.tokenizer.encode(PROMPT)
    assert len(ids) == 10, ids
    trace = run_forward(config, w, target_ids=ids)
    view = View(width=100)

    def command() -> None:
        traced = run_forward(config, w, target_ids=ids)
        table, _ = lens_table(logit_lens(traced), view)
        _console(False).print(table)

    return block_times(
        {
            "forward": lambda: run_forward(config, w, target_ids=ids),
            "lens": lambda: logit_lens(trace).top(1),
            "command": command,
        },
        rounds,
    )


def attention_times(rounds: int) -> tuple[float, float, float, int]:
    """The overview at base size, plain and coloured (best of ``rounds``), and its lines."""
    from transformer_walkthrough.model.transformer import run_forward
    from transformer_walkthrough.views.blocks import print_all
    from transformer_walkthrough.views.overview import attention_stages, overview
    from transformer_walkthrough.views.widgets import View

    trace = run_forward(base_config())
    stages = attention_stages(trace)
    best = {True: float("inf"), False: float("inf")}
    lines = 0
    for _ in range(rounds):
        for coloured in (False, True):
            console = _console(coloured)
            start = time.perf_counter()
            view = View(width=100, colors="truecolor")
            print_all(console, overview(trace, stages, None, view, coloured))
            best[coloured] = min(best[coloured], time.perf_counter() - start)
            if not coloured:
                lines = console.file.getvalue().count("\n")
    start = time.perf_counter()
    run_forward(base_config())
    return best[False], best[True], time.perf_counter() - start, lines


def fresh_processes(commands: dict[str, list[str]], rounds: int) -> dict[str, float]:
    """Median seconds of each command in a fresh process, output to a pipe, taken in turns."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, args in commands.items():
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "transformer_walkthrough", *args], capture_output=True, check=True
            )
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def end_to_end(rounds: int) -> dict[str, float]:
    """`walkthrough attention` and `walkthrough stages` on the base config (``fresh_processes``)."""
    from transformer_walkthrough.config import config_to_yaml

    with tempfile.TemporaryDirectory(prefix="bench-lens-") as folder:
        config = Path(folder) / "base.yaml"
        config.write_text(config_to_yaml(base_config()), encoding="utf-8")
        return fresh_processes({name: [name, "-c", str(config)] for name in ("attention", "stages")}, rounds)


def main() -> int:
    args = arguments(options(__doc__, rounds=7))
    print(host_line(), flush=True)

    folder = checkpoint(args.folder, make_checkpoint, "a random GPT-2 small")
    turns = lens_turns(folder, args.rounds)
    t = medians(turns)
    lens = paired_ratio(turns, "lens", "forward")
    command = paired_ratio(turns, "command", "forward")
    print(f"GPT-2 small's shape, a 10-token prompt, float32, {THREADS} threads, {args.rounds} turns")
    print(f"  one traced forward                 {t['forward'] * 1e3:7.1f} ms")
    print(
        f"  the lens of its 12 layers          {t['lens'] * 1e3:7.1f} ms: {lens:.2f}x the forward "
        f"(middle half of the turns {quartiles(turn_ratios(turns, 'lens', 'forward'))})  (<= 1.5)"
    )
    print(
        f"  forward + lens + table             {t['command'] * 1e3:7.1f} ms: {command:.2f}x the forward "
        f"(middle half {quartiles(turn_ratios(turns, 'command', 'forward'))})"
    )
    e2e = fresh_processes(
        {name: [name, "--model", str(folder), "--prompt", PROMPT] for name in ("lens", "stages")},
        args.e2e_rounds,
    )
    print(
        f"  end to end: walkthrough lens {e2e['lens']:.2f} s vs walkthrough stages {e2e['stages']:.2f} s "
        f"(the same start-up, loading and traced forward): {e2e['lens'] / e2e['stages']:.2f}x"
    )

    plain, coloured, forward, lines = attention_times(max(3, args.rounds // 2))
    print("base size (6 + 6 layers, 8 heads, 64 + 64 tokens): 18 attention stages, 144 heads")
    print(f"  overview printed, plain            {plain:7.3f} s  ({lines:,} lines)  (<= 1 s)")
    print(f"  overview printed, coloured         {coloured:7.3f} s  (<= 1 s)")
    print(f"  the traced forward it reads        {forward:7.3f} s")
    e2e = end_to_end(args.e2e_rounds)
    print(
        f"  end to end: walkthrough attention {e2e['attention']:.2f} s vs walkthrough stages "
        f"{e2e['stages']:.2f} s (the same start-up and forward pass): the overview adds "
        f"{e2e['attention'] - e2e['stages']:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
