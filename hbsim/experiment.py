"""Resolved run configs and `run_config` (docs/ARCHITECTURE.md), shared by `hb sim`, grid
cells and `hb real`:

    {"env": {"kind": "bernoulli", **env_knobs},
     "policy": {"name": "harnessbandit", "label": "harnessbandit", **policy_knobs},
     "seed": 3, "steps": 150, "eval_every": None, "batch_groups": 8}
    (+ "counterfactual": k, only when set: a what-if probe every k-th step, hbsim.counterfactual)
    (+ "policy_seed": s, only when set: the policy's seed where it differs from the env's, hb calibrate)

`resolve_config` fills every env and policy knob with its default, so that equal runs hash
equally whatever was spelled out. The env is built with `make_env(kind, seed=seed, **knobs)`,
the policy with `make(name, n_arms=len(adapter.harnesses), seed=seed, **knobs)`.
"""
from __future__ import annotations

import copy
from typing import Any, Callable

from policies import POLICIES, make

from hbsim.envs import ENVS, expand_preset, make_env
from hbsim.loop import RunResult, run
from policies.errors import UserError
from policies.validate import MAX_SEED, MAX_STEPS, check_int

#: top-level keys and their defaults (env and policy are resolved separately)
TOP_LEVEL = {"seed": 0, "steps": 150, "eval_every": None, "batch_groups": 8}
DEFAULT_ENV = "bernoulli"
DEFAULT_POLICY = "harnessbandit"


def _int(name: str, value: Any, low: int, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        extra = "None or " if allow_none else ""
        raise UserError(f"config {name}={value!r} is not allowed: expected {extra}an integer >= {low}")
    return value


def resolve_policy(policy: dict, n_arms: int) -> dict:
    """{"name", "label"?, **knobs} -> every knob of the policy filled in (validated by
    building the policy once)."""
    policy = dict(policy)
    name = policy.pop("name", DEFAULT_POLICY)
    label = policy.pop("label", None) or name
    if not isinstance(label, str):
        raise UserError(f"config policy.label={label!r} is not allowed: expected a string")
    built = make(name, n_arms=n_arms, seed=0, **policy)
    knobs = {k: v for k, v in built.config().items() if k not in ("n_arms", "seed")}
    return {"name": name, "label": label, **knobs}


def resolve_config(partial: dict | None = None, *,
                   resolve_env: bool | Callable[[dict], dict] = True) -> dict:
    """Fill every default of a partial run config; unknown keys, kinds, names or knobs and
    bad values raise ValueError. `resolve_env`: True resolves a synthetic env kind
    (`ENVS[kind].resolve_knobs`); a callable env -> resolved env resolves another kind
    (`real_runs.resolve_env` for real runs); False keeps the env section as given (it is
    already resolved). The resolved env must say `n_harnesses` for the policy."""
    partial = copy.deepcopy(partial or {})
    unknown = sorted(set(partial) - set(TOP_LEVEL) - {"env", "policy", "counterfactual", "policy_seed"})
    if unknown:
        raise UserError(f"config key {unknown[0]!r} is unknown; valid keys: env, policy, {', '.join(TOP_LEVEL)}, "
                        f"counterfactual, policy_seed")
    env = dict(partial.get("env") or {})
    if callable(resolve_env):
        env = resolve_env(env)
    elif resolve_env:
        env = expand_preset(env)
        kind = env.pop("kind", DEFAULT_ENV)
        env = {"kind": kind, **ENVS[kind].resolve_knobs(**env)}
    n_arms = env.get("n_harnesses")
    if not isinstance(n_arms, int):
        raise UserError(f"config env.n_harnesses={n_arms!r} is not allowed: expected an integer >= 1")
    cfg = {"env": env, "policy": resolve_policy(partial.get("policy") or {}, n_arms)}
    for key, default in TOP_LEVEL.items():
        value = partial.get(key, default)
        low = 0 if key in ("seed", "steps") else 1
        cfg[key] = _int(key, value, low, allow_none=key == "eval_every")
    if partial.get("counterfactual") is not None:      # only when set: other configs hash as before
        cfg["counterfactual"] = check_int("config counterfactual", partial["counterfactual"], 1, MAX_STEPS)
    if partial.get("policy_seed") is not None:         # likewise
        cfg["policy_seed"] = check_int("config policy_seed", partial["policy_seed"], 0, MAX_SEED)
    return cfg


def run_config(cfg: dict, progress: Callable[[int, int], None] | None = None,
               adapter_factory: Callable[[dict], Any] | None = None, *, state: dict | None = None,
               checkpoint: Callable[[Any], bool | None] | None = None) -> RunResult:
    """Run one resolved (or partial) config and return its RunResult: the one entry point
    of `hb sim`, grid cells and `hb real`.

    adapter_factory: cfg -> TrainingAdapter, replacing `make_env` (its env section must then
    be resolved already, e.g. by `real_runs.resolve_env`); state: a `Loop.state_dict()` to
    continue (a checkpoint); checkpoint: `Loop.run`'s hook, called after every step.
    """
    cfg = resolve_config(cfg, resolve_env=adapter_factory is None)
    if adapter_factory is None:
        env = dict(cfg["env"])
        adapter = make_env(env.pop("kind"), seed=cfg["seed"], **env)
    else:
        adapter = adapter_factory(cfg)
    knobs = {k: v for k, v in cfg["policy"].items() if k not in ("name", "label")}
    policy = make(cfg["policy"]["name"], n_arms=len(adapter.harnesses), seed=cfg.get("policy_seed", cfg["seed"]),
                  **knobs)
    return run(policy, adapter, cfg["steps"], label=cfg["policy"]["label"], seed=cfg["seed"],
               eval_every=cfg["eval_every"], config=cfg, progress=progress,
               batch_groups=cfg["batch_groups"], counterfactual=cfg.get("counterfactual"), state=state,
               checkpoint=checkpoint)


__all__ = ["POLICIES", "TOP_LEVEL", "resolve_config", "resolve_policy", "run_config"]
