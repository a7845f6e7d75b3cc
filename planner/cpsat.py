"""CP-SAT candidates: the k best points of the plan space under the surrogate of :mod:`planner.surrogate`.

The model mirrors the space: one model per partition (which components are collocated), per group a one-hot device
count among those at which some member's cost changes (:attr:`planner.tables.CostTables.group_sizes`; the
counts between are never faster, only larger), per stream edge a one-hot granularity, the loop's stage count, and an
offload flag per component in a shared group. Cost tables enter through ``AddElement`` on (size, micro-batch)
indices, seconds scaled to integer ticks, memory to KiB. The k best distinct points come from re-solving with a
no-good cut on the previous solution's decision literals; one search worker and a fixed seed make it deterministic.
"""

from __future__ import annotations

import heapq
from typing import Any

import attrs
from ortools.sat.python import cp_model

from planner.space import PlanPoint, PlanSpace, canonical_granularity
from planner.surrogate import Phase, phases, sides_share_devices, staleness_sides, sync_terms
from planner.tables import CostTables, micro_batch_options, tick_for
from rlinf.core.errors import require

KIB = 1024


@attrs.frozen
class ScoredPoint:
    """A point with the surrogate seconds CP-SAT assigned it."""

    point: PlanPoint
    surrogate_s: float


class _Model:
    """The CP-SAT model of one partition of the space; solved again with a no-good cut after each solution.

    Every cost enters linearly: a boolean per (group, device count, micro-batch count) selects a table row, so
    the objective (a sum of maxima of linear terms, as in :func:`planner.surrogate.estimate`) has a tight linear
    relaxation."""

    def __init__(
        self, tables: CostTables, partition: int, staleness: int = 0, behind_buffer: tuple[str, ...] = ()
    ) -> None:
        self.tables = tables
        self.partition = partition
        self.staleness = staleness
        self.behind_buffer = behind_buffer
        self.space: PlanSpace = tables.space
        self.groups = self.space.partitions[partition]
        self.pools = self.space.pools[partition]
        self.sizes = [tables.search_sizes(g, pool) for g, pool in zip(self.groups, self.pools, strict=True)]
        self.workflow = self.space.workflow
        self.model = cp_model.CpModel()
        self.tick_s = tick_for(tables)
        loop = self.workflow.loop
        self.loop_names: tuple[str, ...] = (loop.env, loop.policy) if loop is not None else ()
        self.feasible = all(self.sizes) and self.space.fits_budgets(
            tuple(s[0] for s in self.sizes), self.pools
        )
        if not self.feasible:
            return
        self._decisions()
        self._micro_batches()
        self._components()
        self._objective()

    def _ticks(self, seconds: float) -> int:
        return int(round(seconds / self.tick_s))

    def _one_hot(self, name: str, count: int) -> list[cp_model.IntVar]:
        return [self.model.new_bool_var(f"{name}[{i}]") for i in range(count)]

    # -------------------------------------------------------------- decisions
    def _decisions(self) -> None:
        space, m = self.space, self.model
        self.size_choice = [self._one_hot(f"size[{g}]", len(sizes)) for g, sizes in enumerate(self.sizes)]
        for choice in self.size_choice:
            m.add_exactly_one(choice)
        for pool in dict.fromkeys(self.pools):
            m.add(
                sum(
                    d * z
                    for sizes, choice, p in zip(self.sizes, self.size_choice, self.pools, strict=True)
                    if p == pool
                    for d, z in zip(sizes, choice, strict=True)
                )
                <= space.budget(pool)
            )
        self.offload: dict[str, cp_model.IntVar] = {}
        for group in self.groups:
            for name in space.offloadable(group):
                self.offload[name] = m.new_bool_var(f"offload[{name}]")

    def _phased(self, last: str) -> cp_model.IntVar:
        """A boolean that is true when a component at or before ``last`` (topological order) offloads: the
        members of the group's phase before its last then run whole (see the surrogate)."""
        position = self.space.order.index(last)
        upstream = [flag for n, flag in self.offload.items() if self.space.order.index(n) <= position]
        phased = self.model.new_bool_var(f"phased[{last}]")
        for flag in upstream:
            self.model.add_implication(flag, phased)
        if not upstream:
            self.model.add(phased == 0)
        return phased

    def _micro_batches(self) -> None:
        """A one-hot micro-batch count per component; a count is realizable when an edge can carry it (a
        stream neighbour with at least as many micro-batches, or a loop component, whose count is separate)."""
        m, space, workflow = self.model, self.space, self.workflow
        self.micro: dict[str, list[cp_model.IntVar]] = {}
        for name in space.order:
            if name in self.loop_names and self.loop_names[0] in self.micro:
                self.micro[name] = self.micro[self.loop_names[0]]
                continue
            self.micro[name] = self._one_hot(f"micro[{name}]", len(micro_batch_options(space, name)))
            m.add_exactly_one(self.micro[name])
        for name in space.order:
            if name in self.loop_names or len(self.micro[name]) == 1:
                continue
            neighbours = [
                e.dst if e.src == name else e.src
                for e in workflow.incoming(name) + workflow.outgoing(name)
                if e.kind == "stream"
            ]
            if any(n in self.loop_names for n in neighbours):
                continue
            for j, flag in enumerate(self.micro[name]):
                m.add(flag <= sum(z for n in neighbours for z in self.micro[n][j:]))

    # -------------------------------------------------------------- components
    def _rows(self, g: int, name: str) -> tuple[list, list]:
        """Booleans selecting (size, micro-batch count) of ``name`` in group ``g``, with their profiles."""
        m, space = self.model, self.space
        counts = micro_batch_options(space, name)
        pairs, profiles = [], []
        by_size = []
        for i, size in enumerate(self.sizes[g]):
            row = []
            for j, count in enumerate(counts):
                u = m.new_bool_var(f"row[{g},{name},{i},{j}]")
                m.add_implication(u, self.size_choice[g][i])
                m.add_implication(u, self.micro[name][j])
                row.append(u)
                pairs.append(u)
                profiles.append(self.tables.profile(name, size, count, self.pools[g], self.staleness >= 2))
            m.add(sum(row) == self.size_choice[g][i])
            by_size.append(row)
        for j in range(len(counts)):
            m.add(sum(row[j] for row in by_size) == self.micro[name][j])
        return pairs, profiles

    def _components(self) -> None:
        tables = self.tables
        self.busy, self.first, self.switch = {}, {}, {}
        for g, group in enumerate(self.groups):
            capacity_kib = tables.capacity(self.pools[g]) // KIB
            activation = {}
            for name in group:
                pairs, profiles = self._rows(g, name)
                self.busy[name] = sum(self._ticks(p.busy_s) * u for u, p in zip(pairs, profiles, strict=True))
                self.first[name] = sum(
                    self._ticks(p.first_s) * u for u, p in zip(pairs, profiles, strict=True)
                )
                activation[name] = sum(
                    -(-p.activation_bytes // KIB) * u for u, p in zip(pairs, profiles, strict=True)
                )
                self.switch[name] = (
                    self._ticks(tables.switch_s[name]) * self.offload[name] if name in self.offload else 0
                )
            self._memory(group, activation, capacity_kib)

    def _memory(self, names: tuple[str, ...], activation: dict, capacity_kib: int) -> None:
        m, tables = self.model, self.tables
        state = {n: -(-tables.state_bytes[n] // KIB) for n in names}
        off = {n: self.offload[n] for n in names if n in self.offload}
        resident = sum(state[n] * (1 - off[n]) if n in off else state[n] for n in names)
        for n in names:
            m.add(resident + activation[n] + (state[n] * off[n] if n in off else 0) <= capacity_kib)
        in_loop = [n for n in names if n in self.loop_names]
        if len(in_loop) == 2 and all(n in off for n in in_loop):
            both = [off[x] for x in in_loop]
            for n in in_loop:
                m.add(
                    resident + activation[n] + sum(state[x] for x in in_loop) <= capacity_kib
                ).only_enforce_if(both)

    # -------------------------------------------------------------- objective
    def _fill(self, members: tuple[str, ...], total: Any) -> Any:
        """Time to the first output micro-batch of a group's members in one phase (see the surrogate)."""
        in_loop = [n for n in members if n in self.loop_names]
        if len(in_loop) == 2:
            return total
        if in_loop:
            return total - self.busy[in_loop[0]] - self.switch[in_loop[0]]
        last = members[-1]
        fill = self.model.new_int_var(0, _HIGH, f"fill[{last}]")
        self.model.add(fill >= sum(self.first[n] for n in members))
        self.model.add(
            fill >= total - self.busy[last] - self.switch[last] + self.first[last]
        ).only_enforce_if(self._phased(last))
        return fill

    def _phase(self, index: int, phase: Phase) -> cp_model.IntVar:
        m = self.model
        totals = [sum(self.busy[n] + self.switch[n] for n in members) for _, members in phase.members]
        fills = [
            self._fill(members, total) for (_, members), total in zip(phase.members, totals, strict=True)
        ]
        seconds = m.new_int_var(0, _HIGH, f"phase[{index}]")
        for total, fill in zip(totals, fills, strict=True):
            m.add(seconds >= total + sum(fills) - fill)
        loop = self.workflow.loop
        for chain in phase.chains:
            around = sum(self.busy[n] + self.switch[n] for n in chain)
            m.add(seconds >= around + sum(self.first[n] for n in phase.names if n not in chain))
        if loop is not None and phase.loop_cut:
            pool_of = {n: p for g, p in zip(self.groups, self.pools, strict=True) for n in g}
            table = self.tables.loop_transfer_s
            if pool_of[loop.env] != pool_of[loop.policy]:
                table = self.tables.loop_host_transfer_s
            transfer = [self._ticks(loop.num_steps * table[c]) for c in self.space.loop_ladder]
            moved = sum(t * z for t, z in zip(transfer, self.micro[loop.env], strict=True))
            m.add(
                seconds
                >= loop.num_steps * (self.first[loop.env] + self.first[loop.policy]) + moved + sum(fills)
            )
        return seconds

    def _objective(self) -> None:
        if self.staleness:
            producer, trainer = staleness_sides(self.tables, self.groups, self.behind_buffer)
            sides = [
                sum(self._phase(i + offset, phase) for i, phase in enumerate(side))
                for offset, side in ((0, producer), (len(producer), trainer))
            ]
            if sides_share_devices(self.workflow, self.groups, self.behind_buffer):
                terms = [sides[0] + sides[1]]
            else:
                both = self.model.new_int_var(0, _HIGH, "sides")
                self.model.add(both >= sides[0])
                self.model.add(both >= sides[1])
                terms = [both]
        else:
            terms = [self._phase(i, phase) for i, phase in enumerate(phases(self.tables, self.groups))]
        group_of = {n: g for g, names in enumerate(self.groups) for n in names}
        pool_of = {n: self.pools[g] for n, g in group_of.items()}
        sync = sum(self._ticks(t) for t in sync_terms(self.tables, group_of, pool_of))
        self.model.minimize(sum(terms) + sync)

    # -------------------------------------------------------------- solutions
    def decode(self, solver: cp_model.CpSolver) -> tuple[PlanPoint, list]:
        """The point of the current solution and its true decision literals (for the no-good cut).

        Edge granularities follow from the micro-batch counts: ``min`` of the two ends (the count of the
        non-loop end when the other is in the loop), which the lowering turns back into the same counts."""
        space = self.space
        literals: list[Any] = []
        sizes = []
        for choice, options in zip(self.size_choice, self.sizes, strict=True):
            i = next(i for i, z in enumerate(choice) if solver.value(z))
            literals.append(choice[i])
            sizes.append(options[i])
        counts = {}
        for name in space.order:
            j = next(j for j, z in enumerate(self.micro[name]) if solver.value(z))
            counts[name] = micro_batch_options(space, name)[j]
            if self.micro[name][j] not in literals:
                literals.append(self.micro[name][j])
        offload = frozenset(n for n, flag in self.offload.items() if solver.value(flag))
        literals += [flag if n in offload else flag.negated() for n, flag in self.offload.items()]
        point = PlanPoint(
            groups=self.groups,
            sizes=tuple(sizes),
            granularity=canonical_granularity(self.workflow, counts),
            offload=offload,
            pools=self.pools,
            staleness=self.staleness,
            buffer_before=self.behind_buffer,
        )
        return point, literals


_HIGH = 2**40
"""Upper bound of tick-valued variables (ticks are scaled so that busy times are about 1e7)."""


def best_points(tables: CostTables, *, k: int, time_limit_s: float, seed: int) -> list[ScoredPoint]:
    """The ``k`` best distinct points by the surrogate, best first; fewer when the space holds fewer feasible
    points (none when nothing fits). See :func:`solve`."""
    return solve(tables, k=k, time_limit_s=time_limit_s, seed=seed)[0]


def solve(
    tables: CostTables, *, k: int, time_limit_s: float, seed: int
) -> tuple[list[ScoredPoint], list[ScoredPoint]]:
    """The ``k`` best distinct points by the surrogate, best first, and the best point of each partition (in
    partition order; the starts of :mod:`planner.refine`).

    One model per partition; each is solved for its best point, then the overall best is taken and its model
    solved again with that point excluded, until ``k`` points are taken. Ties go to the earlier partition."""
    require(
        isinstance(k, int) and k >= 1, "k", k, "must be an integer >= 1", "ask for at least one candidate"
    )
    require(time_limit_s > 0, "time_limit_s", time_limit_s, "must be > 0", "give the solver some seconds")
    solver = cp_model.CpSolver()
    solver.parameters.num_search_workers = 1
    solver.parameters.random_seed = seed
    # Small one-hot models: presolve and LP relaxations cost more than they save here. Measured on the shipped
    # traces at 256 devices: the same sequence of surrogate values as with both on, in about half the time.
    solver.parameters.linearization_level = 0
    solver.parameters.cp_model_presolve = False
    # The model's own variable order (sizes, offload, micro-batch counts, then table rows) branches faster than
    # the default portfolio: measured on the shipped LLM traces at 8-1024 devices, the same points (each solve
    # is proven optimal either way) in about 25% less time.
    solver.parameters.search_branching = cp_model.FIXED_SEARCH
    models = [
        _Model(tables, p, staleness, cut)
        for p in range(len(tables.space.partitions))
        for staleness, cut in tables.space.staleness_modes
    ]
    models = [model for model in models if model.feasible]
    queue: list[tuple[int, int, PlanPoint, list]] = []
    # The budget is CP-SAT's deterministic time (about a second of work per unit on one core), not wall time,
    # so a loaded machine cannot change which candidates come back: same inputs and seed, same plans.
    spent = [0.0]

    def solve_again(p: int) -> None:
        remaining = time_limit_s - spent[0]
        if remaining <= 0:
            return
        solver.parameters.max_deterministic_time = remaining
        status = solver.solve(models[p].model)
        spent[0] += solver.deterministic_time
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            point, literals = models[p].decode(solver)
            heapq.heappush(queue, (int(round(solver.objective_value)), p, point, literals))

    for p in range(len(models)):
        solve_again(p)
    firsts = [ScoredPoint(point=point, surrogate_s=ticks * models[p].tick_s) for ticks, p, point, _ in queue]
    found: list[ScoredPoint] = []
    while queue and len(found) < k:
        ticks, p, point, literals = heapq.heappop(queue)
        found.append(ScoredPoint(point=point, surrogate_s=ticks * models[p].tick_s))
        models[p].model.add_bool_or([literal.negated() for literal in literals])
        solve_again(p)
    return found, sorted(firsts, key=lambda item: tables.space.partition_of(item.point))
