"""Resolved run configs and `run_config` (docs/ARCHITECTURE.md), shared by `hb sim`, grid
cells and `hb real`:

    {"env": {"kind": "bernoulli", **env_knobs},
     "policy": {"name": "harnessbandit", "label": "harnessbandit", **policy_knobs},
     "seed": 3, "steps": 150, "eval_every": None, "batch_groups": 8}
    (+ "counterfactual": k, only when set: a what-if probe every k-th step, hbsim.counterfactual)
    (+ "policy_seed": s, only when set: the policy's seed where it differs from the env's, hb calibrate)
    (+ "eval_budget": "groups:500,1000", only when set: equal-cost evaluations, hbsim.run_knobs.parse_budget)

The top-level keys are the knobs of `hbsim.run_knobs.RUN_KNOBS`, the one table of the run
settings (with `seeds`, the seed count of commands that run many). `resolve_config` fills every env,
policy and run knob with its default, so that equal runs hash equally whatever was
spelled out; it validates each section once (the env's table, the run table, and the
policy by building it once). The env is built with `make_env(kind, seed=seed, **knobs)`.
"""
from __future__ import annotations

import copy
from typing import Any, Callable

from policies import POLICIES, Policy, make
from policies.errors import UserError
from policies.validate import MAX_RUN_EVAL_ROWS, check_name, comma_items

from hbsim.envs import ENVS, expand_preset, make_env
from hbsim.loop import RunResult, attach_ground_truth, run
from hbsim.contract.records import canonical_json
from hbsim.run_knobs import CONFIG_KNOBS, OPTIONAL_RUN_KEYS, budget_milestones
from hbsim.sampling import when_set

DEFAULT_ENV = "bernoulli"
DEFAULT_POLICY = "harnessbandit"


def resolve_synthetic(env: dict) -> dict:
    """A synthetic env section (kind or preset + knobs) -> {"kind", **every knob} (the group
    filter's knobs only when set: `hbsim.sampling.when_set`)."""
    env = expand_preset(env)
    kind = env.pop("kind", DEFAULT_ENV)
    return when_set({"kind": kind, **ENVS[kind].resolve_knobs(**env)})


def build_policy(policy: dict, n_arms: int, seed: int = 0) -> tuple[Policy, dict]:
    """{"name", "label"?, **knobs} -> (the policy, built once: that is its validation, and its
    resolved section {"name", "label", **every knob})."""
    policy = dict(policy)
    name = policy.pop("name", DEFAULT_POLICY)
    label = policy.pop("label", None)
    label = check_name("policy.label", name if label is None else label)   # a folder name of hb sim / study
    built = make(name, n_arms=n_arms, seed=seed, **policy)
    knobs = {k: v for k, v in built.config().items() if k not in ("n_arms", "seed")}
    return built, {"name": name, "label": label, **knobs}


def resolve_policy(policy: dict, n_arms: int) -> dict:
    """{"name", "label"?, **knobs} -> every knob of the policy filled in."""
    return build_policy(policy, n_arms)[1]


def resolve_run(partial: dict) -> dict:
    """The top-level knobs of a partial config (env and policy aside), each checked by
    CONFIG_KNOBS, defaults filled; `counterfactual`, `policy_seed` and `eval_budget` only when
    set (other configs hash as before they existed)."""
    top = CONFIG_KNOBS.resolve({k: v for k, v in partial.items() if k not in ("env", "policy")})
    return {k: v for k, v in top.items() if v is not None or k not in OPTIONAL_RUN_KEYS}


def check_run(env: dict, run: dict) -> None:
    """A run's knobs against its resolved synthetic env, before it starts (plan_cells and
    resolve_config call it): its eval table (rows per evaluation x evaluations: every
    `eval_every` steps, the final step, each `eval_budget` milestone) at most
    MAX_RUN_EVAL_ROWS rows, and a `tokens` budget only on a world whose token cost is not zero
    (`env.group_tokens` unset: no milestone would ever be reached); UserError, one line."""
    if env.get("kind") not in ENVS:
        return
    unit, milestones = budget_milestones(run.get("eval_budget"))
    evaluations = run["steps"] // run["eval_every"] + 1 if run.get("eval_every") else 1
    rows = ENVS[env["kind"]].eval_rows(env) * (evaluations + len(milestones))
    if rows > MAX_RUN_EVAL_ROWS:
        raise UserError(f"steps={run['steps']}, eval_every={run.get('eval_every')} and eval_budget="
                        f"{run.get('eval_budget')!r} are not allowed with this env: the run's eval table would have "
                        f"{rows} rows ({evaluations + len(milestones)} evaluations x "
                        f"{ENVS[env['kind']].eval_rows(env)} rows), allowed at most {MAX_RUN_EVAL_ROWS}; evaluate "
                        "less often (a larger eval_every) or on fewer tasks or attempts")
    if unit != "tokens":
        return
    if not any(float(x) > 0 for x in comma_items(str(env.get("group_tokens") or ""))):
        raise UserError(f"eval_budget={run['eval_budget']!r} is not allowed on this world: its token cost is zero "
                        "(env.group_tokens is unset or 0), so no tokens milestone is ever reached; set "
                        "env.group_tokens (e.g. \"100,400\", per harness) or use a groups or seconds budget")


def warmup_line(configs) -> str | None:
    """One line naming the policies that are round robin for the whole run: those whose
    warm-up (`Policy.warmup_steps`, built from each resolved config's own knobs and its env's
    `n_harnesses`) is at least the run's steps; None when every run leaves its warm-up.
    `hb sim`, `hb grid run` and `hb stress` print it once every check passed, as the runs start
    (`ablations.runner.ProgressBar`'s note)."""
    seen, groups = set(), {}
    for cfg in configs:
        pol, n_arms, steps = cfg["policy"], cfg["env"].get("n_harnesses"), cfg["steps"]
        key = (canonical_json(pol), n_arms, steps)
        if key in seen or not isinstance(n_arms, int):
            continue
        seen.add(key)
        warm = build_policy(pol, n_arms)[0].warmup_steps()
        if warm >= steps > 0:
            labels = groups.setdefault((warm, pol.get("warmup_rounds"), n_arms, steps), [])
            labels += [pol["label"]] if pol["label"] not in labels else []
    if not groups:
        return None
    count = len({label for labels in groups.values() for label in labels})
    said = "; ".join(
        (f"warm-up {warm} steps (warmup_rounds {rounds} x {h} harnesses) >= {steps} steps: " if rounds is not None
         else f"warm-up {warm} steps >= {steps} steps: ") + ", ".join(labels[:12])
        + (f" and {len(labels) - 12} more" if len(labels) > 12 else "")
        for (warm, rounds, h, steps), labels in groups.items())
    return (f"{count} polic{'y is' if count == 1 else 'ies are'} round robin for the whole run ({said}); run more "
            "steps or lower policy.warmup_rounds")


def _resolve(partial: dict | None, resolve_env: bool | Callable[[dict], dict]) -> tuple[dict, Policy]:
    partial = copy.deepcopy(partial or {})
    top = resolve_run(partial)
    env = dict(partial.get("env") or {})
    if callable(resolve_env):
        env = resolve_env(env)
    elif resolve_env:
        env = resolve_synthetic(env)
    check_run(env, top)
    n_arms = env.get("n_harnesses")
    if not isinstance(n_arms, int):
        raise UserError(f"env.n_harnesses={n_arms!r} is not allowed: expected an integer >= 1")
    policy, section = build_policy(partial.get("policy") or {}, n_arms, top.get("policy_seed", top["seed"]))
    if callable(resolve_env):     # a real run's env: no ground truth, so no clairvoyant policy (one line)
        attach_ground_truth(policy, None)
    return {"env": env, "policy": section, **top}, policy


def resolve_config(partial: dict | None = None, *,
                   resolve_env: bool | Callable[[dict], dict] = True) -> dict:
    """Fill every default of a partial run config; unknown keys, kinds, names or knobs and
    bad values raise UserError. `resolve_env`: True resolves a synthetic env kind
    (`resolve_synthetic`); a callable env -> resolved env resolves another kind
    (`real_runs.resolve_env` for real runs); False keeps the env section as given (it is
    already resolved). The resolved env must say `n_harnesses` for the policy."""
    return _resolve(partial, resolve_env)[0]


def run_config(cfg: dict, progress: Callable[[int, int], None] | None = None,
               adapter_factory: Callable[[dict], Any] | None = None, *, state: dict | None = None,
               checkpoint: Callable[[Any], bool | None] | None = None) -> RunResult:
    """Run one resolved (or partial) config and return its RunResult: the one entry point
    of `hb sim`, grid cells and `hb real`.

    adapter_factory: cfg -> TrainingAdapter, replacing `make_env` (its env section must then
    be resolved already, e.g. by `real_runs.resolve_env`); state: a `Loop.state_dict()` to
    continue (a checkpoint); checkpoint: `Loop.run`'s hook, called after every step.
    """
    cfg, policy = _resolve(cfg, resolve_env=adapter_factory is None)
    if adapter_factory is None:
        env = dict(cfg["env"])
        adapter = make_env(env.pop("kind"), seed=cfg["seed"], **env)
    else:
        adapter = adapter_factory(cfg)
    return run(policy, adapter, cfg["steps"], label=cfg["policy"]["label"], seed=cfg["seed"],
               eval_every=cfg["eval_every"], config=cfg, progress=progress,
               batch_groups=cfg["batch_groups"], counterfactual=cfg.get("counterfactual"), state=state,
               checkpoint=checkpoint, eval_budget=cfg.get("eval_budget"))


__all__ = ["POLICIES", "build_policy", "resolve_config", "resolve_policy",
           "resolve_run", "resolve_synthetic", "run_config"]
