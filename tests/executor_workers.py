"""Small real workers for the executor tests: they compute (matrix products whose size follows the op's
samples), pass arrays along, hold torch state that can be offloaded, and can be told to fail."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from rlinf.api import WorkerContext
from rlinf.core.component_facts import ComponentFacts
from rlinf.core.payloads import concat_payloads, num_rows


def chain_facts(component: str) -> ComponentFacts:
    """What a :class:`ChainWorker`'s spec says of its component (it reads only its rank, world and device)."""
    return ComponentFacts(
        component=component,
        num_micro_batches=1,
        micro_batch_groups=((0, 1),),
        group_size=1,
        loop_stages=1,
        offload=False,
    )


class ChainWorker:
    """Emits ``rows`` rows per op, each the row sums of a real matrix product; consumes whatever it is sent."""

    def setup(self, config: dict[str, Any], context: WorkerContext) -> None:
        self.config = dict(config)
        self.rank, self.world = context.rank, context.world
        self.device = device = context.device
        hidden = int(self.config.get("hidden", 64))
        self.model = torch.nn.Linear(hidden, hidden).to(device.torch_device)
        self.optimizer = torch.optim.Adam(self.model.parameters())
        self.calls = 0
        self.received_rows: list[int] = []
        self.version = 0.0

    def compute(self, op_name: str, micro_batch: int, step: int, inputs: list) -> tuple[dict, dict]:
        if self.config.get("fail_on") == (op_name, micro_batch, step):
            raise RuntimeError(f"injected failure in {op_name}[{micro_batch}]")
        if self.config.get("die_on") == (op_name, micro_batch, step):
            import os

            os._exit(3)
        self.calls += 1
        incoming = concat_payloads(inputs)
        self.received_rows.append(num_rows(incoming))
        rows = int(self.config.get("rows", 4))
        work = np.random.default_rng(self.calls).standard_normal((rows, 96))
        seconds = float(self.config.get("seconds", 0.0))
        deadline = time.perf_counter() + seconds
        while True:
            work = np.tanh(work @ np.eye(96) * 0.5)
            if time.perf_counter() >= deadline:
                break
        if op_name == "train":
            loss = (
                self.model(torch.ones(1, self.model.in_features, device=self.model.weight.device))
                .pow(2)
                .mean()
            )
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        value = np.full((rows,), self.version + self.rank, dtype=np.float32)
        return {"value": value, "work": work.astype(np.float32)}, {"rows_in": num_rows(incoming)}

    def state_tensors(self) -> list:
        tensors = list(self.model.parameters())
        for state in self.optimizer.state.values():
            tensors.extend(v for v in state.values() if torch.is_tensor(v))
        return tensors

    def weights(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()}

    def load_weights(self, payload: dict[str, np.ndarray]) -> None:
        self.model.load_state_dict(
            {k: torch.from_numpy(np.array(v)).to(self.model.weight.device) for k, v in payload.items()}
        )
        self.version += 1.0

    def checkpoint(self) -> dict[str, Any]:
        return {"calls": self.calls, "received_rows": list(self.received_rows)}

    def restore(self, state: dict[str, Any]) -> None:
        self.calls, self.received_rows = state["calls"], list(state["received_rows"])
