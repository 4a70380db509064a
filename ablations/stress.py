"""`hb stress`: every policy on every scenario of the suite (`hbsim.scenarios`), as ONE
resumable grid, then the profile of how much of the achievable gain each one captures.

    hb stress [--scenarios NAMES|all] [--policies NAMES] [--seeds N] --out DIR [--quick]
              [--jobs N] [--backend local|ray] [--ray-address ADDR]

`--quick` is a first look of a few minutes (issue 37): QUICK_SCENARIOS (6 of the 14 worlds, one
per failure mechanism; `--scenarios` still picks others, `all` every one), QUICK_POLICIES, 4
seeds, the best fixed arm tuned on 2 seeds, and the shipped axis ONLY (horizon 1x, step size
x1): its verdicts are read at one horizon and one step size, and the profile cannot say which
of them flip. The default run reads every verdict on the four axes below.

--scenarios takes shipped names and paths of your own scenario files (NAME.toml: checked like
a shipped one, `hbsim.scenarios.get`; the part is named after the file's `name`), e.g.
`--scenarios trap,examples/my_scenario.toml`; every cell's run.json names its scenario's file
and sha256.

Every verdict of the default run is read on AXES (issue 28): each scenario at its shipped horizon and at 3x it
(steps x3, an evaluation schedule scaled alike: `axis_run`), and at two step sizes, the
shipped one and half of it (every design's `policy.lr_scale`, which the env's `set_lr_scale`
applies to its own rates). The grid is a grid of parts (`ablations.spec`): per scenario and
axis one part (`part_name`: the scenario's name at the shipped axis, `trap@3x`, `trap@lr0.5`,
`trap@3x@lr0.5` elsewhere) with the scenario's env and batch size, its policies x seeds; and
per scenario and axis one tuned part `NAME+fixed`, the best fixed arm: `fixed` with `[tune]`
over every arm on TUNE_SEEDS tuning seeds (TUNE_SEED0, ...; the test seeds are 0..N-1, so
the test never sees them), selected on the scenario's target, then that ONE arm on the test
seeds (`ablations.tune`, both phases by `ablations.runner.run_tuned` -> `run_many`). `uniform`,
`mixed` and the `oracle` aimed at each scenario's target are always in every part, so the
profile's reference (`reports.readings.references.share_of_gap`: the best of oracle, best fixed arm and
mixed) is reachable on every axis. DIR is a grid directory (`hb grid status DIR`, `hb report
DIR --part NAME` read it; tuning cells in DIR/tune/, the selection in DIR/tune.json), resumed
by rerunning the same command; a different spec (other scenarios, policies or seeds) is
refused with one line before anything is written. The default policies are the shipped
learning designs (a plugin's policy joins through --policies; `fixed` is always there as the
reference). Then DIR/train.parquet and DIR/eval.parquet are collected and the profile
(`reports.stress`) is written to DIR/stress/ (index.html with the reading, a heatmap per axis
and the table; profile.csv; profile.md) and printed, with the wall time, the CPU time and the
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
from ablations.runner import ProgressBar, add_run_options, check_run_options, run_tuned, workers
from ablations.spec import parse_spec
from ablations.tune import planned_configs, test_spec
from hbsim import scenarios as suite
from hbsim.contract import CELLS
from hbsim.contract.labels import FIXED_PART, part_name, scenarios_of
from hbsim.envs import make_env
from hbsim.contract.markers import output_dir
from hbsim.contract.records import canonical_json, read_grid_record, read_meta
from hbsim.experiment import warmup_line
from policies import POLICIES
from policies.errors import UserError
from policies.registry import REFERENCE_POLICIES, SHIPPED_POLICIES
from policies.validate import check_int, comma_items

GRID_NAME = "stress"
#: the profile's subfolder of DIR
PROFILE_DIR = "stress"
#: every shipped learning design (the shipped policies without the clairvoyant references), the default
DEFAULT_POLICIES = tuple(name for name in SHIPPED_POLICIES if name not in REFERENCE_POLICIES)
#: --quick: the paper's main designs and two published ones, 4 seeds
QUICK_POLICIES = ("uniform", "mixed", "learnability", "transfer", "harnessbandit", "sec", "variance")
QUICK_SEEDS = 4
#: --quick's default scenarios, one per failure mechanism: a harness whose steps hurt the others (trap),
#: reward noise that looks learnable (noise), plateaus that stay learnable (saturation), harnesses that
#: never succeed (dead), a held-out target no training signal sees (coverage), every structure at once
#: (kitchen); about 300 cells in all, the 14 scenarios' 100-200 steps each at the shipped axis
QUICK_SCENARIOS = ("trap", "noise", "saturation", "dead", "coverage", "kitchen")
#: the default seed count: each scenario's shipped count, at most this
MAX_DEFAULT_SEEDS = 6
#: in every part: the baseline and the references (the oracle is added per part, aimed at its target)
ALWAYS = ("uniform", "mixed", "oracle")
#: the axes of every verdict: horizon factors (x the shipped steps) and step sizes (x the shipped lr)
HORIZONS = (1, 3)
STEP_SCALES = (1.0, 0.5)
#: the best fixed arm's tuning seeds: TUNE_SEED0, TUNE_SEED0 + 1, ... (the test seeds are 0..N-1)
TUNE_SEED0 = 1000
TUNE_SEEDS = 4
QUICK_TUNE_SEEDS = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenarios", default=None,
                        help="comma-separated scenario names and scenario files (PATH.toml), or all (default; "
                             f"--quick: {','.join(QUICK_SCENARIOS)})")
    parser.add_argument("--policies", default=None,
                        help=f"comma-separated policy names (default: every design, --quick: "
                             f"{','.join(QUICK_POLICIES)}); uniform, mixed, the oracle and the best fixed arm are "
                             "always added")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"test seeds per cell (default: each scenario's shipped count, at most "
                             f"{MAX_DEFAULT_SEEDS}; --quick: {QUICK_SEEDS}); the best fixed arm is chosen on "
                             f"{TUNE_SEEDS} other seeds (--quick: {QUICK_TUNE_SEEDS})")
    parser.add_argument("--out", required=True, help="grid directory (created; rerun the same command to resume)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a first look of a few minutes: {len(QUICK_SCENARIOS)} scenarios, fewer policies and "
                             "seeds, the shipped axis only (horizon 1x, step size x1; the default reads every "
                             "verdict at horizon 1x and 3x, step size x1 and x0.5)")
    add_run_options(parser)
    parser.add_argument("--force", action="store_true",
                        help="write into --out although it holds a stress grid of another spec (its cells stay; the "
                             "profile covers this spec's), another grid, another kind of output or files hb did not "
                             "create")


# -- the grid ------------------------------------------------------------------------
def _split(value: str) -> list[str]:
    return list(dict.fromkeys(comma_items(value)))


def _split_paths(value: str) -> list[str]:
    """`_split`, except that commas inside the name of an existing file do not split it
    (`--scenarios "runs,v2.toml,trap"`: the file runs,v2.toml and trap): the longest run of
    comma-joined pieces that names an existing file is one entry."""
    parts, out, i = comma_items(value, keep_empty=True), [], 0
    while i < len(parts):
        j = next((j for j in range(len(parts), i + 1, -1) if os.path.isfile(",".join(parts[i:j]).strip())), i + 1)
        out.append(",".join(parts[i:j]).strip())
        i = j
    return list(dict.fromkeys(v for v in out if v))


def chosen_scenarios(value: str | None, quick: bool = False) -> list:
    """The Scenario objects named by --scenarios (all: every shipped one; a PATH.toml: that file,
    `hbsim.scenarios.get`; not given: all, --quick: QUICK_SCENARIOS); UserError, one line, on an
    unknown name or a bad file."""
    known = suite.SCENARIOS
    if value is None:
        value = ",".join(QUICK_SCENARIOS) if quick else "all"
    names = list(known) if value.strip() == "all" else _split_paths(value)
    bad = [n for n in names if n not in known and not suite.is_file_reference(n)]
    if bad or not names:
        raise UserError(f"--scenarios {bad[0] if bad else value!r}: unknown scenario; valid: all or a comma-separated "
                        f"list of {', '.join(known)} and scenario files (PATH.toml)")
    return [suite.get(n) for n in names]


def chosen_policies(value: str | None, quick: bool) -> list[str]:
    """The policy names of --policies, `uniform` and `mixed` first, `oracle` and `fixed` left out
    (every part adds its own oracle, and its best fixed arm beside it)."""
    names = _split(value) if value is not None else list(QUICK_POLICIES if quick else DEFAULT_POLICIES)
    bad = [n for n in names if n not in POLICIES]
    if bad or not names:
        raise UserError(f"--policies {bad[0] if bad else value!r}: unknown policy; valid: a comma-separated list of "
                        f"{', '.join(POLICIES.names())}")
    # never empty: `mixed` is profiled in every part (beside being a candidate reference)
    return ["uniform", "mixed"] + [n for n in names if n not in (*ALWAYS, "fixed")]


def _seeds(sc, seeds: int | None, quick: bool) -> int:
    if seeds is not None:
        return seeds
    return QUICK_SEEDS if quick else min(int(sc.seeds), MAX_DEFAULT_SEEDS)


def _n_arms(env: dict) -> int:
    knobs = {k: v for k, v in env.items() if k != "kind"}
    return make_env(env["kind"], seed=0, **knobs).H


def axes(quick: bool = False) -> list[tuple[int, float]]:
    """(horizon factor, step scale) of every axis, the shipped one first (--quick: that one only)."""
    every = [(h, lr) for h in HORIZONS for lr in STEP_SCALES]
    return every[:1] if quick else every


def axis_run(sc, horizon: int) -> dict:
    """The scenario's run knobs at a horizon factor: steps (and an evaluation schedule) x factor."""
    run = sc.run()
    for key in ("steps", "eval_every"):
        if key in run:
            run[key] = run[key] * horizon
    return run


def _design(policy: dict, step_scale: float) -> dict:
    """A policy table at a step size: its label as at the shipped one, lr_scale set where not 1."""
    return {"label": policy["name"], **policy, **({"lr_scale": step_scale} if step_scale != 1 else {})}


def grid_raw(scenarios: list, policies: list[str], seeds: int | None, quick: bool) -> dict:
    """The grid of parts (ablations.spec, module docstring): per scenario and axis the designs'
    part and its best-fixed-arm part, the env the scenario named (`[env] scenario`: a shipped
    name or the file's path)."""
    parts = []
    tune_seeds = [TUNE_SEED0 + i for i in range(QUICK_TUNE_SEEDS if quick else TUNE_SEEDS)]
    for sc in scenarios:
        ref = sc.name if suite.is_shipped(sc) else sc.file
        arms = list(range(_n_arms(sc.env)))
        for horizon, scale in axes(quick):
            name, run = part_name(sc.name, horizon, scale), axis_run(sc, horizon)
            common = {"env": {"scenario": ref}, **run, "seeds": _seeds(sc, seeds, quick)}
            designs = [{"name": p} for p in policies] + [{"name": "oracle", "target": sc.target}]
            parts.append({"name": name, **common, "policies": [_design(p, scale) for p in designs]})
            parts.append({"name": name + FIXED_PART, **common, "policies": [_design({"name": "fixed"}, scale)],
                          "tune": {"seeds": tune_seeds, "target": sc.target, "knobs": {"policy.arm": arms}}})
    return {"name": GRID_NAME, "description": "hb stress: policies x scenarios x axes x seeds", "parts": parts}


def profile_parts(scenarios: list, quick: bool = False) -> dict[str, dict]:
    """part -> {scenario, target, horizon, step_scale, steps, fixed_part}: what the profile
    (reports.stress) reads each designs' part as."""
    out = {}
    for sc in scenarios:
        for horizon, scale in axes(quick):
            name = part_name(sc.name, horizon, scale)
            out[name] = {"scenario": sc.name, "target": sc.target, "horizon": horizon, "step_scale": scale,
                         "steps": axis_run(sc, horizon)["steps"], "fixed_part": name + FIXED_PART}
    return out


def _outline(raw: dict) -> str:
    """scenarios, policies and seeds of a recorded stress spec, in one phrase."""
    parts = raw.get("parts") or []
    scen = ",".join(scenarios_of(str(p.get("name")) for p in parts))
    pols = ",".join(dict.fromkeys(str(q.get("name")) for p in parts for q in p.get("policies", [])))
    seeds = ",".join(sorted({str(p.get("seeds")) for p in parts}))
    return f"scenarios {scen}; policies {pols}; seeds {seeds}"


def check_resume(out: str | os.PathLike, raw: dict, force: bool = False) -> None:
    """A DIR holding a grid of another spec is refused, one line, nothing written (unless
    `force`: `--force`)."""
    record = read_grid_record(out)
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
    scenarios = chosen_scenarios(args.scenarios, args.quick)
    policies = chosen_policies(args.policies, args.quick)
    raw = grid_raw(scenarios, policies, args.seeds, args.quick)
    spec = parse_spec(raw, "hb stress")
    check_resume(args.out, spec.raw, args.force)    # the scenarios' content in place of their names
    out = Path(args.out)
    load0, wall0, cpu0 = os.getloadavg(), time.perf_counter(), time.process_time()
    cpus: list[float] = []                                 # each run's CPU seconds, measured where it ran
    kinds, by_kind = _cell_kinds(spec), dict.fromkeys(KINDS, 0.0)

    def done(answer: dict) -> None:
        cpus.append(answer.get("cpu_seconds", 0.0))
        kind = kinds.get(answer.get("id"), "best fixed arm (test)")    # a test cell of a selection made now
        by_kind[kind] += answer.get("cpu_seconds", 0.0)

    tuned, report, selection = run_tuned(spec, out, jobs=args.jobs, backend=args.backend,
                                         ray_address=args.ray_address, force_mixed=args.force,
                                         progress=ProgressBar(note=warmup_line(planned_configs(spec))),
                                         on_done=done)
    wall = time.perf_counter() - wall0
    batches = [tuned] + ([report] if report else [])
    total, skipped, ran = (sum(getattr(b, k) for b in batches) for k in ("total", "skipped", "ran"))
    failed = [f for b in batches for f in b.failed]
    cells_cpu = sum(cpus)
    in_workers = args.backend != "local" or workers(args.jobs, max(tuned.total - tuned.skipped, 1)) > 1
    cpu = time.process_time() - cpu0 + (cells_cpu if in_workers else 0.0)
    timing = {"cells": total, "tuning_cells": tuned.total, "already_done": skipped, "ran": ran,
              "failed": len(failed), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
              "cells_cpu_s": round(cells_cpu, 1), "cells_cpu_s_by_kind": {k: round(v, 1) for k, v in by_kind.items()},
              "jobs": args.jobs, "backend": args.backend,
              "cores": os.cpu_count(), "load_before": [round(x, 2) for x in load0],
              "load_after": [round(x, 2) for x in os.getloadavg()]}
    _print_summary(timing, len(scenarios), len(axes(args.quick)), len(policies) + 2, failed, out)
    if selection is None:
        print("no best fixed arm: a tuning cell failed; fix it and rerun (finished cells are kept)", file=sys.stderr)
        return 1
    with output_dir(out, "grid", tool="hb stress"):       # the marker lists the tables and the profile too
        code = _profile(test_spec(spec, selection), out, profile_parts(scenarios, args.quick),
                        {"options": {k: v for k, v in vars(args).items() if k != "command"},
                         "scenarios": [sc.name for sc in scenarios], "policies": policies, "timing": timing})
    return code or (1 if failed else 0)


KINDS = ("designs", "oracle", "best fixed arm (tuning)", "best fixed arm (test)")


def _print_summary(timing: dict, n_scenarios: int, n_axes: int, n_policies: int, failed: list[dict],
                   out: Path) -> None:
    """The command's summary lines: cells, wall, CPU (by kind), load, failures."""
    t = timing
    print(f"hb stress: {t['cells']} cells ({n_scenarios} scenarios x {n_axes} ax{'is' if n_axes == 1 else 'es'} "
          f"x {n_policies} policies "
          f"x seeds, the best fixed arm included, plus {t['tuning_cells']} tuning cells of that arm), "
          f"{t['already_done']} already done, {t['ran']} run, {t['failed']} failed in {t['wall_s']:.1f} s wall, {t['cpu_s']:.1f} s CPU "
          f"(runs {t['cells_cpu_s']:.1f} s); load average {t['load_before'][0]:.2f} -> {t['load_after'][0]:.2f} on "
          f"{t['cores']} cores")
    print("  CPU of the runs by kind: " + ", ".join(f"{k} {v:.1f} s" for k, v in t["cells_cpu_s_by_kind"].items()))
    for fail in failed[:5]:
        print(f"  FAILED {fail['id']}: {fail['reason']}  (log: {fail['log']})")
    if len(failed) > 5:
        print(f"  ... and {len(failed) - 5} more (hb grid status {out})")


def _cell_kinds(spec) -> dict[str, str]:
    """cell id -> KINDS entry, for the CPU accounting (tuning cells and the designs' parts)."""
    from ablations.tune import tuning_spec
    out = {c.id: KINDS[2] for c in tuning_spec(spec).cells()}
    for part in spec.parts:
        if not part.tune:
            out.update({c.id: KINDS[1] if c.config["policy"]["name"] == "oracle" else KINDS[0] for c in part.cells()})
    return out


def _profile(spec, out: Path, parts: dict[str, dict], provenance: dict) -> int:
    """Collect the grid's tables, compute, print and write the profile (reports.stress)."""
    from reports import stress as profile
    cells = spec.cells()
    done = [c for c in cells if (out / CELLS / c.id).is_dir()]
    if not done:
        print("no cell finished: no profile", file=sys.stderr)
        return 1
    train_path, eval_path = store.collect(out, current=True)
    train, evals = pd.read_parquet(train_path), pd.read_parquet(eval_path)
    prof = profile.profile(train, evals, [read_meta(out / CELLS / c.id) for c in done], parts)
    files = profile.write_page(prof, out / PROFILE_DIR, provenance)
    print(profile.reading(prof))
    print(profile.text_table(profile.wide_table(prof)))
    print(f"profile: {files['index']} (table {files['csv']})")
    return 0
