"""The twin's identifiability experiment (issue 39, docs/TWIN.md "Identifiability"): can `hb
twin fit` learn a known world from the logs a user would have, well enough to rank schedulers?

    logs      uniform runs with what-if probes of the world (`--counterfactual EVERY`, an
              evaluation every EVERY steps, seeds 0..n-1, the world's own horizon), run in
              process
    stripped  of everything a real run cannot know (`strip`): every truth column
              (hbsim.twin.TRUTH_PREFIXES, the per-harness realised deltas, the env's trust-region
              flag), run.json (never passed), and the harness names, renamed h0..h{H-1} and
              `heldout` in every table (groups included), so no role is revealed by a name
    fitted    by hbsim.twin.fit, written as a twin scenario (hbsim.twin.scenario)
    judged    seven policies (POLICIES) x fresh seeds (FRESH_SEEDS, never in the logs) in the
              true world and in the twin, each run scored by its final noise-free success on
              the world's target (hbsim.scenarios.target_truth); `judge` compares the
              per-policy means: Pearson r, Kendall tau, and the top-1 regret (true mean of the
              true best minus true mean of the twin's best) against the paired MDE of that
              difference over the fresh seeds (ablations.scenarios.paired)

`identify` runs all of it for one scenario (a shipped name or a file: the files as they ship,
never copies). tests/ablations/test_ablations_twin_identify.py asserts its verdict per
scenario; `python -m ablations.twin_identify NAME...` prints the tables of docs/TWIN.md.
"""
from __future__ import annotations

import argparse
import re
import sys
import time

import numpy as np
import pandas as pd

from ablations.scenarios import paired
from hbsim import scenarios, twin
from hbsim.experiment import resolve_config, run_config

#: the seven policies the twin must rank (issue 39)
POLICIES = ("uniform", "round_robin", "learnability", "transfer", "harnessbandit", "variance", "mixed")
#: seeds of the judged runs: never among the fitting logs' seeds (0..3)
FRESH_SEEDS = tuple(range(100, 112))
#: the bar of issue 39: Pearson r over the policy means
MIN_PEARSON = 0.7
#: name of the held-out harness in stripped logs
HELDOUT = "heldout"
#: truth columns beyond hbsim.twin.TRUTH_PREFIXES that a synthetic run logs and a real run cannot
STRIP_PREFIXES = ("delta_", "trust_bound")


def fitting_logs(env: dict, steps: int, *, seeds: int = 4, every: int = 10, batch_groups: int | None = None,
                 policy: dict | None = None, first_seed: int = 0) -> list[dict]:
    """Uniform runs (or `policy`) of world `env` with what-if probes and an evaluation every
    `every` steps, seeds first_seed..first_seed+seeds-1: one {"train", "eval", "counterfactual",
    "groups"} per run."""
    runs = []
    for seed in range(first_seed, first_seed + seeds):
        cfg = {"env": dict(env), "policy": dict(policy or {"name": "uniform"}), "seed": seed, "steps": steps,
               "eval_every": every, "counterfactual": every}
        if batch_groups is not None:
            cfg["batch_groups"] = batch_groups
        r = run_config(resolve_config(cfg))
        runs.append({"train": r.train, "eval": r.eval, "counterfactual": r.counterfactual, "groups": r.groups})
    return runs


def strip(runs: list[dict]) -> list[dict]:
    """The runs as a real run could log them: truth columns dropped, harnesses renamed h0.. and
    the held-out harness `heldout` in every column name and every `harness` value."""
    names = [c[len("alloc_"):] for c in runs[0]["train"].columns if c.startswith("alloc_")]
    rename = {n: f"h{i}" for i, n in enumerate(names)}
    held = set()
    for run in runs:
        ev = run["eval"]
        held |= set(ev.loc[ev["suite"] == "heldout_harness", "harness"].astype(str))
    rename.update({n: HELDOUT for n in held})
    pattern = re.compile(r"_(" + "|".join(re.escape(n) for n in sorted(rename, key=len, reverse=True)) + r")$")
    drop = tuple(twin.TRUTH_PREFIXES) + STRIP_PREFIXES

    def clean(frame):
        if frame is None:
            return None
        frame = frame[[c for c in frame.columns if not c.startswith(drop)]]
        frame = frame.rename(columns=lambda c: pattern.sub(lambda m: "_" + rename[m.group(1)], c))
        if "harness" in frame:
            frame = frame.assign(harness=frame["harness"].map(lambda h: rename.get(h, h)))
        return frame.reset_index(drop=True)

    return [{k: clean(v) for k, v in run.items()} for run in runs]


def policy_scores(env: dict, steps: int, target: str, *, seeds=FRESH_SEEDS, policies=POLICIES,
                  batch_groups: int | None = None) -> pd.DataFrame:
    """(policy, seed, score): each run's final noise-free success on `target`."""
    rows = []
    for name in policies:
        for seed in seeds:
            cfg = {"env": dict(env), "policy": {"name": name}, "seed": seed, "steps": steps}
            if batch_groups is not None:
                cfg["batch_groups"] = batch_groups
            r = run_config(resolve_config(cfg))
            harnesses = [c[len("alloc_"):] for c in r.train.columns if c.startswith("alloc_")]
            score = float(scenarios.target_truth(r.train, target, harnesses).iloc[-1])
            rows.append({"policy": name, "seed": seed, "score": score})
    return pd.DataFrame(rows)


def judge(true: pd.DataFrame, fitted: pd.DataFrame) -> dict:
    """Per-policy means in both worlds, Pearson r, Kendall tau, and the top-1 regret against the
    paired MDE of (true best - twin's best) over the seeds (module docstring)."""
    from scipy import stats

    T = true.pivot_table(index="seed", columns="policy", values="score")
    W = fitted.pivot_table(index="seed", columns="policy", values="score")
    labels = [p for p in T.columns if p in W.columns]
    T, W = T[labels], W[labels]
    tm, wm = T.mean(axis=0).to_numpy(), W.mean(axis=0).to_numpy()
    best, pick = labels[int(np.argmax(tm))], labels[int(np.argmax(wm))]
    gap = paired(T[best].to_numpy(), T[pick].to_numpy()) if best != pick else {"delta": 0.0, "mde": 0.0}
    regret = float(gap["delta"])
    pearson = float(stats.pearsonr(tm, wm).statistic) if np.std(wm) > 0 and np.std(tm) > 0 else float("nan")
    return {"labels": labels, "true": tm, "twin": wm, "pearson": pearson,
            "tau": float(stats.kendalltau(tm, wm).statistic), "true_best": best, "twin_best": pick,
            "regret": regret, "mde": float(gap["mde"]), "seeds": int(len(T)),
            "ok": bool(np.isfinite(pearson) and pearson >= MIN_PEARSON and (best == pick or regret <= gap["mde"]))}


def identify(name: str, *, seeds: int = 4, every: int = 10, fixed_steps: int = 0, fresh=FRESH_SEEDS,
             policies=POLICIES, max_nfev: int = 25, env_overrides: dict | None = None,
             true_scores: pd.DataFrame | None = None) -> dict:
    """Fit a twin on stripped uniform logs of scenario `name` (as it ships, plus `env_overrides`)
    and judge its ranking of `policies` on `fresh` seeds: {"fit", "twin_env", "judge", "cpu"
    (seconds of CPU per phase), ...}. fixed_steps > 0 adds the remedy of docs/TWIN.md: one short
    run of `fixed_steps` steps on each harness alone (policy `fixed`, seeds 50 + h), with probes."""
    sc = scenarios.get(name)
    env = {**sc.env, **(env_overrides or {})}
    t0 = time.process_time()
    runs = fitting_logs(env, sc.steps, seeds=seeds, every=every, batch_groups=sc.batch_groups)
    if fixed_steps:
        H = len([c for c in runs[0]["train"].columns if c.startswith("alloc_")])
        for h in range(H):
            runs += fitting_logs(env, fixed_steps, seeds=1, every=every, batch_groups=sc.batch_groups,
                                 policy={"name": "fixed", "arm": h}, first_seed=50 + h)
    logs = strip(runs)
    t1 = time.process_time()
    result = twin.fit(twin.observations(logs), holdout=0.0, max_nfev=max_nfev)
    t2 = time.process_time()
    table = twin.scenario(result, name=f"{sc.name}_twin", target=sc.target)
    if true_scores is None:
        true_scores = policy_scores(env, sc.steps, sc.target, seeds=fresh, policies=policies,
                                    batch_groups=sc.batch_groups)
    twin_scores = policy_scores(table["env"], sc.steps, sc.target, seeds=fresh, policies=policies,
                                batch_groups=sc.batch_groups)
    t3 = time.process_time()
    return {"scenario": sc.name, "fit": result, "twin_env": table["env"], "judge": judge(true_scores, twin_scores),
            "true_scores": true_scores, "cpu": {"logs": t1 - t0, "fit": t2 - t1, "judge": t3 - t2}}


def report(out: dict) -> str:
    """The true-vs-twin table of one `identify` result (markdown)."""
    j = out["judge"]
    lines = [f"{out['scenario']}: Pearson r {j['pearson']:+.2f}, Kendall tau {j['tau']:+.2f}, true best "
             f"{j['true_best']}, twin's best {j['twin_best']}, top-1 regret {j['regret']:.4f} (paired MDE "
             f"{j['mde']:.4f}, {j['seeds']} seeds) -> {'identified' if j['ok'] else 'NOT identified'}; CPU "
             + ", ".join(f"{k} {v:.1f}s" for k, v in out["cpu"].items()),
             "", "| | " + " | ".join(j["labels"]) + " |", "|---" * (len(j["labels"]) + 1) + "|",
             f"| true `{out['scenario']}` | " + " | ".join(f"{v:.3f}" for v in j["true"]) + " |",
             "| twin | " + " | ".join(f"{v:.3f}" for v in j["twin"]) + " |"]
    prm, names = out["fit"].params, out["fit"].obs.harnesses
    se = out["fit"].standard_errors("read")
    lines.append("")
    lines.append("fitted read (se): " + ", ".join(f"{n} {r:+.2f} ({s:.2f})" for n, r, s in zip(names, prm.read, se))
                 + f"; lr {prm.lr:.2f}, skill_lr {prm.skill_lr:.2f}, max_step {prm.max_step:.2f}, forget "
                 f"{prm.forget:.2f}, interference {prm.interference:.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="+")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--fixed-steps", type=int, default=0)
    args = ap.parse_args(argv)
    for name in args.scenarios:
        print(report(identify(name, seeds=args.seeds, every=args.every, fixed_steps=args.fixed_steps)), flush=True)
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
