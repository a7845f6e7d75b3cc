"""The planner: CP-SAT candidates over placement, mode, granularity and offload, ranked by simulation.

``candidates(workflow, cluster, costs, *, k, time_limit_s, seed)`` returns the k best plans by the surrogate
(CP-SAT's, refined over every device count by :mod:`planner.refine`); ``search(...)`` simulates them together
with the fixed-collocated, fixed-disaggregated and closed-form baselines' plans and returns the fastest that
fits. The plan space is defined once in :mod:`planner.space`; brute force and the other baselines live in
:mod:`planner.baselines`.
"""

from planner.search import SearchResult, candidates, search

__all__ = ["SearchResult", "candidates", "search"]
