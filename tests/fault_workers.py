"""Real workers and objects for the fault-injection tests: a worker that stops at a chosen op and says where
(so a test can kill it there with SIGKILL)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from executor_workers import ChainWorker


class HangWorker(ChainWorker):
    """A :class:`ChainWorker` that, at op ``hang_on = (name, micro_batch, step)`` (in its ``hang_run``-th run, the
    first by default), writes its pid to ``marker`` and then sleeps (``hang_s``) inside the op, until something
    kills it."""

    def compute(self, op_name: str, micro_batch: int, step: int, inputs: list) -> tuple[dict, dict]:
        if self.config.get("hang_on") == (op_name, micro_batch, step):
            self.reached = getattr(self, "reached", 0) + 1
            if self.reached == int(self.config.get("hang_run", 1)):
                Path(self.config["marker"]).write_text(str(os.getpid()))
                time.sleep(float(self.config.get("hang_s", 60.0)))
        return super().compute(op_name, micro_batch, step, inputs)
