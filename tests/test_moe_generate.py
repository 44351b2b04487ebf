"""``generate`` shows each token's experts: for every generation step, the token it read last (the
newest; at step 0 the prompt's last) and, in each sparse layer, the experts its router chose and
their weights. Checked against one full pass over the whole sequence (the routing of that token's
row in each ``experts`` stage): the toy's full passes, a checkpoint's cached steps (one row a step)
and the CLI's table, read back."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import load_config
from transformer_walkthrough.model.generation import Step, compare, full_passes, generate, generated_ids
from transformer_walkthrough.model.training import generate as decode
from transformer_walkthrough.model.transformer import init_weights, run_forward

MOE_PATH = Path(__file__).resolve().parents[1] / "configs" / "moe-style.yaml"
MOE = load_config(MOE_PATH)
ROW = re.compile(
    r"\s*(?:(?P<step>\d+)\s+(?P<token>\S+) \(pos (?P<pos>\d+)\))?\s+(?P<layer>\d+)"
    r"\s+(?P<experts>e\d+ × \S+(?:,\s+e\d+ × \S+)*)"
)


def _full_pass_routes(config, w, steps: list[Step]) -> list[list[tuple[int, tuple[int, ...], np.ndarray]]]:
    """Each step's routing of its last row, read from one recorded pass over everything fed."""
    trace = run_forward(config, w, target_ids=generated_ids(steps)[:-1])  # the last choice is never fed
    m = config.model
    out = []
    for s in steps:
        row = s.positions[-1]
        out.append([
            (i, tuple(int(e) for e in np.rint(trace[f"decoder.{i}.experts"]["chosen"][row])),
             trace[f"decoder.{i}.experts"]["routing_weights"][row])
            for i in range(m.num_decoder_layers) if m.sparse(i)
        ])  # fmt: skip
    return out


def _check(config, w, steps: list[Step]) -> None:
    expected = _full_pass_routes(config, w, steps)
    for s, routes in zip(steps, expected, strict=True):
        assert [r.layer for r in s.routes] == [layer for layer, _, _ in routes]
        for r, (_, chosen, weights) in zip(s.routes, routes, strict=True):
            assert r.experts == chosen
            assert np.max(np.abs(np.array(r.weights) - weights)) <= 1e-12


def test_each_steps_experts_are_its_last_rows_in_one_full_pass() -> None:
    w = init_weights(MOE)
    steps, _ = decode(MOE, w, 6)
    assert all(len(s.routes) == MOE.model.num_decoder_layers for s in steps)
    _check(MOE, w, steps)
    k = MOE.model.experts_per_token
    assert all(len(r.experts) == k and len(set(r.experts)) == k for s in steps for r in s.routes)
    dense = load_config(MOE_PATH.with_name("llama-style.yaml"))
    assert all(s.routes == () for s in decode(dense, init_weights(dense), 3)[0])


def test_the_generate_table_shows_each_tokens_experts_at_80_columns(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["generate", "-c", str(MOE_PATH), "--max-len", "5"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("The experts of each token read (each sparse layer: expert × weight)")
    w = init_weights(MOE)
    steps, _ = decode(MOE, w, 5, 3)  # the CLI's stop for untrained weights: three repeats
    expected = _full_pass_routes(MOE, w, steps)
    table = [line for line in lines[start + 3 :] if ROW.fullmatch(line)]
    assert len(table) == sum(len(r) for r in expected)
    assert all(len(line) <= 80 for line in lines[start:])
    read = iter(table)
    for s, routes in zip(steps, expected, strict=True):
        for j, (layer, chosen, weights) in enumerate(routes):
            found = ROW.fullmatch(next(read))
            assert found is not None
            if j == 0:
                assert int(found["step"]) == s.index and int(found["pos"]) == s.positions[-1]
                assert found["token"] == MOE.vocabulary[s.ids[-1]]
            assert int(found["layer"]) == layer
            shown = re.findall(r"e(\d+) × (\S+?)(?:,|$)", found["experts"])
            assert tuple(int(e) for e, _ in shown) == chosen
            for (_, text), value in zip(shown, weights, strict=True):
                assert abs(float(text) - value) <= 0.5 * 10.0 ** -len(text.split(".")[1]) + 1e-12
    dense = runner.invoke(app, ["generate", "-c", str(MOE_PATH.with_name("llama-style.yaml"))])
    assert "The experts of each token" not in dense.stdout


@pytest.mark.parametrize("name", ["qwen2_moe", "olmoe"])
def test_the_cached_steps_route_as_the_full_pass(moe_family, name) -> None:
    """A checkpoint's continuation with the key/value cache: each step feeds one token, and its
    routing equals that token's row in one full pass, and the reader without a cache."""
    from transformer_walkthrough.checkpoints.run import continue_prompt, load

    loaded = load(str(moe_family[name]), "The cat is", "float64", prompt=True)
    done = continue_prompt(loaded, max_len=8)
    steps = done.steps
    assert len(steps) > 2 and all(len(s.ids) == 1 for s in steps[1:])  # one new row a step: cached
    _check(done.config, done.weights, steps)
    full = generate(full_passes(done.config, done.weights), loaded.ids, len(steps))
    for cached, whole in zip(steps, full, strict=True):
        for a, b in zip(cached.routes, whole.routes, strict=True):
            assert a.layer == b.layer and a.experts == b.experts
            assert np.max(np.abs(np.array(a.weights) - np.array(b.weights))) <= 1e-12
    assert compare(done.config, done.weights, steps).routing <= 1e-12


def test_generate_with_a_prompt_shows_the_routing_and_compares_it(moe_family) -> None:
    result = CliRunner().invoke(
        app, ["generate", "--model", str(moe_family["mixtral"]), "--prompt", "The cat is", "--max-len", "4",
              "--dtype", "float64", "--compare"],
        env={"COLUMNS": "80"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "The experts of each token read" in result.stdout
    routing = re.search(r"^\s*routing\s+(\S+)$", result.stdout, re.MULTILINE)
    assert routing and float(routing[1]) <= 1e-12
