"""The small protocol through which the executor drives workers; the executor knows nothing else about them.

A worker is one replica of one component, living in its own process, pinned to its device. The protocol is the
public one a workload's workers follow (:class:`rlinf.api.Worker`); the executor calls:

* ``setup(config, context)`` once, after the device is bound (and, when ``world > 1``, after the component's
  collective group is initialised, so data-parallel workers may all-reduce in ``compute``): ``config`` is the spec's
  (:class:`executor.runtime.WorkerSpec`), ``context`` the replica's :class:`rlinf.api.WorkerContext`, built from the
  spec's facts and the replica's rank, world and device (:func:`executor.runtime.build_worker`);
* ``compute(op_name, micro_batch, step, inputs) -> (data, info)`` for every compute op: ``data`` goes to the
  consumers, ``info`` (small JSON-ready values: losses, finished episode returns) to the driver. ``inputs`` holds the payloads
  of the op's producers (one per producer replica, in program then rank order), already sliced to this
  replica's share;
* ``state_tensors()``, optional (no state without it): the live tensors of its resident state (weights,
  optimizer); the executor moves them for onload/offload, so a worker never has to (:func:`state_tensors`);
* ``weights() / load_weights(payload)`` for ``sync_weights`` (the source's rank 0 sends, every destination replica
  loads);
* ``checkpoint()`` and ``restore(state)`` for the runner, and any other method through ``backend.call``.

Workers need not import anything from the executor: they are plain classes with these methods.
Payloads are mappings of numpy arrays whose first axis is the sample axis (environments, sequences), so the
executor can split them between producer and consumer replicas without understanding them
(:mod:`rlinf.core.payloads`).
"""

from __future__ import annotations

from typing import Any

from rlinf.api.workload import Worker

__all__ = ["Worker", "share_overlaps", "share_slice", "state_tensors"]


def state_tensors(worker: Worker) -> list[Any]:
    """The live tensors of ``worker``'s resident state: its ``state_tensors()``, none when it has no such method."""
    method = getattr(worker, "state_tensors", None)
    return [] if method is None else list(method())


def share_overlaps(producer_rank: int, producer_world: int, consumer_rank: int, consumer_world: int) -> bool:
    """Whether a producer replica's share of a micro-batch overlaps a consumer replica's share."""
    lo = max(producer_rank * consumer_world, consumer_rank * producer_world)
    hi = min((producer_rank + 1) * consumer_world, (consumer_rank + 1) * producer_world)
    return lo < hi


def share_slice(
    num: int, producer_rank: int, producer_world: int, consumer_rank: int, consumer_world: int
) -> tuple[int, int]:
    """Local row range ``[lo, hi)`` of a producer's ``num`` rows that belongs to a consumer replica.

    A micro-batch of ``producer_world * num`` rows is split contiguously: producer ``p`` holds
    ``[p*num, (p+1)*num)`` and consumer ``c`` takes ``[c*N//C, (c+1)*N//C)``."""
    total = producer_world * num
    own_lo, own_hi = producer_rank * num, (producer_rank + 1) * num
    want_lo = consumer_rank * total // consumer_world
    want_hi = (consumer_rank + 1) * total // consumer_world
    lo, hi = max(own_lo, want_lo), min(own_hi, want_hi)
    if hi <= lo:
        return 0, 0
    return lo - own_lo, hi - own_lo
