"""The report's content, independent of its format: sections of paragraphs, tables and figures.

:func:`rlinf.capacity.sections.build_document` reads a result and returns a :class:`Document`; :mod:`rlinf.capacity.report`
renders it as one HTML file and as Markdown. Every table and figure has an ``id`` that tests (and readers'
scripts) can find.
"""

from __future__ import annotations

import math

import attrs

from rlinf.core.errors import to_tuple


@attrs.frozen(kw_only=True)
class Table:
    """A table with a header row; cells are text."""

    id: str
    header: tuple[str, ...] = attrs.field(converter=to_tuple)
    rows: tuple[tuple[str, ...], ...] = attrs.field(converter=to_tuple)
    numeric_from: int = 1
    """Columns from this index on are right-aligned numbers..."""
    text_columns: tuple[int, ...] = ()
    """...except these, which hold words."""

    def is_numeric(self, column: int) -> bool:
        """Whether a column is right-aligned."""
        return column >= self.numeric_from and column not in self.text_columns


@attrs.frozen(kw_only=True)
class Figure:
    """A PNG chart, by file name, with alternative text and a caption."""

    id: str
    file_name: str
    alt: str
    caption: str


@attrs.frozen(kw_only=True)
class Bullets:
    """A titled bullet list."""

    id: str
    title: str
    items: tuple[str, ...] = attrs.field(converter=to_tuple)


@attrs.frozen(kw_only=True)
class Section:
    """A heading and its blocks, in order: paragraphs (str), tables and figures."""

    id: str
    title: str
    blocks: tuple[str | Table | Figure | Bullets, ...] = attrs.field(converter=to_tuple)
    css_class: str = ""


@attrs.frozen(kw_only=True)
class Document:
    """A whole report."""

    title: str
    subtitle: str
    sections: tuple[Section, ...] = attrs.field(converter=to_tuple)


FIGURES = {
    "throughput": "throughput.png",
    "efficiency": "efficiency.png",
    "breakdown": "breakdown.png",
    "cost": "cost.png",
    "gantt": "gantt.png",
}


def plot(key: str, alt: str, caption: str) -> Figure:
    """The report's figure ``key`` (its file in :data:`FIGURES`, id ``plot-<key>``)."""
    return Figure(id=f"plot-{key}", file_name=FIGURES[key], alt=alt, caption=caption)


def number(value: float, digits: int = 4) -> str:
    """Readable number: thousands separators for large values, ``digits`` significant digits otherwise."""
    if value is None or not math.isfinite(value):
        return "–"
    if abs(value) >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"
