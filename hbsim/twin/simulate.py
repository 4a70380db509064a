"""The twin as it will run (hbsim.twin): its env section (`twin_env`) and a simulation of the
twin env on the LOGGED schedules (`simulate`), the fit's check on its own replay.

Why the fit needs it (issue 39). The replay (`hbsim.twin.model.replay`) is the scenario
model's EXPECTED step, the categories pooled: one deterministic mean path per run. The twin
env a user runs (`hb sim --scenario TWIN.toml`) is the stochastic scenario model with its C
categories, and its realised paths need not stay near the mean path: where a harness reads
the core negatively (a trap), a category whose core falls gives that harness more retained
groups there, whose steps push that category's core down further -- the categories split,
the trap keeps succeeding (and harming) in some of them, and the others plateau below the
mean path. Measured on the shipped `trap` at its true values: the replay takes the trap's
success to 0.00 and the others to 0.95 after 100 uniform steps, the realised runs (and the
twin env with those values) to 0.12 and 0.79. A fit of the replay alone therefore prefers
values whose MEAN path looks like the realised one -- a weak trap -- and the twin env with
those values no longer ranks the schedulers as the world does.

`simulate` runs the twin env (seeds of its own) on every logged schedule and returns the
same quantities as the replay (success per harness, keep probability, retained mean reward,
and the probes' expected one-step changes at the realised states), averaged over `sims`
simulations per run; the fit (`hbsim.twin.fitting.fit`) adds simulate - replay at its
current values to the replay's predictions and refits (a fixed point: at values whose
simulations match the logs the correction is exact).
"""
from __future__ import annotations

import numpy as np

from hbsim.grpo import expected_group_signal
from hbsim.twin.logs import Observations
from hbsim.twin.model import Params

#: the training-task pool of a twin whose logs do not say how many tasks the run had
DEFAULT_POOL = 60


def _floats(values) -> str:
    return ",".join(f"{float(v):.4g}" for v in values)


def twin_env(prm: Params, obs: Observations, pool_size: int | None = None, k_attempts: int | None = None) -> dict:
    """The env section (kind `twin`) of the twin with values `prm` fitted to `obs`."""
    H = len(obs.harnesses)
    roles = ["dead" if d else "noise" if n else "ordinary" for d, n in zip(prm.dead, prm.noise)]
    env = {"kind": "twin", "n_harnesses": H, "n_tasks": int(pool_size or DEFAULT_POOL),
           "n_heldout_tasks": int(obs.n_heldout_tasks), "group_size": int(obs.group_size),
           "roles": ",".join(roles), "harness_names": ",".join(obs.harnesses),
           "harness_bias": _floats(np.where(prm.dead, 0.0, prm.bias)), "harness_read": _floats(prm.read),
           "harness_ceiling": _floats(np.where(prm.dead, 0.0, prm.ceil)),
           "lr": round(float(prm.lr), 4), "skill_lr": round(float(prm.skill_lr), 4),
           "max_step": round(float(prm.max_step), 4), "forget": round(float(prm.forget), 4),
           "interference": round(float(prm.interference), 4), "heldout_bias": round(float(prm.heldout_bias), 4),
           "heldout_read": round(float(prm.heldout_read), 4), "coverage": 0.0,
           "difficulty_std": round(float(prm.spread), 4), "affinity_std": 0.0, "bias_jitter": 0.0}
    if prm.noise.any():
        env["noise_p"] = round(float(prm.noise_p[prm.noise].mean()), 4)
    if k_attempts:
        env["k_attempts"] = int(k_attempts)
    cost = obs.costs.get("per_group")
    if cost is not None and np.nansum(cost) > 0:
        env["group_tokens"] = _floats(np.maximum(cost, 0.0))
    return env


def simulate(prm: Params, obs: Observations, probe_at: np.ndarray | None = None, sims: int = 3,
             seed: int = 0) -> dict:
    """The twin env with values `prm` run on every logged schedule `sims` times (seeds of its
    own): the mean over simulations of the replay's quantities (`hbsim.twin.model.replay`:
    "p" (R, S+1, H+1), "q", "mean" (R, S+1, H), with probe_at "gain" (R, S, H+1, 2)); a run's
    padding steps (beyond its own length) repeat its last state."""
    from hbsim.envs import make_env
    from hbsim.experiment import resolve_synthetic

    knobs = resolve_synthetic(twin_env(prm, obs))
    kind = knobs.pop("kind")
    R, S, H = obs.alloc.shape
    G, batch = obs.group_size, obs.batch_groups
    out = {k: np.zeros((R, S + 1, H + (k == "p"))) for k in ("p", "q", "mean")}
    gain = np.zeros((R, S, H + 1, 2)) if probe_at is not None else None
    transfer, n_sum = np.zeros((R, S, H)), np.zeros((R, S, H))
    cand = np.vstack([np.eye(H) * batch, np.full(H, batch / H)])
    for r in range(R):
        steps = int(obs.steps[r])
        for k in range(sims):
            env = make_env(kind, seed=int(np.random.SeedSequence([seed, r, k]).generate_state(1)[0]), **knobs)
            n, bank = env.n_tasks, None
            for t in range(S + 1):
                if t <= steps:
                    p = env.success_matrix()
                    train = p[:n, :H]
                    es, keep = expected_group_signal(train, G)
                    q = keep.mean(axis=0)
                    mean = np.divide((train - train ** G).mean(axis=0), q, out=np.zeros(H), where=q > 1e-12)
                    now = p.mean(axis=0)                # every task: the population the replay's nodes stand for
                    if probe_at is not None and t < S and probe_at[r, t]:
                        after = env.expected_success(cand)                                # (H+1, n_all, H+1)
                        gain[r, t, :, 0] += (after[:, :, :H].mean(axis=(1, 2)) - p[:, :H].mean()) / sims
                        gain[r, t, :, 1] += (after[:, :, H].mean(axis=1) - now[H]) / sims
                        bank = _probe_transfer(env, bank, H, batch, t + 1, transfer[r, t], n_sum[r, t])
                out["p"][r, t] += now / sims
                out["q"][r, t] += q / sims
                out["mean"][r, t] += mean / sims
                if t < steps:
                    counts = obs.alloc[r, t].astype(np.int64)
                    if counts.sum() > 0:
                        env.train_step(counts)
    if gain is not None:
        out["gain"] = gain
        out["T"] = np.divide(transfer, n_sum, out=np.full_like(transfer, np.nan), where=n_sum > 0)
    return out


#: the EMA rate of the probes' memories (SPEC §2.5; hbsim.counterfactual's for a policy without one)
ETA = 0.3


def _probe_transfer(env, bank, H: int, batch: int, step: int, total: np.ndarray, count: np.ndarray):
    """The what-if probe's T (hbsim.counterfactual) in the simulated env: a pure `batch`-group
    step on each harness from the current state (restored after each), the T of its gradient
    sketch against the probe's own memories `bank` (added to total / count, (H,)), then every
    harness's sketch enters its memory. Returns the bank (created at the first sketch)."""
    import copy

    from hbsim.counterfactual import transfer_against
    from policies.signals import MemoryBank, transfer_and_update

    state = copy.deepcopy(env.state_dict())
    sketches = []
    for h in range(H):
        env.load_state_dict(state)
        counts = np.zeros(H, dtype=np.int64)
        counts[h] = batch
        res = env.train_step(counts)
        sketches.append(res.sketch)
        value = transfer_against(bank, h, res.sketch, ETA, step)
        if np.isfinite(value):
            total[h] += value
            count[h] += 1
    env.load_state_dict(state)
    for h, sketch in enumerate(sketches):
        if sketch is None:
            continue
        if bank is None:
            bank = MemoryBank(H, np.asarray(sketch).shape[0], np.asarray(sketch).dtype)
        transfer_and_update(bank, h, sketch, ETA, step)
    return bank


__all__ = ["DEFAULT_POOL", "simulate", "twin_env"]
