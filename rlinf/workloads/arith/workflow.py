"""The GRPO macro flow of the arithmetic workload and its plans for each mode.

Components: ``rollout`` (generation), ``reward`` (the verifier and group advantages), ``inference`` (old-policy
and reference log-probabilities) and ``actor`` (GRPO training), joined by stream edges
``rollout -> reward -> inference -> actor``; after training the actor syncs its weights to the rollout and to
the inference component (the next iteration's old policy). A micro-batch holds whole prompt groups.
"""

from __future__ import annotations

import math

from rlinf.errors import ConfigError, require
from rlinf.lowering import micro_batch_ranges
from rlinf.plan import Placement, Plan
from rlinf.workflow import Component, Edge, WeightSync, Workflow
from rlinf.workloads.arith.config import ArithGrpoConfig
from rlinf.workloads.arith.evaluation import model_config
from rlinf.workloads.arith.model import DecoderTransformer
from rlinf.workloads.arith.tokenizer import ArithTokenizer

COMPONENTS = ("rollout", "reward", "inference", "actor")
STREAM_EDGES = ("rollout->reward", "reward->inference", "inference->actor")
DISAGGREGATED_MIN_DEVICES = len(COMPONENTS)
"""Four components on pairwise disjoint devices."""


def parameter_bytes(config: ArithGrpoConfig) -> int:
    """Bytes of the policy's float32 weights."""
    model = DecoderTransformer(model_config(config, ArithTokenizer()), seed=0)
    return 4 * sum(p.numel() for p in model.parameters())


def mean_response_tokens(config: ArithGrpoConfig) -> float:
    """Expected generated tokens per response: the answer and EOS, or the maximum for long-tail prompts."""
    short = min(config.grpo.max_new_tokens, config.task.max_answer_chars + 1)
    tail = config.grpo.long_tail_fraction
    return (1.0 - tail) * short + tail * config.grpo.max_new_tokens


def grpo_workflow(config: ArithGrpoConfig) -> Workflow:
    """The macro flow of one GRPO iteration for ``config``."""
    weights = parameter_bytes(config)
    width = model_config(config, ArithTokenizer()).max_seq_len
    token_bytes = 8 * width
    return Workflow(
        name="grpo-arith",
        components=[
            Component(name="rollout", role="rollout", state_bytes=weights),
            Component(name="reward", role="reward"),
            Component(name="inference", role="inference", state_bytes=2 * weights),
            Component(name="actor", role="actor", state_bytes=4 * weights),
        ],
        edges=[
            Edge(src="rollout", dst="reward", bytes_per_sample=token_bytes + 4 * width),
            Edge(src="reward", dst="inference", bytes_per_sample=token_bytes + 4 * width + 8),
            Edge(src="inference", dst="actor", bytes_per_sample=token_bytes + 12 * width + 8),
        ],
        weight_sync=[
            WeightSync(src="actor", dst="rollout", num_bytes=weights),
            WeightSync(src="actor", dst="inference", num_bytes=weights),
        ],
        batch_size=config.grpo.prompts_per_iteration * config.grpo.group_size,
        group_size=config.grpo.group_size,
        tokens_per_sample=mean_response_tokens(config),
    )


def plan_for_mode(mode: str, num_devices: int, config: ArithGrpoConfig) -> tuple[Plan, int]:
    """A plan for ``mode`` on ``num_devices`` devices, and the number of logical devices it uses.

    * collocated: every component on every device (data-parallel over all of them);
    * disaggregated: the four components on disjoint devices (the rollout takes what a quarter split leaves
      over); with fewer than four devices it uses four logical devices, which the caller maps onto the physical
      ones (and warns);
    * hybrid: rollout and reward on the first half, inference and actor on the second."""
    require(num_devices >= 1, "--devices", num_devices, "must be >= 1", "use at least one device")
    devices = tuple(range(num_devices))
    if mode == "collocated":
        placement = {name: devices for name in COMPONENTS}
        logical = num_devices
    elif mode == "disaggregated":
        logical = max(num_devices, DISAGGREGATED_MIN_DEVICES)
        quarter = logical // 4
        first = logical - 3 * quarter
        placement = {
            "rollout": tuple(range(first)),
            "reward": tuple(range(first, first + quarter)),
            "inference": tuple(range(first + quarter, first + 2 * quarter)),
            "actor": tuple(range(first + 2 * quarter, logical)),
        }
    elif mode == "hybrid":
        require(
            num_devices >= 2,
            "--devices",
            num_devices,
            "hybrid needs at least 2 devices (rollout+reward apart from inference+actor)",
            "use --devices 2 or more, or --mode collocated",
        )
        half = num_devices // 2
        placement = {
            "rollout": devices[:half],
            "reward": devices[:half],
            "inference": devices[half:],
            "actor": devices[half:],
        }
        logical = num_devices
    else:
        raise ConfigError("mode", mode, "unknown mode", "use collocated, disaggregated or hybrid")
    plan = Plan(
        placements=[Placement(component=name, devices=ids) for name, ids in placement.items()],
        granularity={edge: config.execution.granularity for edge in STREAM_EDGES},
        offload=frozenset(config.execution.offload),  # type: ignore[arg-type]  # attrs converter typed generically
    )
    return plan, logical


def component_micro_batches(plan: Plan, name: str) -> int:
    """Micro-batches of a component under ``plan`` (the largest granularity of its stream edges, as lowered)."""
    return max(plan.granularity_of(edge) for edge in STREAM_EDGES if name in edge.split("->"))


def check_plan_fits(plan: Plan, config: ArithGrpoConfig) -> None:
    """Raise when a component's micro-batches do not split into whole groups over its and its consumer's
    replicas, or when the rollout's granularity differs from the config's (the rollout workers read it there)."""
    num_groups = config.grpo.prompts_per_iteration
    replicas = {name: len(plan.devices_of(name)) for name in COMPONENTS}
    for index, name in enumerate(COMPONENTS):
        m = component_micro_batches(plan, name)
        require(
            m <= num_groups,
            f"granularity of {name}",
            m,
            f"exceeds the {num_groups} prompt groups of an iteration",
            f"use at most {num_groups} micro-batches",
        )
        split = (
            replicas[name]
            if index == len(COMPONENTS) - 1
            else math.lcm(replicas[name], replicas[COMPONENTS[index + 1]])
        )
        for lo, hi in micro_batch_ranges(num_groups, m):
            require(
                (hi - lo) % split == 0,
                "grpo.prompts_per_iteration",
                num_groups,
                f"a micro-batch of {hi - lo} groups of {name} does not split over {split} replicas",
                f"use a multiple of {m * split} prompts per iteration, or another granularity",
            )
    rollout_m = component_micro_batches(plan, "rollout")
    require(
        rollout_m == config.execution.granularity,
        "execution.granularity",
        config.execution.granularity,
        f"differs from the plan's rollout granularity {rollout_m}",
        f"--set execution.granularity={rollout_m}",
    )
