"""Generated blocks in Markdown files: text between ``<!-- KIND:NAME -->`` and ``<!-- /KIND:NAME -->`` that a
script writes and a test recomputes, so that a figure edited by hand, or left behind when its source changed, fails.

Two scripts own blocks: ``benchmarks/doc_figures.py`` (kind ``figures``: simulated figures, computed by the code)
and ``benchmarks/measurements.py`` (kind ``measured``: measured figures, rendered from the JSON artifacts in
``docs/``). Both use the functions here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent


@attrs.frozen
class Block:
    """A generated block: the file (relative to the repository root), its marker's name and what renders it."""

    path: str
    name: str
    make: Callable[[], str]


def pattern(kind: str, name: str) -> re.Pattern[str]:
    """A block in a file: the opening marker, the body, the closing marker (which may be indented)."""
    return re.compile(
        rf"(<!-- {kind}:{re.escape(name)} -->\n)(.*?)\n?( *<!-- /{kind}:{re.escape(name)} -->)", re.S
    )


def compute(blocks: Iterable[Block]) -> dict[tuple[str, str], str]:
    """Every block's body, by (file, name)."""
    return {(b.path, b.name): b.make() for b in blocks}


def read(blocks: Iterable[Block]) -> dict[str, str]:
    """The text of every file that holds one of ``blocks``."""
    return {path: (ROOT / path).read_text() for path in dict.fromkeys(b.path for b in blocks)}


def differences(kind: str, texts: dict[str, str], bodies: dict[tuple[str, str], str]) -> list[str]:
    """``path:name`` of each block whose body in ``texts[path]`` differs from ``bodies`` (or is missing)."""
    out = []
    for (path, name), body in bodies.items():
        found = pattern(kind, name).search(texts[path])
        if found is None or found.group(2) != body:
            out.append(f"{path}:{name}")
    return out


def rewrite(kind: str, texts: dict[str, str], bodies: dict[tuple[str, str], str]) -> dict[str, str]:
    """``texts`` with every block's body replaced by ``bodies`` (a missing block is an error: add its markers)."""
    out = dict(texts)
    for (path, name), body in bodies.items():
        block = pattern(kind, name)
        found = block.search(out[path])
        if found is None:
            raise ValueError(f"{path} has no block {kind}:{name}: add its markers where the block goes")
        out[path] = (
            out[path][: found.start()]
            + f"{found.group(1)}{body}\n{found.group(3)}"
            + out[path][found.end() :]
        )
    return out


def indented(make: Callable[[], str], indent: str) -> Callable[[], str]:
    """``make``'s text with every non-empty line indented (a block inside a list item)."""
    return lambda: "\n".join(indent + line if line else line for line in make().splitlines())
