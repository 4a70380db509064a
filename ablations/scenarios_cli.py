"""`hb scenarios`: the shipped scenario suite (hbsim.scenarios), and your own scenario files.

    hb scenarios                      # every scenario: name, target, seeds x steps, its paragraph
    hb scenarios NAME                 # its config (the scenario file's settings, the env knobs)
    hb scenarios PATH.toml [--check]  # the same for your own scenario file (docs/EXTENDING.md)
    hb scenarios NAME --check [--policy mixed --policy 'mixed:arms=[0,1]'] [--seeds N]
        # the oracle (on the scenario's target) vs uniform, paired over the shipped seeds, and
        # each --policy's mean gain on the three targets (noise-free truth of the final step);
        # then the same on every axis of `hb stress` (horizon 1x and 3x, step size x1 and x0.5)
    hb scenarios NAME --sweep         # per learning-rate multiplier: uniform's final training success,
                                      # the fraction of its steps the trust region binds, its late gain

Runs go through `ablations.runner.run_many` in this process (--jobs N: worker processes).
`hb sim --scenario NAME` runs a scenario like any env, with the full per-policy table.
"""
from __future__ import annotations

import argparse
import json
import textwrap

from ablations import scenarios as measure
from policies.clairvoyant import TARGETS
from hbsim.scenarios import SCENARIOS, get, is_shipped
from policies.errors import UserError
from policies.validate import MAX_SEEDS, check_int, parse_sets


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", default=None, metavar="NAME|PATH.toml",
                        help=f"a scenario: {', '.join(SCENARIOS)}, or the path of your own scenario file")
    parser.add_argument("--check", action="store_true", help="measure the oracle against uniform (and --policy)")
    parser.add_argument("--sweep", action="store_true",
                        help="per lr multiplier: uniform's training success, trust-region binding fraction, late gain")
    parser.add_argument("--policy", action="append", default=[], metavar="NAME[:KNOB=V,...]",
                        help="also measure this policy with --check (repeatable; V parsed as JSON)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default: the scenario's)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1: in this process)")


def parse_policy(text: str) -> dict:
    """"mixed:arms=[0,1]" -> {"name": "mixed", "arms": [0, 1], "label": "mixed:arms=[0,1]"}."""
    name, _, rest = text.partition(":")
    try:     # each KNOB=VALUE in the one --set grammar (policies.validate.parse_sets)
        policy = {"name": name.strip(), **parse_sets(filter(None, _split(rest)))}
    except UserError:
        raise UserError(f"--policy {text!r} is not allowed: expected NAME or NAME:KNOB=VALUE,...") from None
    if rest:
        policy["label"] = text
    return policy


def _split(text: str) -> list[str]:
    """Split on commas outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


def listing() -> str:
    lines = []
    for sc in SCENARIOS.values():
        lines.append(f"{sc.name}  (target {sc.target}; {sc.seeds} seeds x {sc.steps} steps; env {sc.env['kind']})")
        lines += textwrap.wrap(sc.summary, 96, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines)


def show(name: str) -> str:
    sc = get(name)
    lines = [f"name = {sc.name}", f"target = {sc.target}", f"seeds = {sc.seeds}", f"steps = {sc.steps}"]
    if sc.batch_groups is not None:
        lines.append(f"batch_groups = {sc.batch_groups}")
    lines += ["summary:"] + textwrap.wrap(sc.summary, 96, initial_indent="    ", subsequent_indent="    ")
    lines += ["lr:"] + textwrap.wrap(sc.lr_note, 96, initial_indent="    ", subsequent_indent="    ")
    lines += ["[env]"] + [f"{k} = {json.dumps(v)}" for k, v in sc.env.items()]
    if not is_shipped(sc):      # the user's own file: which one, and its content hash
        lines += [f"file = {sc.file}", f"sha256 = {sc.sha256}"]
    return "\n".join(lines)


def sweep_text(name: str, sweep: dict[float, dict]) -> str:
    """The lines of `hb scenarios NAME --sweep` from `ablations.scenarios.sweep`."""
    late = f"last {measure.LATE:.0%}"
    lines = [f"{get(name).name}: uniform per lr multiplier (lr and skill_lr x the multiplier): final training "
             f"success | fraction of steps the trust region (max_step) binds | share of the gain made in the {late} "
             f"of the steps"]
    lines += [f"  x{f:<6g} {v['train']:.3f} | bound {v['bound']:.2f} | late {v['late']:.2f}" for f, v in sweep.items()]
    return "\n".join(lines)


def check(name: str, extra: list[dict], seeds: int | None, jobs: int) -> str:
    """The shipped axis in full, then oracle - uniform (and each extra's gain) on the target at
    every axis of `hb stress` (`ablations.stress.axes`: horizon x steps, step size x lr), and
    what holds on all of them."""
    from ablations.stress import axes
    from reports.stress import axis_label

    sc = get(name)
    policies = [measure.oracle_policy(name), {"name": "uniform"}] + extra
    i = TARGETS.index(sc.target)
    at = {}
    for horizon, scale in axes():
        scaled = [{**p, "lr_scale": p.get("lr_scale", 1.0) * scale} if scale != 1 else p for p in policies]
        at[(horizon, scale)] = measure.final_truth(name, scaled, seeds, steps=sc.steps * horizon, jobs=jobs)
    truth = at[(1, 1.0)]
    start = truth["start"].mean(axis=0)
    lines = [f"{sc.name}: mean gain over the start (noise-free truth after step {sc.steps}; "
             f"{truth['start'].shape[0]} seeds); start " + "  ".join(f"{t} {v:.3f}" for t, v in zip(TARGETS, start))]
    for j, p in enumerate(policies):      # by position: a user's --policy uniform is a row of its own
        label = measure.label_of(p)
        gain = truth[j].mean(axis=0) - start
        lines.append(f"  {label:24s} " + "  ".join(f"{t} {g:+.3f}" for t, g in zip(TARGETS, gain)))
    g = measure.paired(truth[0][:, i], truth[1][:, i])
    lines.append(f"oracle - uniform on {sc.target}: {g['delta']:+.4f} (sd {g['sd']:.4f}); paired MDE "
                 f"{g['mde']:.4f} (alpha 0.05, power 0.8); gain = {g['ratio']:.1f} x MDE")
    lines.append(f"on every axis (horizon x {sc.steps} steps / step size x the shipped lr), on {sc.target}:")
    weak = []
    for (horizon, scale), tr in at.items():
        axis, g = axis_label(horizon, scale), measure.paired(tr[0][:, i], tr[1][:, i])
        gains = "  ".join(f"{measure.label_of(p)} {(tr[k][:, i] - tr['start'][:, i]).mean():+.3f}"
                          for k, p in enumerate(extra, start=2))      # keyed by position: oracle 0, uniform 1
        lines.append(f"  {axis:9s} {sc.steps * horizon:5d} steps  oracle - uniform {g['delta']:+.4f} (MDE "
                     f"{g['mde']:.4f}, {g['ratio']:.1f} x MDE)" + (f"  gains: {gains}" if gains else ""))
        if not g["ratio"] >= 3:
            weak.append(f"{axis} ({g['ratio']:.1f} x MDE)")
    if not weak:
        lines.append("the oracle gains >= 3 x MDE over uniform on every axis")
    elif len(weak) == len(at):
        lines.append(f"the oracle gains < 3 x MDE over uniform on every axis at {truth['start'].shape[0]} seeds")
    else:
        lines.append(f"the oracle gains < 3 x MDE over uniform at {', '.join(weak)}: the scenario poses its problem "
                     "only on the other axes")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if args.seeds is not None:
        check_int("--seeds", args.seeds, 2, MAX_SEEDS)
    check_int("--jobs", args.jobs, 1, 1024)
    if args.name is None:
        if args.check or args.sweep or args.policy:
            raise UserError("hb scenarios: --check, --sweep and --policy need a scenario NAME or PATH.toml")
        print(listing())
        return 0
    get(args.name)
    extra = [parse_policy(p) for p in args.policy]
    if args.policy and not args.check:
        raise UserError("hb scenarios: --policy is measured by --check; pass --check too")
    print(show(args.name))
    if args.sweep:
        print(sweep_text(args.name, measure.sweep(args.name, seeds=args.seeds, jobs=args.jobs)))
    if args.check:
        print(check(args.name, extra, args.seeds, args.jobs))
    return 0
