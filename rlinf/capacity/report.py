"""Write a capacity report: ``report.html`` (one self-contained file, charts as data URIs) and ``report.md`` with
its PNGs beside it, plus ``capacity.json``. Every file is written atomically."""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping
from pathlib import Path

import attrs

from rlinf.capacity import plots
from rlinf.capacity.document import FIGURES, Bullets, Document, Figure, Section, Table
from rlinf.capacity.result import CapacityResult
from rlinf.capacity.sections import build_document
from rlinf.capacity.sweep import simulate_plan
from rlinf.core.export import component_colors, write_gantt_png
from rlinf.core.files import write_bytes_atomic, write_text_atomic
from rlinf.core.trace import Trace


@attrs.frozen(kw_only=True)
class ReportFiles:
    """What :func:`write_report` wrote."""

    html: Path
    markdown: Path
    json: Path
    images: tuple[Path, ...]


def write_report(result: CapacityResult, trace: Trace, out_dir: str | Path) -> ReportFiles:
    """Draw the charts, simulate the focus plan for its Gantt chart and write every file under ``out_dir``."""
    out = Path(out_dir)
    focus = result.focus_row()
    colors: dict[str, str] = {}
    images: dict[str, bytes] = {}
    if focus is not None and focus.plan is not None:
        timeline = simulate_plan(trace, focus.num_devices, focus.plan, seed=result.options.seed)
        colors = component_colors([timeline])
        title = f"{focus.plan.mode} on {focus.num_devices} devices: iteration {timeline.iteration_s:.4g} s"
        write_gantt_png(timeline, out / FIGURES["gantt"], title=title)
        images["gantt"] = (out / FIGURES["gantt"]).read_bytes()
    images["throughput"] = plots.throughput_png(result)
    images["efficiency"] = plots.efficiency_png(result)
    images["breakdown"] = plots.breakdown_png(result, colors)
    images["cost"] = plots.cost_png(result)
    document = build_document(result, has_gantt="gantt" in images)
    written = []
    for key, data in images.items():
        path = out / FIGURES[key]
        if key != "gantt":
            write_bytes_atomic(path, data)
        written.append(path)
    by_file = {FIGURES[key]: data for key, data in images.items()}
    write_text_atomic(out / "report.html", render_html(document, by_file))
    write_text_atomic(out / "report.md", render_markdown(document))
    write_text_atomic(out / "capacity.json", json.dumps(result.to_dict(), indent=1) + "\n")
    return ReportFiles(
        html=out / "report.html",
        markdown=out / "report.md",
        json=out / "capacity.json",
        images=tuple(written),
    )


# ---------------------------------------------------------------------------------------------------- HTML
STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1d2330; margin: 0;
       background: #f4f5f7; line-height: 1.45; }
main { max-width: 1240px; margin: 0 auto; padding: 24px 32px 48px; background: #fff; }
h1 { font-size: 26px; margin: 8px 0 4px; }
h2 { font-size: 19px; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 2px solid #e3e6ec; }
p.subtitle { color: #5a6272; margin: 0 0 12px; }
nav { font-size: 13px; margin-bottom: 8px; }
nav a { margin-right: 14px; color: #1f3a93; text-decoration: none; }
table { border-collapse: collapse; font-size: 12.5px; margin: 10px 0 16px; width: 100%; }
th, td { border-bottom: 1px solid #e3e6ec; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f0f2f6; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:hover td { background: #fafbfd; }
figure { margin: 12px 0 18px; }
figure img { max-width: 100%; border: 1px solid #e3e6ec; }
figcaption { font-size: 12.5px; color: #5a6272; }
section.answer p { font-size: 16px; padding: 12px 16px; border-radius: 6px; }
section.target-met p { background: #e8f6ee; border-left: 5px solid #27ae60; }
section.target-unmet p { background: #fdecea; border-left: 5px solid #c0392b; font-weight: 600; }
section.target-none p { background: #eef2fb; border-left: 5px solid #1f3a93; }
#provenance table td:first-child { width: 170px; color: #5a6272; }
div.bullets h3 { font-size: 14px; margin: 14px 0 4px; }
div.bullets ul { margin: 0; padding-left: 20px; font-size: 13px; color: #3a4150; columns: 2; column-gap: 36px; }
div.bullets li { margin-bottom: 3px; break-inside: avoid; }
#table-plans td:last-child { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 11.5px; }
#notes p { font-size: 12.5px; color: #5a6272; margin: 2px 0; }
"""
# Records each chart's decoded size on the element, so a headless browser's DOM dump shows it was drawn.
SCRIPT = """
window.addEventListener("load", function () {
  document.querySelectorAll("figure img").forEach(function (img) {
    img.setAttribute("data-natural-width", img.naturalWidth);
    img.setAttribute("data-natural-height", img.naturalHeight);
  });
  document.body.setAttribute("data-loaded", "true");
});
"""


def render_html(document: Document, images: Mapping[str, bytes]) -> str:
    """One self-contained HTML page; ``images`` maps figure file names to PNG bytes."""
    escape = html.escape
    nav = " ".join(f'<a href="#{s.id}">{escape(s.title)}</a>' for s in document.sections)
    body = "\n".join(_html_section(section, images) for section in document.sections)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(document.title)}</title>\n<style>{STYLE}</style>\n<script>{SCRIPT}</script>\n</head>\n"
        f"<body>\n<main>\n<h1>{escape(document.title)}</h1>\n"
        f'<p class="subtitle">{escape(document.subtitle)}</p>\n<nav>{nav}</nav>\n{body}\n</main>\n</body>\n</html>\n'
    )


def _html_section(section: Section, images: Mapping[str, bytes]) -> str:
    classes = " ".join(c for c in ("answer" if section.id == "target" else "", section.css_class) if c)
    parts = [f'<section id="{section.id}"' + (f' class="{classes}"' if classes else "") + ">"]
    parts.append(f"<h2>{html.escape(section.title)}</h2>")
    for block in section.blocks:
        if isinstance(block, Table):
            parts.append(_html_table(block))
        elif isinstance(block, Figure):
            data = base64.b64encode(images[block.file_name]).decode("ascii")
            parts.append(
                f'<figure class="plot" id="{block.id}"><img src="data:image/png;base64,{data}" '
                f'alt="{html.escape(block.alt)}"><figcaption>{html.escape(block.caption)}</figcaption></figure>'
            )
        elif isinstance(block, Bullets):
            items = "".join(f"<li>{html.escape(item)}</li>" for item in block.items)
            parts.append(
                f'<div class="bullets" id="{block.id}"><h3>{html.escape(block.title)}</h3><ul>{items}</ul></div>'
            )
        else:
            parts.append(f"<p>{html.escape(block)}</p>")
    parts.append("</section>")
    return "\n".join(parts)


def _html_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in table.header)
    rows = []
    for row in table.rows:
        cells = "".join(
            f'<td class="num">{html.escape(cell)}</td>'
            if table.is_numeric(i)
            else f"<td>{html.escape(cell)}</td>"
            for i, cell in enumerate(row)
        )
        rows.append(f"<tr>{cells}</tr>")
    return (
        f'<table id="{table.id}" class="data">\n<thead><tr>{head}</tr></thead>\n<tbody>\n'
        + "\n".join(rows)
        + "\n</tbody>\n</table>"
    )


# ------------------------------------------------------------------------------------------------ Markdown
def render_markdown(document: Document) -> str:
    """Markdown with the charts as PNG files beside it."""
    lines = [f"# {document.title}", "", document.subtitle, ""]
    for section in document.sections:
        lines += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, Table):
                lines += _markdown_table(block)
            elif isinstance(block, Figure):
                lines += [f"![{block.alt}]({block.file_name})", "", f"*{block.caption}*"]
            elif isinstance(block, Bullets):
                lines += [f"**{block.title}**", ""] + [f"- {_md(item)}" for item in block.items]
            else:
                lines.append(
                    ("**" + _md(block) + "**") if section.css_class == "target-unmet" else _md(block)
                )
            lines.append("")
    return "\n".join(lines)


def _md(text: str) -> str:
    """Text with Markdown's emphasis markers escaped (formulas such as ``2*N`` stay literal)."""
    return text.replace("*", "\\*")


def _markdown_table(table: Table) -> list[str]:
    def cell(text: str) -> str:
        return _md(text).replace("|", "\\|")

    align = ["---:" if table.is_numeric(i) else "---" for i in range(len(table.header))]
    lines = ["| " + " | ".join(cell(c) for c in table.header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in table.rows]
    return lines
