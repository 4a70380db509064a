"""`hb grid`: plan, run, inspect and collect ablation grids.

    hb grid plan GRID.toml [--out DIR]
    hb grid run GRID.toml --out DIR [--jobs N] [--backend local|ray] [--ray-address ADDR] [--force]
    hb grid status DIR
    hb grid collect DIR [--current]

Progress goes to stderr; tables to stdout. `run` exits 1 when any cell failed
(`status` lists them with their log paths), 2 on bad input (nothing in DIR modified).
DIR is checked before any work (hbsim.contract.folders): a file, an unwritable or too long
path, a folder of another kind (`hb sim`/`hb real`/report) or a non-empty folder hb did
not create is refused unless `--force`.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from ablations import store
from ablations.runner import REAL_CHECKPOINT_EVERY, ProgressBar, add_run_options, run_grid, run_tuned
from ablations.spec import load_spec
from ablations.tune import is_tuned, planned_configs, test_spec
from hbsim.contract import CELLS, GRID_JSON
from hbsim.contract.records import done_ids, load_cells, read_grid_record, read_meta
from hbsim.experiment import warmup_line
from policies.errors import UserError
from policies.validate import MAX_STEPS, check_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="grid_command", metavar="ACTION", required=True,
                                parser_class=type(parser))
    p = sub.add_parser("plan", help="list the cells of a grid file without running them")
    p.add_argument("grid", help="grid TOML file")
    p.add_argument("--out", help="grid directory: also show which cells are already done")
    p = sub.add_parser("run", help="run every missing cell of a grid file")
    p.add_argument("grid", help="grid TOML file")
    p.add_argument("--out", required=True, help="grid directory (created; resumable)")
    add_run_options(p)
    p.add_argument("--checkpoint-every", type=int, default=REAL_CHECKPOINT_EVERY, metavar="N",
                   help="a real grid's cells (env kind 'real') checkpoint into DIR/running/ after step 1 and every "
                        f"N steps, and a rerun continues a killed cell from there (default {REAL_CHECKPOINT_EVERY}; "
                        "0: a killed cell starts over)")
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


# -- commands ------------------------------------------------------------------------
def cmd_plan(args) -> int:
    spec = load_spec(args.grid)
    cells = spec.cells()
    done = done_ids(args.out) if args.out else set()
    sweep_keys = sorted(spec.sweep)
    points = math.prod(len(v) for v in spec.sweep.values())
    policy_keys = any(k.startswith("policy.") for k in spec.sweep)
    note = " (policy.* keys apply only to policies with that knob)" if policy_keys else ""
    if spec.parts:
        parts = ", ".join(f"{p.part} ({len(p.cells())} cells, env {p.env.get('kind')!r}, {p.steps} steps)"
                          for p in spec.parts)
        print(f"grid {spec.name!r}: {len(cells)} cells in {len(spec.parts)} parts: {parts}")
    elif spec.tune:
        print(f"grid {spec.name!r} with [tune]: {len(cells)} tuning cells (designs x tune points x tuning seeds "
              f"{spec.tune.seeds}) in DIR/tune/, then {len(spec.policies)} designs x {len(spec.seeds)} test seeds "
              f"{spec.seeds} at the selected settings; {spec.steps} steps, env {spec.env.get('kind')!r}")
        sweep_keys, done = sorted(spec.tune.knobs), done_ids(Path(args.out) / "tune") if args.out else set()
    else:
        print(f"grid {spec.name!r}: {len(cells)} cells from {len(spec.policies)} policy variants x "
              f"{points} sweep point{'s' if points != 1 else ''} x {len(spec.seeds)} seeds{note}, "
              f"{spec.steps} steps, env {spec.env.get('kind')!r}")
    header = ["cell", "policy", "seed"] + sweep_keys + (["state"] if args.out else [])
    rows = [[c.id, c.label, str(c.seed)] + [str(c.sweep.get(k, "")) for k in sweep_keys]
            + (["done" if c.id in done else "missing"] if args.out else []) for c in cells]
    print(_table(header, rows))
    return 0


def cmd_run(args) -> int:
    check_int("--checkpoint-every", args.checkpoint_every, 0, MAX_STEPS)
    spec = load_spec(args.grid)
    note = warmup_line(planned_configs(spec))       # said once the checks passed and the cells start
    if is_tuned(spec):
        return _run_tuned(spec, args, note)
    rows: dict[str, tuple] = {}
    report = run_grid(spec, args.out, jobs=args.jobs, backend=args.backend, ray_address=args.ray_address,
                      force_mixed=args.force_mixed, progress=ProgressBar(note=note), checkpoint_every=args.checkpoint_every,
                      on_done=lambda answer: rows.update({answer["id"]: answer["rows"]} if "rows" in answer else {}))
    print(f"grid {spec.name!r}: {report.total} cells, {report.skipped} already done, {report.ran} run, "
          f"{len(report.failed)} failed; results in {args.out}")
    for failed in report.failed:
        print(f"  FAILED {failed['id']}: {failed['reason']}  (log: {failed['log']})")
    for part in spec.parts or [spec]:      # a grid of parts: one summary per part (its own uniform, oracle)
        summary = _summary(args.out, {c.id for c in part.cells()}, rows)
        if summary:
            print(f"part {part.part!r}:\n{summary}" if part.part else summary)
    return 1 if report.failed else 0


def _run_tuned(spec, args, note: str | None = None) -> int:
    """`hb grid run` of a grid with [tune] (ablations.tune): tune, select, test."""
    tuned, report, selection = run_tuned(spec, args.out, jobs=args.jobs, backend=args.backend,
                                         ray_address=args.ray_address, force_mixed=args.force_mixed,
                                         progress=ProgressBar(note=note))
    print(f"grid {spec.name!r} tuning: {tuned.total} cells, {tuned.skipped} already done, {tuned.ran} run, "
          f"{len(tuned.failed)} failed; in {Path(args.out) / 'tune'}")
    for failed in tuned.failed + (report.failed if report else []):
        print(f"  FAILED {failed['id']}: {failed['reason']}  (log: {failed['log']})")
    if report is None:
        print("no selection: a tuning cell failed; fix it and rerun (finished cells are kept)")
        return 1
    records = selection["parts"].items() if spec.parts else [(None, selection)]
    for part, record in records:        # a grid of parts: each tuned part's selection
        for label, sel in record["designs"].items():
            setting = ", ".join(f"{k}={v}" for k, v in sel["setting"].items()) or "(defaults)"
            print(f"  selected {label}{f' in part {part}' if part else ''}: {setting}  ({record['target']} "
                  f"{sel['score']:.4f} over tuning seeds {record['seeds']})")
    print(f"grid {spec.name!r} test: {report.total} cells on seeds {spec.seeds}, {report.skipped} already done, "
          f"{report.ran} run, {len(report.failed)} failed; results in {args.out}")
    summary = _summary(args.out, {c.id for c in test_spec(spec, selection).cells()})
    if summary:
        print(summary)
    return 1 if report.failed else 0


def _summary(out, ids: set[str], rows: dict[str, tuple] | None = None) -> str | None:
    """The `hb sim` summary table of the grid's cells (None, with a note, if none is done):
    from the rows the workers returned when every cell ran now, else read from the cells."""
    import pandas as pd

    from reports.readings.references import run_table
    from reports.readings.summary import EVAL_COLUMNS_READ, summary_table
    try:
        if ids and ids <= (rows or {}).keys():
            order = sorted(ids)   # load_cells' order
            train, evals = (pd.concat([rows[i][k] for i in order], ignore_index=True) for k in (0, 1))
        else:
            train, evals = load_cells(out, only=ids, eval_columns=EVAL_COLUMNS_READ)
        runs = run_table(read_meta(Path(out) / CELLS / i) for i in sorted(ids))   # labels' names and knobs
        try:
            return summary_table(train, evals, runs)
        except KeyError:  # the summary grew a column: read the whole eval table
            return summary_table(*load_cells(out, only=ids), runs)
    except ValueError as exc:
        print(f"no summary: {exc}", file=sys.stderr)
        return None


def cmd_status(args) -> int:
    root = Path(args.dir)
    spec = store.recorded_spec(root)
    done, failed = done_ids(root), store.failed_ids(root)
    cells = spec.cells()
    planned = {c.id for c in cells}
    missing = planned - done - failed
    name = read_grid_record(root).get("name")
    print(f"grid {name!r} in {root} (grid file {spec.path}): {len(planned)} cells planned")
    print(f"  done:    {len(done & planned)}" + (f" (+{len(done - planned)} from other grid files)"
                                                  if done - planned else ""))
    print(f"  missing: {len(missing)}")
    under_way = {c.id: store.running_line(root, c.id) for c in cells if c.id in missing}
    shown = sorted((c for c in cells if c.id in missing), key=lambda c: not under_way[c.id])
    for c in shown[:10]:                    # the cells a real grid has under way first, with the step they reached
        print(f"    {c.id}: {c.label}, seed {c.seed}" + (f"  (under way: {under_way[c.id]})" if under_way[c.id] else ""))
    if len(shown) > 10:
        print(f"    ... and {len(shown) - 10} more (hb grid plan {spec.path} --out {root})")
    print(f"  failed:  {len(failed)}")
    for cell_id in sorted(failed):
        print(f"    {cell_id}: {store.failure_reason(root, cell_id)}  (log: {store.failure_log(root, cell_id)})")
    return 0


def cmd_collect(args) -> int:
    if read_grid_record(args.dir) is None:
        raise UserError(f"grid directory {args.dir}: no {GRID_JSON} (not a grid directory); "
                        "hb grid collect writes only into folders made by hb grid run")
    train_path, eval_path = store.collect(args.dir, current=args.current)
    print(f"wrote {train_path} and {eval_path}")
    return 0


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(map(len, column)) for column in zip(header, *rows)]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in [header, *rows])
