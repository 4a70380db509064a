"""The page toolkit of the reports: one content written as Markdown and HTML at once
(`Doc`: headings, paragraphs, tables, collapsible groups, figures rendered to PNG and
inlined), the tables' number formats, the cutting of a wide table into column groups that
fit the page (`column_groups`), the page's CSS and file-name slugs. It knows nothing of a
report's sections: `reports.render` (the first screen), `reports.sections` (the groups
below it), `reports.gap` and `reports.stress` (the `hb stress` page) lay out with it.

No table is wider than the page at a 1400 px window: a table whose estimated width exceeds
`TABLE_PX` is cut into column groups that repeat its key columns
(tests/reports/test_reports_page.py measures it in headless Chromium).
"""
from __future__ import annotations

import base64
import html
import re
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from hbsim.contract.atomic import atomic_write
from reports import figures, text

CSS = ("body{font-family:sans-serif;max-width:1320px;margin:auto;padding:0 1em;color:#222}"
       "h1{font-size:1.4em;margin:.5em 0 .3em}h2{font-size:1.2em;margin:1em 0 .3em}h3,h4{margin:.6em 0 .3em}"
       "p{margin:.4em 0}table{border-collapse:collapse;font-size:12px;margin:.4em 0}td,th{border:1px solid #ccc;"
       "padding:2px 6px;text-align:right}th{background:#eee}pre{background:#f6f6f6;padding:.5em;"
       "font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere}img{max-width:100%;display:block;margin:.4em 0}"
       ".note{color:#a33}.lead{font-size:16px;font-weight:bold;margin:.3em 0}"
       ".conclusion{font-size:15px;line-height:1.35}.meta{color:#666;font-size:12px}"
       "details{margin:.3em 0;border-left:3px solid #ddd;padding-left:.6em}"
       "summary{cursor:pointer;font-weight:bold;padding:.15em 0}")

#: estimated width (px) above which a table is cut into column groups; the content box of
#: the page is about 1350 px at a 1400 px window, and the estimate is generous
TABLE_PX = 1250
#: one character of a 12 px table cell, of its bold header, and a cell's padding and border (px), for the estimate
CHAR_PX, HEAD_PX, CELL_PX = 7, 8, 14


def slug(text: str) -> str:
    """A file-name-safe form of a label (pass@3 -> pass_at3, pass^3 -> pass_hat3)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text.replace("@", "_at").replace("^", "_hat")).strip("_")


#: the folder of the rliable export inside the report folder
EXPORT_DIR = "rliable"


def export_stem(suite: str, metric: str) -> str:
    """The file stem of one suite x metric of the rliable export."""
    return f"{slug(suite)}__{slug(metric)}"


def _is_p(column) -> bool:
    c = str(column)
    return c == "p" or c.startswith("p_") or c.endswith("_p") or c == "mcnemar_mid_p"


def _fmt(v, p_value: bool = False) -> str:
    """One format for every table: p-values as `text.fmt_p`, other floats with 3 decimals."""
    if v is pd.NA or v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else ""
    if isinstance(v, (float, np.floating)):
        if not np.isfinite(v):
            return "" if np.isnan(v) else str(v)
        return text.fmt_p(v) if p_value else f"{v:.3f}"
    return str(v)


def _rows(df: pd.DataFrame):
    flags = [_is_p(c) for c in df.columns]
    for row in df.itertuples(index=False):
        yield [_fmt(v, f) for v, f in zip(row, flags)]


def md_table(df: pd.DataFrame, max_rows: int = 60) -> str:
    if df.empty:
        return "_(none)_\n"
    df = df.head(max_rows)
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in _rows(df)]
    return "\n".join(lines) + "\n"


def _col_px(header, cells) -> int:
    """Estimated width of a column: headers break after '_' (`<wbr>`) and at spaces, cells do not."""
    head = max((len(w) for w in re.split(r"(?<=_)| ", str(header))), default=1)
    return max(HEAD_PX * head, CHAR_PX * max((len(c) for c in cells), default=0)) + CELL_PX


def column_groups(columns, widths, keys: int, budget: int = TABLE_PX) -> list[list[int]]:
    """Column indices of each table a wide table is cut into: the first ``keys`` columns in
    every group, the others in order while the group's estimated width fits ``budget``."""
    key = list(range(min(keys, len(columns))))
    base = sum(widths[i] for i in key)
    groups, cur, used = [], [], base
    for i in range(len(key), len(columns)):
        if cur and used + widths[i] > budget:
            groups.append(key + cur)
            cur, used = [], base
        cur.append(i)
        used += widths[i]
    if cur or not groups:
        groups.append(key + cur)
    return groups


def _key_count(df: pd.DataFrame) -> int:
    """Leading text columns (labels such as metric, candidate, policy), at most 3."""
    n = 0
    for c in df.columns[:3]:
        if pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c]):
            break
        n += 1
    return max(n, 1)


def html_table(df: pd.DataFrame, max_rows: int = 60, keys: int | None = None) -> str:
    if df.empty:
        return "<p><i>(none)</i></p>"
    df = df.head(max_rows)
    cells = list(_rows(df))
    cols = [str(c) for c in df.columns]
    widths = [_col_px(c, [r[i] for r in cells]) for i, c in enumerate(cols)]
    out = []
    for group in column_groups(cols, widths, _key_count(df) if keys is None else keys):
        head = "".join(f"<th>{html.escape(cols[i]).replace('_', '_<wbr>')}</th>" for i in group)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(r[i])}</td>" for i in group) + "</tr>" for r in cells)
        out.append(f"<table><tr>{head}</tr>{body}</table>")
    return "".join(out)


#: figures a `Doc` keeps open before it renders them (below matplotlib's warning at 20)
OPEN_FIGURES = 16


class Doc:
    """Accumulates the same content as Markdown and HTML. Figures are kept until
    `save_figures` renders them (`body_html` does, first): with ``jobs`` 2 half of them in a
    forked helper (`reports.offload`), the same PNG bytes either way."""

    def __init__(self, fig_dir: Path, jobs: int = 1):
        self.md, self.html, self.fig_dir, self.figs, self.jobs = [], [], fig_dir, {}, jobs
        self._pending: list[tuple[str, Path, object, int]] = []  # (name, path, figure, its html slot)

    def h(self, level: int, text: str):
        self.md.append(f"{'#' * level} {text}\n")
        self.html.append(f"<h{level}>{html.escape(text)}</h{level}>")

    def p(self, text: str, cls: str = ""):
        self.md.append(text + "\n")
        attr = f' class="{cls}"' if cls else ""
        self.html.append(f"<p{attr}>{html.escape(text)}</p>")

    def pre(self, text: str):
        self.md.append("```\n" + text.rstrip() + "\n```\n")
        self.html.append(f"<pre>{html.escape(text)}</pre>")

    def table(self, df: pd.DataFrame, max_rows: int = 60, keys: int | None = None):
        self.md.append(md_table(df, max_rows))
        self.html.append(html_table(df, max_rows, keys))
        if len(df) > max_rows:
            self.p(f"({len(df) - max_rows} more rows in the CSV)")

    @contextmanager
    def details(self, summary: str, level: int = 3):
        """A collapsed group in index.html (a heading in report.md)."""
        self.md.append(f"{'#' * level} {summary}\n")
        self.html.append(f"<details><summary>{html.escape(summary)}</summary>")
        try:
            yield self
        finally:
            self.html.append("</details>")

    def figure(self, name: str, fig_ax):
        path = self.fig_dir / f"{slug(name)}.png"
        self.md.append(f"![{name}](figures/{path.name})\n")
        self._pending.append((name, path, fig_ax[0], len(self.html)))
        self.html.append("")  # the <img> once the PNG exists (save_figures)
        if len(self._pending) >= OPEN_FIGURES:
            self.save_figures()

    def save_figures(self) -> None:
        """Render the pending figures (half in the helper with jobs 2), write each PNG
        atomically and inline it into the HTML."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        from reports import offload

        figs = [fig for _, _, fig, _ in pending]
        helper = offload.Helper(self.jobs if len(figs) > 1 else 1, {"figures": figs})
        try:
            theirs = helper.submit(_png_bytes, list(range(1, len(figs), 2))) if helper.forked else None
            mine = range(0, len(figs), 2) if theirs is not None else range(len(figs))
            pngs = dict(zip(mine, _png_bytes({"figures": figs}, list(mine))))
            if theirs is not None:
                pngs.update(zip(range(1, len(figs), 2), theirs.result()))
        finally:
            helper.close(cancel=True)
            for fig in figs:
                figures.close(fig)
        for i, (name, path, _, slot) in enumerate(pending):
            atomic_write(path, pngs[i])
            self.figs[name] = path
            data = base64.b64encode(pngs[i]).decode()
            self.html[slot] = f'<img alt="{html.escape(name)}" src="data:image/png;base64,{data}">'

    def body_html(self) -> str:
        self.save_figures()
        return "".join(self.html)


def _png_bytes(state: dict, which: list[int]) -> list[bytes]:
    """The PNG bytes of figures ``which`` of ``state["figures"]`` (`figures.png_bytes`)."""
    return [figures.png_bytes(state["figures"][i]) for i in which]
