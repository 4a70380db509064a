"""Measuring the scenario suite (hbsim.scenarios): every run through the one multi-run path
(`ablations.runner.run_many`, in this process by default), read on the noise-free truth of
the final train row (hbsim.scenarios.target_truth), so a paired seed-level comparison of
two policies has no evaluation noise.

    truth = final_truth("trap", [{"name": "oracle", "target": "train"}, {"name": "uniform"}])
    truth[1]                          # uniform's (seeds, 3): train, heldout_tasks, heldout_harness
    gap = oracle_gap("trap")          # {"delta", "mde", "ratio", ...}: oracle vs uniform, paired over seeds
    lr_sweep("trap", (0.5, 1, 2))     # uniform's mean final training success per lr multiplier
    sweep("trap", (0.5, 1, 2))        # ... with the trust region's binding fraction and the late gain
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ablations import runner
from ablations.plan import check_cells
from hbsim.contract.labels import of_part
from hbsim.envs import make_env
from hbsim.envs.base import target_means
from hbsim.experiment import resolve_config
from hbsim.scenarios import get, scenario_config, target_truth
from policies.clairvoyant import TARGETS
from reports.readings import at_cost
from reports.stats import mde

def oracle_policy(name: str) -> dict:
    """The oracle aimed at scenario `name`'s target."""
    return {"name": "oracle", "target": get(name).target}


def label_of(policy: dict) -> str:
    return policy.get("label") or policy["name"]


def runs(name: str, policies: list[dict], seeds: int | None = None, *, steps: int | None = None, jobs: int = 1,
         **env_overrides) -> tuple[list[list], np.ndarray, list[str]]:
    """The runs of `final_truth` and `train_tables` with every row kept, through the one
    multi-run path: (per policy, its train tables on seeds 0..N-1; the truth of the three
    TARGETS before training per seed (N, 3); the harness names). `final_of(tables[i],
    harnesses)` is `final_truth(...)[i]`."""
    sc = get(name)
    n = sc.seeds if seeds is None else seeds
    check_cells(len(policies) * n, f"hb scenarios {sc.name}", "runs (policies x seeds)", "--seeds or --policy")
    tasks = []
    for i, policy in enumerate(policies):
        for seed in range(n):
            cfg = scenario_config(name, {**policy, "label": label_of(policy)}, seed, **env_overrides)
            if steps is not None:
                cfg["steps"] = steps
            tasks.append({"id": f"{i}:{label_of(policy)}/seed{seed}", "config": resolve_config(cfg)})
    answers = {}
    runner.run_many(tasks, jobs=jobs, on_done=lambda a: answers.update({a["id"]: a})).check()
    env = dict(tasks[0]["config"]["env"])
    kind = env.pop("kind")
    starts = []
    for seed in range(n):
        e = make_env(kind, seed=seed, **env)
        starts.append(target_means(e.success_matrix(), e.n_tasks, e.H))
    harnesses = make_env(kind, seed=0, **env).harnesses
    trains = [answers[t["id"]]["result"].train for t in tasks]
    return [trains[i * n:(i + 1) * n] for i in range(len(policies))], np.asarray(starts, dtype=np.float64), harnesses


def final_truth(name: str, policies: list[dict], seeds: int | None = None, *, steps: int | None = None,
                jobs: int = 1, **env_overrides) -> dict:
    """{"start": (seeds, 3), i: (seeds, 3)}: the truth of the three TARGETS before training
    and after the final step of policies[i] ({"name", "label"?, **knobs}), seeds 0..N-1.
    Keyed by the policy's position, never by its label: a user's `--policy uniform` is a
    policy of its own beside the built-in uniform."""
    tables, starts, harnesses = runs(name, policies, seeds, steps=steps, jobs=jobs, **env_overrides)
    out: dict = {"start": starts}
    for i, trains in enumerate(tables):
        out[i] = final_of(trains, harnesses)
    return out


def final_of(trains: list[pd.DataFrame], harnesses: list[str]) -> np.ndarray:
    """(seeds, 3): the truth of the three TARGETS after the final step of each train table."""
    return np.asarray([[float(target_truth(train, target, harnesses).iloc[-1]) for target in TARGETS]
                       for train in trains], dtype=np.float64)


def paired(a: np.ndarray, b: np.ndarray) -> dict:
    """Paired comparison of per-seed values a - b: mean delta, sd, its paired t MDE (alpha
    0.05, power 0.8) and delta / MDE."""
    d = np.asarray(a) - np.asarray(b)
    m = mde(d, 0.05)
    return {"delta": float(d.mean()), "sd": float(d.std(ddof=1)), "mde": m,
            "ratio": float(d.mean() / m) if m > 0 else float("inf"), "seeds": int(d.size)}


def oracle_gap(name: str, seeds: int | None = None, **kw) -> dict:
    """The oracle (aimed at the scenario's target) against uniform at the shipped seed count,
    on that target."""
    i = TARGETS.index(get(name).target)
    truth = final_truth(name, [oracle_policy(name), {"name": "uniform"}], seeds, **kw)
    oracle, uniform = truth[0][:, i], truth[1][:, i]
    return {**paired(oracle, uniform), "start": float(truth["start"][:, i].mean()),
            "oracle": float(oracle.mean()), "uniform": float(uniform.mean())}


def train_tables(name: str, policy: dict, seeds: int | None = None, jobs: int = 1, **env_overrides) -> tuple:
    """(train tables of `policy` on seeds 0..N-1, the training-target truth before training
    per seed (N,), the harness names): the runs `final_truth` makes, with every row kept."""
    tables, starts, harnesses = runs(name, [policy], seeds, jobs=jobs, **env_overrides)
    return tables[0], starts[:, 0], harnesses


#: the fraction of the horizon whose gain `sweep` reports as "late" (its last quarter)
LATE = 0.25


def sweep(name: str, factors=(0.25, 0.5, 1.0, 2.0, 4.0, 8.0), policy: dict | None = None,
          seeds: int | None = None, jobs: int = 1) -> dict[float, dict]:
    """factor -> {"train", "bound", "late"} of `policy` (default uniform) with its learning
    rate multiplied by factor (the design's `lr_scale`, policies.base.LR_SCALE, applied by the
    env's `set_lr_scale` to its own rate knobs, times factor): "train" the mean final noise-free
    training success over seeds, "bound" the fraction of its steps on which the trust region
    (max_step) clipped the move (the `trust_bound` column, mean over steps and seeds), "late"
    the share of its training gain over the start made in the last quarter of the horizon,
    (mean final - mean at 3/4 of the steps) / (mean final - mean start). Where "train" still
    rises with the factor and "bound" is small, the learning rate (not the trust region)
    sets the progress."""
    policy = policy or {"name": "uniform"}
    out = {}
    for f in factors:
        scaled = {**policy, "lr_scale": policy.get("lr_scale", 1.0) * f}
        tables, start, harnesses = train_tables(name, scaled, seeds, jobs)
        truth = np.array([target_truth(t, "train", harnesses).to_numpy() for t in tables])   # (seeds, steps)
        final, at = truth[:, -1].mean(), truth[:, int(round(truth.shape[1] * (1 - LATE))) - 1].mean()
        gain = final - start.mean()
        out[float(f)] = {"train": float(final),
                         "bound": float(np.mean([t["trust_bound"].mean() for t in tables])),
                         "late": float((final - at) / gain) if gain != 0 else float("nan")}
    return out


def lr_sweep(name: str, factors=(0.25, 0.5, 1.0, 2.0, 4.0, 8.0), policy: dict | None = None,
             seeds: int | None = None) -> dict[float, float]:
    """factor -> mean final TRAINING success of `policy` (default uniform) with its learning
    rate multiplied by factor (`sweep`'s "train")."""
    return {f: row["train"] for f, row in sweep(name, factors, policy, seeds).items()}


__all__ = ["LATE", "final_truth", "label_of", "lr_sweep", "oracle_gap", "oracle_policy", "paired", "sweep",
           "train_tables"]


def equal_groups(train: pd.DataFrame, part: str, target: str) -> tuple[pd.DataFrame, float]:
    """(seed x policy table of scores, the milestone in groups) of one part of a stress grid:
    every run (a label and a seed) read at the largest number of generated groups every run of
    the part reached (`reports.readings.at_cost`, the one equal-cost reading), on the EXACT
    expected score of `target` (`hbsim.scenarios.target_truth` over the run's training
    harnesses, its alloc_ columns). Labels lose their part suffix."""
    mine = of_part(train, "policy", part)
    mine = mine.assign(run_id=mine["policy"] + "/" + mine["seed"].astype(str))     # a run: a label and a seed
    scored = []
    for _, rows in mine.groupby("run_id", sort=False):
        rows = rows.dropna(axis=1, how="all")
        names = [c[len("alloc_"):] for c in rows.columns if c.startswith("alloc_")]
        scored.append(rows.assign(score=target_truth(rows, target, names).to_numpy(dtype=float)))
    scores = pd.concat(scored)
    milestone = at_cost.common_milestone(at_cost.step_costs(scores, "groups"))
    table = at_cost.runs_at(scores, "groups", milestone, ["score"])
    return table.pivot_table(index="seed", columns="policy", values="score"), milestone
