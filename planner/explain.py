"""Why nothing fits: which component, how much memory, on which device type, and what would make it fit."""

from __future__ import annotations

from planner.space import PlanSpace
from planner.tables import CostTables, micro_batch_options
from rlinf.core.cluster import GIB, Cluster


def smallest_fit(tables: CostTables, name: str) -> tuple[int, int, int] | None:
    """(devices, micro-batches, bytes per device) of the fewest devices on which ``name`` fits alone, or None."""
    space = tables.space
    state = tables.state_bytes[name]
    for devices in tables.component_sizes[name]:
        options = [
            (state + tables.profile(name, devices, m).activation_bytes, m)
            for m in micro_batch_options(space, name)
        ]
        need, count = min(options)
        if need <= tables.capacity_bytes:
            return devices, count, need
    return None


def explain_infeasible(space: PlanSpace, tables: CostTables, cluster: Cluster) -> str:
    """One message naming the component that cannot fit, its memory, the device type, and the fix."""
    capacity = tables.capacity_bytes
    device = f"{cluster.device.name} ({capacity / GIB:.1f} GiB)"
    workflow = space.workflow
    for name in space.order:
        component = workflow.component(name)
        state = tables.state_bytes[name]
        if state > capacity:
            return (
                f"no plan fits: component {name} needs {state / GIB:.1f} GiB per device for its state alone, more "
                f"than a {device} holds; fix: raise its model_parallel_size (now {component.model_parallel_size}) "
                f"or use devices with more memory"
            )
        if smallest_fit(tables, name) is None:
            largest = max(tables.component_sizes[name], default=0)
            need = min(
                (
                    state + tables.profile(name, largest, m).activation_bytes
                    for m in micro_batch_options(space, name)
                ),
                default=state,
            )
            return (
                f"no plan fits: component {name} needs {need / GIB:.1f} GiB per device ({state / GIB:.1f} GiB state "
                f"+ activations) even on {largest} of the {space.num_devices} devices at the finest granularity, more "
                f"than a {device} holds; fix: more devices (its activations shrink with more data-parallel "
                f"replicas), a smaller batch or a larger model_parallel_size"
            )
    alone = {name: smallest_fit(tables, name) for name in space.order}
    total = sum(fit[0] for fit in alone.values() if fit is not None)
    parts = ", ".join(
        f"{name} {fit[0]} devices ({fit[2] / GIB:.1f} GiB)" for name, fit in alone.items() if fit is not None
    )
    return (
        f"no plan fits on {space.num_devices} {device} devices: each component fits alone ({parts}, {total} devices "
        f"in all) but not together with the others on the devices left; fix: more devices (at least {total} "
        f"disaggregated), or offload states when collocated (the planner already tries offload)"
    )
