"""The transformer and its arithmetic, from the functions up to the trace.

``functional`` (pure NumPy: each forward with its backward) and ``architecture`` (Figure 1
described once: the walk of every stage, its id, kind and inputs) → ``kinds`` (each kind of
stage, owning everything about it: parameter specs, forward that records, backward, second
computation, explainers, formulas) → ``parameters`` and ``size`` (read off the walk and the
kinds) → ``transformer`` (the wiring, from the walk) → ``trace`` (what a pass leaves behind);
``weights`` holds the parameters, ``backprop`` walks a trace back, ``training`` and
``generation`` use them. ``cell`` and ``numbers`` are how the kinds' explainers
write a cell's arithmetic; an .npz is read by ``files.weights``. The model imports nothing from the
layers above it (views, files, compare, checkpoints): they import it (``[tool.importlinter]`` in
pyproject.toml says so).
"""

from .transformer import Weights, forward, init_weights, run_forward

__all__ = ["Weights", "forward", "init_weights", "run_forward"]
