"""The transformer and its arithmetic, from the functions up to the trace.

``functional`` (pure NumPy: each forward with its backward) and ``architecture`` (Figure 1
described once: stage ids, sublayers, parameter specs) → ``kinds`` (each kind of stage, owning
everything about it: parameters, forward that records, backward, second computation, explainers,
formulas) →
``transformer`` (the wiring) → ``trace`` (what a pass leaves behind); ``weights`` names the
parameters, ``backprop`` walks a trace back, ``training`` and ``generation`` use them.
"""

from .transformer import Weights, forward, init_weights, load_weights, run_forward

__all__ = ["Weights", "forward", "init_weights", "load_weights", "run_forward"]
