"""The embodied PPO configuration: one frozen value, read from YAML with loud errors for unknown keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from rlinf.api import (
    ConfigError,
    current_limits,
    integer,
    limit_exceeded,
    non_negative,
    number,
    positive,
    require,
    structure_config,
)

MAX_SEED = 2**32 - 1
MAX_LAYER_WIDTH = 1_000_000


def _sizes(value: Any) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,)
    return tuple(value)


@attrs.frozen(kw_only=True)
class EmbodiedConfig:
    """Everything an embodied PPO run needs besides the plan."""

    env_id: str = "Hopper-v5"
    """Any gymnasium MuJoCo environment id with continuous actions."""
    num_envs: int = 8
    """Parallel environments (the workflow's batch)."""
    num_steps: int = 32
    """Transitions collected per environment per iteration (the loop runs num_steps + 1 steps: the first one
    only reads the observations the environments carried over from the previous iteration)."""
    hidden_sizes: tuple[int, ...] = attrs.field(default=(64, 64), converter=_sizes)
    """Hidden layer widths of the policy's mean and of the value function (two MLPs; one width may be given)."""
    learning_rate: float = 3e-4
    """Adam's step size."""
    gamma: float = 0.99
    """Discount factor of returns and advantages."""
    gae_lambda: float = 0.95
    """GAE's lambda: 0 bootstraps every step, 1 sums the whole episode."""
    clip_coef: float = 0.2
    """PPO's clip range of the probability ratio."""
    value_coef: float = 0.5
    """Weight of the value loss in the PPO loss."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus in the PPO loss."""
    max_grad_norm: float = 0.5
    """Gradients are clipped to this global norm before each step."""
    num_epochs: int = 10
    """Passes over an iteration's trajectories."""
    num_minibatches: int = 4
    """Minibatches per epoch (per data-parallel replica)."""
    obs_clip: float = 10.0
    """Normalized observations are clipped to ``[-obs_clip, obs_clip]``."""
    normalize_rewards: bool = True
    """Scale rewards by the running std of the discounted return."""
    seed: int = 0
    """The run's seed (``execution.seed``, copied by the workload's ``load_config``)."""

    def __attrs_post_init__(self) -> None:
        for name in ("num_envs", "num_steps", "num_epochs", "num_minibatches"):
            value = getattr(self, name)
            require(
                isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                name,
                value,
                "must be an integer >= 1",
                f"set {name} to a positive integer",
            )
        bound = current_limits()
        for name, most, limit in (
            ("num_envs", bound.max_batch_size, "max_batch_size"),
            ("num_steps", bound.max_loop_steps - 1, "max_loop_steps"),
        ):
            if getattr(self, name) > most:
                raise limit_exceeded(name, getattr(self, name), name.replace("_", " "), limit, most)
        integer("seed", self.seed, minimum=0, maximum=MAX_SEED)
        samples = self.num_envs * self.num_steps  # refused here, not when the actor's workers start up
        require(
            self.num_minibatches <= samples, "num_minibatches", self.num_minibatches,
            f"exceeds the {samples} samples of an iteration (num_envs x num_steps)",
            f"use at most {samples} minibatches, or more environments or steps",
        )  # fmt: skip
        for name in ("learning_rate", "obs_clip", "max_grad_norm"):
            positive(name, getattr(self, name))
        for name in ("clip_coef", "value_coef", "entropy_coef"):
            non_negative(name, getattr(self, name))
        for name in ("gamma", "gae_lambda"):
            value = getattr(self, name)
            number(name, value)
            require(0.0 <= value <= 1.0, name, value, "must be in [0, 1]", f"set {name} between 0 and 1")
        require(
            len(self.hidden_sizes) >= 1
            and all(
                isinstance(h, int) and not isinstance(h, bool) and 1 <= h <= MAX_LAYER_WIDTH
                for h in self.hidden_sizes
            ),
            "hidden_sizes",
            self.hidden_sizes,
            f"must be layer widths in 1-{MAX_LAYER_WIDTH:,}",
            "write e.g. [64, 64]",
        )
        require(
            isinstance(self.normalize_rewards, bool),
            "normalize_rewards",
            self.normalize_rewards,
            "must be true or false",
            "write true or false",
        )
        require(
            isinstance(self.env_id, str) and bool(self.env_id.strip()),
            "env_id",
            self.env_id,
            "must be a non-empty environment id",
            "write e.g. Hopper-v5",
        )

    @property
    def loop_steps(self) -> int:
        """Steps of the env <-> rollout loop per iteration."""
        return self.num_steps + 1


FIELDS = tuple(a.name for a in attrs.fields(EmbodiedConfig))


def config_from_dict(data: Any, source: str = "config") -> EmbodiedConfig:
    """Validate a mapping into a config (:func:`rlinf.api.structure_config`: types checked, unknown keys are errors
    that list the valid ones). ``hidden_sizes`` may be one width."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(source, data, "must be a mapping", f"write keys from {list(FIELDS)}")
    data = dict(data)
    width = data.get("hidden_sizes")
    if isinstance(width, int) and not isinstance(width, bool):
        data["hidden_sizes"] = [width]
    return structure_config(EmbodiedConfig, data, source)


def check_env_id(env_id: str) -> tuple[int, int]:
    """Observation and action sizes of a continuous-control gymnasium env; a clear error when it does not exist."""
    import gymnasium as gym

    try:
        gym.spec(env_id)
    except gym.error.Error as error:
        close = [name for name in gym.registry if name.split("-")[0].lower() == env_id.split("-")[0].lower()]
        hint = (
            f"did you mean one of {sorted(close)[:6]}?"
            if close
            else "use a registered MuJoCo id such as Hopper-v5"
        )
        raise ConfigError(
            "env_id", env_id, f"is not a registered gymnasium environment ({type(error).__name__})", hint
        ) from None
    env = gym.make(env_id)
    try:
        obs_space, act_space = env.observation_space, env.action_space
        require(
            isinstance(obs_space, gym.spaces.Box)
            and isinstance(act_space, gym.spaces.Box)
            and len(obs_space.shape) == 1,
            "env_id",
            env_id,
            "needs flat Box observations and continuous Box actions",
            "use a MuJoCo locomotion env such as Hopper-v5, Walker2d-v5 or HalfCheetah-v5",
        )
        obs_shape, act_shape = obs_space.shape or (0,), act_space.shape or (0,)
        return int(obs_shape[0]), int(act_shape[0])
    finally:
        env.close()
