"""`hb grid`: plan, run, inspect and collect ablation grids.

    hb grid plan GRID.toml [--out DIR]
    hb grid run GRID.toml --out DIR [--jobs N] [--backend local|ray] [--ray-address ADDR] [--force]
    hb grid status DIR
    hb grid collect DIR [--current]

Progress goes to stderr; tables to stdout. `run` exits 1 when any cell failed
(`status` lists them with their log paths), 2 on bad input (nothing in DIR modified).
DIR is checked before any work (hbsim.folders): a file, an unwritable or too long
path, a folder of another kind (`hb sim`/`hb real`/report) or a non-empty folder hb did
not create is refused unless `--force`.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from ablations.collect import collect as collect_grid, load as load_grid
from ablations import store
from ablations.runner import BACKENDS, default_jobs, run_grid, warm_up
from ablations.spec import load_spec, parse_spec
from hbsim.contract import GRID_JSON
from policies.errors import UserError
from policies.validate import MAX_JOBS, check_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="grid_command", metavar="ACTION", required=True,
                                parser_class=type(parser))
    p = sub.add_parser("plan", help="list the cells of a grid file without running them")
    p.add_argument("grid", help="grid TOML file")
    p.add_argument("--out", help="grid directory: also show which cells are already done")
    p = sub.add_parser("run", help="run every missing cell of a grid file")
    p.add_argument("grid", help="grid TOML file")
    p.add_argument("--out", required=True, help="grid directory (created; resumable)")
    p.add_argument("--jobs", type=int, default=None, help=f"worker processes (default: cores = {default_jobs()})")
    p.add_argument("--backend", default="local", help=f"one of {', '.join(BACKENDS)} (default: local)")
    p.add_argument("--ray-address", default=None, help="join this Ray cluster (default: start a local one)")
    p.add_argument("--force", "--force-mixed", dest="force_mixed", action="store_true",
                   help="write into DIR although it holds another grid, another kind of output, or files hb did "
                        "not create")
    p = sub.add_parser("status", help="done, missing and failed cells of a grid directory")
    p.add_argument("dir", help="grid directory")
    p = sub.add_parser("collect", help="write DIR/train.parquet and DIR/eval.parquet of all cells")
    p.add_argument("dir", help="grid directory")
    p.add_argument("--current", action="store_true", help="only the cells of the grid file recorded last")


def main(args: argparse.Namespace) -> int:
    return {"plan": cmd_plan, "run": cmd_run, "status": cmd_status, "collect": cmd_collect}[args.grid_command](args)


# -- progress ------------------------------------------------------------------------
class ProgressBar:
    """`[#####.....] 37/200 cells  4.1 cells/s  ETA 0:00:40` on stderr.

    Redrawn in place on a terminal; elsewhere (logs, CI) one line per ~10% or 5 s.
    """

    def __init__(self, stream=None, width: int = 30):
        self.stream, self.width = stream or sys.stderr, width
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.first_done: int | None = None
        self.last_print = 0.0
        self.last_done = -1

    def __call__(self, done: int, total: int, failed: int) -> None:
        now = time.perf_counter()
        if self.first_done is None:
            self.first_done = done
            self.start = now
        ran = done - self.first_done
        elapsed = now - self.start
        rate = ran / elapsed if elapsed > 0 and ran else 0.0
        eta = (total - done) / rate if rate > 0 else float("nan")
        final = done >= total
        if not self.tty and not final and done != self.first_done:
            step = max(1, total // 10)
            if done // step == self.last_done // step and now - self.last_print < 5:
                return
        filled = int(self.width * done / total) if total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        text = (f"[{bar}] {done}/{total} cells  {rate:.1f} cells/s  ETA {_hms(eta)}"
                + (f"  ({failed} failed)" if failed else ""))
        end = "\n" if final or not self.tty else ""
        self.stream.write(("\r" if self.tty else "") + text + end)
        self.stream.flush()
        self.last_print, self.last_done = now, done


def _hms(seconds: float) -> str:
    if seconds != seconds:  # nan
        return "--:--:--"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


# -- commands ------------------------------------------------------------------------
def cmd_plan(args) -> int:
    spec = load_spec(args.grid)
    cells = spec.cells()
    done = store.done_ids(args.out) if args.out else set()
    sweep_keys = sorted(spec.sweep)
    points = math.prod(len(v) for v in spec.sweep.values())
    note = " (policy.* keys apply only to policies with that knob)" if any(k.startswith("policy.") for k in spec.sweep) else ""
    print(f"grid {spec.name!r}: {len(cells)} cells from {len(spec.policies)} policy variants x "
          f"{points} sweep point{'s' if points != 1 else ''} x {len(spec.seeds)} seeds{note}, "
          f"{spec.steps} steps, env {spec.env.get('kind')!r}")
    header = ["cell", "policy", "seed"] + sweep_keys + (["state"] if args.out else [])
    rows = [[c.id, c.label, str(c.seed)] + [str(c.sweep.get(k, "")) for k in sweep_keys]
            + (["done" if c.id in done else "missing"] if args.out else []) for c in cells]
    print(_table(header, rows))
    return 0


def cmd_run(args) -> int:
    if args.jobs is not None:
        check_int("--jobs", args.jobs, 1, MAX_JOBS)
    warm_up(args.backend, args.jobs)  # the worker pool's start-up overlaps with planning
    spec = load_spec(args.grid)
    report = run_grid(spec, args.out, jobs=args.jobs, backend=args.backend, ray_address=args.ray_address,
                      force_mixed=args.force_mixed, progress=ProgressBar())
    print(f"grid {spec.name!r}: {report.total} cells, {report.skipped} already done, {report.ran} run, "
          f"{len(report.failed)} failed; results in {args.out}")
    for cell_id, reason, log in report.failed:
        print(f"  FAILED {cell_id}: {reason}  (log: {log})")
    summary = _summary(args.out, {c.id for c in spec.cells()})
    if summary:
        print(summary)
    return 1 if report.failed else 0


def _summary(out, ids: set[str]) -> str | None:
    """The `hb sim` summary table of the grid's cells (None, with a note, if none is done)."""
    from hbsim.summary import EVAL_COLUMNS_READ, summary_table
    try:
        train, evals = load_grid(out, only=ids, eval_columns=EVAL_COLUMNS_READ)
        try:
            return summary_table(train, evals)
        except KeyError:  # the summary grew a column: read the whole eval table
            return summary_table(*load_grid(out, only=ids))
    except ValueError as exc:
        print(f"no summary: {exc}", file=sys.stderr)
        return None


def cmd_status(args) -> int:
    root = Path(args.dir)
    record = store.read_grid_json(root)
    if record is None:
        raise UserError(f"grid directory {root}: no {GRID_JSON} (not a grid directory)")
    done, failed = store.done_ids(root), store.failed_ids(root)
    raw = record.get("spec", {})
    spec = parse_spec(raw.get("raw", {}), raw.get("path", str(root / GRID_JSON)))
    cells = spec.cells()
    planned = {c.id for c in cells}
    missing = planned - done - failed
    print(f"grid {record.get('name')!r} in {root} (grid file {raw.get('path')}): {len(planned)} cells planned")
    print(f"  done:    {len(done & planned)}" + (f" (+{len(done - planned)} from other grid files)"
                                                  if done - planned else ""))
    print(f"  missing: {len(missing)}")
    shown = [c for c in cells if c.id in missing]
    for c in shown[:10]:
        print(f"    {c.id}: {c.label}, seed {c.seed}")
    if len(shown) > 10:
        print(f"    ... and {len(shown) - 10} more (hb grid plan {raw.get('path')} --out {root})")
    print(f"  failed:  {len(failed)}")
    for cell_id in sorted(failed):
        print(f"    {cell_id}: {store.failure_reason(root, cell_id)}  (log: {store.failure_log(root, cell_id)})")
    return 0


def cmd_collect(args) -> int:
    if store.read_grid_json(args.dir) is None:
        raise UserError(f"grid directory {args.dir}: no {GRID_JSON} (not a grid directory); "
                        "hb grid collect writes only into folders made by hb grid run")
    train_path, eval_path = collect_grid(args.dir, current=args.current)
    print(f"wrote {train_path} and {eval_path}")
    return 0


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)
