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

The cells of a grid (variants x sweep points x seeds, their ids and labels) are planned
by `ablations.plan`; a `[tune]` table is read and planned by `ablations.tune`.

Every problem is a `SpecError` (a UserError) whose message names the file, the key
and what is allowed. Values are checked by the knob tables (the run's `RUN_KNOBS`, each
env kind's and each policy's `KNOBS`), which name the key themselves.
"""
from __future__ import annotations

import os
from typing import Any

from ablations.plan import GridSpec, SpecError, cell_bound, check_cells, checked, key_errors, plan_cells
from ablations.tune import parse_tune, tuning_spec
from hbsim import scenarios
from hbsim.run_knobs import RUN_KNOBS, seed_list
from hbsim.contract.tomlfile import read_toml
from policies.errors import UserError
from policies.registry import load_plugins

TOP_KEYS = ("name", "description", "steps", "seeds", "eval_every", "batch_groups", "plugins",
            "env", "policies", "sweep", "counterfactual", "eval_budget", "tune", "parts")
#: the keys of a grid of parts that are not its parts' defaults
OWN_KEYS = ("name", "description", "plugins", "parts")

# -- parsing -------------------------------------------------------------------------
def load_spec(path: str | os.PathLike) -> GridSpec:
    """Read, parse and validate a grid file (plugins imported, every cell resolved)."""
    path = os.fspath(path)
    raw, _ = read_toml(path, "grid", error=SpecError)
    return parse_spec(raw, path, folder=os.path.dirname(os.path.abspath(path)))


def parse_spec(raw: dict, path: str = "<grid>", part: str | None = None,
               folder: str | os.PathLike | None = None, *, plan: bool = True) -> GridSpec:
    """Validate a parsed grid dict; see the module docstring for the format (`folder`: where
    a relative `[env] scenario` path starts, default the current folder). `plan`: also plan
    its cells now (a part is planned by its grid, after the whole grid's size bound)."""
    err = key_errors(path)
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
    spec.tune = parse_tune(raw.get("tune"), path, seeds, raw)
    check_cells(cell_bound(spec), path)       # both phases of a [tune], before either is planned
    if plan:
        spec._cells = tuning_spec(spec).cells() if spec.tune else plan_cells(spec)
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
        part, scenario = _with_scenario(key_errors(where), part, defaults, folder)
        expanded.append(part)
        sub = {**defaults, **part, "name": f"{name}/{pname}", "plugins": raw.get("plugins", [])}
        spec = parse_spec(sub, where, part=pname, plan=False)
        spec.scenario = scenario if "env" in part else top_scenario
        specs.append(spec)
    raw = {**raw, "parts": expanded}
    spec = GridSpec(path=path, name=name, steps=specs[0].steps, seeds=specs[0].seeds, eval_every=None,
                    batch_groups=None, env={}, policies=[], sweep={}, plugins=list(raw.get("plugins", [])),
                    raw=raw, parts=specs)
    check_cells(cell_bound(spec), path, "cells (the parts' policies x sweep points x seeds)")
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


def _run_knob(err, key: str, value: Any):
    return checked(err, key, RUN_KNOBS, key, value)


def _seeds(err, value: Any) -> list[int]:
    """A count or a list of seeds (`hbsim.run_knobs.seed_list`, the one parse of `seeds`)."""
    try:
        return seed_list("seeds", value)
    except UserError as exc:
        err("seeds", str(exc))


def import_plugins(modules: list[str], err) -> None:
    """Load the grid's plugin modules (they register extra policies or environments) through
    the one loader, `policies.registry.load_plugins`; its UserError names `plugins[i]`."""
    for i, module in enumerate(modules):
        try:
            load_plugins([module])
        except UserError as exc:
            err(f"plugins[{i}]", str(exc))
