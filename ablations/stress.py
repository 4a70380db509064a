"""`hb stress`: every policy on every scenario of the suite (`hbsim.scenarios`), as ONE
resumable grid, then the profile of how much of the achievable gain each one captures.

    hb stress [--scenarios NAMES|all] [--policies NAMES] [--seeds N] --out DIR [--quick]
              [--jobs N] [--backend local|ray] [--ray-address ADDR]

--scenarios takes shipped names and paths of your own scenario files (NAME.toml: checked like
a shipped one, `hbsim.scenarios.get`; the part is named after the file's `name`), e.g.
`--scenarios trap,examples/my_scenario.toml`; every cell's run.json names its scenario's file
and sha256.

The grid is a grid of parts (`ablations.spec`: one part per scenario, with the scenario's
env, steps and batch size) of policies x seeds, built in memory and run by the grid
machinery (`ablations.runner.run_grid` -> `run_many`); DIR is a grid directory (`hb grid
status DIR`, `hb report DIR` read it), resumed by rerunning the same command; a different
spec (other scenarios, policies or seeds) is refused with one line before anything is
written. `uniform` and the `oracle` aimed at each scenario's target are always in it;
the default policies are the shipped learning designs (a plugin's policy joins through
--policies); `fixed` in --policies runs one cell per arm (the best fixed arm in hindsight joins the
profile). Then DIR/train.parquet and DIR/eval.parquet are collected and the profile
(`reports.stress`) is written to DIR/stress/ (index.html with the reading, the heatmap and
the table; profile.csv; profile.md) and printed, with the wall time, the CPU time and the
load average of the machine.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd

from ablations import store
from ablations.runner import ProgressBar, add_run_options, check_run_options, run_grid, workers
from ablations.spec import parse_spec
from hbsim import scenarios as suite
from hbsim.contract import CELLS
from hbsim.envs import make_env
from hbsim.folders import output_dir
from hbsim.records import canonical_json, read_meta
from policies import POLICIES
from policies.errors import UserError
from policies.registry import REFERENCE_POLICIES, SHIPPED_POLICIES
from policies.validate import check_int

GRID_NAME = "stress"
#: the profile's subfolder of DIR
PROFILE_DIR = "stress"
#: every shipped learning design (the shipped policies without the clairvoyant references), the default
DEFAULT_POLICIES = tuple(name for name in SHIPPED_POLICIES if name not in REFERENCE_POLICIES)
#: --quick: the paper's main designs and two published ones, 4 seeds
QUICK_POLICIES = ("uniform", "mixed", "learnability", "transfer", "harnessbandit", "sec", "variance")
QUICK_SEEDS = 4
#: the default seed count: each scenario's shipped count, at most this
MAX_DEFAULT_SEEDS = 6
ALWAYS = ("uniform", "oracle")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenarios", default="all",
                        help="comma-separated scenario names and scenario files (PATH.toml), or all (default)")
    parser.add_argument("--policies", default=None,
                        help=f"comma-separated policy names (default: every design, --quick: "
                             f"{','.join(QUICK_POLICIES)}); uniform and the oracle are always added")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"seeds per cell (default: each scenario's shipped count, at most {MAX_DEFAULT_SEEDS}; "
                             f"--quick: {QUICK_SEEDS})")
    parser.add_argument("--out", required=True, help="grid directory (created; rerun the same command to resume)")
    parser.add_argument("--quick", action="store_true", help="fewer policies and seeds (finishes within ~2 minutes)")
    add_run_options(parser)
    parser.add_argument("--force", action="store_true",
                        help="write into --out although it holds a stress grid of another spec (its cells stay; the "
                             "profile covers this spec's), another grid, another kind of output or files hb did not "
                             "create")


# -- the grid ------------------------------------------------------------------------
def _split(value: str) -> list[str]:
    return list(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))


def chosen_scenarios(value: str) -> list:
    """The Scenario objects named by --scenarios (all: every shipped one; a PATH.toml: that file,
    `hbsim.scenarios.get`); UserError, one line, on an unknown name or a bad file."""
    known = suite.SCENARIOS
    names = list(known) if value.strip() == "all" else _split(value)
    bad = [n for n in names if n not in known and not suite.is_file_reference(n)]
    if bad or not names:
        raise UserError(f"--scenarios {bad[0] if bad else value!r}: unknown scenario; valid: all or a comma-separated "
                        f"list of {', '.join(known)} and scenario files (PATH.toml)")
    return [suite.get(n) for n in names]


def chosen_policies(value: str | None, quick: bool) -> list[str]:
    """The policy names of --policies, `uniform` first, `oracle` left out (every part adds its own)."""
    names = _split(value) if value is not None else list(QUICK_POLICIES if quick else DEFAULT_POLICIES)
    bad = [n for n in names if n not in POLICIES]
    if bad or not names:
        raise UserError(f"--policies {bad[0] if bad else value!r}: unknown policy; valid: a comma-separated list of "
                        f"{', '.join(POLICIES)}")
    designs = [n for n in names if n not in ALWAYS]
    if not designs:      # the profile is of designs against the references; with none it would be empty
        raise UserError(f"--policies {value!r} names only {' and '.join(ALWAYS)}, which every profile runs as its "
                        f"references: name at least one design to profile (e.g. harnessbandit), or see "
                        "the oracle's gap over uniform with hb scenarios NAME --check")
    return ["uniform"] + designs


def _seeds(sc, seeds: int | None, quick: bool) -> int:
    if seeds is not None:
        return seeds
    return QUICK_SEEDS if quick else min(int(sc.seeds), MAX_DEFAULT_SEEDS)


def _n_arms(env: dict) -> int:
    knobs = {k: v for k, v in env.items() if k != "kind"}
    return make_env(env["kind"], seed=0, **knobs).H


def grid_raw(scenarios: list, policies: list[str], seeds: int | None, quick: bool) -> dict:
    """The grid of parts (ablations.spec), one part per scenario, its env the scenario named
    (`[env] scenario`: a shipped name or the file's path)."""
    parts = []
    for sc in scenarios:
        ref = sc.name if suite.is_shipped(sc) else sc.file
        part = {"name": sc.name, "env": {"scenario": ref}, **sc.run(), "seeds": _seeds(sc, seeds, quick),
                "policies": [{"name": p} for p in policies] + [{"name": "oracle", "target": sc.target}]}
        if "fixed" in policies:
            part["sweep"] = {"policy.arm": list(range(_n_arms(sc.env)))}
        parts.append(part)
    return {"name": GRID_NAME, "description": "hb stress: policies x scenarios x seeds", "parts": parts}


def _outline(raw: dict) -> str:
    """scenarios, policies and seeds of a recorded stress spec, in one phrase."""
    parts = raw.get("parts") or []
    scen = ",".join(str(p.get("name")) for p in parts)
    pols = ",".join(dict.fromkeys(str(q.get("name")) for p in parts for q in p.get("policies", [])))
    seeds = ",".join(sorted({str(p.get("seeds")) for p in parts}))
    return f"scenarios {scen}; policies {pols}; seeds {seeds}"


def check_resume(out: str | os.PathLike, raw: dict, force: bool = False) -> None:
    """A DIR holding a grid of another spec is refused, one line, nothing written (unless
    `force`: `--force`)."""
    record = store.read_grid_json(out)
    if record is None or force:
        return
    old = (record.get("spec") or {}).get("raw") or {}
    if record.get("name") == GRID_NAME and canonical_json(old) != canonical_json(raw):
        was, now = _outline(old), _outline(raw)
        other = (f"another spec ({was}), not this one ({now})" if was != now else
                 f"another spec (the same {was}, but a scenario's env or run settings differ: an edited scenario file?)")
        raise UserError(f"--out {str(out)!r} holds an hb stress grid of {other}; nothing was written: rerun that "
                        "command to resume, choose a new --out or pass --force")


# -- the command ---------------------------------------------------------------------
def main(args: argparse.Namespace) -> int:
    if args.seeds is not None:
        check_int("--seeds", args.seeds, 2, 1000)
    check_run_options(args.jobs, args.backend, args.ray_address)
    scenarios = chosen_scenarios(args.scenarios)
    policies = chosen_policies(args.policies, args.quick)
    raw = grid_raw(scenarios, policies, args.seeds, args.quick)
    spec = parse_spec(raw, "hb stress")
    check_resume(args.out, spec.raw, args.force)    # the scenarios' content in place of their names
    out = Path(args.out)
    load0, wall0, cpu0 = os.getloadavg(), time.perf_counter(), time.process_time()
    cpus: list[float] = []                                 # each run's CPU seconds, measured where it ran
    report = run_grid(spec, out, jobs=args.jobs, backend=args.backend, ray_address=args.ray_address,
                      force_mixed=args.force, progress=ProgressBar(), on_done=lambda answer: cpus.append(answer.get("cpu_seconds", 0.0)))
    wall = time.perf_counter() - wall0
    cells_cpu = sum(cpus)
    in_workers = args.backend != "local" or workers(args.jobs, report.total - report.skipped) > 1
    cpu = time.process_time() - cpu0 + (cells_cpu if in_workers else 0.0)
    timing = {"cells": report.total, "already_done": report.skipped, "ran": report.ran,
              "failed": len(report.failed), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
              "cells_cpu_s": round(cells_cpu, 1), "jobs": args.jobs, "backend": args.backend,
              "cores": os.cpu_count(), "load_before": [round(x, 2) for x in load0],
              "load_after": [round(x, 2) for x in os.getloadavg()]}
    print(f"hb stress: {report.total} cells ({len(scenarios)} scenarios x {len(policies) + 1} policies x seeds), "
          f"{report.skipped} already done, {report.ran} run, {len(report.failed)} failed in {wall:.1f} s wall, "
          f"{cpu:.1f} s CPU (runs {cells_cpu:.1f} s); load average {load0[0]:.2f} -> {timing['load_after'][0]:.2f} "
          f"on {os.cpu_count()} cores")
    for failed in report.failed[:5]:
        print(f"  FAILED {failed['id']}: {failed['reason']}  (log: {failed['log']})")
    if len(report.failed) > 5:
        print(f"  ... and {len(report.failed) - 5} more (hb grid status {out})")
    with output_dir(out, "grid", tool="hb stress"):       # the marker lists the tables and the profile too
        code = _profile(spec, out, {sc.name: sc.target for sc in scenarios},
                        {"options": {k: v for k, v in vars(args).items() if k != "command"},
                         "scenarios": [sc.name for sc in scenarios], "policies": policies, "timing": timing})
    return code or (1 if report.failed else 0)


def _profile(spec, out: Path, targets: dict[str, str], provenance: dict) -> int:
    """Collect the grid's tables, compute, print and write the profile (reports.stress)."""
    from reports import stress as profile
    cells = spec.cells()
    done = [c for c in cells if (out / CELLS / c.id).is_dir()]
    if not done:
        print("no cell finished: no profile", file=sys.stderr)
        return 1
    train_path, eval_path = store.collect(out, current=True)
    train, evals = pd.read_parquet(train_path), pd.read_parquet(eval_path)
    prof = profile.profile(train, evals, [read_meta(out / CELLS / c.id) for c in done], targets)
    files = profile.write_page(prof, out / PROFILE_DIR, provenance)
    print(profile.reading(prof))
    print(profile.text_table(profile.wide_table(prof)))
    print(f"profile: {files['index']} (table {files['csv']})")
    return 0
