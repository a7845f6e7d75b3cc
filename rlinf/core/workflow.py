"""The macro flow: components and the data that flows between them, written once per workload.

A :class:`Workflow` is a DAG of :class:`Component` joined by :class:`Edge`. A ``stream`` edge lets the consumer
start on a micro-batch as soon as the producer has emitted it; a ``barrier`` edge makes the consumer wait for the
whole batch. Embodied RL adds a :class:`Loop`: env and policy alternate for ``num_steps`` steps before the
trajectory flows on. Weight sync (``actor -> rollout``) closes the iteration.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from rlinf.core import limits
from rlinf.core.config_structure import structure_config
from rlinf.core.errors import ConfigError, integer, non_negative, positive, require, to_tuple

ROLES = ("env", "rollout", "reward", "inference", "actor", "critic")
TRAINER_ROLES = ("actor", "critic")
"""Roles of the training side: with a staleness bound (``Plan.max_staleness`` >= 1) they train on what the rollout
side produced up to that many iterations before, while the rollout side runs ahead."""
BEHIND_BUFFER_ROLES = ("reward", "inference")
"""Roles a plan may move behind a staleness bound's buffer, to the training side (``Plan.buffer_before``): they
then score the batch the rollout side buffered, while the rollout generates the next one."""
EDGE_KINDS = ("stream", "barrier")
UNITS = ("samples", "env_steps")


@attrs.frozen(kw_only=True)
class Component:
    """One worker type of the workflow."""

    name: str
    """Unique name, used in plans and traces."""
    role: str
    """One of :data:`ROLES`; decides how the cost model reads its ops (e.g. rollout generation streams)."""
    state_bytes: int = 0
    """Resident state of one replica (weights, optimizer, reserved KV cache), sharded over its model-parallel
    devices. This is what offload moves to host memory."""
    model_parallel_size: int = 1
    """Devices per replica (tensor x pipeline parallel). A component's device count is a multiple of it."""
    cpu_ok: bool = False
    """Whether the component needs no GPU (an environment simulator, a rule-based reward): the planner may then
    place it on the CPU cores beside the GPUs (:mod:`rlinf.core.cluster`'s core pool)."""
    keeps_versions: bool = False
    """Whether the component's worker scores each batch with the weights version that sampled it, keeping the
    versions synced to it until a batch of theirs comes. Only then may a component that receives weights run
    behind a staleness bound's buffer (``Plan.buffer_before``), where the next version arrives before the batch
    the previous one sampled."""

    def __attrs_post_init__(self) -> None:
        _name("component.name", self.name)
        for flag, meaning in (
            ("cpu_ok", "that needs no GPU"),
            ("keeps_versions", "whose worker keeps versions"),
        ):
            require(
                isinstance(getattr(self, flag), bool),
                f"components.{self.name}.{flag}",
                getattr(self, flag),
                "must be true or false",
                f"write true for a component {meaning}",
            )
        require(
            self.role in ROLES,
            f"components.{self.name}.role",
            self.role,
            "unknown role",
            f"use one of {list(ROLES)}",
        )
        _byte_count(f"components.{self.name}.state_bytes", self.state_bytes)
        integer(
            f"components.{self.name}.model_parallel_size",
            self.model_parallel_size,
            minimum=1,
            maximum=limits.current().max_devices,
            fix="set it to the devices one replica spans",
        )

    def state_bytes_per_device(self) -> int:
        """Resident bytes this component keeps on each of its devices."""
        return self.state_bytes // self.model_parallel_size


@attrs.frozen(kw_only=True)
class Edge:
    """Data flowing from ``src`` to ``dst``."""

    src: str
    dst: str
    kind: str = "stream"
    """``stream`` (micro-batch granularity) or ``barrier`` (whole batch)."""
    bytes_per_sample: int = 0
    """Payload moved per sample (tokens, log-probs, trajectories)."""

    def __attrs_post_init__(self) -> None:
        _name("edge.src", self.src)
        _name("edge.dst", self.dst)
        require(
            self.kind in EDGE_KINDS,
            f"edges.{self.key}.kind",
            self.kind,
            "unknown edge kind",
            f"use one of {list(EDGE_KINDS)}",
        )
        _byte_count(f"edges.{self.key}.bytes_per_sample", self.bytes_per_sample)

    @property
    def key(self) -> str:
        """``src->dst``, the name a plan's granularity uses."""
        return f"{self.src}->{self.dst}"


@attrs.frozen(kw_only=True)
class Loop:
    """The embodied env <-> policy loop: ``num_steps`` alternations per iteration."""

    env: str
    policy: str
    num_steps: int
    obs_bytes_per_env: int = 0
    """Observation payload per env per step (env -> policy)."""
    action_bytes_per_env: int = 0
    """Action payload per env per step (policy -> env)."""

    def __attrs_post_init__(self) -> None:
        _name("loop.env", self.env)
        _name("loop.policy", self.policy)
        integer("loop.num_steps", self.num_steps, fix="give the env steps per iteration")
        positive("loop.num_steps", self.num_steps)
        bound = limits.current().max_loop_steps
        if self.num_steps > bound:
            raise limits.exceeded("loop.num_steps", self.num_steps, "loop steps", "max_loop_steps", bound)
        _byte_count("loop.obs_bytes_per_env", self.obs_bytes_per_env)
        _byte_count("loop.action_bytes_per_env", self.action_bytes_per_env)

    key = "loop"
    """The name a plan's granularity uses for the loop's pipeline stages."""


@attrs.frozen(kw_only=True)
class WeightSync:
    """After training, ``src`` (actor) pushes ``num_bytes`` of weights to ``dst`` (rollout)."""

    src: str
    dst: str
    num_bytes: int
    reshard_s: float = 0.0
    """Seconds the sync takes where ``src`` and ``dst`` share their devices (collocated): the training layout
    gathered, converted and loaded into the engine's tensors in place, which no link's bandwidth prices
    (:mod:`rlinf.analytic.weight_sync`). 0: the bytes at the devices' memory bandwidth alone."""

    def __attrs_post_init__(self) -> None:
        _name("weight_sync.src", self.src)
        _name("weight_sync.dst", self.dst)
        _byte_count("weight_sync.num_bytes", self.num_bytes)
        require(
            isinstance(self.reshard_s, (int, float)) and not isinstance(self.reshard_s, bool)
            and self.reshard_s >= 0,
            "weight_sync.reshard_s",
            self.reshard_s,
            "must be a number of seconds >= 0",
            "give 0 or more seconds",
        )  # fmt: skip


@attrs.frozen(kw_only=True)
class Workflow:
    """A whole RL iteration as a macro flow."""

    name: str
    components: tuple[Component, ...] = attrs.field(converter=to_tuple)
    edges: tuple[Edge, ...] = attrs.field(converter=to_tuple, default=())
    loop: Loop | None = None
    weight_sync: tuple[WeightSync, ...] = attrs.field(converter=to_tuple, default=())
    batch_size: int = 1
    """Samples per iteration: prompts x group size, or the number of parallel environments."""
    group_size: int = 1
    """Responses per prompt (GRPO); micro-batches hold whole groups."""
    tokens_per_sample: float = 0.0
    """Mean generated tokens per sample, for tokens/s (0 when not a language workload)."""
    unit: str = "samples"
    """What throughput counts: ``samples`` or ``env_steps`` (env steps = batch_size x loop.num_steps)."""

    def __attrs_post_init__(self) -> None:
        require(
            isinstance(self.name, str), "workflow.name", self.name, "must be a string", "name the workflow"
        )
        require(len(self.components) > 0, "workflow.components", [], "is empty", "add at least one component")
        for field, values, cls in (
            ("components", self.components, Component),
            ("edges", self.edges, Edge),
            ("weight_sync", self.weight_sync, WeightSync),
        ):
            for i, value in enumerate(values):
                require(
                    isinstance(value, cls), f"workflow.{field}[{i}]", value, f"is not a {cls.__name__}", ""
                )
        require(
            self.loop is None or isinstance(self.loop, Loop), "workflow.loop", self.loop, "is not a Loop", ""
        )
        for field in ("batch_size", "group_size"):
            integer(f"workflow.{field}", getattr(self, field), fix=f"give the {field.replace('_', ' ')}")
            positive(f"workflow.{field}", getattr(self, field))
        bound = limits.current().max_batch_size
        if self.batch_size > bound:
            raise limits.exceeded("workflow.batch_size", self.batch_size, "samples", "max_batch_size", bound)
        non_negative("workflow.tokens_per_sample", self.tokens_per_sample)
        require(
            self.batch_size % self.group_size == 0,
            "workflow.batch_size",
            self.batch_size,
            f"is not a multiple of group_size={self.group_size}",
            "use prompts x group_size samples",
        )
        require(self.unit in UNITS, "workflow.unit", self.unit, "unknown unit", f"use one of {list(UNITS)}")
        names = [c.name for c in self.components]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        require(
            not duplicates,
            "workflow.components",
            duplicates,
            "duplicate component names",
            "give each component a unique name",
        )
        known = set(names)
        for edge in self.edges:
            for end in (edge.src, edge.dst):
                require(
                    end in known,
                    f"edges.{edge.key}",
                    end,
                    "names an unknown component",
                    f"use one of {sorted(known)}",
                )
            require(
                edge.src != edge.dst,
                f"edges.{edge.key}",
                edge.key,
                "is a self-loop",
                "model env<->policy alternation with a loop",
            )
        keys = [e.key for e in self.edges]
        require(len(set(keys)) == len(keys), "workflow.edges", keys, "duplicate edge", "list each edge once")
        if self.loop is not None:
            for end, side in ((self.loop.env, "env"), (self.loop.policy, "policy")):
                require(
                    end in known,
                    f"loop.{side}",
                    end,
                    "names an unknown component",
                    f"use one of {sorted(known)}",
                )
            require(
                self.unit == "env_steps",
                "workflow.unit",
                self.unit,
                "an embodied loop counts env steps",
                "set unit: env_steps",
            )
        pairs = [(sync.src, sync.dst) for sync in self.weight_sync]
        for i, sync in enumerate(self.weight_sync):
            require(
                sync.src != sync.dst and pairs.index((sync.src, sync.dst)) == i,
                f"weight_sync[{i}].dst",
                sync.dst,
                "repeats a weight sync or syncs a component with itself",
                "list each src -> dst weight sync once",
            )
            for end, side in ((sync.src, "src"), (sync.dst, "dst")):
                require(
                    end in known,
                    f"weight_sync[{i}].{side}",
                    end,
                    "names an unknown component",
                    f"use one of {sorted(known)}",
                )
        self.topological_order()  # raises on cycles

    def component(self, name: str) -> Component:
        """The component called ``name``; raises listing the valid names."""
        for component in self.components:
            if component.name == name:
                return component
        raise ConfigError(
            "component", name, "unknown component", f"use one of {[c.name for c in self.components]}"
        )

    @property
    def component_names(self) -> tuple[str, ...]:
        """Names in declaration order."""
        return tuple(c.name for c in self.components)

    def incoming(self, name: str) -> tuple[Edge, ...]:
        """Edges into ``name``."""
        return tuple(e for e in self.edges if e.dst == name)

    def outgoing(self, name: str) -> tuple[Edge, ...]:
        """Edges out of ``name``."""
        return tuple(e for e in self.edges if e.src == name)

    def topological_order(self) -> tuple[str, ...]:
        """Component names so that every edge goes forward; ties keep declaration order. The loop's env
        comes before its policy."""
        names = list(self.component_names)
        preds: dict[str, set[str]] = {n: set() for n in names}
        for edge in self.edges:
            preds[edge.dst].add(edge.src)
        if self.loop is not None:
            preds[self.loop.policy].add(self.loop.env)
        order: list[str] = []
        remaining = list(names)
        while remaining:
            ready = [n for n in remaining if preds[n] <= set(order)]
            if not ready:
                raise ConfigError(
                    "workflow.edges",
                    sorted(remaining),
                    "form a cycle",
                    "make the edges a DAG (use a loop for env<->policy)",
                )
            order.append(ready[0])
            remaining.remove(ready[0])
        return tuple(order)

    @property
    def granularity_keys(self) -> tuple[str, ...]:
        """Names a plan may give a granularity: each stream edge, and ``loop``."""
        keys = [e.key for e in self.edges if e.kind == "stream"]
        if self.loop is not None:
            keys.append(Loop.key)
        return tuple(keys)

    def same_flow(self, other: Workflow) -> bool:
        """Whether ``other`` is this workflow up to where its components may run (``cpu_ok``) and whether they keep
        weight versions (``keeps_versions``): what a trace profiled before the flags existed, or on a machine
        without GPUs, still measures."""

        def plain(workflow: Workflow) -> Workflow:
            components = tuple(
                attrs.evolve(c, cpu_ok=False, keeps_versions=False) for c in workflow.components
            )
            return attrs.evolve(workflow, components=components)

        return plain(self) == plain(other)

    @property
    def trainer_side(self) -> tuple[str, ...]:
        """The components that train (:data:`TRAINER_ROLES`), in declaration order."""
        return self.training_side(())

    @property
    def buffered_edges(self) -> tuple[Edge, ...]:
        """The edges from the rollout side into the training side: what a staleness bound buffers (the trainer
        reads what the producer made ``max_staleness`` iterations before)."""
        return self.buffered_edges_for(())

    def training_side(self, behind_buffer: Iterable[str] = ()) -> tuple[str, ...]:
        """The components on the training side of a staleness bound's buffer: the trainers and ``behind_buffer``
        (``Plan.buffer_before``), in declaration order."""
        behind = set(behind_buffer)
        return tuple(c.name for c in self.components if c.role in TRAINER_ROLES or c.name in behind)

    def buffered_edges_for(self, behind_buffer: Iterable[str] = ()) -> tuple[Edge, ...]:
        """The edges into the training side from the rest when ``behind_buffer`` joins the trainers."""
        side = set(self.training_side(behind_buffer))
        return tuple(e for e in self.edges if e.dst in side and e.src not in side)

    @property
    def buffer_cuts(self) -> tuple[tuple[str, ...], ...]:
        """Where a staleness bound's buffer may sit, as the components besides the trainers that run behind it
        (sorted names): ``()`` (the buffer feeds the trainers), then every set of :data:`BEHIND_BUFFER_ROLES`
        components, outside the loop, sending no weights and receiving none unless they keep versions
        (``Component.keeps_versions``), whose outputs all stay on the training side, so that the rollout side only
        feeds it through the buffer."""
        if not self.buffered_edges:
            return ()
        trainers = set(self.trainer_side)
        loop = {self.loop.env, self.loop.policy} if self.loop is not None else set()
        senders = {w.src for w in self.weight_sync}
        receivers = {w.dst for w in self.weight_sync}
        movable = [
            c.name
            for c in self.components
            if c.role in BEHIND_BUFFER_ROLES
            and c.name not in loop
            and c.name not in senders
            and (c.name not in receivers or c.keeps_versions)
        ]
        cuts: list[tuple[str, ...]] = [()]
        for size in range(1, len(movable) + 1):
            for chosen in itertools.combinations(movable, size):
                side = trainers | set(chosen)
                if all(e.dst in side for name in chosen for e in self.outgoing(name)):
                    cuts.append(tuple(sorted(chosen)))
        return tuple(cuts)

    @property
    def units_per_iteration(self) -> int:
        """Samples (or env steps) one iteration produces."""
        if self.unit == "env_steps" and self.loop is not None:
            return self.batch_size * self.loop.num_steps
        return self.batch_size

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; :func:`workflow_from_dict` reads it back."""
        return {
            "name": self.name,
            "components": [_component_dict(c) for c in self.components],
            "edges": [attrs.asdict(e) for e in self.edges],
            "loop": None if self.loop is None else attrs.asdict(self.loop),
            "weight_sync": [_weight_sync_dict(w) for w in self.weight_sync],
            "batch_size": self.batch_size,
            "group_size": self.group_size,
            "tokens_per_sample": self.tokens_per_sample,
            "unit": self.unit,
        }


def _component_dict(component: Component) -> dict[str, Any]:
    """A component's JSON form (``cpu_ok`` and ``keeps_versions`` only when true, so traces written before they
    existed read the same)."""
    out = attrs.asdict(component)
    for flag in ("cpu_ok", "keeps_versions"):
        if not out[flag]:
            del out[flag]
    return out


def _weight_sync_dict(sync: WeightSync) -> dict[str, Any]:
    """A weight sync's JSON form (``reshard_s`` only when not 0, so traces written before it existed read the
    same)."""
    out = attrs.asdict(sync)
    if not out["reshard_s"]:
        del out["reshard_s"]
    return out


def workflow_from_dict(data: Any, source: str = "workflow") -> Workflow:
    """Build a workflow from its :meth:`Workflow.to_dict` form (types checked by
    :func:`~rlinf.core.config_structure.structure_config`), naming the bad field's path under ``source`` on error."""
    try:
        return structure_config(Workflow, data, source, f"{source}.")
    except ConfigError as error:
        raise _edge_by_index(error, data, source) from None


def _edge_by_index(error: ConfigError, data: Any, source: str) -> ConfigError:
    """An error the workflow raised about edge ``src->dst``, renamed to that edge's place in ``data``."""
    prefix = f"{source}.edges."
    if not error.field.startswith(prefix) or not isinstance(data, Mapping):
        return error
    key = error.field[len(prefix) :]  # the whole rest: a component name may hold dots
    for i, edge in enumerate(data.get("edges") or ()):
        if isinstance(edge, Mapping) and f"{edge.get('src')}->{edge.get('dst')}" == key:
            side = "src" if error.value == edge.get("src") and error.problem.startswith("names") else "dst"
            return ConfigError(f"{source}.edges[{i}].{side}", error.value, error.problem, error.fix)
    return error


def _name(field: str, value: Any) -> None:
    require(
        isinstance(value, str) and bool(value) and "->" not in value,
        field,
        value,
        "must be a non-empty name without '->'",
        "write the component's name",
    )


def _byte_count(field: str, value: Any) -> None:
    integer(field, value, fix=f"give {field} as a whole number of bytes")
    non_negative(field, value)
