"""The shared validation layer: reading files (rlinf.core.inputs), limits (rlinf.core.limits), output paths (rlinf.core.outputs),
typed conversion (rlinf.api.structure_config) and command-line values (rlinf.commands.values); every refusal names the
field."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import attrs
import pytest

from rlinf.cli import main
from rlinf.commands import values
from rlinf.core import limits
from rlinf.core.cluster import parse_cluster
from rlinf.core.config_structure import structure_config
from rlinf.core.errors import ConfigError
from rlinf.core.inputs import decode_console_text, decode_text, load_json, parse_json, parse_yaml, read_bytes
from rlinf.core.outputs import check_output_dir, check_output_file
from rlinf.core.plan import parse_devices

SMALL = limits.Limits(max_input_bytes=16, max_json_depth=3, max_list_length=4, max_yaml_nodes=20)


def test_read_bytes_refuses_what_is_not_a_readable_regular_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"trace='.*nowhere.json': file does not exist"):
        read_bytes(tmp_path / "nowhere.json", "trace")
    with pytest.raises(ConfigError, match=r"is a folder, not a file"):
        read_bytes(tmp_path, "trace")
    with pytest.raises(ConfigError, match=r"is not a regular file"):
        read_bytes("/dev/zero", "trace")
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b"1," * 20 + b"1]")
    with pytest.raises(ConfigError, match=r"exceeds the limit of 16 bytes .* RLINF_MAX_INPUT_BYTES=N"):
        read_bytes(big, "trace", limits=SMALL)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ("{}".encode("utf-16"), r"is UTF-16 text; fix: save the file as UTF-8"),
        ("{}".encode("utf-32"), r"is UTF-32 text"),
        ("{}".encode("utf-16-le"), r"is not text \(a zero byte at offset 1"),
        (b'{"a": "caf\xe9"}', r"is not UTF-8 text \(byte 0xe9 at offset 10\)"),
    ],
)
def test_decode_text_refuses_other_encodings(data: bytes, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        decode_text(data, "trace", "t.json")


def test_a_console_log_as_published_keeps_its_text_without_stray_zero_bytes_or_cut_characters() -> None:
    log = b"\x1b[36m(pid=1)\x1b[0m device: \x00\nstep:0 - timing/gen:1.5\n" + "100%|\u2588|".encode()
    text, cleaning = decode_console_text(log, "path", "run.log")
    assert text == log.replace(b"\x00", b"").decode() and cleaning == {
        "zero_bytes_dropped": 1,
        "invalid_utf8_replaced": 0,
    }
    cut = "\u2588".encode()[:2]  # a block character cut by a process's output buffer
    text, cleaning = decode_console_text(b"step:0 - a:1\n" + cut + b"\n", "path", "run.log")
    assert text == "step:0 - a:1\n\ufffd\n" and cleaning == {
        "zero_bytes_dropped": 0,
        "invalid_utf8_replaced": 1,
    }
    with pytest.raises(ConfigError, match="is not text"):  # UTF-16 without a byte-order mark: half zero bytes
        decode_console_text("step:0 - timing/gen:1.5\n".encode("utf-16-le"), "path", "run.log")
    with pytest.raises(ConfigError, match="is UTF-16 text"):
        decode_console_text(b"\xff\xfe" + "step".encode("utf-16-le"), "path", "run.log")


def test_decode_text_drops_a_utf8_byte_order_mark() -> None:
    assert decode_text(b"\xef\xbb\xbf{}", "trace", "t.json") == "{}"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"a": [1,}', r"trace='t.json:1:10': is not valid JSON"),
        ("[" * 50_000 + "]" * 50_000, r"trace='t.json': exceeds the limit of 3 levels of nesting"),
        ("[[[[1]]]]", r"t.json\[0\]\[0\]\[0\]='\[...\]': exceeds the limit of 3 levels"),
        ('{"a": {"seconds": NaN}}', r"t.json.a.seconds=nan: must be a finite number"),
        ('{"a": [1e400]}', r"t.json.a\[0\]=inf: must be a finite number"),
        ('{"a": [1, 2, 3, 4, 5]}', r"t.json.a='<5 items>': exceeds the limit of 4 items"),
        ('{"a": ' + "9" * 5000 + "}", r"trace='t.json': is not valid JSON \(Exceeds the limit"),
    ],
)
def test_parse_json_refusals(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_json(text, "trace", "t.json", limits=SMALL)


BOMB = "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("a: [1\n", r"plan='p.yaml': is not valid YAML"),
        (BOMB, r"plan='p.yaml': exceeds the limit of 20 values once its aliases are expanded"),
        ("&a [*a]\n", r"has an alias that refers to itself"),
        ("- " * 100_000 + "x\n", r"exceeds the limit of 3 levels of nesting"),
        ("a: [[[[1]]]]\n", r"exceeds the limit of 3 levels of nesting"),
        ("{[1, 2]: x}\n", r"plan='p.yaml': is not valid YAML"),
        ("1: x\n", r"p.yaml.1=1: is not a text key"),
        ("a: .inf\n", r"p.yaml.a=inf: must be a finite number"),
        ("!!python/object:os.system x\n", r"is not valid YAML \(could not determine a constructor"),
    ],
)
def test_parse_yaml_refusals(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_yaml(text, "plan", "p.yaml", limits=SMALL)


def test_yaml_aliases_within_the_limit_are_expanded() -> None:
    assert parse_yaml("a: &a [1, 2]\nb: *a\n", "plan", "p.yaml") == {"a": [1, 2], "b": [1, 2]}


def test_limits_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"cluster.num_nodes=100000: exceeds the limit of 65,536 nodes"):
        parse_cluster("100000x1xCPU")
    monkeypatch.setenv("RLINF_MAX_DEVICES", "200_000")
    assert parse_cluster("100000x1xCPU").num_devices == 100_000
    monkeypatch.setenv("RLINF_MAX_DEVICES", "many")
    with pytest.raises(ConfigError, match=r"RLINF_MAX_DEVICES='many': is not a whole number"):
        limits.current()
    monkeypatch.setenv("RLINF_MAX_DEVICES", "0")
    with pytest.raises(ConfigError, match=r"RLINF_MAX_DEVICES=0: must be an integer >= 1"):
        limits.current()


def test_device_ranges_are_bounded_before_they_are_expanded() -> None:
    with pytest.raises(
        ConfigError, match=r"placement.actor='0-999999999': exceeds the limit of 65,536 devices"
    ):
        parse_devices("0-999999999", 8, "placement.actor")
    with pytest.raises(ConfigError, match=r"exceeds the limit"):
        parse_devices("0-" + "9" * 5000, 8, "placement.actor")
    with pytest.raises(ConfigError, match=r"placement.actor=-1: negative device id"):
        parse_devices([-1], 8, "placement.actor")


def test_output_paths(tmp_path: Path) -> None:
    existing = tmp_path / "file.txt"
    existing.write_text("x")
    assert check_output_dir(tmp_path / "new" / "run", "--out") == tmp_path / "new" / "run"
    assert check_output_file(tmp_path / "plan.yaml", "--out") == tmp_path / "plan.yaml"
    with pytest.raises(ConfigError, match=r"--out='.*file.txt': is a file, not a folder"):
        check_output_dir(existing, "--out")
    with pytest.raises(ConfigError, match=r"is a folder, not a file"):
        check_output_file(tmp_path, "--out")
    with pytest.raises(ConfigError, match=r"cannot be created: .*file.txt is a file, not a folder"):
        check_output_dir(existing / "run", "--out")
    with pytest.raises(ConfigError, match=r"is inside /proc, a kernel pseudo-filesystem"):
        check_output_dir("/proc/rlinf", "--out")
    with pytest.raises(ConfigError, match=r"has a name longer than 255 bytes"):
        check_output_dir(tmp_path / ("n" * 300), "--out")
    with pytest.raises(ConfigError, match=r"--out='': is empty"):
        check_output_file("", "--out")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_folder_is_refused(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match=r"is not writable"):
            check_output_dir(tmp_path / "run", "--out")
    finally:
        tmp_path.chmod(0o700)


@attrs.frozen(kw_only=True)
class Inner:
    ratio: float
    names: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class Outer:
    count: int
    inner: Inner
    flag: bool = False


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"inner": {"ratio": 1.0}}, r"count=None: is missing"),
        ({"count": 1.5, "inner": {"ratio": 1.0}}, r"count=1.5: must be an integer"),
        ({"count": True, "inner": {"ratio": 1.0}}, r"count=True: must be an integer"),
        ({"count": 1, "inner": {"ratio": "1e3"}}, r"inner.ratio='1e3': must be a number"),
        ({"count": 1, "inner": {"ratio": 10**400}}, r"inner.ratio=.*must be a finite number"),
        ({"count": 1, "inner": {"ratio": 1.0, "names": [1]}}, r"inner.names\[0\]=1: must be a string"),
        ({"count": 1, "inner": [1]}, r"inner=\[1\]: must be a mapping"),
        ({"count": 1, "inner": {"ratio": 1.0}, "colour": 2}, r"cfg.yaml.colour=\['colour'\]: unknown key"),
        (
            {"count": 2**64, "inner": {"ratio": 1.0}},
            r"count=18446744073709551616: is beyond the 64-bit range",
        ),
    ],
)
def test_structure_config_checks_types_before_the_constructor(data: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        structure_config(Outer, data, "cfg.yaml")


def test_command_line_values() -> None:
    assert values.seed("7") == 7
    assert values.count(1, limit="max_devices")("8") == 8
    for convert, text, match in (
        (values.seed, "-1", r"=-1: must be an integer in 0-4294967295"),
        (values.seed, "9" * 40, r"must be a whole number of at most 30 digits"),
        (values.count(1, 10), "11", r"=11: must be <= 10"),
        (values.count(1, limit="max_devices"), "70000", r"RLINF_MAX_DEVICES"),
        (values.positive_seconds, "nan", r"=nan: must be a finite number"),
        (values.positive_seconds, "0", r"=0: must be a finite number > 0"),
        (values.real(), "x", r"='x': must be a number"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=match):
            convert(text)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["simulate"], "rlinf: error: --trace: is required"),
        (
            ["simulate", "--trace", "t", "--plan", "p", "--seed", "-1"],
            "rlinf: error: --seed=-1: must be an integer",
        ),
        (
            ["simulate", "--trace", "t", "--plan", "p", "--seed"],
            "rlinf: error: --seed: expected one argument",
        ),
        (["train", "c.yaml", "--mode", "sideways"], "rlinf: error: --mode='sideways': invalid choice"),
        (["trace", "show", "t.json", "--colour"], "rlinf: error: --colour: is not a flag of this command"),
    ],
)
def test_usage_errors_are_one_line(argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1 and "fix: see 'rlinf" in err, err


def test_a_trace_file_is_read_through_the_same_checks(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes("{}".encode("utf-16"))
    with pytest.raises(ConfigError, match=r"--measured='.*t.json': is UTF-16 text"):
        load_json(path, "--measured")


def test_a_bad_plan_inside_a_trace_names_where_it_is(tmp_path: Path) -> None:
    """Found by the fuzz suite: a probe plan in a profile's provenance with a bad placement was reported as
    ``placement.actor``, a field the trace does not have; it is named by its path in the trace."""
    from rlinf.app.profiling import samples_by_plan
    from rlinf.core.trace import load_trace

    trace = load_trace(Path(__file__).resolve().parents[1] / "traces" / "grpo_arith_cpu2.json")
    entries = [dict(entry) for entry in trace.provenance["probe_plan_samples"]]
    entries[1] = {**entries[1], "plan": {**entries[1]["plan"], "placement": {"actor": None}}}
    broken = attrs.evolve(trace, provenance={**trace.provenance, "probe_plan_samples": entries})
    with pytest.raises(
        ConfigError, match=r"^trace\.provenance\.probe_plan_samples\[1\]\.plan\.placement\.actor=None"
    ):
        samples_by_plan(broken)
