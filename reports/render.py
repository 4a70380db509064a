"""Lay out a finished ReportResult: CSVs, PNG figures, the rliable export, a self-contained
index.html (figures embedded as base64 PNG) and report.md. Nothing is computed here except
formatting and the selection of rows to show.

One screen first: the top of index.html is the conclusion, one figure (per suite, each
candidate's delta on the primary metric with its headline interval, the baseline at 0)
and one compact table (the same rows); everything else follows in collapsible groups
(`<details>`). No table is wider than the page at a 1400 px window: a table whose
estimated width exceeds `TABLE_PX` is cut into column groups that repeat its key columns
(tests/reports/test_reports_page.py measures it in headless Chromium).
"""
from __future__ import annotations

import base64
import html
import json
import re
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from hbsim.contract import REPORT_INDEX, REPORT_MARKDOWN
from hbsim.folders import atomic_write, written_files
from reports import figures, gap, rliable_views, text

CSS = ("body{font-family:sans-serif;max-width:1320px;margin:auto;padding:0 1em;color:#222}"
       "h1{font-size:1.4em;margin:.5em 0 .3em}h2{font-size:1.2em;margin:1em 0 .3em}h3,h4{margin:.6em 0 .3em}"
       "p{margin:.4em 0}table{border-collapse:collapse;font-size:12px;margin:.4em 0}td,th{border:1px solid #ccc;"
       "padding:2px 6px;text-align:right}th{background:#eee}pre{background:#f6f6f6;padding:.5em;"
       "font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere}img{max-width:100%;display:block;margin:.4em 0}"
       ".note{color:#a33}.conclusion{font-size:15px;line-height:1.35}.meta{color:#666;font-size:12px}"
       "details{margin:.3em 0;border-left:3px solid #ddd;padding-left:.6em}"
       "summary{cursor:pointer;font-weight:bold;padding:.15em 0}")

#: estimated width (px) above which a table is cut into column groups; the content box of
#: the page is about 1350 px at a 1400 px window, and the estimate is generous
TABLE_PX = 1250
#: one character of a 12 px table cell, of its bold header, and a cell's padding and border (px), for the estimate
CHAR_PX, HEAD_PX, CELL_PX = 7, 8, 14


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text.replace("@", "_at").replace("^", "_hat")).strip("_")


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


# ------------------------------------------------------------------ paired columns

def interval_columns(paired: pd.DataFrame, alpha: float) -> tuple[str, str, str]:
    """(low, high, label) of the headline interval, looked up here only: the t interval
    over seeds (ci_low, ci_high) where paired.csv has it, else the crossed bootstrap."""
    pct = f"{100 * (1 - alpha):.0f}%"
    if {"ci_low", "ci_high"} <= set(paired.columns):
        return "ci_low", "ci_high", f"{pct} CI"
    return "boot_low", "boot_high", f"{pct} boot CI"


def verdict(r, alpha: float) -> str:
    """The per-candidate sentence of earlier reports, as one table cell."""
    if int(r["n_seeds"]) < 2:
        return "one seed: no test"
    if r["p_holm"] < alpha:
        return "ahead" if r["delta"] > 0 else "behind"
    mde = r.get("mde", np.nan)
    if np.isfinite(mde) and abs(r["delta"]) < mde:
        return "not detectable (|delta| < MDE)"
    return "not significant (Holm)"


def fmt_mde(v) -> str:
    """The MDE; above 1 no attainable delta is detectable (every metric lies in [0, 1])."""
    if v is None or not np.isfinite(v):
        return "n/a"
    return "> 1 (none)" if v > 1 else f"{v:.3f}"


def primary_rows(result) -> pd.DataFrame:
    """The paired rows of each suite's primary metric (rliable_views.primary_metric)."""
    paired = result.tables["paired"]
    if paired.empty:
        return paired
    primary = result.config.get("primary", "score")
    keep = [g[g["metric"] == rliable_views.primary_metric(g["metric"].drop_duplicates(), primary)]
            for _, g in paired.groupby("suite", sort=True)]
    return pd.concat(keep, ignore_index=True)


def headline_table(result) -> pd.DataFrame:
    """The compact table under the figure: one row per suite x candidate, primary metric;
    the values are the pair's own (the seeds and tasks of its delta)."""
    rows = primary_rows(result)
    alpha = result.config["alpha"]
    lo, hi, label = interval_columns(result.tables["paired"], alpha)
    return pd.DataFrame({
        "suite": rows["suite"], "metric": rows["metric"], "candidate": rows["candidate"],
        "seeds": rows["n_seeds"].astype(int).astype(str), "candidate value": rows["candidate_value"],
        "baseline value": rows["baseline_value"], "delta": rows["delta"],
        label: [f"[{a:+.3f}, {b:+.3f}]" if np.isfinite(a) else "n/a" for a, b in zip(rows[lo], rows[hi])],
        "p_holm": rows["p_holm"], "seeds +/-": [f"{int(u)}/{int(d)}" for u, d in zip(rows["seeds_up"],
                                                                                rows["seeds_down"])],
        "MDE": rows["mde"].map(fmt_mde), "verdict": [verdict(r, alpha) for _, r in rows.iterrows()]})


def _headline(doc: Doc, result) -> None:
    """The top of the page: conclusion, the one figure, the compact table."""
    cfg = result.config
    cands = [p for p in result.policies if p != cfg["baseline"]]
    doc.h(1, f"{len(cands)} candidate(s) against the baseline {cfg['baseline']}")
    doc.p(text.conclusion(result), "conclusion")
    rows = primary_rows(result)
    if not rows.empty:
        lo, hi, label = interval_columns(result.tables["paired"], cfg["alpha"])
        titles = {s: f"{s}: {g['metric'].iloc[0]}, {int(g['n_seeds'].max())} seeds x {int(g['n_tasks'].max())} tasks"
                  for s, g in rows.groupby("suite")}
        fig_rows = pd.DataFrame({"suite": rows["suite"], "title": rows["suite"].map(titles),
                                 "candidate": rows["candidate"], "delta": rows["delta"], "low": rows[lo],
                                 "high": rows[hi], "significant": rows["p_holm"] < cfg["alpha"]})
        doc.figure("headline", figures.headline_plot(fig_rows, f"{label} (p_holm < {cfg['alpha']})"))
        doc.table(headline_table(result), max_rows=200, keys=3)
        doc.p(f"delta = candidate - baseline on the seeds and tasks both have; {label}: "
              + ("t interval over the per-seed differences" if lo == "ci_low" else
                 "crossed bootstrap over tasks and seeds")
              + "; p_holm: seed-level sign-flip test, Holm-adjusted; seeds +/-: seeds where the candidate is "
                "ahead / behind; MDE: smallest true delta detectable with power 0.8 at these seeds. Every "
                "metric and column: the groups below and paired.csv.", "meta")
    doc.p(f"Source: {cfg['source']}. Policies: {', '.join(result.policies)}. Bootstrap: {cfg['resamples']} "
          f"crossed task x seed resamples (generator seed {cfg['seed']}), alpha = {cfg['alpha']}. "
          f"Runs hash {cfg['runs']['hash']}.", "meta")
    if "validity" in result.files:
        doc.md.append("Signal validity (what-if probes, `--counterfactual`): [validity.html](validity.html)\n")
        doc.html.append('<p class="meta">Signal validity (what-if probes, <code>--counterfactual</code>): '
                        '<a href="validity.html">validity.html</a></p>')
    if result.notes:
        with doc.details(f"Warnings and exclusions ({len(result.notes)})", 2):
            for line in result.notes:
                doc.p(line, "note")


# ------------------------------------------------------------------------ writing

def write(result, out: Path, jobs: int = 1) -> None:
    """Write CSVs, figures, the rliable export, report.md and index.html into ``out``
    (files replaced atomically, created with the user's umask: `hbsim.folders.atomic_write`)."""
    from reports import sections

    out.mkdir(parents=True, exist_ok=True)
    fig_dir = out / "figures"
    fig_dir.mkdir(exist_ok=True)
    for name, df in result.tables.items():
        atomic_write(out / f"{name}.csv", df.to_csv(index=False))
        result.files[name] = out / f"{name}.csv"
    _export(result, out / EXPORT_DIR)
    doc = Doc(fig_dir, jobs)
    _headline(doc, result)
    for suite in sorted(result.suites):
        sections.suite(doc, result, suite)
    sections.sensitivity(doc, result)
    gap.section(doc, result)
    sections.diagnostics(doc, result)
    sections.reference(doc, result)
    body = doc.body_html()  # renders and writes the figures first
    atomic_write(out / REPORT_MARKDOWN, "\n".join(doc.md))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>harnessbandit report</title>"
            f"<style>{CSS}</style></head><body>{body}</body></html>")
    atomic_write(out / REPORT_INDEX, page)
    atomic_write(out / "config.json", json.dumps(result.config, indent=1, default=str))
    result.files.update({"index": out / REPORT_INDEX, "markdown": out / REPORT_MARKDOWN})
    result.files.update({f"fig:{k}": v for k, v in doc.figs.items()})
    for stale in {p for p in written_files(out) if p.parent == fig_dir} - set(doc.figs.values()):
        stale.unlink()  # figures an earlier report wrote here (its marker lists them); the user's stay
    result.out = out


#: the folder of the rliable export inside the report folder
EXPORT_DIR = "rliable"


def export_stem(suite: str, metric: str) -> str:
    return f"{slug(suite)}__{slug(metric)}"


def _export(result, folder: Path) -> None:
    """rliable's input form: one .npz per suite x metric, {policy: (runs, tasks)}."""
    if result.views is None or not result.views.matrices:
        return
    folder.mkdir(exist_ok=True)
    files = rliable_views.export_files(result.views, export_stem)
    for name, data in files.items():
        atomic_write(folder / name, data)
    for stale in {p for p in written_files(folder.parent) if p.parent == folder} - {folder / n for n in files}:
        stale.unlink()  # matrices an earlier report wrote here (its marker lists them); the user's stay
    result.files["rliable"] = folder
