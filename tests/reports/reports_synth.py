"""Synthetic run tables in the SPEC §7 schema for the reports tests (a helper module with
a unique name, not a conftest, so that it never clashes with another folder's helpers)."""
from __future__ import annotations

import numpy as np
import pandas as pd

HARNESSES = ("openclaw", "codex", "pi")
PHASES = ("rollout", "tools", "backward", "sketch", "scheduler", "optimizer")


def make_synthetic(effects=None, n_seeds=3, n_tasks=(24, 16), attempts=(1, 3), steps=12,
                   eval_steps=(12,), seed=0, categories=("coding", "memory", "skills")):
    """(eval_df, train_df) for policies with additive logit effects {label: effect}.

    Same seed -> same task difficulties and noise for every policy (common random numbers).
    Suites: heldout_tasks (attempts[0] per task) and heldout_harness (attempts[1]).
    """
    effects = effects or {"base": 0.0, "hb": 0.8}
    rng = np.random.default_rng(seed)
    suites = [("heldout_tasks", n_tasks[0], attempts[0]), ("heldout_harness", n_tasks[1], attempts[1])]
    diff = {s: rng.normal(0, 1.2, n) for s, n, _ in suites}
    ev, tr = [], []
    for pol, eff in effects.items():
        for sd in range(n_seeds):
            run_id = f"{pol}-{sd}"
            for step in eval_steps:
                crn = np.random.default_rng([seed, sd, step])
                for s, n, a in suites:
                    u = crn.random((n, a))
                    logit = diff[s][:, None] + eff * step / max(eval_steps) + crn.normal(0, 0.3)
                    succ = u < 1 / (1 + np.exp(-logit))
                    reward = np.where(succ, 1.0, np.round(0.3 * crn.random((n, a)), 3))
                    for t in range(n):
                        for k in range(a):
                            ev.append((run_id, pol, sd, step, s, f"{s[:5]}-t{t:03d}", categories[t % len(categories)],
                                       HARNESSES[t % 3], k, reward[t, k], bool(succ[t, k])))
            tr.append(_train(run_id, pol, sd, steps, np.random.default_rng([seed, sd, 99, len(tr)])))
    ev = pd.DataFrame(ev, columns=["run_id", "policy", "seed", "step", "suite", "task", "category", "harness",
                                   "attempt", "reward", "success"])
    return ev, pd.concat(tr, ignore_index=True)


def _train(run_id, pol, sd, steps, rng):
    h = len(HARNESSES)
    rows = []
    for step in range(1, steps + 1):
        p = rng.dirichlet(np.ones(h))
        arm = int(rng.integers(h))
        lval = rng.random() * 0.57
        row = {"run_id": run_id, "policy": pol, "seed": sd, "step": step, "arm": arm, "learnability": lval,
               "transfer": 0.5 * lval + 0.2 * rng.random(), "l_norm": rng.random(), "t_norm": rng.random(),
               "score": rng.random(), "reward": rng.random(), "groups_generated": 10 + int(rng.integers(5)),
               "groups_scored": 10, "groups_retained": 8, "groups_optimized": 8, "leftover_used": 1,
               "leftover_age": 1.0, "leftover_size": 2, "tokens": 0, "oracle_arm": 0, "regret": rng.random() * 0.1}
        for i, name in enumerate(HARNESSES):
            row.update({f"p_{name}": p[i], f"q_{name}": rng.random(), f"n_{name}": step // h,
                        f"mem_norm_{name}": rng.random(), f"mem_age_{name}": float(step % 5),
                        f"alloc_{name}": 8 if i == arm else 0, f"true_{name}": 0.5})
        row.update({f"seconds_{ph}": 0.01 for ph in PHASES})
        rows.append(row)
    return pd.DataFrame(rows)


def write_grid(root, eval_df, train_df, collected=False):
    """Write a grid directory: DIR/cells/<run_id>/{eval,train}.parquet + run.json (or collected)."""
    import json

    root.mkdir(parents=True, exist_ok=True)
    if collected:
        eval_df.to_parquet(root / "eval.parquet")
        train_df.to_parquet(root / "train.parquet")
        return root
    for run_id, g in eval_df.groupby("run_id"):
        d = root / "cells" / run_id
        d.mkdir(parents=True)
        g.to_parquet(d / "eval.parquet")
        train_df[train_df["run_id"] == run_id].to_parquet(d / "train.parquet")
        (d / "run.json").write_text(json.dumps({"run_id": run_id, "config_hash": run_id, "seed": int(g["seed"].iloc[0])}))
    return root
