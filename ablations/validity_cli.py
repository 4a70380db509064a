"""`hb validity DIR`: does L, T or the fused score predict the true gain of training on a
harness? Reads the `counterfactual.parquet` files of a run directory, an `hb sim --out`
directory or a grid (runs made with `--counterfactual`) and prints, per env, signal and
target, the Spearman correlation across harnesses and the top-1 agreement with the truly
best harness (bootstrap intervals over seeds), then regret per target (reports.validity);
`--out` also writes CSVs and validity.html.

With `--study FILE` (e.g. ablations/examples/validity.toml) it first runs the study's missing
runs into DIR/<env>/<label>/seed<s>/ (resumable; `ablations.runner.run_many`, --jobs/--backend
as `hb grid run`), then analyses DIR. A study file:

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
import os
import sys
from pathlib import Path

from ablations import runner
from ablations.plan import check_cells
from ablations.sim_cli import run_dir
from hbsim.experiment import resolve_config, resolve_run
from hbsim.contract.folders import check_output_dir
from hbsim.contract.markers import output_dir
from hbsim.run_knobs import run_values, seed_list
from hbsim.contract.tomlfile import read_toml
from policies.errors import UserError
from policies.validate import MAX_RESAMPLES, MAX_SEED, MAX_STEPS, check_int, check_name

STUDY_KEYS = ("name", "description", "steps", "seeds", "counterfactual", "envs", "policies", "env", "batch_groups")
#: the run knobs of a study file (seeds aside: a count or a list, `seed_list`)
RUN_KEYS = ("steps", "batch_groups", "counterfactual")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", help="run, hb sim --out or grid directory holding counterfactual.parquet files")
    parser.add_argument("--study", default=None, metavar="FILE",
                        help="first run this study file's missing runs into DIR "
                             "(e.g. ablations/examples/validity.toml)")
    parser.add_argument("--out", default=None,
                        help="write validity.csv, calibration.csv, regret.csv and validity.html here")
    parser.add_argument("--min-step", type=int, default=30,
                        help="use probed steps after this one (default 30: the warm-up of 5 rounds x 6)")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap replicates over seeds (default 2000)")
    parser.add_argument("--bins", type=int, default=5, help="quantile bins of the calibration tables (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--force", action="store_true",
                        help="write --out although it holds other output or files hb did not create")
    runner.add_run_options(parser)


def main(args: argparse.Namespace) -> int:
    for name, low, high in (("min_step", 0, MAX_STEPS), ("resamples", 1, MAX_RESAMPLES), ("bins", 1, 1000),
                            ("seed", 0, MAX_SEED)):
        check_int(f"--{name.replace('_', '-')}", getattr(args, name), low, high)
    runner.check_run_options(args.jobs, args.backend, args.ray_address)
    configs, runs = None, None
    if args.study is not None:
        configs = study_configs(args.study)
        if args.out is not None and Path(args.out).resolve() == Path(args.dir).resolve():
            raise UserError(f"--out {args.out!r} is DIR, where --study writes its runs; choose another --out folder")
        check_output_dir(args.dir, "study", flag="DIR", force_flag=None)    # new, or ours to resume
        runs = [task["dir"] for task in study_tasks(configs, args.dir)]      # paths checked inside DIR
    if args.out is not None:
        check_output_dir(args.out, "report", flag="--out", force=args.force)
    if configs is not None:
        run_study(configs, args)
    from reports import validity

    tables = validity.analyse(args.dir, min_step=args.min_step, resamples=args.resamples, seed=args.seed,
                              bins=args.bins, runs=runs)        # a study: only its own runs
    print(validity.text_tables(tables))
    if args.out is not None:
        with output_dir(args.out, "report", tool="hb validity"):     # marker first, completed last
            paths = validity.write(tables, Path(args.out))
        print(f"validity: {paths['html'].resolve()}")
    return 0


def study_configs(path: str) -> list[tuple[str, dict]]:
    """(env name, resolved run config) of every run of a study file; all validation first."""
    raw, _ = read_toml(path, "study", shown=f"--study {path!r}")
    unknown = sorted(set(raw) - set(STUDY_KEYS))
    if unknown:
        raise UserError(f"{path}: key {unknown[0]!r} is unknown; valid keys: {', '.join(STUDY_KEYS)}")
    envs, policies = raw.get("envs"), raw.get("policies")
    if not isinstance(envs, list) or not envs or not all(isinstance(e, str) for e in envs):
        raise UserError(f"{path}: envs={envs!r} is not allowed: expected a non-empty list of env kinds or presets")
    if not isinstance(policies, list) or not policies or not all(isinstance(p, dict) for p in policies):
        raise UserError(f"{path}: policies={policies!r} is not allowed: expected [[policies]] tables with a name")
    if not isinstance(raw.get("env", {}), dict):
        raise UserError(f"{path}: env={raw['env']!r} is not allowed: expected an [env] table of knobs")
    for i, env in enumerate(envs):
        check_name(f"{path}: envs[{i}]", env)
        if env in envs[:i]:
            raise UserError(f"{path}: envs[{i}]={env!r} is listed twice; list each env once")
    try:    # the run knobs' own parses (hbsim.run_knobs), named as the file's keys
        seeds = seed_list("seeds", raw.get("seeds", 8))
        # steps, batch_groups: the run defaults; counterfactual: every step unless the file says
        run = resolve_run({"counterfactual": 1, **run_values(sets={k: raw[k] for k in RUN_KEYS if k in raw})})
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    check_cells(len(envs) * len(policies) * len(seeds), path, "runs (envs x policies x seeds)",
                "envs, policies or seeds")
    configs, labels = [], {}
    for env in envs:
        for i, pol in enumerate(policies):
            for seed in seeds:
                try:
                    cfg = resolve_config({"env": {**raw.get("env", {}), "kind": env}, "policy": dict(pol), **run,
                                          "seed": seed})
                except (UserError, ValueError, TypeError) as exc:
                    raise UserError(f"{path}: env {env!r}, policies[{i}] {pol.get('name')!r}: {exc}") from None
                configs.append((env, cfg))
            label = configs[-1][1]["policy"]["label"]
            if env == envs[0] and labels.setdefault(label, i) != i:
                raise UserError(f"{path}: policies[{i}] label={label!r} is also policies[{labels[label]}]'s; "
                                "give each policy a distinct label")
    return configs


def study_tasks(configs: list[tuple[str, dict]], directory) -> list[dict]:
    """The runner tasks of a study: DIR/<env>/<label>/seed<s>/, each checked to lie inside DIR."""
    root = Path(directory).resolve()
    tasks = []
    for env, cfg in configs:
        path = run_dir(root / env, cfg)
        if not Path(os.path.realpath(path)).is_relative_to(root):
            raise UserError(f"policy.label={cfg['policy']['label']!r} would write outside DIR {str(root)!r}; "
                            "choose a plain name")
        tasks.append({"id": f"{env}/{cfg['policy']['label']}/seed{cfg['seed']}", "config": cfg, "dir": str(path)})
    return tasks


def run_study(configs: list[tuple[str, dict]], args: argparse.Namespace) -> None:
    """Run the missing ones into DIR/<env>/<label>/seed<s>/ (ablations.runner); progress on stderr.
    A finished run there that another config made (the study file changed) is refused first."""
    tasks = study_tasks(configs, args.dir)
    todo = runner.pending(tasks, remedy="the study file changed; choose a new DIR")
    with output_dir(args.dir, "study", tool="hb validity --study"):      # marker first, completed last
        print(f"hb validity: {len(todo)} of {len(tasks)} runs to do on {runner.workers(args.jobs, len(todo))} "
              "worker(s)", file=sys.stderr)
        runner.run_many(tasks, jobs=args.jobs, backend=args.backend, ray_address=args.ray_address,
                        progress=runner.ProgressBar(noun="runs")).check()
