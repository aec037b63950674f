"""The planners: ``solve``, ``size_for``, ``replan`` and ``solve_fleet``, all one flow.

``scenario`` validates the question once (models, GPU pool, workload, connector, limits,
objective) and hands Rust one typed value; Rust returns the candidate rows, the node fill
patterns, the order's stages, a hint and valid bounds (``_core.candidates``); ``cpsat``
builds the one CP-SAT model over them and decides; ``plan`` turns the decision into a
:class:`Plan` with its placement. The public names live at the top level (``pdtp.solve``,
``pdtp.Plan`` …); this package keeps no re-exports so that importing it stays cheap.
"""
