"""CP-SAT candidates: the k best points of the plan space under the surrogate of :mod:`planner.surrogate`.

The model mirrors the space exactly: a one-hot choice of partition (which consecutive components are collocated),
per usable group a one-hot device count, per stream edge a one-hot granularity, the loop's stage count, and an
offload flag per component in a shared group. Cost tables enter through ``AddElement`` on (size, micro-batch)
indices, seconds scaled to integer ticks, memory to KiB. The k best distinct points come from re-solving with a
no-good cut on the previous solution's decision literals; one search worker and a fixed seed make it deterministic.
"""

from __future__ import annotations

import heapq
from typing import Any

import attrs
from ortools.sat.python import cp_model

from planner.space import PlanPoint, PlanSpace
from planner.surrogate import CostTables, cut_kind, micro_batch_options, tick_for
from rlinf.errors import require

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

    def __init__(self, tables: CostTables, partition: int) -> None:
        self.tables = tables
        self.partition = partition
        self.parts = tables.space.partitions[partition]
        self.space: PlanSpace = tables.space
        self.workflow = self.space.workflow
        self.model = cp_model.CpModel()
        self.tick_s = tick_for(tables)
        loop = self.workflow.loop
        self.loop_names: tuple[str, ...] = (loop.env, loop.policy) if loop is not None else ()
        self._decisions()
        self._micro_batches()
        self._segments()
        self._objective()

    def _ticks(self, seconds: float) -> int:
        return int(round(seconds / self.tick_s))

    def _one_hot(self, name: str, count: int) -> list[cp_model.IntVar]:
        return [self.model.new_bool_var(f"{name}[{i}]") for i in range(count)]

    # -------------------------------------------------------------- decisions
    def _decisions(self) -> None:
        space, m = self.space, self.model
        self.size_choice = {s: self._one_hot(f"size[{s}]", len(space.sizes[s])) for s in self.parts}
        for choice in self.size_choice.values():
            m.add_exactly_one(choice)
        m.add(
            sum(
                d * z
                for s, choice in self.size_choice.items()
                for d, z in zip(space.sizes[s], choice, strict=True)
            )
            <= space.num_devices
        )
        self.offload: dict[str, cp_model.IntVar] = {}
        for s in self.parts:
            for name in space.offloadable(space.group_names(s)):
                self.offload[name] = m.new_bool_var(f"offload[{name}]")
        # A group is phased when a component of it or of an earlier group is switched (see the surrogate).
        self.phased: dict[int, cp_model.IntVar] = {}
        upstream: list[cp_model.IntVar] = []
        for s in self.parts:
            upstream += [self.offload[n] for n in space.offloadable(space.group_names(s))]
            self.phased[s] = m.new_bool_var(f"phased[{s}]")
            for flag in upstream:
                m.add_implication(flag, self.phased[s])
            if not upstream:
                m.add(self.phased[s] == 0)

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

    # -------------------------------------------------------------- groups
    def _rows(self, s: int, name: str) -> tuple[list, list]:
        """Booleans selecting (size, micro-batch count) of ``name`` in segment ``s``, with their profiles."""
        m, space = self.model, self.space
        counts = micro_batch_options(space, name)
        pairs, profiles = [], []
        by_size = []
        for i, size in enumerate(space.sizes[s]):
            row = []
            for j, count in enumerate(counts):
                u = m.new_bool_var(f"row[{s},{name},{i},{j}]")
                m.add_implication(u, self.size_choice[s][i])
                m.add_implication(u, self.micro[name][j])
                row.append(u)
                pairs.append(u)
                profiles.append(self.tables.profile(name, size, count))
            m.add(sum(row) == self.size_choice[s][i])
            by_size.append(row)
        for j in range(len(counts)):
            m.add(sum(row[j] for row in by_size) == self.micro[name][j])
        return pairs, profiles

    def _segments(self) -> None:
        space, tables, m = self.space, self.tables, self.model
        self.busy, self.fill, self.first = {}, {}, {}
        capacity_kib = tables.capacity_bytes // KIB
        for s in self.parts:
            names = space.group_names(s)
            busy, first, activation = {}, {}, {}
            for name in names:
                pairs, profiles = self._rows(s, name)
                busy[name] = sum(self._ticks(p.busy_s) * u for u, p in zip(pairs, profiles, strict=True))
                first[name] = sum(self._ticks(p.first_s) * u for u, p in zip(pairs, profiles, strict=True))
                activation[name] = sum(
                    -(-p.activation_bytes // KIB) * u for u, p in zip(pairs, profiles, strict=True)
                )
            switch = {
                n: self._ticks(tables.switch_s[n]) * self.offload[n] if n in self.offload else 0
                for n in names
            }
            total = sum(busy[n] + switch[n] for n in names)
            in_loop = [n for n in names if n in self.loop_names]
            if len(in_loop) == 2:
                fill = total
            elif in_loop:
                fill = total - busy[in_loop[0]] - switch[in_loop[0]]
            else:
                last = names[-1]
                fill_var = m.new_int_var(0, _HIGH, f"f[{s}]")
                m.add(fill_var >= sum(first[n] for n in names))
                m.add(fill_var >= total - busy[last] - switch[last] + first[last]).only_enforce_if(
                    self.phased[s]
                )
                fill = fill_var
            self.busy[s] = total
            self.fill[s] = fill
            self.first[s] = first
            self._memory(s, names, activation, capacity_kib)

    def _memory(self, s: int, names: tuple[str, ...], activation: dict, capacity_kib: int) -> None:
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
    def _phase(self, segments: tuple[int, ...], loop_cut: tuple[int, int] | None) -> cp_model.IntVar:
        m = self.model
        phase = m.new_int_var(0, _HIGH, f"phase[{segments}]")
        fills = sum(self.fill[s] for s in segments)
        for s in segments:
            m.add(phase >= self.busy[s] + fills - self.fill[s])
        if loop_cut is not None:
            loop = self.workflow.loop
            assert loop is not None
            s_env, s_policy = loop_cut
            transfer = [
                self._ticks(loop.num_steps * self.tables.loop_transfer_s[c]) for c in self.space.loop_ladder
            ]
            moved = sum(t * z for t, z in zip(transfer, self.micro[loop.env], strict=True))
            m.add(
                phase
                >= loop.num_steps * (self.first[s_env][loop.env] + self.first[s_policy][loop.policy])
                + moved
                + fills
            )
        return phase

    def _objective(self) -> None:
        m, parts = self.model, self.parts
        loop = self.workflow.loop
        groups = [self.space.group_names(s) for s in parts]
        terms = []
        current, loop_cut = [parts[0]], None
        for i in range(1, len(parts) + 1):
            kind = "end" if i == len(parts) else cut_kind(self.workflow, groups[i - 1][-1], groups[i][0])
            if kind == "loop":
                assert loop is not None
                env_first = groups[i - 1][-1] == loop.env
                loop_cut = (parts[i - 1], parts[i]) if env_first else (parts[i], parts[i - 1])
            if kind in ("loop", "stream"):
                current.append(parts[i])
                continue
            terms.append(self._phase(tuple(current), loop_cut))
            current, loop_cut = [parts[i]] if i < len(parts) else [], None
        group_of = {n: g for g, names in enumerate(groups) for n in names}
        sync = sum(
            self._ticks(local if group_of[src] == group_of[dst] else cross)
            for src, dst, local, cross in self.tables.sync_s
        )
        m.minimize(sum(terms) + sync)

    # -------------------------------------------------------------- solutions
    def decode(self, solver: cp_model.CpSolver) -> tuple[PlanPoint, list]:
        """The point of the current solution and its true decision literals (for the no-good cut).

        Edge granularities follow from the micro-batch counts: ``min`` of the two ends (the count of the
        non-loop end when the other is in the loop), which the lowering turns back into the same counts."""
        space, parts = self.space, self.parts
        literals: list[Any] = []
        sizes = []
        for s in parts:
            i = next(i for i, z in enumerate(self.size_choice[s]) if solver.value(z))
            literals.append(self.size_choice[s][i])
            sizes.append(space.sizes[s][i])
        counts = {}
        for name in space.order:
            j = next(j for j, z in enumerate(self.micro[name]) if solver.value(z))
            counts[name] = micro_batch_options(space, name)[j]
            if self.micro[name][j] not in literals:
                literals.append(self.micro[name][j])
        granularity = []
        for edge in self.workflow.edges:
            if edge.kind != "stream":
                continue
            ends = [counts[n] for n in (edge.src, edge.dst) if n not in self.loop_names]
            granularity.append((edge.key, min(ends) if ends else 1))
        if space.loop_ladder:
            granularity.append(("loop", counts[self.loop_names[0]]))
        offload = frozenset(n for n, flag in self.offload.items() if solver.value(flag))
        literals += [flag if n in offload else flag.negated() for n, flag in self.offload.items()]
        point = PlanPoint(
            groups=tuple(space.group_names(s) for s in parts),
            sizes=tuple(sizes),
            granularity=tuple(sorted(granularity)),
            offload=offload,
        )
        return point, literals


_HIGH = 2**40
"""Upper bound of tick-valued variables (ticks are scaled so that busy times are about 1e7)."""


def best_points(tables: CostTables, *, k: int, time_limit_s: float, seed: int) -> list[ScoredPoint]:
    """The ``k`` best distinct points by the surrogate, best first; fewer when the space holds fewer feasible
    points (none when nothing fits).

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
    models = [_Model(tables, p) for p in range(len(tables.space.partitions))]
    queue: list[tuple[int, int, PlanPoint, list]] = []
    # The budget is CP-SAT's deterministic time (about a second of work per unit on one core), not wall time,
    # so a loaded machine cannot change which candidates come back: same inputs and seed, same plans.
    spent = [0.0]

    def solve(p: int) -> None:
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
        solve(p)
    found: list[ScoredPoint] = []
    while queue and len(found) < k:
        ticks, p, point, literals = heapq.heappop(queue)
        found.append(ScoredPoint(point=point, surrogate_s=ticks * models[p].tick_s))
        models[p].model.add_bool_or([literal.negated() for literal in literals])
        solve(p)
    return found
