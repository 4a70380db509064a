"""`hb sim`: compare scheduling policies on a synthetic environment, every policy on the
same seeds (common random numbers), and print a compact per-policy table.

    hb sim --env bernoulli --policy harnessbandit --policy uniform --seeds 10 --steps 150 \
           [--out DIR] [--set env.lr=0.5] [--set policy.tau=0.1] [--jobs N] [--backend local|ray]

`--scenario NAME` takes the env, steps and seed count of a shipped scenario (`hb scenarios`;
the oracle is aimed at its target); `--scenario PATH.toml` those of your own scenario file,
checked like a shipped one (`hbsim.scenarios.load`; docs/EXTENDING.md). Each run's config
holds the scenario's env, steps and batch size (its hash changes exactly when the runs would,
so --out reuses runs of an unchanged scenario wherever its file lies); run.json's
`scenario` records the file's name, path and sha256. `--policy all` runs every registered policy. `--set policy.KNOB=V` goes to every selected
policy that has the knob (an error if none has it); `--set` is the one grammar of `hbsim.run_knobs.split_sets`
(env.KNOB or a bare env knob, policy.KNOB, and the run knobs of RUN_KEYS, each also a flag: one knob
given both ways is refused). `--out DIR` writes one run directory
per (policy, seed): DIR/<label>/seed<seed>/, in a folder of kind "sim" (hbsim.contract.folders):
runs already there with the identical config are reused, not rerun; a different run at the
same place needs --overwrite; other env/steps settings, another kind of folder or one hb
did not create need --force. The runs go through `ablations.runner.run_many` (worker
processes with one BLAS thread each, or Ray; each run directory written atomically).
Progress goes to stderr, the table to stdout.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import pandas as pd

from ablations import runner
from ablations.plan import check_cells
from hbsim.envs import ENV_PRESETS, ENVS, expand_preset
from hbsim import scenarios
from hbsim.experiment import resolve_config, warmup_line
from hbsim.contract.folders import check_output_dir
from hbsim.contract.markers import output_dir
from hbsim.contract.records import config_hash, read_run
from reports.readings.references import run_table
from hbsim.run_knobs import RUN_KNOBS, from_command
from reports.readings.summary import summary_table
from policies import POLICIES
from policies.errors import UserError
from policies.validate import MAX_SEED, check_int


#: the run knobs of `hb sim`, each a flag (--eval-budget) and a --set key (eval_budget)
RUN_KEYS = ("steps", "seeds", "batch_groups", "eval_every", "eval_budget", "counterfactual")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", default=None,
                        help=f"environment kind: {', '.join(ENVS)}; or a preset: {', '.join(ENV_PRESETS)} "
                             f"(default bernoulli)")
    parser.add_argument("--scenario", default=None, metavar="NAME|PATH.toml",
                        help="a shipped scenario (`hb scenarios`) or your own scenario file: its env, steps and "
                             "seed count (--set, --steps and --seeds override them)")
    parser.add_argument("--policy", action="append", default=None, metavar="NAME",
                        help=f"policy to run (repeatable) or 'all': {', '.join(POLICIES.names())} (default: all)")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"number of seeds, 0..N-1 (default {RUN_KNOBS['seeds'].default}, or the scenario's)")
    parser.add_argument("--seed-offset", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--steps", type=int, default=None,
                        help=f"optimizer steps per run (default {RUN_KNOBS['steps'].default}, or the scenario's)")
    parser.add_argument("--batch-groups", type=int, default=None,
                        help=f"groups per optimizer step (default {RUN_KNOBS['batch_groups'].default}, or the "
                             f"scenario's)")
    parser.add_argument("--eval-every", type=int, default=None,
                        help="also evaluate every N steps (default: only at the final step)")
    parser.add_argument("--eval-budget", default=None, metavar="UNIT:M1,M2",
                        help="also evaluate when the cumulative cost first crosses each milestone, UNIT one of "
                             "groups, tokens, seconds (e.g. groups:500,1000; hb report --budget compares there)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"env.KNOB=VALUE (or KNOB=VALUE), policy.KNOB=VALUE, or a run knob: "
                             f"{', '.join(RUN_KEYS)} (repeatable; VALUE parsed as JSON, none = unset; "
                             "--knobs lists the env's knobs, 'hb policies' the policies' knobs)")
    parser.add_argument("--out", default=None, help="write DIR/<label>/seed<seed>/ run directories")
    parser.add_argument("--overwrite", action="store_true", help="replace existing complete run directories")
    parser.add_argument("--force", action="store_true",
                        help="write into an --out folder of another kind or settings, or one hb did not create")
    parser.add_argument("--knobs", action="store_true", help="list the env's knobs (default, range, doc) and exit")
    parser.add_argument("--counterfactual", type=int, nargs="?", const=1, default=None, metavar="EVERY",
                        help="every EVERY-th step (default 1) a what-if pure step on every harness, restored "
                             "exactly; writes counterfactual.parquet per run (hbsim.counterfactual)")
    runner.add_run_options(parser)


def policy_names(requested: list[str] | None) -> list[str]:
    """The --policy names in order, each once ('all': every registered policy; the default)."""
    names = [n for name in requested or ["all"] for n in (POLICIES if name == "all" else [name])]
    for n in names:
        if n not in POLICIES:
            raise UserError(f"--policy {n!r} is unknown; valid policies: all, {', '.join(POLICIES.names())}")
    return list(dict.fromkeys(names))


def apply_scenario(args: argparse.Namespace, run: dict | None = None) -> scenarios.Scenario | None:
    """Fill --env from --scenario (or its default) and `run`'s steps, seeds and batch_groups
    from the scenario where not given (then their defaults); the scenario (its env knobs are
    defaults that --set overrides), None without one."""
    sc, run = None, {} if run is None else run
    if args.scenario is not None:
        if args.env is not None:
            raise UserError(f"--env {args.env} and --scenario {args.scenario} are not allowed together: the "
                            f"scenario names its env")
        sc = scenarios.get(args.scenario)
        args.env = sc.env["kind"]
        scenario_run = {"steps": sc.steps, "seeds": sc.seeds, "batch_groups": sc.batch_groups}
        run.update({k: v for k, v in scenario_run.items() if v is not None and k not in run})
    args.env = "bernoulli" if args.env is None else args.env
    for key in ("steps", "seeds", "batch_groups"):
        run.setdefault(key, RUN_KNOBS[key].default)
    return sc


def build_configs(args: argparse.Namespace) -> tuple[list[dict], scenarios.Scenario | None]:
    """Every resolved (policy, seed) config, and the --scenario; all validation happens here,
    before any run. The run knobs by flag or --set (`hbsim.run_knobs.from_command`: one parse
    each, the error naming the form typed), the env and policy knobs by --set."""
    sets, run = from_command(args, RUN_KEYS, RUN_KEYS)
    sc = apply_scenario(args, run)
    scenario_env = dict(sc.env) if sc is not None else {}
    seeds = run.pop("seeds")
    check_int("--seed-offset", args.seed_offset, 0, MAX_SEED - seeds + 1)
    runner.check_run_options(args.jobs, args.backend, args.ray_address)
    env_knobs, policy_knobs = sets.env, sets.policy
    if "kind" in env_knobs and env_knobs["kind"] != args.env:
        raise UserError(f"--set env.kind={env_knobs['kind']!r} contradicts --env {args.env!r}; "
                        "choose the environment with --env only")
    names = policy_names(args.policy)
    for knob in policy_knobs:
        if not any(knob in POLICIES[n].KNOBS for n in names):
            raise UserError(f"--set policy.{knob} is not a knob of any selected policy ({', '.join(names)})")
    check_cells(len(names) * seeds, "hb sim", "runs (policies x seeds)", "--seeds or --policy")
    configs = []
    for name in names:
        knobs = {k: v for k, v in policy_knobs.items() if k in POLICIES[name].KNOBS}
        if sc is not None and name == "oracle":      # aimed at the scenario's target unless set
            knobs.setdefault("target", sc.target)
        for seed in range(args.seed_offset, args.seed_offset + seeds):
            configs.append(resolve_config({"env": {**scenario_env, "kind": args.env, **env_knobs},
                                           "policy": {"name": name, **knobs}, "seed": seed, **run}))
    return configs, sc


def run_dir(out: str | Path, cfg: dict) -> Path:
    return Path(out) / cfg["policy"]["label"] / f"seed{cfg['seed']}"


def main(args: argparse.Namespace) -> int:
    if args.knobs:      # `name = default: doc (allowed)` for every knob of the env kind (or preset's kind)
        apply_scenario(args)
        print("\n".join(ENVS[expand_preset({"kind": args.env})["kind"]].KNOBS.listing()))
        return 0
    configs, sc = build_configs(args)
    out = Path(os.path.realpath(args.out)) if args.out is not None else None   # a link loop: refused below, one line
    meta = {"scenario": sc.record()} if sc is not None else {}
    tasks = [{"id": f"{c['policy']['label']}/seed{c['seed']}", "config": c, "meta": meta,
              "dir": str(run_dir(out, c)) if out else None, "replace": args.overwrite} for c in configs]
    todo = tasks
    if out is not None:     # every check before the first write
        # what every run of the folder shares (env, steps, eval_every, batch_groups): more
        # policies or seeds may be added to it, other settings not
        settings = config_hash({k: v for k, v in configs[0].items() if k not in ("policy", "seed")})
        check_output_dir(args.out, "sim", settings, force=args.force)
        todo = runner.pending(tasks, remedy="choose a new --out or pass --overwrite")
    pending = {t["id"] for t in todo}
    # the finished runs reused, every table checked (hbsim.contract.records.read_table) before any work
    reused_runs = {t["id"]: read_run(t["dir"]) for t in tasks if out is not None and t["id"] not in pending}
    start = time.perf_counter()
    reused = f"; {len(tasks) - len(todo)} finished runs reused from {args.out}" if len(todo) < len(tasks) else ""
    print(f"hb sim: {len(todo)} runs ({args.env}, {configs[0]['steps']} steps) on {runner.workers(args.jobs, len(todo))} "
          f"worker(s){reused}", file=sys.stderr)
    kept = {}   # the results of runs without --out
    # --out: the marker first ("incomplete"), completed once every run is there
    with output_dir(args.out, "sim", settings, tool="hb sim") if out is not None else contextlib.nullcontext():
        runner.run_many(tasks, jobs=args.jobs, backend=args.backend, ray_address=args.ray_address,
                        progress=runner.ProgressBar(noun="runs", note=warmup_line(configs)),
                        on_done=lambda answer: kept.update({answer["id"]: answer.get("result")})).check()
    results = [kept[t["id"]] if out is None else reused_runs.get(t["id"]) or read_run(t["dir"]) for t in tasks]
    train = pd.concat([r.train for r in results], ignore_index=True)
    evals = pd.concat([r.eval for r in results], ignore_index=True)
    print(summary_table(train, evals, runs=run_table(r.meta for r in results)))
    print(f"hb sim: done in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    return 0
