"""Training the toy: one step of ours against the same step in PyTorch eager, and time to learn.

Run: python benchmarks/bench_train.py [--rounds N]

One step = forward pass + backward pass + Adam update, float64, the default config (the article's
example), in one process; each the median of its runs, taken in blocks, in turns, with pauses so that
neither library's spinning threads slow the other. Targets: ours <= 0.5 x torch per step (tiny
matrices are where NumPy's low overhead wins); wall time from random weights to loss < 0.01 < 1 s.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench_forward import block_times, host_line, medians, paired_ratio  # first: pins the BLAS threads

from transformer_walkthrough.config import Config
from transformer_walkthrough.model.backprop import next_tokens
from transformer_walkthrough.model.training import Adam, loss_and_gradients, parameters
from transformer_walkthrough.model.transformer import init_weights, run_forward


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    print(host_line(), flush=True)

    import torch

    from transformer_walkthrough.compare.reference import TorchTransformer

    config = Config()
    lr = config.training.learning_rate

    w = init_weights(config)
    adam = Adam(parameters(w), lr)

    def ours_step() -> None:
        _, grads = loss_and_gradients(config, w)
        adam.step(grads)

    tw = init_weights(config)
    trace = run_forward(config, tw)
    net = TorchTransformer(torch, config, tw)  # the harness the tests use: every parameter a leaf
    optimizer = torch.optim.Adam([t for t, _ in net.tensors.values()], lr=lr)
    src, tgt = config.token_ids(trace.source_tokens), config.token_ids(trace.target_tokens)
    targets = torch.tensor(next_tokens(trace)[:-1])

    def torch_step() -> None:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(net.forward(src, tgt)[:-1], targets)
        loss.backward()
        optimizer.step()

    turns = block_times({"ours": ours_step, "torch": torch_step}, args.rounds, repeats=50)
    median = medians(turns)

    # From fresh random weights to a loss under 0.01, as `walkthrough train` does it.
    fresh = init_weights(config)
    fresh_adam = Adam(parameters(fresh), lr)
    start = time.perf_counter()
    steps = 0
    while True:
        loss, grads = loss_and_gradients(config, fresh)
        if loss < 0.01 or steps > 10_000:
            break
        fresh_adam.step(grads)
        steps += 1
    learn = time.perf_counter() - start

    ratio = paired_ratio(turns, "ours", "torch")  # the median of each turn's ratio
    print(f"one training step (forward + backward + Adam), float64, default config, {args.rounds} x 50 runs")
    print(f"{'ours':<8}{median['ours'] * 1e3:>9.3f} ms")
    print(f"{'torch':<8}{median['torch'] * 1e3:>9.3f} ms")
    print(f"ours / torch = {ratio:.2f} (target <= 0.5)")
    print(f"to loss < 0.01 from seed {config.seed}: {steps} steps, {learn:.2f} s (target < 1 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
