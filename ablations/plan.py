"""The cells of a grid (the lower half of `ablations.spec`, which reads grid files): the
validated `GridSpec`, its `Cell`s and `plan_cells`, which checks every knob against its
table (each env kind's and each policy's `KNOBS`) and resolves each cell's config.

Cells = policy variants x sweep points x seeds (of a grid of parts: its parts' cells, in
order). A cell's id is the hash of its fully resolved config (`hbsim.resolve_config` fills
every default), so reordering the file, or spelling a default out, never changes an id. The
`policy` label of a cell is unique per variant AND sweep point (`harnessbandit[window=16]`,
or the user's label with the same suffix) so that reports can pair variants. Each distinct
env is built once and each policy variant once per sweep point (the cross-knob checks).
`ablations.tune` plans its two phases with these; `ablations.spec` parses the file into a
GridSpec and plans it.
"""
from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from hbsim.contract import PART
from hbsim.contract.labels import format_value, part_suffix, variant_label
from hbsim.envs import ENVS, make_env
from hbsim.experiment import check_run, resolve_policy, resolve_run
from hbsim.contract.records import canonical_json, config_hash
from policies import POLICIES
from policies.errors import UserError
from policies.knobs import Knob, Knobs

REAL_KIND = "real"
#: the most cells one grid may plan (policies x sweep points x seeds, summed over its parts and over
#: both phases of a [tune]; the runs of `hb scenarios --check`); checked before planning (`check_cells`)
MAX_CELLS = 100_000


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
    eval_budget: str | None = None        # equal-cost evaluations (hbsim.run_knobs.parse_budget)
    tune: Any = None                      # ablations.tune.TuneSpec of a [tune] table
    parts: list["GridSpec"] = field(default_factory=list)   # a grid of parts: its parts, in file order
    part: str | None = None               # the part's name (label suffix [part=NAME], sweep part = NAME)
    scenario: dict | None = None          # the record of the scenario its env came from (`[env] scenario`)
    _cells: list[Cell] | None = None

    def cells(self) -> list[Cell]:
        if self._cells is None:
            self._cells = plan_cells(self)
        return list(self._cells)


def key_errors(path: str):
    """err(key, problem): raise the SpecError naming the grid file and the key."""
    def err(key: str, problem: str):
        raise SpecError(f"{path}: key {key!r}: {problem}")
    return err


def checked(err, key: str, table: Knobs, knob: str, value: Any, name: str | None = None, where: str = ""):
    """`table.check(knob, value)` (the value named `name` if given); its UserError, which
    names the knob, becomes the grid's error at `key`, after `where`."""
    try:
        return table.check(knob, value) if name is None else table[knob].check(name, value)
    except UserError as exc:
        err(key, f"{where}{exc}")


# -- registries ----------------------------------------------------------------------
def env_kinds() -> list[str]:
    return [*ENVS, REAL_KIND]


def env_table(kind: str) -> Knobs:
    """The knob table of an env kind; `real` has no table of values here (real_runs resolves
    them), only its names. UserError listing the valid kinds if unknown."""
    if kind == REAL_KIND:
        import real_runs
        unchecked = Knob(None, "checked by real_runs.resolve_env", parse=lambda name, value: value)
        return Knobs(dict.fromkeys(real_runs.adapter_knobs(), unchecked), scope="env", owner="env kind 'real'")
    if kind not in ENVS:
        raise UserError(f"unknown env kind {kind!r}; valid kinds: {', '.join(env_kinds())}")
    return ENVS[kind].KNOBS


# -- size ----------------------------------------------------------------------------
def check_cells(count: int, where: str, what: str = "cells (policies x sweep points x seeds)",
                fewer: str = "seeds, policies or sweep points (or several grids)") -> None:
    """The one size bound of everything that plans many runs: at most MAX_CELLS; UserError
    naming `where` (a grid file, `hb stress`, `hb scenarios --check`, ...) and what to use
    fewer of otherwise."""
    if count > MAX_CELLS:
        raise SpecError(f"{where}: plans up to {count} {what}: allowed at most {MAX_CELLS}; use fewer {fewer}")


def cell_bound(spec: GridSpec) -> int:
    """The most cells `spec` can plan, from the lengths of its lists alone (before any value is
    checked or point listed): policies x sweep points x seeds, summed over a grid's parts; a
    [tune] grid adds its tuning phase (designs x tune points x tuning seeds)."""
    if spec.parts:
        return sum(cell_bound(part) for part in spec.parts)
    def points(table: dict) -> int:
        return math.prod(len(v) if isinstance(v, list) else 1 for v in table.values())
    test = len(spec.policies) * len(spec.seeds) * points(spec.sweep)
    tune = len(spec.policies) * len(spec.tune.seeds) * points(spec.tune.knobs) if spec.tune else 0
    return test + tune


# -- cells ---------------------------------------------------------------------------
def seed_major(cells: list[Cell]) -> list[Cell]:
    """`cells` in the order a grid runs them: every cell of the first seed (in file order),
    then of the next seed, ... (seeds in their order of first appearance), so a grid stopped
    early holds whole seeds of every design, which a paired report can compare."""
    rank = {seed: i for i, seed in enumerate(dict.fromkeys(c.seed for c in cells))}
    return sorted(cells, key=lambda c: rank[c.seed])


def plan_cells(spec: GridSpec) -> list[Cell]:
    """Policy variants x sweep points x seeds, validated, with stable ids (file order); of a
    grid of parts, its parts' cells. The size bound (`check_cells`) comes first."""
    check_cells(cell_bound(spec), spec.path)
    if spec.parts:
        return [c for part in spec.parts for c in part.cells()]
    err = key_errors(spec.path)
    kind, env_base, table = _check_env(err, spec.env)
    sweep_keys = _check_sweep(err, spec, table)
    cells, labels, envs = [], {}, {}
    points = list(itertools.product(*(spec.sweep[k] for k in sweep_keys))) if sweep_keys else [()]
    top = {k: v for k, v in {"steps": spec.steps, "eval_every": spec.eval_every, "batch_groups": spec.batch_groups,
                             "counterfactual": spec.counterfactual, "eval_budget": spec.eval_budget}.items()
           if v is not None}
    for i, pol in enumerate(spec.policies):
        name, base_label, knobs, ptable = _check_policy(err, i, pol, sweep_keys)
        seen_points = set()
        for point in points:
            env_over, pol_over, suffix = _apply_point(sweep_keys, point, ptable)
            if suffix in seen_points:  # a policy.* key this policy lacks: same cell as before
                continue
            seen_points.add(suffix)
            label = variant_label(base_label, name, knobs, suffix) + (part_suffix(spec.part) if spec.part else "")
            where = f"policies[{i}]" + (f" at sweep point {suffix}" if suffix else "")
            if label in labels:
                err(f"policies[{i}].label", f"label {label!r} is used twice (also by {labels[label]}); "
                    "give each variant a distinct label")
            labels[label] = where
            env_cfg = {"kind": kind, **env_base, **env_over}
            env_key = canonical_json(env_cfg)
            if env_key not in envs:
                envs[env_key] = _resolve_env(err, suffix, env_cfg)
                try:
                    check_run(envs[env_key], top)
                except UserError as exc:
                    key = "eval_budget" if str(exc).startswith("eval_budget") else "eval_every"
                    err(key, f"{'at sweep point ' + suffix + ': ' if suffix else ''}{exc}")
            env = envs[env_key]
            for knob, value in pol_over.items():
                checked(err, f"sweep.policy.{knob}", ptable, knob, value, where=f"{where}: ")
            policy = _resolve_policy(err, i, where, {"name": name, "label": label, **knobs, **pol_over},
                                     env["n_harnesses"])
            sweep_values = {k: v for k, v in zip(sweep_keys, point)
                            if k.startswith("env.") or k[len("policy."):] in ptable}
            if spec.part:
                sweep_values[PART] = spec.part
            for seed in spec.seeds:
                config = {"env": copy.deepcopy(env), "policy": copy.deepcopy(policy),
                          **resolve_run({**top, "seed": seed})}
                cells.append(Cell(id=config_hash(config), config=config, label=label, seed=seed,
                                  sweep=sweep_values))
    assert len({c.id for c in cells}) == len(cells), "labels are unique, so the cells' configs are"
    return cells


def _check_env(err, env: dict) -> tuple[str, dict, Knobs]:
    kind = env.get("kind")
    if not isinstance(kind, str):
        err("env.kind", f"{kind!r} is not allowed: expected one of {', '.join(env_kinds())}")
    try:
        table = env_table(kind)
    except UserError as exc:
        err("env.kind", str(exc))
    knobs = {k: v for k, v in env.items() if k != "kind"}
    for k, v in knobs.items():
        checked(err, f"env.{k}", table, k, v)
    return kind, knobs, table


def _check_policy(err, i: int, pol: dict, sweep_keys: list[str]):
    name = pol.get("name")
    if name not in POLICIES:
        err(f"policies[{i}].name", f"unknown policy {name!r}; valid names: {', '.join(POLICIES.names())}")
    label = pol.get("label")
    if label is not None and (not isinstance(label, str) or not label.strip()):
        err(f"policies[{i}].label", f"{label!r} is not allowed: expected a non-empty string")
    table = POLICIES[name].KNOBS
    knobs = {k: v for k, v in pol.items() if k not in ("name", "label")}
    for k, v in knobs.items():
        checked(err, f"policies[{i}].{k}", table, k, v)
        if f"policy.{k}" in sweep_keys:
            err(f"policies[{i}].{k}", f"is also swept by sweep key 'policy.{k}'; set it in one place")
    return name, label, knobs, table


def _check_sweep(err, spec: GridSpec, etable: Knobs) -> list[str]:
    keys = sorted(spec.sweep)
    for key in keys:
        values = spec.sweep[key]
        if not isinstance(values, list) or not values:
            err(f"sweep.{key}", f"{values!r} is not allowed: expected a non-empty list of values")
        if len({canonical_json(v) for v in values}) != len(values):
            err(f"sweep.{key}", f"{values!r} is not allowed: values must be distinct")
        scope, _, knob = key.partition(".")
        if scope == "env":
            for value in values:
                checked(err, f"sweep.{key}", etable, knob, value)
            if knob in spec.env:
                err(f"sweep.{key}", f"env.{knob} is also set in [env]; set it in one place")
        elif scope == "policy":
            names = [p.get("name") for p in spec.policies]
            if not any(n in POLICIES and knob in POLICIES[n].KNOBS for n in names):
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


def _resolve_env(err, suffix: str, env: dict) -> dict:
    """The resolved env section, validated by building the env once (a real env only
    resolves its config: building it would load a model). A failure here is a cross-knob
    one (each value passed its table), so it names the [env] table."""
    try:
        if env["kind"] == REAL_KIND:
            import real_runs
            return real_runs.resolve_env(env)
        return make_env(env["kind"], seed=0, **{k: v for k, v in env.items() if k != "kind"}).config()
    except ValueError as exc:
        err("env", f"{'at sweep point ' + suffix + ': ' if suffix else ''}{_one_line(exc)}")


def _resolve_policy(err, i: int, where: str, policy: dict, n_arms: int) -> dict:
    """The resolved policy section, validated by building the policy once."""
    try:
        resolved = resolve_policy(policy, n_arms)
    except ValueError as exc:
        err(f"policies[{i}]", f"{where}: policy {policy['name']!r}: {_one_line(exc)}")
    # lr_scale = 1 and the knobs beyond the paper at their defaults are left out of config() on
    # purpose (policies.base.LR_SCALE, Policy.QUIET_DEFAULTS)
    quiet = {"lr_scale": 1.0, **getattr(POLICIES.get(policy["name"]), "QUIET_DEFAULTS", {})}
    lost = sorted(k for k in set(policy) - set(resolved) if not (k in quiet and policy[k] == quiet[k]))
    if lost:  # a policy whose config() drops a knob would silently run with its default
        err(f"policies[{i}].{lost[0]}", f"policy {policy['name']!r} accepts knob {lost[0]!r} "
            "but does not report it in config(), so the cell would ignore it")
    return resolved


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
