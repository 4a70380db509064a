"""Grid files (TOML): parsing, validation and the cells of a grid.

A grid file describes an ablation once::

    name = "fusion-ablation"
    steps = 150
    seeds = 10                  # or an explicit list: seeds = [0, 1, 2]
    eval_every = 50             # optional
    batch_groups = 8            # optional
    counterfactual = 1          # optional: what-if probe every k-th step -> counterfactual.parquet
    [tune]                      # optional: tune per design on other seeds, then test (ablations.tune)
    eval_budget = "groups:500,1000"   # optional: also evaluate at these cumulative costs (hb report --budget)
    plugins = ["my_policies"]   # optional: modules imported before planning and in workers

    [env]                       # hbsim.make_env kind and knobs ("real" -> real_runs)
    kind = "bernoulli"          # or: scenario = "trap" / "my_scenario.toml" (below)

    [[policies]]                # one table per policy variant: name, optional label, knobs
    name = "harnessbandit"

    [sweep]                     # optional cartesian product over env.* / policy.* knobs
    "policy.window" = [16, 32]

A grid of PARTS holds several such grids in one folder (`hb stress`: one part per
scenario), each part with its own env, policies, steps, ...; a top-level key other than
name, description, plugins and parts is every part's default::

    name = "stress"
    seeds = 4                   # the parts' default
    [[parts]]
    name = "trap"               # unique; the cells' labels end in [part=trap], their
    steps = 100                 # sweep (and the collected tables) get part = "trap"
    env = {kind = "bernoulli"}
    policies = [{name = "uniform"}, {name = "harnessbandit"}]

`[env] scenario = "NAME"` (a shipped scenario) or `"PATH.toml"` (a scenario file; a relative
path is relative to the folder of the grid file, for a grid built in memory to the current
folder) takes the scenario's env: its knobs are the defaults of the [env] table's own, and
its steps, seeds and batch_groups those of the grid (or part) where neither it nor the
grid's defaults set them (`hbsim.scenarios.get` reads and checks the file). The grid is
recorded (grid.json) with the scenario's content in place of the reference, and each cell's
run.json names the scenario's file and sha256 (`scenario`).

Cells = policy variants x sweep points x seeds (of a grid of parts: its parts' cells, in order). A cell's id is the hash of its fully
resolved config (`hbsim.resolve_config` fills every default), so reordering the file,
or spelling a default out, never changes an id. The `policy` label of a cell is unique
per variant AND sweep point (`harnessbandit[window=16]`, or the user's label with the
same suffix) so that reports can pair variants.

Every problem is a `SpecError` (a UserError) whose message names the file, the key
and what is allowed. Values are checked by the knob tables (the run's `RUN_KNOBS`, each
env kind's and each policy's `KNOBS`), which name the key themselves; then each distinct
env is built once and each policy variant once per sweep point (the cross-knob checks).
"""
from __future__ import annotations

import copy
import itertools
import math
import os
try:
    import tomllib
except ImportError:  # Python 3.10: the tomli backport (a dependency there)
    import tomli as tomllib
from dataclasses import dataclass, field
from typing import Any

from hbsim import scenarios
from hbsim.contract import PART, part_suffix
from hbsim.envs import ENVS, make_env
from hbsim.experiment import RUN_KNOBS, resolve_policy, resolve_run
from hbsim.records import canonical_json, config_hash
from policies import POLICIES
from policies.errors import UserError
from policies.knobs import Knob, Knobs
from policies.registry import load_plugins
from policies.validate import MAX_SEEDS

TOP_KEYS = ("name", "description", "steps", "seeds", "eval_every", "batch_groups", "plugins",
            "env", "policies", "sweep", "counterfactual", "eval_budget", "tune", "parts")
#: the keys of a grid of parts that are not its parts' defaults
OWN_KEYS = ("name", "description", "plugins", "parts")
REAL_KIND = "real"
#: the most cells one grid may plan (policies x sweep points x seeds); checked before planning
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
    eval_budget: str | None = None        # equal-cost evaluations (hbsim.loop.EVAL_BUDGET)
    tune: Any = None                      # ablations.tune.TuneSpec of a [tune] table
    parts: list["GridSpec"] = field(default_factory=list)   # a grid of parts: its parts, in file order
    part: str | None = None               # the part's name (label suffix [part=NAME], sweep part = NAME)
    scenario: dict | None = None          # the record of the scenario its env came from (`[env] scenario`)
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
    except (UnicodeDecodeError, OSError) as exc:    # not UTF-8; unreadable
        raise SpecError(f"{path}: cannot read the grid file: {str(exc)[:200]}") from None
    return parse_spec(raw, path, folder=os.path.dirname(os.path.abspath(path)))


def parse_spec(raw: dict, path: str = "<grid>", part: str | None = None,
               folder: str | os.PathLike | None = None) -> GridSpec:
    """Validate a parsed grid dict; see the module docstring for the format (`folder`: where
    a relative `[env] scenario` path starts, default the current folder)."""
    err = _errors(path)
    unknown = sorted(set(raw) - set(TOP_KEYS))
    if unknown:
        err(unknown[0], f"unknown key; valid top-level keys: {', '.join(TOP_KEYS)}")
    if "parts" in raw:
        if part is not None:
            err("parts", "a part cannot have parts of its own")
        return _parse_parts(raw, path, err, folder)
    raw, scenario = _with_scenario(err, raw, {}, folder)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        err("name", f"{name!r} is not allowed: expected a non-empty string")
    steps = _run_knob(err, "steps", raw.get("steps"))
    seeds = _seeds(err, raw.get("seeds"))
    eval_every, counterfactual, eval_budget = (_run_knob(err, key, raw.get(key))
                                               for key in ("eval_every", "counterfactual", "eval_budget"))
    batch_groups = None if raw.get("batch_groups") is None else _run_knob(err, "batch_groups", raw["batch_groups"])
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
                    sweep=dict(sweep), plugins=list(plugins), raw=raw,
                    counterfactual=counterfactual, eval_budget=eval_budget, part=part, scenario=scenario)
    from ablations import tune       # imports this module
    spec.tune = tune.parse_tune(raw.get("tune"), path, seeds, raw)
    spec._cells = tune.tuning_spec(spec).cells() if spec.tune else plan_cells(spec)
    return spec


def _parse_parts(raw: dict, path: str, err, folder) -> GridSpec:
    """A grid of parts (module docstring): each part parsed as a grid of its own, with the
    top-level defaults, its cells labelled [part=NAME]."""
    parts, name = raw["parts"], raw.get("name")
    if not isinstance(name, str) or not name.strip():
        err("name", f"{name!r} is not allowed: expected a non-empty string")
    if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
        err("parts", f"{parts!r} is not allowed: expected a non-empty list of tables ([[parts]])")
    raw, top_scenario = _with_scenario(err, raw, {}, folder)      # the parts' default env may name one
    defaults = {k: v for k, v in raw.items() if k not in OWN_KEYS}
    specs, seen, expanded = [], set(), []
    for i, part in enumerate(parts):
        pname = part.get("name")
        if not isinstance(pname, str) or not pname.strip() or any(c in pname for c in "[],=/"):
            err(f"parts[{i}].name", f"{pname!r} is not allowed: expected a non-empty string without [],=/")
        if pname in seen:
            err(f"parts[{i}].name", f"part {pname!r} is named twice; give each part a distinct name")
        bad = sorted(set(part) & set(OWN_KEYS) - {"name"})
        if bad:
            err(f"parts[{i}].{bad[0]}", "is a key of the whole grid, not of a part")
        seen.add(pname)
        where = f"{path} parts[{i}] ({pname})"
        part, scenario = _with_scenario(_errors(where), part, defaults, folder)
        expanded.append(part)
        sub = {**defaults, **part, "name": f"{name}/{pname}", "plugins": raw.get("plugins", [])}
        spec = parse_spec(sub, where, part=pname)
        spec.scenario = scenario if "env" in part else top_scenario
        specs.append(spec)
    raw = {**raw, "parts": expanded}
    spec = GridSpec(path=path, name=name, steps=specs[0].steps, seeds=specs[0].seeds, eval_every=None,
                    batch_groups=None, env={}, policies=[], sweep={}, plugins=list(raw.get("plugins", [])),
                    raw=raw, parts=specs)
    cells = spec.cells()
    assert len({c.id for c in cells}) == len(cells), "labels end in the part's name, so the cells' configs differ"
    return spec


def _with_scenario(err, table: dict, inherited: dict, folder) -> tuple[dict, dict | None]:
    """A grid's (or part's) table whose [env] names a scenario -> (the table with the
    scenario's env under the [env] table's own knobs, and its steps, seeds and batch_groups
    where neither the table nor `inherited` sets them; the scenario's record). Other tables
    come back as they are, with None."""
    env = table.get("env")
    if not isinstance(env, dict) or "scenario" not in env:
        return table, None
    ref = env["scenario"]
    try:
        sc = scenarios.get(ref, folder)
    except UserError as exc:
        err("env.scenario", str(exc))
    own = {k: v for k, v in env.items() if k != "scenario"}
    if own.get("kind", sc.env["kind"]) != sc.env["kind"]:
        err("env.kind", f"{own['kind']!r} contradicts scenario {sc.name!r} (kind {sc.env['kind']!r}): leave kind "
                        "out, the scenario names its env")
    filled = {k: v for k, v in {**sc.run(), "seeds": sc.seeds}.items() if k not in table and k not in inherited}
    return {**table, **filled, "env": {**sc.env, **own}}, sc.record()


def _errors(path: str):
    """err(key, problem): raise the SpecError naming the grid file and the key."""
    def err(key: str, problem: str):
        raise SpecError(f"{path}: key {key!r}: {problem}")
    return err


def _checked(err, key: str, table: Knobs, knob: str, value: Any, name: str | None = None, where: str = ""):
    """`table.check(knob, value)` (the value named `name` if given); its UserError, which
    names the knob, becomes the grid's error at `key`, after `where`."""
    try:
        return table.check(knob, value) if name is None else table[knob].check(name, value)
    except UserError as exc:
        err(key, f"{where}{exc}")


def _run_knob(err, key: str, value: Any):
    return _checked(err, key, RUN_KNOBS, key, value)


def _seeds(err, value: Any) -> list[int]:
    """A count (`seeds` of RUN_KNOBS) or a non-empty list of at most MAX_SEEDS distinct
    seeds (each a `seed`: 0 <= seed < 2^32)."""
    if not isinstance(value, list):
        return list(range(_run_knob(err, "seeds", value)))
    if len(value) > MAX_SEEDS:
        err("seeds", f"a list of {len(value)} seeds is not allowed: expected at most {MAX_SEEDS}")
    if not value or len(set(map(repr, value))) != len(value):
        err("seeds", f"{value!r} is not allowed: expected a count or a non-empty list of distinct seeds")
    return [_checked(err, "seeds", RUN_KNOBS, "seed", s, f"seeds[{i}]") for i, s in enumerate(value)]


def import_plugins(modules: list[str], err) -> None:
    """Load the grid's plugin modules (they register extra policies or environments) through
    the one loader, `policies.registry.load_plugins`; its UserError names `plugins[i]`."""
    for i, module in enumerate(modules):
        try:
            load_plugins([module])
        except UserError as exc:
            err(f"plugins[{i}]", str(exc))


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


# -- cells ---------------------------------------------------------------------------
def plan_cells(spec: GridSpec) -> list[Cell]:
    """Policy variants x sweep points x seeds, validated, with stable ids (file order); of a
    grid of parts, its parts' cells."""
    if spec.parts:
        return [c for part in spec.parts for c in part.cells()]
    err = _errors(spec.path)
    kind, env_base, table = _check_env(err, spec.env)
    bound = len(spec.policies) * len(spec.seeds) * math.prod(len(v) if isinstance(v, list) else 1
                                                             for v in spec.sweep.values())
    if bound > MAX_CELLS:     # before the sweep's values are checked and its points listed
        err("sweep", f"the grid has up to {bound} cells (policies x sweep points x seeds): allowed at most "
                     f"{MAX_CELLS}; split it into several grids")
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
            label = _label(base_label, name, knobs, suffix) + (part_suffix(spec.part) if spec.part else "")
            where = f"policies[{i}]" + (f" at sweep point {suffix}" if suffix else "")
            if label in labels:
                err(f"policies[{i}].label", f"label {label!r} is used twice (also by {labels[label]}); "
                    "give each variant a distinct label")
            labels[label] = where
            env_cfg = {"kind": kind, **env_base, **env_over}
            env_key = canonical_json(env_cfg)
            if env_key not in envs:
                envs[env_key] = _resolve_env(err, suffix, env_cfg)
            env = envs[env_key]
            for knob, value in pol_over.items():
                _checked(err, f"sweep.policy.{knob}", ptable, knob, value, where=f"{where}: ")
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
        _checked(err, f"env.{k}", table, k, v)
    return kind, knobs, table


def _check_policy(err, i: int, pol: dict, sweep_keys: list[str]):
    name = pol.get("name")
    if name not in POLICIES:
        err(f"policies[{i}].name", f"unknown policy {name!r}; valid names: {', '.join(POLICIES)}")
    label = pol.get("label")
    if label is not None and (not isinstance(label, str) or not label.strip()):
        err(f"policies[{i}].label", f"{label!r} is not allowed: expected a non-empty string")
    table = POLICIES[name].KNOBS
    knobs = {k: v for k, v in pol.items() if k not in ("name", "label")}
    for k, v in knobs.items():
        _checked(err, f"policies[{i}].{k}", table, k, v)
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
                _checked(err, f"sweep.{key}", etable, knob, value)
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


def format_value(value: Any) -> str:
    """How a sweep value reads in a label (numpy values as plain JSON)."""
    return value if isinstance(value, str) else canonical_json(value)


def _label(base: str | None, name: str, knobs: dict, suffix: str) -> str:
    if base is None:
        base = name
        if knobs:
            base += "[" + ",".join(f"{k}={format_value(knobs[k])}" for k in sorted(knobs)) + "]"
    return f"{base}[{suffix}]" if suffix else base


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
    # lr_scale = 1 is left out of config() on purpose (policies.base.LR_SCALE)
    lost = sorted(k for k in set(policy) - set(resolved) if not (k == "lr_scale" and policy[k] == 1.0))
    if lost:  # a policy whose config() drops a knob would silently run with its default
        err(f"policies[{i}].{lost[0]}", f"policy {policy['name']!r} accepts knob {lost[0]!r} "
            "but does not report it in config(), so the cell would ignore it")
    return resolved


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
