"""Does an op's time depend on what the other core does at the same time (issue 34: find the bias)?

    python benchmarks/interference.py [--rounds 7] [--json OUT.json]

Times the main job's (examples/hopper_ppo.yaml) two kinds of work, each in a process pinned to one core with one
torch thread, as the local backend runs its workers:

* ``train``: one PPO update of the job's actor (the ``ActorCritic`` at its hidden sizes, 10 epochs of 4
  minibatches over 8 x 32 samples, fused Adam), the op that dominates a pinned loop's iteration;
* ``env``: 32 Hopper-v5 steps of 8 environments (the env component's share of an iteration).

Each is timed alone (the other core idle) and beside a neighbour on the other core that repeats the same work
or the other kind without pause, in alternating rounds so that a drift of the machine's speed falls on every
condition alike. It prints, per op, the median time alone and each neighbour's ratio to it: 1.00 means no
interference, which is what the simulator assumes when it overlaps lanes of one plan.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import suite

OPS = ("train", "env")
NEIGHBOURS = (None, "train", "env")
REPEATS = 20
"""Timed calls per op and round (each call is one iteration's share of that op)."""


def _pin(core: int) -> None:
    import torch

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)


def _work(kind: str) -> Callable[[], None]:
    """One call of the op named ``kind``, built as the main job builds it."""
    import gymnasium as gym
    import numpy as np
    import torch

    from rlinf.workloads.embodied.policy import ActorCritic

    if kind == "env":
        envs = gym.vector.SyncVectorEnv([lambda: gym.make("Hopper-v5") for _ in range(8)])
        envs.reset(seed=0)
        rng = np.random.default_rng(0)

        def steps() -> None:
            for _ in range(32):
                envs.step(rng.uniform(-1, 1, size=(8, 3)).astype(np.float32))

        return steps
    torch.manual_seed(0)
    model = ActorCritic(11, 3, (64, 64))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, eps=1e-5, fused=True)
    obs, actions = torch.randn(256, 11), torch.randn(256, 3)
    targets = torch.randn(256)

    def update() -> None:
        for _ in range(10):
            for rows in torch.randperm(256).split(64):
                log_probs, entropy, values = model.evaluate(obs[rows], actions[rows])
                loss = -log_probs.mean() - 0.01 * entropy.mean() + ((values - targets[rows]) ** 2).mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

    return update


def _neighbour(kind: str, core: int, ready: Any, stop: Any) -> None:
    _pin(core)
    work = _work(kind)
    work()
    ready.set()
    while not stop.is_set():
        work()


def _timed(kind: str, core: int, requests: Any, results: Any) -> None:
    _pin(core)
    work = _work(kind)
    for _ in range(3):
        work()
    while (request := requests.get()) is not None:
        seconds = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            work()
            seconds.append(time.perf_counter() - started)
        results.put((request, statistics.median(seconds)))


def measure(rounds: int) -> dict[str, Any]:
    """Per op: the median seconds per call alone and beside each neighbour, over ``rounds`` alternating rounds."""
    context = mp.get_context("spawn")
    out: dict[str, Any] = {}
    for op in OPS:
        requests, results = context.Queue(), context.Queue()
        timed = context.Process(target=_timed, args=(op, 0, requests, results), daemon=True)
        timed.start()
        by_neighbour: dict[str, list[float]] = {str(n): [] for n in NEIGHBOURS}
        for _ in range(rounds):
            for neighbour in NEIGHBOURS:
                stop, ready = context.Event(), context.Event()
                helper = None
                if neighbour is not None:
                    helper = context.Process(target=_neighbour, args=(neighbour, 1, ready, stop), daemon=True)
                    helper.start()
                    ready.wait(120)
                requests.put(str(neighbour))
                key, seconds = results.get(timeout=600)
                by_neighbour[key].append(seconds)
                stop.set()
                if helper is not None:
                    helper.join(30)
        requests.put(None)
        timed.join(30)
        alone = statistics.median(by_neighbour["None"])
        out[op] = {
            "alone_ms": 1e3 * alone,
            "ratio_beside": {
                n: statistics.median(by_neighbour[n]) / alone for n in by_neighbour if n != "None"
            },
            "rounds_ms": {n: [1e3 * s for s in v] for n, v in by_neighbour.items()},
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", help="write the measurement here")
    args = parser.parse_args()
    started = suite.begin("python benchmarks/interference.py", sys.argv[1:])
    result = {"rounds": args.rounds, "repeats": REPEATS, "ops": measure(args.rounds)}
    for op, row in result["ops"].items():
        ratios = ", ".join(f"beside {n}: {r:.2f}x" for n, r in row["ratio_beside"].items())
        print(f"{op:6s} alone {row['alone_ms']:7.2f} ms per call; {ratios}")
    if args.json:
        suite.write_artifact(args.json, result, started)


if __name__ == "__main__":
    main()
