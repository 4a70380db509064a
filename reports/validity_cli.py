"""`hb validity DIR`: does L, T or the fused score predict the true gain of training on a
harness? Reads the `counterfactual.parquet` files of a run directory, an `hb sim --out`
directory or a grid (runs made with `--counterfactual`), prints per env, signal and target
the Spearman correlation across harnesses and the top-1 agreement (bootstrap intervals over
seeds), then regret per target; writes CSVs and validity.html with `--out`.

    hb validity runs/validity [--out runs/validity/validity] [--min-step 30] [--resamples 2000]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from policies.errors import UserError
from reports import validity


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", help="run, hb sim --out or grid directory holding counterfactual.parquet files")
    parser.add_argument("--out", default=None,
                        help="write validity.csv, calibration.csv, regret.csv and validity.html here")
    parser.add_argument("--min-step", type=int, default=30,
                        help="use probed steps after this one (default 30: the warm-up of 5 rounds x 6)")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap replicates over seeds (default 2000)")
    parser.add_argument("--bins", type=int, default=5, help="quantile bins of the calibration tables (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")


def main(args: argparse.Namespace) -> int:
    for name in ("min_step", "resamples", "bins"):
        low = 0 if name == "min_step" else 1
        if getattr(args, name) < low:
            raise UserError(f"--{name.replace('_', '-')} {getattr(args, name)} is not allowed: expected an "
                            f"integer >= {low}")
    tables = validity.analyse(args.dir, min_step=args.min_step, resamples=args.resamples, seed=args.seed,
                              bins=args.bins)
    print(validity.text_tables(tables))
    if args.out is not None:
        paths = validity.write(tables, Path(args.out))
        print(f"validity: {paths['html'].resolve()}")
    return 0
