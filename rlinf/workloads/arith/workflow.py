"""The GRPO macro flow of the arithmetic workload (rlinf derives its plans).

Components: ``rollout`` (generation), ``reward`` (the verifier and group advantages), ``inference`` (old-policy
and reference log-probabilities) and ``actor`` (GRPO training), joined by stream edges
``rollout -> reward -> inference -> actor``; after training the actor syncs its weights to the rollout and to
the inference component (the next iteration's old policy). A micro-batch holds whole prompt groups.
"""

from __future__ import annotations

from rlinf.api import Component, Edge, WeightSync, Workflow
from rlinf.workloads.arith.config import ArithGrpoConfig
from rlinf.workloads.arith.evaluation import model_config
from rlinf.workloads.arith.model import DecoderTransformer
from rlinf.workloads.arith.tokenizer import ArithTokenizer


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
            Component(name="reward", role="reward", cpu_ok=True),
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
