"""The transformer and its arithmetic, from the functions up to the trace.

``functional`` (pure NumPy: each forward with its backward) and ``architecture`` (Figure 1
described once: stage ids, sublayers, parameter specs) → ``kinds`` (each kind of stage, owning
everything about it: parameters, forward that records, backward, second computation, explainers,
formulas) →
``transformer`` (the wiring) → ``trace`` (what a pass leaves behind); ``weights`` names the
parameters (drawn from the seed; an .npz is read by ``files.weights``), ``backprop`` walks a trace
back, ``training`` and ``generation`` use them. ``cell`` and ``numbers`` are how the kinds' explainers
write a cell's arithmetic. The model imports nothing from the layers above it (views, files,
compare, checkpoints): they import it (``[tool.importlinter]`` in pyproject.toml says so).
"""

from .transformer import Weights, forward, init_weights, run_forward

__all__ = ["Weights", "forward", "init_weights", "run_forward"]
