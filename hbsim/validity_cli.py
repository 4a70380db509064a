"""`hb validity DIR`: does L, T or the fused score predict the true gain of training on a
harness? Reads the `counterfactual.parquet` files of a run directory, an `hb sim --out`
directory or a grid (runs made with `--counterfactual`) and prints, per env, signal and
target, the Spearman correlation across harnesses and the top-1 agreement with the truly
best harness (bootstrap intervals over seeds), then regret per target (reports.validity);
`--out` also writes CSVs and validity.html.

With `--study FILE` (e.g. ablations/examples/validity.toml) it first runs the study's missing runs
into DIR/<env>/<label>/seed<s>/ (resumable), then analyses DIR. A study file:

    steps = 150
    seeds = 8
    counterfactual = 1                      # probe every step
    envs = ["bernoulli", "drifting", "student"]    # kinds or presets (hbsim.envs.ENV_PRESETS)
    [[policies]]                            # as in grid files: name, optional label, knobs
    name = "harnessbandit"
    [env]                                   # optional knobs for every env (e.g. n_tasks)
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from hbsim.folders import check_output_dir, claim_output_dir
from hbsim.sim_cli import run_dir
from policies.base import BATCH_GROUPS
from policies.errors import UserError
from policies.validate import (MAX_BATCH_GROUPS, MAX_JOBS, MAX_RESAMPLES, MAX_SEED, MAX_SEEDS, MAX_STEPS,
                               check_int)

STUDY_KEYS = ("name", "description", "steps", "seeds", "counterfactual", "envs", "policies", "env", "batch_groups")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", help="run, hb sim --out or grid directory holding counterfactual.parquet files")
    parser.add_argument("--study", default=None, metavar="FILE",
                        help="first run this study file's missing runs into DIR (e.g. ablations/examples/validity.toml)")
    parser.add_argument("--out", default=None,
                        help="write validity.csv, calibration.csv, regret.csv and validity.html here")
    parser.add_argument("--min-step", type=int, default=30,
                        help="use probed steps after this one (default 30: the warm-up of 5 rounds x 6)")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap replicates over seeds (default 2000)")
    parser.add_argument("--bins", type=int, default=5, help="quantile bins of the calibration tables (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="parallel runs with --study (default: min(2, CPUs))")


def main(args: argparse.Namespace) -> int:
    for name, low, high in (("min_step", 0, MAX_STEPS), ("resamples", 1, MAX_RESAMPLES), ("bins", 1, 1000),
                            ("seed", 0, MAX_SEED), ("workers", 1, MAX_JOBS)):
        check_int(f"--{name.replace('_', '-')}", getattr(args, name), low, high)
    configs = study_configs(args.study) if args.study is not None else None
    if configs is not None and args.out is not None and Path(args.out).resolve() == Path(args.dir).resolve():
        raise UserError(f"--out {args.out!r} is DIR, where --study writes its runs; choose another --out folder")
    if configs is not None:     # DIR: a study folder (new, or ours to resume), never another kind
        check_output_dir(args.dir, "study", flag="DIR", force_flag=None)
    if args.out is not None:
        check_output_dir(args.out, "report", flag="--out", force_flag=None)
    if configs is not None:
        _check_done(configs, Path(args.dir))
        claim_output_dir(args.dir, "study", tool="hb validity --study")
        run_study(configs, Path(args.dir), args.workers)
    from reports import validity

    tables = validity.analyse(args.dir, min_step=args.min_step, resamples=args.resamples, seed=args.seed,
                              bins=args.bins)
    print(validity.text_tables(tables))
    if args.out is not None:
        paths = validity.write(tables, Path(args.out))
        claim_output_dir(args.out, "report", tool="hb validity")
        print(f"validity: {paths['html'].resolve()}")
    return 0


def study_configs(path: str) -> list[tuple[str, dict]]:
    """(env name, resolved run config) of every run of a study file; all validation first."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    from hbsim.experiment import resolve_config

    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"--study {path!r}: cannot read the study file: {exc}") from None
    unknown = sorted(set(raw) - set(STUDY_KEYS))
    if unknown:
        raise UserError(f"{path}: key {unknown[0]!r} is unknown; valid keys: {', '.join(STUDY_KEYS)}")
    envs, policies = raw.get("envs"), raw.get("policies")
    if not isinstance(envs, list) or not envs or not all(isinstance(e, str) for e in envs):
        raise UserError(f"{path}: envs={envs!r} is not allowed: expected a non-empty list of env kinds or presets")
    if not isinstance(policies, list) or not policies or not all(isinstance(p, dict) for p in policies):
        raise UserError(f"{path}: policies={policies!r} is not allowed: expected [[policies]] tables with a name")
    seeds = raw.get("seeds", 8)
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = list(range(check_int(f"{path}: seeds", seeds, 1, MAX_SEEDS)))
    if isinstance(seeds, list):
        check_int(f"{path}: number of seeds", len(seeds), 1, MAX_SEEDS)
        for s in seeds:
            check_int(f"{path}: seeds item", s, 0, MAX_SEED)
    check_int(f"{path}: steps", raw.get("steps", 150), 1, MAX_STEPS)
    check_int(f"{path}: batch_groups", raw.get("batch_groups", BATCH_GROUPS.default), 1, MAX_BATCH_GROUPS)
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise UserError(f"{path}: seeds={raw.get('seeds')!r} is not allowed: expected a count >= 1 or a list of "
                        f"integers >= 0")
    configs = []
    for env in envs:
        for pol in policies:
            for seed in seeds:
                partial = {"env": {**raw.get("env", {}), "kind": env}, "policy": dict(pol), "seed": seed,
                           "steps": raw.get("steps", 150), "counterfactual": raw.get("counterfactual", 1),
                           "batch_groups": raw.get("batch_groups", BATCH_GROUPS.default)}
                try:
                    configs.append((env, resolve_config(partial)))
                except ValueError as exc:
                    raise UserError(f"{path}: env {env!r}, policy {pol.get('name')!r}: {exc}") from None
    return configs


def _check_done(configs: list[tuple[str, dict]], out: Path) -> None:
    """Refuse (before any run) a finished run in `out` that another config made: the study
    file changed since, and its runs would be mixed with the old ones."""
    import json

    from hbsim.records import config_hash, is_complete

    for env, cfg in configs:
        path = run_dir(out / env, cfg)
        if path.exists() and not path.is_dir():
            raise UserError(f"DIR {str(out)!r}: {str(path)!r} is a file, not a run directory; choose a new DIR")
        if is_complete(path):
            try:
                saved = json.loads((path / "run.json").read_text()).get("config_hash")
            except (OSError, ValueError, AttributeError) as exc:
                raise UserError(f"{path / 'run.json'}: unreadable run record ({exc}); expected the JSON hb "
                                "writes") from None
            if saved != config_hash(cfg):
                raise UserError(f"DIR {str(out)!r} already holds a different run in {str(path)!r} (config hash "
                                f"{saved}, this study {config_hash(cfg)}): the study file changed; nothing was "
                                "written: choose a new DIR")


def _run(cfg: dict):
    from hbsim.experiment import run_config
    return run_config(cfg)


def run_study(configs: list[tuple[str, dict]], out: Path, workers: int) -> None:
    """Run the missing ones into out/<env>/<label>/seed<s>/; progress on stderr."""
    from hbsim.records import is_complete, write_run

    todo = [(env, cfg) for env, cfg in configs
            if not is_complete(run_dir(out / env, cfg))]
    start = time.perf_counter()
    print(f"hb validity: {len(todo)} of {len(configs)} runs to do on {min(workers, max(len(todo), 1))} worker(s)",
          file=sys.stderr)
    if not todo:
        return
    if workers > 1 and len(todo) > 1:
        pool = ProcessPoolExecutor(min(workers, len(todo)), mp_context=multiprocessing.get_context("fork"))
        results = pool.map(_run, [cfg for _, cfg in todo])
    else:
        pool, results = None, map(_run, [cfg for _, cfg in todo])
    try:
        for i, ((env, cfg), result) in enumerate(zip(todo, results)):
            write_run(result, run_dir(out / env, cfg))
            print(f"[{i + 1}/{len(todo)}] {env} {cfg['policy']['label']} seed {cfg['seed']} "
                  f"({time.perf_counter() - start:.1f}s)", file=sys.stderr)
    finally:
        if pool is not None:
            pool.shutdown()
