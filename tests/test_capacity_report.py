"""The capacity report: every plot and table present in headless Chromium, and numbers equal to ``rlinf simulate``."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from factories import grpo_trace

from rlinf.capacity import BASELINE, SweepOptions, Target, parse_whatif, sweep, write_report
from rlinf.capacity.document import FIGURES, number
from rlinf.cli import main

REPO = Path(__file__).resolve().parent.parent
TRACE_7B = REPO / "traces" / "grpo_7b_h100.json"
PLOT_IDS = ("plot-throughput", "plot-efficiency", "plot-breakdown", "plot-cost", "plot-gantt")
TABLE_IDS = (
    "table-provenance",
    "table-throughput",
    "table-breakdown",
    "table-cost",
    "table-plans",
    "table-whatif",
)
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=5000",
)
WINDOW = (1400, 4000)


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of the linear-cost test trace on 8, 16 and 32 devices with a what-if series and a met target."""
    trace = grpo_trace()
    options = SweepOptions(
        device_counts=(8, 16, 32),
        strategies=("best", "collocated", "disaggregated"),
        search_time_s=0.5,
        price_per_device_hour=2.5,
        target=Target(kind="deadline", value=1e6),
    )
    result = sweep(trace, options, whatifs=[parse_whatif("trace.batch_scale=2")], trace_name="test", jobs=1)
    out = tmp_path_factory.mktemp("capacity")
    write_report(result, trace, out)
    return out


class _Elements(HTMLParser):
    """Collects every element's tag and attributes, and the text of table cells."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.rows_by_table: dict[str, int] = {}
        self._table = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.elements.append((tag, attributes))
        if tag == "table":
            self._table = attributes.get("id") or ""
            self.rows_by_table[self._table] = 0
        elif tag == "tr" and self._table:
            self.rows_by_table[self._table] += 1

    def by_id(self, element_id: str) -> tuple[str, dict[str, str | None]]:
        return next(e for e in self.elements if e[1].get("id") == element_id)


def test_report_files_are_written(report_dir: Path) -> None:
    for name in ("report.html", "report.md", "capacity.json", *FIGURES.values()):
        assert (report_dir / name).stat().st_size > 0, name
    html = (report_dir / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(PLOT_IDS)
    assert 'src="http' not in html and 'href="http' not in html  # self-contained
    markdown = (report_dir / "report.md").read_text()
    for name in FIGURES.values():
        assert f"]({name})" in markdown
    assert markdown.index("## Trace provenance and assumptions") < markdown.index("## Answer")
    assert "smallest cluster that meets it is 8 devices" in markdown


@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="chromium is not installed (apt-get install -y chromium)"
)
def test_report_renders_in_headless_chromium(report_dir: Path, tmp_path: Path) -> None:
    url = (report_dir / "report.html").as_uri()
    screenshot = tmp_path / "report.png"
    with tempfile.TemporaryDirectory() as profile:
        dom = _chromium(profile, "--dump-dom", url).stdout
    with tempfile.TemporaryDirectory() as profile:
        _chromium(profile, f"--screenshot={screenshot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", url)
    parser = _Elements()
    parser.feed(dom)
    assert parser.by_id("provenance")[0] == "section"
    for plot in PLOT_IDS:
        tag, attributes = parser.by_id(plot)
        assert tag == "figure"
        image = parser.elements[parser.elements.index((tag, attributes)) + 1]
        assert image[0] == "img"
        assert int(image[1]["data-natural-width"] or 0) > 300, plot  # the PNG decoded in the browser
    for table in TABLE_IDS:
        assert parser.by_id(table)[0] == "table"
        assert parser.rows_by_table[table] >= 2, table  # a header row and at least one data row
    assert parser.rows_by_table["table-throughput"] == 1 + 3
    assert parser.by_id("target")[1]["class"] == "answer target-met"
    _check_screenshot(screenshot)


def _chromium(profile: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = ["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def _check_screenshot(path: Path) -> None:
    """The page was painted: the right size, the charts' line colours and the green target banner are visible."""
    from PIL import Image

    image = Image.open(path).convert("RGB")
    assert image.size == WINDOW
    colors = {color for _, color in image.getcolors(maxcolors=1 << 20)}
    assert (0x1F, 0x3A, 0x93) in colors  # the "best" line of the throughput chart (and the nav links)
    assert (0xE6, 0x7E, 0x22) in colors  # the "collocated" line
    assert (0xE8, 0xF6, 0xEE) in colors  # the background of the "target met" banner
    white = sum(count for count, color in image.getcolors(maxcolors=1 << 20) if color == (255, 255, 255))
    assert white < 0.9 * WINDOW[0] * WINDOW[1]


def test_report_numbers_equal_rlinf_simulate(tmp_path: Path, capsys) -> None:
    """Every plan of a 7B sweep, run through ``rlinf simulate``, gives the report's iteration and throughput."""
    out = tmp_path / "report"
    code = main(
        ["capacity", "--trace", str(TRACE_7B), "--devices", "8,16", "--search-time-s", "1", "--jobs", "1",
         "--quiet", "--json", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    checked = 0
    for row in result["rows"]:
        if row["plan"] is None:
            continue
        plan = tmp_path / f"{row['strategy']}_{row['num_devices']}.yaml"
        plan.write_text(json.dumps(row["plan"]))  # JSON is YAML
        cluster = f"{max(1, row['num_devices'] // 8)}x{min(8, row['num_devices'])}xH100"
        assert (
            main(["simulate", "--trace", str(TRACE_7B), "--plan", str(plan), "--cluster", cluster, "--json"])
            == 0
        )
        simulated = json.loads(capsys.readouterr().out)
        assert simulated["iteration_s"] == row["iteration_s"]
        assert simulated["throughput"]["samples_per_s"] == row["samples_per_s"]
        assert simulated["throughput"]["tokens_per_s"] == row["tokens_per_s"]
        assert simulated["mode"] == row["mode"]
        checked += 1
    assert checked >= 5  # best, collocated and disaggregated at 16; best and collocated at 8
    report = (out / "report.md").read_text()
    best_16 = next(r for r in result["rows"] if r["strategy"] == "best" and r["num_devices"] == 16)
    assert f"| 16 | {number(best_16['iteration_s'])} |" in report


def test_result_json_round_trips_the_rows(report_dir: Path) -> None:
    data = json.loads((report_dir / "capacity.json").read_text())
    assert data["target_met"] is True and data["target_num_devices"] == 8
    assert {r["series"] for r in data["rows"]} == {BASELINE, "batch_scale=2"}
    assert len(data["rows"]) == 2 * 3 * 3
    for row in data["rows"]:
        if row["plan"] is not None:
            assert row["cost_per_1k_samples"] == pytest.approx(2.5 * row["device_hours_per_1k_samples"])
