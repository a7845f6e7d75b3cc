"""Cost models: ``fit(trace) -> CostModel``, which answers how long each op of a program takes.

* Compute ops: samples of the same (component, op) are grouped by device count. A query uses the group whose
  device count is nearest (log scale) and interpolates linearly in *samples per replica* (data-parallel scaling:
  ``replicas = devices / model_parallel_size``). A share beyond that group's profiled range that another device
  count measured follows that count's curve, scaled to agree at the nearest profiled end (:func:`_borrow_shape`);
  otherwise the model extrapolates linearly. Either way it warns.
  Replicas may hold uneven shares (``samples`` need not divide by ``replicas``; shares differ by at most one
  sample): the busiest replica, with ``ceil(samples / replicas)``, sets the op's time, both when a sample is
  fitted and when an op is priced (:func:`busiest_share`). A step of the env <-> policy loop whose two
  components share devices (``Op.shared``: every hand-off is a context switch between two processes) is priced
  from samples measured that way when the trace has them at that device count and size, else from all samples.
* Streaming generation: a rollout's ``generate`` op ``k`` of ``m`` is the segment of one continuous-batching
  generation between the completion of micro-batch ``k-1`` and ``k``; groups complete in order of their longest
  response, and time is taken proportional to decode steps (memory-bound decode). The segments add up to the
  whole-batch generation time, so streaming costs generation nothing and lets consumers start early.
* Movement ops (transfer, sync_weights, onload, offload): measured bandwidth when the trace has samples for
  them, else the cluster's link bandwidth, plus a fixed latency. When the samples of one (component, op) move at
  least two distinct sizes, seconds are interpolated linearly in bytes between the median seconds of each size
  (as compute ops are in samples): small messages cost a round trip, not bytes over a bandwidth. A weight sync
  between components on the same devices also pays the workflow's resharding time for that pair
  (``WeightSync.reshard_s``: the training layout loaded into the engine in place, which no bandwidth prices),
  unless the trace measured that sync.
"""

from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Callable, Mapping

import attrs
import numpy as np

from rlinf.core.cluster import Cluster
from rlinf.core.errors import ConfigError, ExtrapolationWarning, RlinfError
from rlinf.core.lowering import micro_batch_ranges
from rlinf.core.program import Op, Program
from rlinf.core.trace import MOVEMENT_OPS, CostSample, Trace
from rlinf.core.workflow import Workflow

LINK_LATENCY_S = {"local": 0.0, "intra_node": 10e-6, "inter_node": 30e-6, "host": 10e-6}
"""Fixed start-up cost of a data movement, per link kind."""


@attrs.frozen
class Curve:
    """Seconds as a piecewise-linear function of samples per replica, at one device count."""

    devices: int
    xs: tuple[float, ...]
    ys: tuple[float, ...]

    def __call__(self, x: float) -> tuple[float, bool]:
        """(seconds, extrapolated?)."""
        xs, ys = self.xs, self.ys
        if len(xs) == 1:
            # One point: scale proportionally (a cost per sample), flagged when x differs.
            return ys[0] * (x / xs[0] if xs[0] > 0 else 1.0), not math.isclose(x, xs[0])
        if x < xs[0]:
            slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
            return max(0.0, ys[0] + slope * (x - xs[0])), True
        if x > xs[-1]:
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            return ys[-1] + max(slope, 0.0) * (x - xs[-1]), True
        # numpy.interp's arithmetic, without its per-call overhead (a search prices thousands of ops).
        if x == xs[-1]:
            return ys[-1], False
        j = bisect.bisect_right(xs, x) - 1
        if x == xs[j]:
            return ys[j], False
        return (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j]) * (x - xs[j]) + ys[j], False


@attrs.frozen(kw_only=True)
class CostModel:
    """Fitted costs for the ops of one workflow on one cluster."""

    workflow: Workflow
    cluster: Cluster
    curves: Mapping[tuple[str, str], tuple[Curve, ...]]
    """(component, op) -> curves sorted by device count, of the ops measured on the device pool."""
    bandwidths: Mapping[tuple[str, str], float]
    """(component, op kind) -> measured bytes/s for movement ops."""
    movement_curves: Mapping[tuple[str, str], Curve] = attrs.field(factory=dict)
    """(component, op kind) -> seconds as a function of bytes, where samples moved two or more sizes."""
    response_lengths: tuple[float, ...] = ()
    activation_bytes_per_sample: Mapping[str, float] = attrs.field(factory=dict)
    flagged_curves: Mapping[tuple[str, str, bool], Mapping[int, Curve]] = attrs.field(factory=dict)
    """(component, op, shared) -> device count -> curve of only the samples with that ``shared`` flag, for the
    (component, op) pairs whose samples have both flags (:attr:`rlinf.core.program.Op.shared`)."""
    core_curves: Mapping[tuple[str, str], tuple[Curve, ...]] = attrs.field(factory=dict)
    """(component, op) -> curves of the ops measured on the core pool (CPU cores beside GPUs). An op on one pool
    that was measured only on the other is priced from the other's samples, with a warning."""
    _expected_group_max: np.ndarray | None = attrs.field(init=False, eq=False, repr=False)
    """The expected longest response of each prompt group, in completion order (read-only; ``None`` without
    response lengths): what :meth:`generation_fractions` without ``rng`` reads, computed once here from the fitted
    lengths (every plan a search simulates asks for it again). The model holds no mutable state: an extrapolation
    warning is shown once per call that prices ops (:meth:`durations`), not once per model."""

    @_expected_group_max.default
    def _group_max(self) -> np.ndarray | None:
        lengths = np.asarray(self.response_lengths, dtype=float)
        if lengths.size == 0:
            return None
        num_groups = self.workflow.batch_size // self.workflow.group_size
        quantiles = ((np.arange(num_groups) + 0.5) / num_groups) ** (1.0 / self.workflow.group_size)
        expected = np.quantile(lengths, quantiles)
        expected.flags.writeable = False
        return expected

    # ------------------------------------------------------------------ compute
    def compute_seconds(
        self,
        component: str,
        op_name: str,
        num_devices: int,
        samples: float,
        shared: bool = False,
        pool: str = "device",
    ) -> float:
        """Seconds for ``samples`` of ``op_name`` on ``num_devices`` devices of ``component`` in ``pool``;
        ``shared``: a loop step whose env and policy share devices, priced from such samples where they were
        measured at this device count and within their range of sizes (else from all samples)."""
        notes: dict[str, str] = {}
        seconds = self._compute_seconds(component, op_name, num_devices, samples, shared, pool, notes)
        _show(notes)
        return seconds

    def _compute_seconds(
        self,
        component: str,
        op_name: str,
        num_devices: int,
        samples: float,
        shared: bool,
        pool: str,
        notes: dict[str, str],
    ) -> float:
        """:meth:`compute_seconds`, its warnings added to ``notes`` (key -> message, the first of each key)."""
        flagged = self.flagged_curves.get((component, op_name, shared), {}).get(num_devices)
        if flagged is not None and pool == "device":
            model_parallel = self.workflow.component(component).model_parallel_size
            x = busiest_share(samples, max(1, num_devices // model_parallel))
            if flagged.xs[0] <= x <= flagged.xs[-1]:
                return flagged(x)[0]
        curves = self._pool_curves(component, op_name, pool, notes)
        model_parallel = self.workflow.component(component).model_parallel_size
        curve = min(curves, key=lambda c: abs(math.log(c.devices / num_devices)))
        replicas = max(1, num_devices // model_parallel)
        ref_replicas = max(1, curve.devices // model_parallel)
        per_replica = busiest_share(samples, replicas)
        seconds, extrapolated = curve(per_replica)
        if extrapolated:
            borrowed = _borrow_shape(curve, curves, per_replica)
            if borrowed is not None:
                other, edge, seconds = borrowed
                notes.setdefault(
                    f"{component}.{op_name}.shape",
                    f"cost model prices {component}.{op_name} at {per_replica:g} samples per replica on "
                    f"{num_devices} devices from the shape measured on {other.devices} devices (outside the "
                    f"profiled {curve.xs[0]:g}-{curve.xs[-1]:g} on {curve.devices}; matched at {edge:g})",
                )
                extrapolated = False
        if extrapolated:
            low, high = curve.xs[0] * ref_replicas, curve.xs[-1] * ref_replicas
            notes.setdefault(
                f"{component}.{op_name}",
                f"cost model extrapolates {component}.{op_name}: {per_replica:g} samples per replica on "
                f"{num_devices} devices is outside the profiled {curve.xs[0]:g}-{curve.xs[-1]:g} "
                f"(batches {low:g}-{high:g} on {curve.devices} devices)",
            )
        devices = [c.devices for c in curves]
        if num_devices < min(devices) or num_devices > max(devices):
            notes.setdefault(
                f"{component}.{op_name}.devices",
                f"cost model scales {component}.{op_name} to {num_devices} devices from samples on "
                f"{min(devices)}-{max(devices)} devices (assumes data-parallel scaling)",
            )
        return seconds

    def _pool_curves_or_none(self, component: str, op_name: str, pool: str) -> tuple[Curve, ...]:
        """The curves of ``component.op_name`` on either pool (``pool``'s first), or ``()``."""
        key = (component, op_name)
        first, second = (self.core_curves, self.curves) if pool == "cpu" else (self.curves, self.core_curves)
        return first.get(key) or second.get(key) or ()

    def _pool_curves(
        self, component: str, op_name: str, pool: str, notes: dict[str, str]
    ) -> tuple[Curve, ...]:
        """The curves of ``component.op_name`` measured on ``pool``, else (with a warning) on the other pool."""
        key = (component, op_name)
        own, other = (self.core_curves, self.curves) if pool == "cpu" else (self.curves, self.core_curves)
        curves = own.get(key)
        if curves:
            return curves
        curves = other.get(key)
        if curves:
            where = "CPU cores beside the GPUs" if pool == "cpu" else "devices"
            notes.setdefault(
                f"{component}.{op_name}.pool",
                f"cost model prices {component}.{op_name} on {where} from samples measured on the other pool "
                "(profile it there for a measured cost)",
            )
            return curves
        known = sorted({".".join(k) for k in (*self.curves, *self.core_curves)})
        raise RlinfError(
            f"trace has no samples for {component}.{op_name}; fix: profile that component "
            f"or synthesize a trace that includes it (known: {known})"
        )

    def generation_fractions(
        self, num_micro_batches: int, rng: np.random.Generator | None = None
    ) -> np.ndarray:
        """Cumulative fraction of generation time at which each streamed micro-batch is complete.

        Groups complete when their longest response does; micro-batch ``k`` is the ``k``-th set of groups to
        complete. Deterministic (expected quantiles) without ``rng``; drawn from the trace's distribution with it.
        The last value is the generation time relative to the expected whole-batch time (1.0 without ``rng``);
        the array is read-only."""
        num_groups = self.workflow.batch_size // self.workflow.group_size
        ends = np.array([hi for _, hi in micro_batch_ranges(num_groups, num_micro_batches)]) - 1
        expected_group_max = self._expected_group_max
        if expected_group_max is None:
            fractions = (ends + 1) / num_groups
        elif rng is None:
            fractions = expected_group_max[ends] / expected_group_max[-1]
        else:
            lengths = np.asarray(self.response_lengths, dtype=float)
            drawn = rng.choice(lengths, size=(num_groups, self.workflow.group_size), replace=True)
            fractions = np.sort(drawn.max(axis=1))[ends] / expected_group_max[-1]
        fractions.flags.writeable = False
        return fractions

    def activation_bytes(self, op: Op) -> int:
        """Transient device memory of a compute op, per device."""
        per_sample = self.activation_bytes_per_sample.get(op.component, 0.0)
        if op.kind != "compute" or per_sample == 0 or not op.devices:
            return 0
        model_parallel = self.workflow.component(op.component).model_parallel_size
        replicas = max(1, len(op.devices) // model_parallel)
        return int(per_sample * busiest_share(op.samples, replicas) / model_parallel)

    # ------------------------------------------------------------------ movement
    def movement_seconds(self, op: Op) -> float:
        """Seconds to move ``op.num_bytes`` over the op's link; a weight sync between components on the same
        devices adds its resharding time (:attr:`rlinf.core.workflow.WeightSync.reshard_s`)."""
        notes: dict[str, str] = {}
        seconds = self._movement_seconds(op, notes)
        _show(notes)
        return seconds

    def _movement_seconds(self, op: Op, notes: dict[str, str]) -> float:
        """:meth:`movement_seconds`, its warnings added to ``notes``."""
        if op.num_bytes == 0 or op.link == "local" and op.kind == "transfer":
            return 0.0
        return self._bytes_seconds(op, notes) + self._reshard_seconds(op)

    def _reshard_seconds(self, op: Op) -> float:
        """The workflow's resharding time of a collocated sync, unless the trace measured the sync (then the
        measurement holds all of it)."""
        measured = (op.component, op.kind) in self.movement_curves or (
            op.component,
            op.kind,
        ) in self.bandwidths
        if op.kind != "sync_weights" or op.link != "local" or measured:
            return 0.0
        return sum(
            sync.reshard_s
            for sync in self.workflow.weight_sync
            if (sync.src, sync.dst) == (op.component, op.peer)
        )

    def _bytes_seconds(self, op: Op, notes: dict[str, str]) -> float:
        curve = self.movement_curves.get((op.component, op.kind))
        if curve is not None:
            seconds, extrapolated = curve(op.num_bytes)
            if extrapolated:
                notes.setdefault(
                    f"{op.component}.{op.kind}.bytes",
                    f"cost model extrapolates {op.component}.{op.kind}: {op.num_bytes} bytes is outside the "
                    f"profiled {curve.xs[0]:g}-{curve.xs[-1]:g} bytes",
                )
            return seconds
        measured = self.bandwidths.get((op.component, op.kind))
        links = self.cluster.links
        if measured is not None:
            bandwidth = measured
        elif op.kind in ("onload", "offload"):
            bandwidth = links.host_device_bytes_per_s
        elif op.link == "local":
            bandwidth = self.cluster.device.memory_bandwidth_bytes_per_s
        elif op.link == "host":  # between the devices and the cores of a node
            bandwidth = links.host_device_bytes_per_s
        elif op.link == "intra_node":
            bandwidth = links.intra_node_bytes_per_s
        else:
            bandwidth = links.inter_node_bytes_per_s
        return LINK_LATENCY_S.get(op.link, 0.0) + op.num_bytes / bandwidth

    # ------------------------------------------------------------------ programs
    def seconds(self, op: Op) -> float:
        """Expected duration of one op (generation segments use expected response lengths)."""
        return float(self.durations_for((op,), rng=None)[0])

    def durations(self, program: Program, rng: np.random.Generator | None = None) -> np.ndarray:
        """Duration of every op of ``program``; stochastic (long-tail lengths drawn) when ``rng`` is given. Under
        a staleness bound of 2 or more the rollout generates continuously (:meth:`continuous_generation`)."""
        return self.durations_for(program.ops, rng, continuous=program.max_staleness >= 2)

    def continuous_generation(self, component: str) -> bool:
        """Whether the trace measured ``component``'s generation in a continuous stream of batches
        (``generate_continuous`` samples: the analytic model's asynchronous rollout, which admits the next
        iteration's prompts while the current one generates). Without them a plan with any staleness bound
        generates one batch at a time, as rlinf's own rollout engines do."""
        return bool(self._pool_curves_or_none(component, "generate_continuous", "device"))

    def durations_for(
        self, ops: tuple[Op, ...], rng: np.random.Generator | None, *, continuous: bool = False
    ) -> np.ndarray:
        """Durations of ``ops`` (see :meth:`durations`); each extrapolation warning shown once."""
        notes: dict[str, str] = {}
        out = np.zeros(len(ops))
        fractions: dict[tuple[str, int], np.ndarray] = {}
        whole: dict[tuple[str, int], float] = {}
        known: dict[tuple[object, ...], float] = {}  # micro-batches of one component repeat the same question
        for position, op in enumerate(ops):
            if op.kind != "compute":
                move_key = (op.kind, op.component, op.peer, op.link, op.num_bytes)
                if move_key not in known:
                    known[move_key] = self._movement_seconds(op, notes)
                out[position] = known[move_key]
                continue
            role = self.workflow.component(op.component).role
            if role == "rollout" and op.name == "generate":
                streamed = continuous and self.continuous_generation(op.component)
                whole_key = (op.component, len(op.devices))
                if whole_key not in whole:
                    whole[whole_key] = self._compute_seconds(
                        op.component,
                        "generate_continuous" if streamed else "generate",
                        len(op.devices),
                        self.workflow.batch_size,
                        False,
                        op.pool,
                        notes,
                    )
                m = op.num_micro_batches
                if (op.component, m) not in fractions:
                    # In a continuous stream groups complete at an even rate, not by their longest response.
                    fractions[(op.component, m)] = (
                        (np.arange(m) + 1.0) / m if streamed else self.generation_fractions(m, rng)
                    )
                cumulative = fractions[(op.component, m)]
                previous = cumulative[op.micro_batch - 1] if op.micro_batch > 0 else 0.0
                out[position] = whole[whole_key] * (cumulative[op.micro_batch] - previous)
            else:
                key = (op.component, op.name, len(op.devices), op.samples, op.shared, op.pool)
                if key not in known:
                    known[key] = self._compute_seconds(
                        op.component, op.name, len(op.devices), op.samples, op.shared, op.pool, notes
                    )
                out[position] = known[key]
        _show(notes)
        return out


def _show(notes: dict[str, str]) -> None:
    """Show each warning of ``notes`` (key -> message) as an :class:`ExtrapolationWarning`."""
    for message in notes.values():
        warnings.warn(message, ExtrapolationWarning, stacklevel=3)


def _borrow_shape(curve: Curve, curves: tuple[Curve, ...], x: float) -> tuple[Curve, float, float] | None:
    """Price ``x`` samples per replica, outside ``curve``'s range, from another device count's curve that
    measured both ``x`` and the end of ``curve``'s range nearest to it, scaled to agree with ``curve`` there:
    (that curve, the matching point, seconds); ``None`` when no other curve covers both.

    How an op's time grows with its per-replica share is mostly the replica's own work, so a shape measured on
    another device count beats a straight line drawn past the profiled sizes (fixed costs make small shares
    dearer, and large ones leave the caches), while the level stays that of the asked device count (what data
    parallelism costs on top)."""
    edge = curve.xs[0] if x < curve.xs[0] else curve.xs[-1]
    covering = [
        c
        for c in curves
        if c is not curve and len(c.xs) >= 2 and c.xs[0] <= min(x, edge) and max(x, edge) <= c.xs[-1]
    ]
    if not covering:
        return None
    other = min(covering, key=lambda c: (abs(math.log(c.devices / curve.devices)), c.devices))
    at_edge = other(edge)[0]
    if at_edge <= 0:
        return None
    return other, edge, other(x)[0] * curve(edge)[0] / at_edge


def busiest_share(samples: float, replicas: int) -> int:
    """Samples the busiest of ``replicas`` data-parallel replicas holds when they split ``samples`` as evenly as
    whole samples allow (shares differ by at most one): ``ceil(samples / replicas)``. The slowest replica sets
    the time of a data-parallel op, so this is the per-replica work a cost curve is read at."""
    return math.ceil(samples / replicas)


STATISTICS: dict[str, Callable[[list[float]], float]] = {
    "median": lambda v: float(np.median(v)),
    "mean": lambda v: float(np.mean(v)),
}
"""How repeated samples of one op at one size are summarised."""


def fit(trace: Trace, cluster: Cluster | None = None, *, statistic: str = "median") -> CostModel:
    """Fit a cost model from a trace, for the trace's cluster or another one of the same device type.

    ``statistic`` summarises repeated samples of one op at one size: the ``median`` resists stragglers; the
    ``mean`` is what a sum of many ops (an iteration) adds up to when op times are skewed by preemption on a
    shared machine (used for profiled traces, see :mod:`rlinf.app.profiling`)."""
    if statistic not in STATISTICS:
        raise ConfigError("statistic", statistic, "unknown statistic", f"use one of {sorted(STATISTICS)}")
    summarise = STATISTICS[statistic]
    target = cluster or trace.cluster
    if target.device.name != trace.cluster.device.name:
        raise ConfigError(
            "cluster",
            target.spec(),
            f"has {target.device.name} devices but the trace was made on {trace.cluster.device.name}",
            f"use a {trace.cluster.device.name} cluster or synthesize a trace for {target.device.name}",
        )
    grouped: dict[tuple[str, str], dict[int, list[CostSample]]] = {}
    on_cores: dict[tuple[str, str], dict[int, list[CostSample]]] = {}
    moves: dict[tuple[str, str], list[CostSample]] = {}
    for sample in trace.samples:
        if sample.op in MOVEMENT_OPS:
            moves.setdefault((sample.component, sample.op), []).append(sample)
            continue
        into = on_cores if sample.pool == "cpu" else grouped
        into.setdefault((sample.component, sample.op), {}).setdefault(sample.devices, []).append(sample)
    curves = {
        key: tuple(
            _curve(trace.workflow, key[0], devices, group, summarise)
            for devices, group in sorted(by_devices.items())
        )
        for key, by_devices in grouped.items()
    }
    core_curves = {
        key: tuple(
            _curve(trace.workflow, key[0], devices, group, summarise)
            for devices, group in sorted(by_devices.items())
        )
        for key, by_devices in on_cores.items()
    }
    flagged: dict[tuple[str, str, bool], dict[int, Curve]] = {}
    for key, by_devices in grouped.items():
        if len({s.shared for group in by_devices.values() for s in group}) < 2:
            continue
        for shared in (False, True):
            flagged[(*key, shared)] = {
                devices: _curve(trace.workflow, key[0], devices, subset, summarise)
                for devices, group in by_devices.items()
                if (subset := [s for s in group if s.shared is shared])
            }
    bandwidths, movement_curves = {}, {}
    for key, group in moves.items():
        if len({s.num_bytes for s in group}) >= 2:
            movement_curves[key] = _bytes_curve(group, summarise)
            continue
        total_bytes = sum(s.num_bytes for s in group)
        total_seconds = sum(s.seconds for s in group)
        if total_bytes > 0 and total_seconds > 0:
            bandwidths[key] = total_bytes / total_seconds
    return CostModel(
        workflow=trace.workflow,
        cluster=target,
        curves=curves,
        bandwidths=bandwidths,
        movement_curves=movement_curves,
        response_lengths=trace.response_lengths,
        activation_bytes_per_sample=dict(trace.activation_bytes_per_sample),
        flagged_curves=flagged,
        core_curves=core_curves,
    )


def _curve(
    workflow: Workflow,
    component: str,
    devices: int,
    group: list[CostSample],
    summarise: Callable[[list[float]], float] = STATISTICS["median"],
) -> Curve:
    replicas = max(1, devices // workflow.component(component).model_parallel_size)
    by_x: dict[float, list[float]] = {}
    for sample in group:
        by_x.setdefault(float(busiest_share(sample.samples, replicas)), []).append(sample.seconds)
    xs = sorted(by_x)
    ys = [float(summarise(by_x[x])) for x in xs]
    return Curve(devices=devices, xs=tuple(xs), ys=tuple(ys))


def _bytes_curve(group: list[CostSample], summarise: Callable[[list[float]], float]) -> Curve:
    """Summarised seconds per distinct size of a movement op, as a curve over bytes."""
    by_size: dict[int, list[float]] = {}
    for sample in group:
        by_size.setdefault(sample.num_bytes, []).append(sample.seconds)
    sizes = sorted(by_size)
    return Curve(
        devices=0, xs=tuple(float(x) for x in sizes), ys=tuple(float(summarise(by_size[x])) for x in sizes)
    )
