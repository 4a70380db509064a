"""`hb demo`: the main job, end to end in about a minute.

Runs `ablations/examples/demo_grid.toml` (the paper's comparison design: all 8 designs and
the oracle, on the shipped scenario `table1`, where the schedule matters; the same design on
the bernoulli env is `demo_bernoulli.toml`, `--grid`) into `runs/demo/` (resumable: a second
call reuses every finished cell), collects it, writes the paired report against the
2-harness mixed baseline to `runs/demo/report/`, and prints one sentence per suite, the conclusion, each design's
share of the achievable gain (where the grid has `uniform` and an `oracle`), the headline
table and the path of `index.html`.
"""
from __future__ import annotations

import argparse
import sys
import textwrap
import time
from pathlib import Path

from ablations import EXAMPLES, store
from ablations.runner import ProgressBar, add_run_options, check_run_options, run_grid
from ablations.spec import load_spec
from reports.readings import references
from hbsim.contract import REPORT_INDEX
from hbsim.contract.folders import check_output_dir
from hbsim.contract.markers import output_dir
from policies.validate import MAX_RESAMPLES, check_choice, check_int

DEFAULT_GRID = EXAMPLES / "demo_grid.toml"
BASELINE = "mixed-2"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grid", default=str(DEFAULT_GRID),
                        help="grid file (default: the shipped ablations/examples/demo_grid.toml)")
    parser.add_argument("--out", default="runs/demo", help="grid directory (default: runs/demo)")
    add_run_options(parser)
    parser.add_argument("--baseline", default=BASELINE, help=f"baseline policy label (default: {BASELINE})")
    parser.add_argument("--resamples", type=int, default=2000,
                        help=f"bootstrap replicates, 1..{MAX_RESAMPLES} (default: 2000)")
    parser.add_argument("--force", action="store_true",
                        help="write into --out although it holds other output or files hb did not create")


def main(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    spec = load_spec(args.grid)
    out = Path(args.out)
    _check_inputs(args, spec, out)
    print(f"demo: grid {spec.name!r} ({len(spec.cells())} cells) -> {out}", file=sys.stderr)
    report = run_grid(spec, out, jobs=args.jobs, backend=args.backend, ray_address=args.ray_address,
                      force_mixed=args.force, progress=ProgressBar())
    if report.failed:
        for failed in report.failed:
            print(f"FAILED {failed['id']}: {failed['reason']}  (log: {failed['log']})", file=sys.stderr)
        return 1
    store.collect(out, current=True)
    t_grid = time.perf_counter() - t0
    print(f"demo: grid done in {t_grid:.1f}s; building the report", file=sys.stderr)
    import reports
    from reports import offload

    with output_dir(out / "report", "report", tool="hb demo"):   # marker first, completed last
        result = reports.build_report(out, baseline=args.baseline, out=out / "report", resamples=args.resamples,
                                      seed=0, progress=_report_progress, jobs=offload.default_jobs())
    print(reports.lead_text(result))             # the answer first: one plain sentence per suite
    print(textwrap.fill(reports.conclusion(result), width=110) + "\n")
    gap = result.tables.get("gap")          # the share of the achievable gain (reports.gap)
    if gap is not None and not gap.empty:
        print("\n".join(references.share_lines(gap)) + "\n")
    print(reports.headline_table(result))
    print(f"report: {(out / 'report' / REPORT_INDEX).resolve()}")
    print(f"demo: total {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0


def _check_inputs(args: argparse.Namespace, spec, out: Path) -> None:
    """Everything the report needs is checked before the grid runs (minutes of work)."""
    labels = sorted({c.label for c in spec.cells()})
    check_choice("--baseline", args.baseline, labels)
    check_int("--resamples", args.resamples, 1, MAX_RESAMPLES)
    from reports import offload
    offload.default_jobs()  # $HB_REPORT_JOBS, the report's processes
    check_run_options(args.jobs, args.backend, args.ray_address)
    check_output_dir(out, "grid", force=args.force)
    check_output_dir(out / "report", "report", force=args.force)


def _report_progress(done: int, total: int, label: str = "") -> None:
    """progress(done, total, label) of reports.build_report: one stderr line per finished stage."""
    if done >= total:
        print(f"report: {label} done", file=sys.stderr)
