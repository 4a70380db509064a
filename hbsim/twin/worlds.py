"""A fitted twin as a scenario file's table, and what any world's exact model says
(`world_quantities`) with the distance between two worlds (hbsim.twin)."""
from __future__ import annotations

import numpy as np

from policies.validate import comma_items

from hbsim.twin.fitting import Fit
from hbsim.twin.simulate import DEFAULT_POOL, twin_env


# -- the twin as a scenario ------------------------------------------------------------------
def scenario(result: Fit, *, name: str, target: str = "heldout_tasks", pool_size: int | None = None,
             seeds: int = 2, k_attempts: int | None = None, sources: str = "") -> dict:
    """The fitted twin as a scenario file's table (hbsim.scenarios: name, summary, target,
    seeds, steps, batch_groups, lr_note, [env] of kind `twin`)."""
    prm, obs = result.params, result.obs
    env = twin_env(prm, obs, pool_size, k_attempts)
    roles = comma_items(env["roles"], keep_empty=True)
    steps = int(obs.steps.max())
    described = ", ".join(f"{h} ({r})" for h, r in zip(obs.harnesses, roles))
    summary = (f"A twin fitted by `hb twin fit` to {len(obs.steps)} runs of {steps} steps{sources}: harnesses "
               f"{described}; the scenario model with one bias, core reading and ceiling per harness, fitted "
               "to the logged success of every step's groups, the evaluations and the what-if probes "
               "(docs/TWIN.md).")
    note = (f"Learning rates fitted: the core's lr {env['lr']} (fixed at 1 where no probe logged T: without T only "
            f"lr x read is identified), skill_lr {env['skill_lr']}, trust region max_step {env['max_step']}, forget "
            f"{env['forget']}.")
    return {"name": name, "summary": summary, "target": target, "seeds": max(2, int(seeds)), "steps": steps,
            "batch_groups": int(obs.batch_groups), "lr_note": note, "env": env}


def world_quantities(env: dict, seeds: tuple = (0, 1), batch: int = 8) -> dict:
    """What a world's exact model says, from its env section (any synthetic kind): per harness
    the initial training success `initial` (H,), the one-step `transfer` matrix (H, H+1):
    the expected change of harness j's success (column H: the held-out harness) from a pure
    `batch`-group step on harness h at the start, `mixed_ratio` the even mixed batch's gain over
    the mean pure gain (interference), `ceiling` (H,); averaged over `seeds`."""
    from hbsim.envs import make_env
    from hbsim.experiment import resolve_synthetic

    knobs = resolve_synthetic(dict(env))
    kind = knobs.pop("kind")
    init, transfer, mixed, ceil = [], [], [], []
    for seed in seeds:
        world = make_env(kind, seed=seed, **knobs)
        H, n = world.H, world.n_tasks
        now = world.success_matrix()[:n]                                             # (n, H+1)
        cand = np.vstack([np.eye(H, dtype=np.int64) * batch, _even(H, batch)])
        after = world.expected_success(cand, tasks=slice(0, n))                      # (H+1, n, H+1)
        gain = after.mean(axis=1) - now.mean(axis=0)[None]                            # (H+1, H+1)
        init.append(now[:, :H].mean(axis=0))
        transfer.append(gain[:H])
        pure = gain[:H, :H].mean(axis=1).mean()
        mixed.append(gain[H, :H].mean() / pure if abs(pure) > 1e-9 else 1.0)
        ceil.append(np.asarray(getattr(world, "ceil", np.ones(H + 1)))[:H])
    return {"initial": np.mean(init, axis=0), "transfer": np.mean(transfer, axis=0),
            "mixed_ratio": float(np.mean(mixed)), "ceiling": np.mean(ceil, axis=0)}


def _even(H: int, batch: int) -> np.ndarray:
    counts = np.full(H, batch // H, dtype=np.int64)
    counts[: batch % H] += 1
    if counts.sum() == 0 or (counts == 0).any():
        counts = np.ones(H, dtype=np.int64)
    return counts[None]


#: quantiles at which the sorted per-harness features are compared (worlds of any H)
FEATURE_QUANTILES = np.linspace(0.0, 1.0, 6)


def world_features(q: dict) -> np.ndarray:
    """The distance's features of `world_quantities` (docs/TWIN.md): the quantiles of the
    sorted initial success, of each harness's own one-step gain (x 100) and of its mean effect
    on the OTHER training harnesses (x 100), and the mixed batch's gain ratio (clipped to
    [-2, 2])."""
    T = q["transfer"]
    H = T.shape[0]
    own = np.diag(T[:, :H])
    cross = (T[:, :H].sum(axis=1) - own) / max(H - 1, 1)
    quant = lambda v: np.quantile(np.sort(v), FEATURE_QUANTILES)   # noqa: E731
    return np.concatenate([quant(q["initial"]), 100 * quant(own), 100 * quant(cross),
                           [np.clip(q["mixed_ratio"], -2, 2)]])


def world_distance(a: dict, b: dict) -> float:
    """Euclidean distance of two worlds' `world_features` (a, b: `world_quantities`)."""
    return float(np.linalg.norm(world_features(a) - world_features(b)))
