"""The HTML block every notebook view returns, and blocks laid out side by side.

An :class:`Html` block renders as HTML in Jupyter and ``str()`` turns back into its source, so
scripts and tests can read what a notebook shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from html import escape


@dataclass(frozen=True)
class Html:
    """A block of HTML that Jupyter displays rendered; ``str(block)`` is its source."""

    source: str

    def _repr_html_(self) -> str:
        return self.source

    def __str__(self) -> str:
        return self.source

    def __repr__(self) -> str:
        return f"<Html block, {len(self.source):,} characters: displayed as HTML in Jupyter>"

    def __add__(self, other: Html | str) -> Html:
        return Html(self.source + str(other))


def side_by_side(blocks: Mapping[str, Html | str], *, min_width: int = 380) -> Html:
    """Blocks (episode viewers, token views) next to each other under their names; in a window
    too narrow for two columns of ``min_width`` pixels they stack."""
    columns = "".join(
        f'<div style="flex:1 1 {min_width}px; min-width:0; text-align:left"><div style="font-weight:700; '
        f'font-size:14px; margin:2px 0 4px">{escape(name)}</div>{block}</div>'
        for name, block in blocks.items()
    )
    return Html(f'<div style="display:flex; flex-wrap:wrap; gap:12px; align-items:flex-start">{columns}</div>')
