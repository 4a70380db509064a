"""`hb report`: the paired report of a grid or run directory, and `hb report marginals`.

    hb report DIR --baseline LABEL [--out OUTDIR] [--suite NAME] [--k 1,3]
                  [--resamples 10000] [--seed 0] [--alpha 0.05] [--axis policy.tau] [--recollect] [--force]
                  [--budget groups|tokens|seconds [--at VALUE]]
                  [--primary score] [--target-delta D] [--unpaired] [--part NAME]
    hb report marginals --n 161 --a 67 --b 62      (n <= 1e9; closed form)

The first positional word `marginals` selects the marginal-McNemar helper instead of a
directory (to report on a directory literally called "marginals", write ./marginals).
"""
from __future__ import annotations

import argparse
import math
import sys
import textwrap
import time
import warnings
from pathlib import Path

from hbsim.contract import folders

from hbsim.contract import markers
from hbsim.contract import CELLS, EVAL_FILE, GRID_JSON, TRAIN_FILE
from hbsim.contract.records import read_tune
from policies import validate
from policies.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("examples: hb report runs/grid --baseline uniform --k 1,3;  "
                     "hb report marginals --n 161 --a 67 --b 62")
    parser.add_argument("dir", metavar="DIR", help="grid or run directory (or the word 'marginals')")
    parser.add_argument("--baseline", help="policy label every other policy is compared against (required for DIR)")
    parser.add_argument("--out", help="output directory (default DIR/report; with --part, DIR/report-PART)")
    parser.add_argument("--suite", help="restrict to one eval suite (default: all)")
    parser.add_argument("--k", default=None, help="comma-separated k for pass@k and pass^k (default 1,3, or 1 "
                                                   "when tasks have fewer than 3 attempts)")
    parser.add_argument("--resamples", type=int, default=10000, help="bootstrap / permutation resamples")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap generator")
    parser.add_argument("--alpha", type=float, default=0.05, help="1 - interval coverage and test level")
    parser.add_argument("--axis", help="a swept knob column of the collected grid (e.g. policy.tau): delta against "
                                       "the baseline as a function of it, table + figure")
    parser.add_argument("--budget", choices=("groups", "tokens", "seconds"), default=None,
                        help="compare at equal cost: each run at exactly a milestone (runs with eval_budget; the "
                             "largest every run reached), interpolated between the two evaluations that bracket it")
    parser.add_argument("--at", type=float, default=None, help="with --budget: this milestone instead")
    parser.add_argument("--cost-tolerance", type=float, default=None,
                        help="with --budget: the largest |cost read / milestone - 1| of a run that cannot be "
                             "interpolated (nothing evaluated below the milestone) before the report refuses "
                             "(default 0.05)")
    parser.add_argument("--primary", default="score",
                        help="the headline metric: Holm over candidates x suites on it (default score, i.e. pass@1 "
                             "for binary rewards); the other metrics are secondary (max-T over a candidate's metrics)")
    parser.add_argument("--target-delta", type=float, default=None,
                        help="the true effect on the primary metric that seeds_needed plans for (a design "
                             "calculation; default 0.02, two points on a metric in [0, 1])")
    parser.add_argument("--jobs", type=int, default=None,
                        help="processes: 2 computes rliable's views and half the figures in a forked helper while "
                             "the paired tables run (the same numbers and files as 1; default $HB_REPORT_JOBS, else 2 "
                             "on Linux with two cores or more, else 1)")
    parser.add_argument("--part", help="a grid of parts (hb stress: one per scenario): report this part alone, its "
                                       "labels without the [part=NAME] suffix (--baseline uniform)")
    parser.add_argument("--unpaired", action="store_true",
                        help="runs of a seed did not share their environment (run.json): compare the arms' per-seed "
                             "means as independent samples instead of refusing")
    parser.add_argument("--recollect", action="store_true",
                        help="a grid whose cells are newer than its collected tables: collect them again first")
    parser.add_argument("--force", action="store_true",
                        help="write into --out although it holds other output or files hb did not create")
    group = parser.add_argument_group("marginals", "hb report marginals --n N --a A --b B")
    group.add_argument("--n", type=_count("--n"), help="number of tasks both systems were evaluated on (<= 1e9)")
    group.add_argument("--a", type=_count("--a"), help="tasks solved by system A")
    group.add_argument("--b", type=_count("--b"), help="tasks solved by system B")


def _count(flag: str):
    """argparse type: a non-negative integer, also written as 1e8 (an integral float)."""
    def parse(text: str) -> int:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (math.isfinite(value) and value >= 0 and value == int(value)):  # rejects nan and inf
            raise argparse.ArgumentTypeError(f"got {text!r}, allowed: a non-negative integer (e.g. 161 or 1e8)")
        return int(value)
    parse.__name__ = "count"
    return parse


def _parse_ks(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        ks = tuple(int(v) for v in validate.comma_items(text))
    except ValueError:
        raise UserError(f"--k: got {text!r}, allowed: comma-separated positive integers, e.g. 1,3") from None
    if not ks or min(ks) < 1:
        raise UserError(f"--k: got {text!r}, allowed: comma-separated positive integers, e.g. 1,3")
    return ks


def _marginals(args) -> int:
    from reports.stats import marginal_mcnemar_bounds

    missing = [f"--{k}" for k in ("n", "a", "b") if getattr(args, k) is None]
    if missing:
        raise UserError(f"hb report marginals: missing {', '.join(missing)}; usage: hb report marginals --n N --a A --b B")
    res = marginal_mcnemar_bounds(args.n, args.a, args.b)
    lo, hi = res["min"], res["max"]
    print(f"n={args.n} tasks, A solved {args.a}, B solved {args.b}: {res['tables']} pairings are consistent "
          f"(n10 - n01 = {args.a - args.b})")
    for name, r in (("smallest", lo), ("largest", hi)):
        print(f"{name} exact McNemar p = {r['p']:.4g}  (both {r['n11']}, only A {r['n10']}, "
              f"only B {r['n01']}, neither {r['n00']})")
    return 0


class _Progress:
    """Bootstrap progress on stderr: a self-overwriting line on a terminal, otherwise one
    plain line per finished stage (no carriage returns in logs)."""

    def __init__(self):
        self.tty, self.last = sys.stderr.isatty(), 0.0

    def __call__(self, done: int, total: int, label: str) -> None:
        now = time.monotonic()
        if not self.tty:
            if done == total:
                print(f"bootstrap {label}: {done}/{total}", file=sys.stderr, flush=True)
            return
        if done == total or now - self.last > 0.2:
            end = "\n" if done == total else ""
            print(f"\rbootstrap {label}: {done}/{total}", end=end, file=sys.stderr, flush=True)
            self.last = now


def _check_paths(args) -> Path:
    """Before any work: --resamples bounded, the output folder writable and a report
    folder (hbsim.contract.folders), and a grid's collected tables not older than its cells
    (exit 2, or collect again with --recollect). Returns the output folder."""
    validate.check_int("--resamples", args.resamples, 1, validate.MAX_RESAMPLES)
    validate.check_int("--seed", args.seed, 0, validate.MAX_SEED)
    from reports import offload
    args.jobs = offload.check_jobs(offload.default_jobs() if args.jobs is None else args.jobs)
    if not Path(args.dir).is_dir():
        raise UserError(f"DIR: {args.dir!r} is not a directory; expected a grid or run directory")
    if args.part is not None:
        validate.check_name("--part", args.part)      # it names the default output folder
    out = Path(args.out) if args.out else Path(args.dir) / ("report" if args.part is None else f"report-{args.part}")
    folders.check_output_dir(out, "report", force=args.force)
    read_tune(args.dir)           # a tuned grid's record, shape checked before any work (printed at the end)
    stale = folders.stale_collected_tables(args.dir)
    grid = Path(args.dir) / GRID_JSON
    uncollected = grid.is_file() and not all((Path(args.dir) / t).is_file() for t in (EVAL_FILE, TRAIN_FILE))
    if stale and not args.recollect:
        raise UserError(f"DIR {args.dir!r}: its collected tables (eval.parquet, train.parquet) are stale: {stale}; "
                        f"run `hb grid collect {args.dir}` or pass --recollect")
    if uncollected and args.part is not None and not args.recollect:
        raise UserError(f"--part {args.part!r}: DIR {args.dir!r} is a grid whose tables were never collected (no "
                        f"{EVAL_FILE}); --part reads the collected tables: run `hb grid collect {args.dir}` or pass "
                        "--recollect")
    if args.recollect and (stale or uncollected):
        from hbsim.contract.labels import has_part
        from hbsim.contract.records import collect_cells, read_grid_record
        planned = (read_grid_record(args.dir) or {}).get("planned") or []
        if args.part is not None and planned and not any(has_part(label) for _, label, _ in planned):
            from reports.load import no_parts    # refused before the collect writes the tables
            raise no_parts(args.part, f"no cell of grid {args.dir!r} belongs to a part")
        collect_cells(args.dir)
        print(f"report: collected {args.dir} {'again (' + stale + ')' if stale else '(its tables were missing)'}",
              file=sys.stderr)
    return out


def unfinished_grid(root) -> str | None:
    """Why grid directory `root` is unfinished, or None: the planned cells with no result, as
    grid.json records them (`hbsim.contract.records.missing_cells`); for a grid recorded before hb kept
    its plan, its marker saying "incomplete" (an `hb grid run` killed or stopped before every
    cell), with the (label, seed) pairs missing from the finished cells' labels x seeds."""
    from hbsim.contract.records import done_ids, missing_cells, missing_line, read_grid_record, read_meta
    root = Path(root)
    record = read_grid_record(root) if (root / GRID_JSON).is_file() else None
    if record is None:
        return None
    if record.get("planned") is not None:
        missing = missing_cells(root)
        return f"{missing_line(root, missing)}; this report covers only the finished cells" if missing else None
    try:
        marker = folders.read_marker(root)
    except UserError:
        return None
    if not marker or marker.get("kind") != "grid" or marker.get("state") != "incomplete":
        return None
    pairs = set()
    for cell in done_ids(root):
        grid = (read_meta(root / CELLS / cell) or {}).get("grid") or {}
        if grid.get("label") is not None and grid.get("seed") is not None:
            pairs.add((str(grid["label"]), int(grid["seed"])))
    labels, seeds = sorted({p[0] for p in pairs}), sorted({p[1] for p in pairs})
    gaps = [f"{label} seed {seed}" for label in labels for seed in seeds if (label, seed) not in pairs]
    named = (f"; missing among its labels and seeds: {', '.join(gaps[:5])}" + (f" and {len(gaps) - 5} more"
             if len(gaps) > 5 else "")) if gaps else ""
    return (f"grid directory {str(root)!r} is unfinished (its marker says incomplete: `hb grid run` stopped before "
            f"every cell was done): this report covers its {len(pairs)} finished cells{named}; `hb grid status "
            f"{root}` lists every missing cell")


def main(args: argparse.Namespace) -> int:
    if args.dir == "marginals":
        return _marginals(args)
    stray = [f"--{k}" for k in ("n", "a", "b") if getattr(args, k) is not None]
    if stray:
        raise UserError(f"{', '.join(stray)}: only allowed with `hb report marginals`; got DIR {args.dir!r}")
    if args.baseline is None:
        raise UserError("--baseline: missing; allowed: one of the policy labels of DIR (hb report DIR --baseline LABEL)")
    if args.at is not None and args.budget is None:
        raise UserError(f"--at {args.at:g}: only allowed with --budget groups|tokens|seconds")
    if args.cost_tolerance is not None and args.budget is None:
        raise UserError(f"--cost-tolerance {args.cost_tolerance:g}: only allowed with --budget groups|tokens|seconds")
    out = _check_paths(args)
    from reports import budget, build_report, headline_table, load
    from reports.text import LEGEND, conclusion, lead_text

    # the marker first ("incomplete"), completed last with every file written (--force removes only those)
    with markers.output_dir(out, "report", tool="hb report"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # exclusions are printed below as one line each
        extra = (args.axis,) if args.axis else ()
        if args.budget:
            tolerance = budget.DEFAULT_TOLERANCE if args.cost_tolerance is None else args.cost_tolerance
            source, info = budget.frames_at(args.dir, args.budget, args.at, extra, part=args.part,
                                            tolerance=tolerance)
        else:
            source, info = (load.read_dir(args.dir, extra, part=args.part) if args.part else args.dir), None
        result = build_report(source, args.baseline, out, suite=args.suite, ks=_parse_ks(args.k),
                              resamples=args.resamples, seed=args.seed, alpha=args.alpha, progress=_Progress(),
                              axis=args.axis, primary=args.primary, unpaired=args.unpaired,
                              target_delta=args.target_delta, jobs=args.jobs, budget=info)
    for line in result.notes:
        print(f"warning: {line}", file=sys.stderr)
    unfinished = unfinished_grid(args.dir)
    if unfinished:
        print(f"warning: {unfinished}", file=sys.stderr)
    print(lead_text(result))                    # the answer first: one plain sentence per suite
    print(textwrap.fill(conclusion(result), width=110) + "\n")
    print(headline_table(result))
    print(textwrap.fill(LEGEND, width=110) + "\n")
    if info is not None:
        print("\n".join(result.config["budget"]["lines"]) + "\n")
    for line in budget.tuned_lines(args.dir, getattr(args, "part", None)):
        print(line)
    print(f"report: {result.files['index']}")
    if "validity" in result.files:
        print(f"validity: {result.files['validity']}")
    return 0
