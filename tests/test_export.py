"""Chrome trace and Gantt exports of timelines."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from rlinf.core.export import (
    chrome_trace,
    device_groups,
    link_lanes,
    write_chrome_trace,
    write_gantt_png,
    write_timeline_pair_png,
)
from rlinf.core.program import Lane, Op, Program
from rlinf.core.timeline import Timeline

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _timeline(specs: list[tuple], num_devices: int, mode: str) -> Timeline:
    """A timeline from (kind, component, name, devices, start_s, end_s, micro_batch, peer) tuples in run order."""
    ops = tuple(
        Op(
            index=i,
            kind=kind,
            component=component,
            name=name,
            micro_batch=micro_batch,
            num_micro_batches=2,
            devices=tuple(devices),
            peer=peer,
            deps=(i - 1,) if i else (),
        )
        for i, (kind, component, name, devices, *_rest, micro_batch, peer) in enumerate(specs)
    )
    by_sequence: dict[tuple[int, ...], list[int]] = {}
    for device in range(num_devices):
        sequence = tuple(op.index for op in ops if device in op.devices)
        if sequence:
            by_sequence.setdefault(sequence, []).append(device)
    lanes = tuple(Lane(devices=tuple(devices), ops=sequence) for sequence, devices in by_sequence.items())
    program = Program(ops=ops, num_devices=num_devices, lanes=lanes, mode=mode)
    return Timeline(
        program=program,
        start_s=[spec[4] for spec in specs],
        end_s=[spec[5] for spec in specs],
        peak_memory_bytes=(0,) * num_devices,
    )


@pytest.fixture
def collocated_64() -> Timeline:
    """64 devices that all run the same ops, with context switches and a weight sync."""
    everyone = range(64)
    return _timeline(
        [
            ("onload", "rollout", "onload", everyone, 0.0, 0.5, 0, ""),
            ("compute", "rollout", "generate", everyone, 0.5, 3.0, 0, ""),
            ("compute", "rollout", "generate", everyone, 3.0, 4.0, 1, ""),
            ("offload", "rollout", "offload", everyone, 4.0, 4.5, 0, ""),
            ("onload", "actor", "onload", everyone, 4.5, 5.0, 0, ""),
            ("compute", "actor", "train", everyone, 5.0, 7.0, 0, ""),
            ("sync_weights", "actor", "sync_weights", everyone, 7.0, 7.2, 0, "rollout"),
            ("offload", "actor", "offload", everyone, 7.2, 7.7, 0, ""),
        ],
        num_devices=64,
        mode="collocated",
    )


@pytest.fixture
def disaggregated() -> Timeline:
    """rollout on 0-3, actor on 4-5, devices 6-7 idle; two transfers overlap on one link."""
    return _timeline(
        [
            ("compute", "rollout", "generate", (0, 1, 2, 3), 0.0, 2.0, 0, ""),
            ("compute", "rollout", "generate", (0, 1, 2, 3), 2.0, 2.5, 1, ""),
            ("transfer", "rollout", "transfer", (), 2.0, 2.8, 0, "actor"),
            ("transfer", "rollout", "transfer", (), 2.5, 3.0, 1, "actor"),
            ("compute", "actor", "train", (4, 5), 2.8, 4.0, 0, ""),
            ("compute", "actor", "train", (4, 5), 4.0, 5.0, 1, ""),
        ],
        num_devices=8,
        mode="disaggregated",
    )


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _complete_events(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def _names(trace: dict, kind: str) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == kind
    }


def test_device_groups_merge_devices_with_identical_spans(
    collocated_64: Timeline, disaggregated: Timeline
) -> None:
    groups = device_groups(collocated_64)
    assert [g.label for g in groups] == ["dev 0-63"]
    assert groups[0].span_indices == tuple(range(8))
    assert [(g.label, len(g.span_indices)) for g in device_groups(disaggregated)] == [
        ("dev 0-3", 2),
        ("dev 4-5", 2),
        ("dev 6-7", 0),
    ]


def test_chrome_trace_has_one_event_per_op_and_device_plus_links(disaggregated: Timeline) -> None:
    trace = json.loads(json.dumps(chrome_trace(disaggregated)))
    events = _complete_events(trace)
    expected = sum(len(s.devices) or 1 for s in disaggregated.spans)
    assert len(events) == expected == 4 * 2 + 2 * 2 + 2
    for event in events:
        span = disaggregated.spans[event["args"]["op_index"]]
        assert event["ts"] == pytest.approx(span.start_s * 1e6)
        assert event["dur"] == pytest.approx(span.seconds * 1e6)
        assert event["name"] == span.label
        assert event["args"]["component"] == span.component
        assert event["args"]["kind"] == span.kind
        assert event["args"]["micro_batch"] == span.micro_batch
        assert event["args"]["step"] == span.step
    threads = _names(trace, "thread_name")
    on_device = {
        (e["args"]["op_index"], threads[(e["pid"], e["tid"])]) for e in events if e["cat"] != "transfer"
    }
    assert on_device == {(i, f"dev {d}") for i, s in enumerate(disaggregated.spans) for d in s.devices}
    link_rows = sorted(threads[(e["pid"], e["tid"])] for e in events if e["cat"] == "transfer")
    assert link_rows == ["rollout->actor", "rollout->actor (2)"]


def test_chrome_trace_rows_never_hold_overlapping_events(disaggregated: Timeline) -> None:
    by_row: dict[tuple[int, int], list[dict]] = {}
    for event in _complete_events(chrome_trace(disaggregated)):
        by_row.setdefault((event["pid"], event["tid"]), []).append(event)
    for events in by_row.values():
        events.sort(key=lambda e: e["ts"])
        for before, after in zip(events, events[1:], strict=False):
            assert before["ts"] + before["dur"] <= after["ts"] + 1e-6


def test_chrome_trace_names_processes_after_device_groups(disaggregated: Timeline) -> None:
    processes = set(_names(chrome_trace(disaggregated), "process_name").values())
    assert processes == {"dev 0-3 (rollout)", "dev 4-5 (actor)", "dev 6-7 (idle)", "links"}


def test_chrome_trace_times_start_at_the_first_span() -> None:
    late = _timeline(
        [("compute", "actor", "train", (0,), 100.0, 101.5, 0, "")], num_devices=1, mode="collocated"
    )
    (event,) = _complete_events(chrome_trace(late))
    assert (event["ts"], event["dur"]) == (0.0, pytest.approx(1.5e6))


def test_link_lanes_split_overlapping_transfers(disaggregated: Timeline) -> None:
    assert link_lanes(disaggregated) == {"rollout->actor": [[2], [3]]}


def test_write_chrome_trace_is_atomic_and_round_trips(tmp_path: Path, collocated_64: Timeline) -> None:
    path = tmp_path / "timeline.json"
    path.write_text("old")
    write_chrome_trace(collocated_64, path)
    assert json.loads(path.read_text()) == json.loads(json.dumps(chrome_trace(collocated_64)))
    assert [p.name for p in tmp_path.iterdir()] == ["timeline.json"]
    kinds = {e["cat"] for e in _complete_events(json.loads(path.read_text()))}
    assert kinds == {"onload", "offload", "compute", "sync_weights"}


def test_gantt_png_is_written_atomically(tmp_path: Path, disaggregated: Timeline) -> None:
    path = tmp_path / "plots" / "gantt.png"
    write_gantt_png(disaggregated, path, title="two components")
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert path.stat().st_size > 10_000
    assert [p.name for p in path.parent.iterdir()] == ["gantt.png"]


def test_gantt_rows_are_device_groups(
    tmp_path: Path, collocated_64: Timeline, disaggregated: Timeline
) -> None:
    # 64 identical devices make one row; three device groups and a link row make a taller chart.
    write_gantt_png(collocated_64, tmp_path / "collocated.png")
    write_gantt_png(disaggregated, tmp_path / "disaggregated.png")
    _, collocated_height = _png_size(tmp_path / "collocated.png")
    _, disaggregated_height = _png_size(tmp_path / "disaggregated.png")
    assert collocated_height < disaggregated_height < 2 * collocated_height + 200


def test_timeline_pair_png_stacks_two_timelines(
    tmp_path: Path, collocated_64: Timeline, disaggregated: Timeline
) -> None:
    write_gantt_png(disaggregated, tmp_path / "single.png")
    write_timeline_pair_png(disaggregated, collocated_64, tmp_path / "pair.png")
    single_width, single_height = _png_size(tmp_path / "single.png")
    pair_width, pair_height = _png_size(tmp_path / "pair.png")
    assert pair_height > single_height
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pair.png", "single.png"]
