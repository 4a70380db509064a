"""Grid files (TOML): parsing, validation and the cells of a grid.

A grid file describes an ablation once::

    name = "fusion-ablation"
    steps = 150
    seeds = 10                  # or an explicit list: seeds = [0, 1, 2]
    eval_every = 50             # optional
    batch_groups = 8            # optional
    counterfactual = 1          # optional: what-if probe every k-th step -> counterfactual.parquet
    plugins = ["my_policies"]   # optional: modules imported before planning and in workers

    [env]                       # hbsim.make_env kind and knobs ("real" -> real_runs)
    kind = "bernoulli"

    [[policies]]                # one table per policy variant: name, optional label, knobs
    name = "harnessbandit"

    [sweep]                     # optional cartesian product over env.* / policy.* knobs
    "policy.window" = [16, 32]

Cells = policy variants x sweep points x seeds. A cell's id is the hash of its fully
resolved config (`hbsim.resolve_config` fills every default), so reordering the file,
or spelling a default out, never changes an id. The `policy` label of a cell is unique
per variant AND sweep point (`harnessbandit[window=16]`, or the user's label with the
same suffix) so that reports can pair variants.

Every problem is a `SpecError` (a UserError) whose message names the file, the key
and what is allowed; validation builds each distinct env and policy once.
"""
from __future__ import annotations

import importlib
import itertools
import json
import os
import re
try:
    import tomllib
except ImportError:  # Python 3.10: the tomli backport (a dependency there)
    import tomli as tomllib
from dataclasses import dataclass, field
from typing import Any

from hbsim.records import canonical_json, config_hash
from policies.errors import UserError
from policies.validate import MAX_BATCH_GROUPS, MAX_SEEDS, MAX_STEPS

TOP_KEYS = ("name", "description", "steps", "seeds", "eval_every", "batch_groups", "plugins",
            "env", "policies", "sweep", "counterfactual")
REAL_KIND = "real"


class SpecError(UserError):
    """A bad grid file: one line naming file, key and problem."""


@dataclass(frozen=True)
class Cell:
    """One run of a grid.

    id: stable hash of the resolved config (= the run's config hash)
    config: the fully resolved run config (env, policy, seed, steps, eval_every, ...)
    label: the `policy` column of the cell's tables
    seed: the run's seed
    sweep: sweep key -> value for the keys that apply to this cell
    """

    id: str
    config: dict
    label: str
    seed: int
    sweep: dict = field(default_factory=dict)


@dataclass
class GridSpec:
    """A validated grid file. `cells()` lists its cells in file order."""

    path: str
    name: str
    steps: int
    seeds: list[int]
    eval_every: int | None
    batch_groups: int | None
    env: dict
    policies: list[dict]
    sweep: dict[str, list]
    plugins: list[str]
    raw: dict
    counterfactual: int | None = None     # what-if probe every k-th step (hbsim.counterfactual)
    _cells: list[Cell] | None = None

    def cells(self) -> list[Cell]:
        if self._cells is None:
            self._cells = plan_cells(self)
        return list(self._cells)


# -- parsing -------------------------------------------------------------------------
def load_spec(path: str | os.PathLike) -> GridSpec:
    """Read, parse and validate a grid file (plugins imported, every cell resolved)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise SpecError(f"{path}: grid file not found") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a directory, expected a grid TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: malformed TOML: {exc}") from None
    return parse_spec(raw, path)


def parse_spec(raw: dict, path: str = "<grid>") -> GridSpec:
    """Validate a parsed grid dict; see the module docstring for the format."""
    err = _Errors(path)
    unknown = sorted(set(raw) - set(TOP_KEYS))
    if unknown:
        err(unknown[0], f"unknown key; valid top-level keys: {', '.join(TOP_KEYS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        err("name", f"{name!r} is not allowed: expected a non-empty string")
    steps = _int(err, "steps", raw.get("steps"), low=1)
    seeds = _seeds(err, raw.get("seeds"))
    eval_every = None if raw.get("eval_every") is None else _int(err, "eval_every", raw["eval_every"], low=1)
    batch_groups = None if raw.get("batch_groups") is None else _int(err, "batch_groups", raw["batch_groups"], low=1,
                                                                      high=MAX_BATCH_GROUPS)
    counterfactual = None if raw.get("counterfactual") is None else _int(err, "counterfactual", raw["counterfactual"],
                                                                        low=1, high=MAX_STEPS)
    plugins = raw.get("plugins", [])
    if not isinstance(plugins, list) or not all(isinstance(p, str) and p for p in plugins):
        err("plugins", f"{plugins!r} is not allowed: expected a list of module names")
    import_plugins(plugins, err)
    env = raw.get("env")
    if not isinstance(env, dict):
        err("env", "missing or not a table: expected [env] with kind = \"...\"")
    policies = raw.get("policies")
    if not isinstance(policies, list) or not policies:
        err("policies", "the grid is empty: expected at least one [[policies]] table")
    for i, pol in enumerate(policies):
        if not isinstance(pol, dict):
            err(f"policies[{i}]", "is not a table: expected [[policies]] with name = \"...\"")
    sweep = raw.get("sweep", {})
    if not isinstance(sweep, dict):
        err("sweep", "is not a table: expected [sweep] with \"env.<knob>\" / \"policy.<knob>\" = [values]")
    spec = GridSpec(path=path, name=name, steps=steps, seeds=seeds, eval_every=eval_every,
                    batch_groups=batch_groups, env=dict(env), policies=[dict(p) for p in policies],
                    sweep={k: v for k, v in sweep.items()}, plugins=list(plugins), raw=raw,
                    counterfactual=counterfactual)
    spec._cells = plan_cells(spec)
    return spec


class _Errors:
    def __init__(self, path: str):
        self.path = path

    def __call__(self, key: str, problem: str):
        raise SpecError(f"{self.path}: key {key!r}: {problem}")


def _int(err, key: str, value: Any, low: int, high: int = MAX_STEPS) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        err(key, f"{value!r} is not allowed: expected an integer in [{low}, {high}]")
    return int(value)


def _seeds(err, value: Any) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= MAX_SEEDS:
            err("seeds", f"{value!r} is not allowed: expected a count in [1, {MAX_SEEDS}] or a list of seeds")
        return list(range(value))
    if isinstance(value, list) and value and all(isinstance(s, int) and not isinstance(s, bool)
                                                 and s >= 0 for s in value):
        if len(set(value)) != len(value):
            err("seeds", f"{value!r} is not allowed: seeds must be distinct")
        return list(value)
    err("seeds", f"{value!r} is not allowed: expected a count >= 1 or a non-empty list of integers >= 0")


def import_plugins(modules: list[str], err=None) -> None:
    """Import plugin modules (they may register extra policies or environments)."""
    for i, module in enumerate(modules):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            if err is None:
                raise
            err(f"plugins[{i}]", f"module {module!r} cannot be imported: {exc}")


# -- registries ----------------------------------------------------------------------
def policy_knobs(name: str) -> dict:
    from policies import POLICIES
    return dict(POLICIES[name].knobs())


def policy_names() -> list[str]:
    from policies import POLICIES
    return list(POLICIES)


def env_knobs(kind: str) -> dict:
    """Default knobs of an environment kind; ValueError listing valid kinds if unknown."""
    if kind == REAL_KIND:
        import real_runs
        return dict(real_runs.adapter_knobs())
    import hbsim
    kinds = env_kinds()
    if kind not in kinds:
        raise UserError(f"unknown env kind {kind!r}; valid kinds: {', '.join(kinds)}")
    return dict(hbsim.ENVS[kind].knobs())


def env_kinds() -> list[str]:
    import hbsim
    kinds = list(hbsim.ENVS)
    try:
        importlib.util.find_spec("real_runs")
        kinds.append(REAL_KIND)
    except (ImportError, ValueError):  # pragma: no cover - real_runs is part of the repo
        pass
    return kinds


# -- cells ---------------------------------------------------------------------------
def plan_cells(spec: GridSpec) -> list[Cell]:
    """Policy variants x sweep points x seeds, validated, with stable ids (file order)."""
    err = _Errors(spec.path)
    kind, env_base, env_defaults = _check_env(err, spec.env)
    sweep_keys = _check_sweep(err, spec, env_defaults)
    cells, labels, checked, swept = [], {}, set(), set(sweep_keys)
    points = list(itertools.product(*(spec.sweep[k] for k in sweep_keys))) if sweep_keys else [()]
    for i, pol in enumerate(spec.policies):
        name, base_label, knobs, defaults = _check_policy(err, i, pol, sweep_keys)
        seen_points = set()
        for point in points:
            env_over, pol_over, suffix = _apply_point(sweep_keys, point, defaults)
            if suffix in seen_points:  # a policy.* key this policy lacks: same cell as before
                continue
            seen_points.add(suffix)
            label = _label(base_label, name, knobs, suffix)
            where = f"policies[{i}]" + (f" at sweep point {suffix}" if suffix else "")
            if label in labels:
                err(f"policies[{i}].label", f"label {label!r} is used twice (also by {labels[label]}); "
                    "give each variant a distinct label")
            labels[label] = where
            env_cfg = {"kind": kind, **env_base, **env_over}
            pol_cfg = {"name": name, "label": label, **knobs, **pol_over}
            base = {"env": env_cfg, "policy": pol_cfg, "steps": spec.steps, "eval_every": spec.eval_every}
            if spec.batch_groups is not None:
                base["batch_groups"] = spec.batch_groups
            if spec.counterfactual is not None:
                base["counterfactual"] = spec.counterfactual
            key = canonical_json({"env": env_cfg, "policy": {**pol_cfg, "label": ""}})
            if key not in checked:
                _construct(err, where, base, swept)
                checked.add(key)
            sweep_values = {k: v for k, v in zip(sweep_keys, point)
                            if k.startswith("env.") or k[len("policy."):] in defaults}
            for seed in spec.seeds:
                config = _resolve(err, where, {**base, "seed": seed})
                cells.append(Cell(id=config_hash(config), config=config, label=label, seed=seed,
                                  sweep=sweep_values))
    ids = [c.id for c in cells]
    if len(set(ids)) != len(ids):  # pragma: no cover - labels are unique, so configs are
        err("policies", "two cells resolve to the same config")
    return cells


def _check_env(err, env: dict) -> tuple[str, dict, dict]:
    kind = env.get("kind")
    if not isinstance(kind, str):
        err("env.kind", f"{kind!r} is not allowed: expected one of {', '.join(env_kinds())}")
    try:
        defaults = env_knobs(kind)
    except ValueError as exc:
        err("env.kind", str(exc))
    knobs = {k: v for k, v in env.items() if k != "kind"}
    for k in knobs:
        if k not in defaults:
            err(f"env.{k}", f"unknown knob of env kind {kind!r}; valid knobs: {', '.join(sorted(defaults))}")
    return kind, knobs, defaults


def _check_policy(err, i: int, pol: dict, sweep_keys: list[str]):
    name = pol.get("name")
    valid = policy_names()
    if name not in valid:
        err(f"policies[{i}].name", f"unknown policy {name!r}; valid names: {', '.join(valid)}")
    label = pol.get("label")
    if label is not None and (not isinstance(label, str) or not label.strip()):
        err(f"policies[{i}].label", f"{label!r} is not allowed: expected a non-empty string")
    defaults = policy_knobs(name)
    knobs = {k: v for k, v in pol.items() if k not in ("name", "label")}
    for k in knobs:
        if k not in defaults:
            err(f"policies[{i}].{k}", f"policy {name!r} has no knob {k!r}; valid knobs: "
                f"{', '.join(sorted(defaults)) or '(none)'}")
        if f"policy.{k}" in sweep_keys:
            err(f"policies[{i}].{k}", f"is also swept by sweep key 'policy.{k}'; set it in one place")
    return name, label, knobs, defaults


def _check_sweep(err, spec: GridSpec, env_defaults: dict) -> list[str]:
    keys = sorted(spec.sweep)
    for key in keys:
        values = spec.sweep[key]
        if not isinstance(values, list) or not values:
            err(f"sweep.{key}", f"{values!r} is not allowed: expected a non-empty list of values")
        if len({canonical_json(v) for v in values}) != len(values):
            err(f"sweep.{key}", f"{values!r} is not allowed: values must be distinct")
        scope, _, knob = key.partition(".")
        if scope == "env":
            if knob not in env_defaults or knob == "kind":
                err(f"sweep.{key}", f"env kind {spec.env.get('kind')!r} has no knob {knob!r}; valid knobs: "
                    f"{', '.join(sorted(env_defaults))}")
            if knob in spec.env:
                err(f"sweep.{key}", f"env.{knob} is also set in [env]; set it in one place")
        elif scope == "policy":
            names = [p.get("name") for p in spec.policies]
            if not any(n in policy_names() and knob in policy_knobs(n) for n in names):
                err(f"sweep.{key}", f"no policy of the grid ({', '.join(map(str, names))}) has knob {knob!r}")
        else:
            err(f"sweep.{key}", "unknown sweep key: expected \"env.<knob>\" or \"policy.<knob>\"")
    return keys


def _apply_point(keys: list[str], point: tuple, pol_defaults: dict):
    env_over, pol_over, parts = {}, {}, []
    short = [k.partition(".")[2] for k in keys]
    for key, knob, value in zip(keys, short, point):
        shown = knob if short.count(knob) == 1 else key
        if key.startswith("env."):
            env_over[knob] = value
        elif knob in pol_defaults:
            pol_over[knob] = value
        else:
            continue
        parts.append(f"{shown}={format_value(value)}")
    return env_over, pol_over, ",".join(parts)


def format_value(value: Any) -> str:
    """How a sweep value reads in a label (numpy values as plain JSON)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), default=_json_default)


def _json_default(obj: Any):
    import numpy as np
    if isinstance(obj, (np.generic, np.ndarray)):
        return obj.tolist()
    raise TypeError(f"value {obj!r} of type {type(obj).__name__} is not JSON serialisable")


def _label(base: str | None, name: str, knobs: dict, suffix: str) -> str:
    if base is None:
        base = name
        if knobs:
            base += "[" + ",".join(f"{k}={format_value(knobs[k])}" for k in sorted(knobs)) + "]"
    return f"{base}[{suffix}]" if suffix else base


def _construct(err, where: str, partial: dict, swept: set[str]) -> None:
    """Build the env and the policy once, so a bad value fails at plan time.

    swept: the "env.<knob>" / "policy.<knob>" keys whose values came from [sweep]; an error
    about one of them names the sweep key instead of the table.
    """
    import hbsim
    env = partial["env"]
    pol = partial["policy"]
    knobs = {k: v for k, v in pol.items() if k not in ("name", "label")}
    try:
        if env["kind"] == REAL_KIND:  # building a real adapter loads a model: validate its config only
            import real_runs
            real_runs.resolve(**{k: v for k, v in env.items() if k not in ("kind", "n_harnesses")})
            n_arms = _real_arms(env)
        else:
            adapter = hbsim.make_env(env["kind"], seed=0, **{k: v for k, v in env.items() if k != "kind"})
            n_arms = len(adapter.harnesses)
    except (ValueError, TypeError) as exc:
        at = where.partition(" ")[2]  # "at sweep point ..." or ""
        err(_culprit(exc, "env", env, swept, "env"), f"{at + ': ' if at else ''}{_one_line(exc)}")
    try:
        from policies import make
        make(pol["name"], n_arms=n_arms, seed=0, **knobs)
    except (ValueError, TypeError) as exc:
        table = where.split(" ")[0]
        err(_culprit(exc, "policy", knobs, swept, table), f"{where}: policy {pol['name']!r}: {_one_line(exc)}")


def _culprit(exc: BaseException, scope: str, knobs: dict, swept: set[str], table: str) -> str:
    """The key a construction error is about: `table.knob`, `sweep.scope.knob`, or `table`."""
    text = str(exc)
    for knob in sorted(knobs, key=len, reverse=True):
        if re.search(rf"(?<![\w.]){re.escape(knob)}\s*=", text) or f"{knob!r}" in text:
            return f"sweep.{scope}.{knob}" if f"{scope}.{knob}" in swept else f"{table}.{knob}"
    return table


def _real_arms(env: dict) -> int:
    knobs = {**env_knobs(REAL_KIND), **{k: v for k, v in env.items() if k != "kind"}}
    harnesses = knobs.get("harnesses")
    if isinstance(harnesses, (list, tuple)):
        return len(harnesses)
    return int(knobs.get("n_harnesses", 2))


def _resolve(err, where: str, partial: dict) -> dict:
    import hbsim
    try:
        if partial["env"]["kind"] == REAL_KIND:  # real_runs resolves its own knobs (presets included)
            import real_runs
            return hbsim.resolve_config(partial, resolve_env=real_runs.resolve_env)
        resolved = hbsim.resolve_config(partial)
    except (ValueError, TypeError) as exc:
        err(where.split(" ")[0], _one_line(exc))
    lost = sorted(set(partial["policy"]) - set(resolved["policy"]))
    if lost:  # a policy whose config() drops a knob would silently run with its default
        err(f"{where.split(' ')[0]}.{lost[0]}", f"policy {partial['policy']['name']!r} accepts knob {lost[0]!r} "
            "but does not report it in config(), so the cell would ignore it")
    return resolved


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
