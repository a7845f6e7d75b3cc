"""rlinf: RL training that plans its own execution.

A user enters through two doors, and the root package re-exports nothing else: the command line (the ``rlinf``
console script, :func:`rlinf.cli.main`; ``python -m rlinf``) and the workload API, :mod:`rlinf.api`, which a
workload (built-in or a user's) imports rlinf through (``docs/workloads.md``).

The package is split by layer (each imports only those below it; ``pyproject.toml``'s import contracts):
``rlinf.core`` (the values every part shares: cluster, workflow, plan, program, timeline, trace, cost model, and
the M2Flow lowering), ``rlinf.algorithms`` (RL math), ``rlinf.api`` (the workload API),
``rlinf.analytic`` (the analytic model of LLM-scale RL), ``rlinf.workloads`` (the built-in workloads, plug-ins
like a user's), ``rlinf.app`` (training, profiling, planning, validation, checkpoints), ``rlinf.capacity``
(capacity reports) and ``rlinf.commands`` / ``rlinf.cli`` (the command line).
"""

__all__: list[str] = []
