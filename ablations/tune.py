"""Tuning apart from testing: a grid file's `[tune]` table (SPEC §8's hyper-parameter bias).

    seeds = [0, 1, 2, 3]          # the TEST seeds
    [env]
    kind = "bernoulli"
    n_validation_tasks = 40       # the tuning split (suite `validation`), needed by [tune]
    [[policies]]                  # each table is one design
    name = "harnessbandit"
    [tune]
    seeds = [100, 101]            # tuning seeds: a list, disjoint from the test seeds
    target = "validation"         # the selection target (the only one so far)
    [tune.knobs]                  # swept per design, like [sweep] (a policy.* key only where it applies)
    "policy.tau" = [0.1, 0.3]
    "env.lr" = [1.0, 2.5]

`hb grid run` (`ablations.runner.run_tuned`) then (1) runs every design x tune point x tuning seed into DIR/tune/ (a grid
directory of its own, resumable), (2) selects each design's setting: the point with the
largest mean over tuning seeds of the cell's mean validation reward at its final step; a
tie goes to the point listed first (points in [tune.knobs] order: keys sorted, each key's
values in file order), and a design with one point keeps it; the selection is written to
DIR/tune.json (atomically, `hbsim.atomic`); (3) runs each design at its selected setting on
the test seeds into DIR/cells/, labelled by the design alone (`harnessbandit`), so `hb
report DIR` sees only test runs and lists the settings (reports.budget.tuned_lines). A
rerun skips the finished cells of both phases and recomputes the same selection from them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ablations.plan import REAL_KIND, GridSpec, SpecError, cell_bound, check_cells, plan_cells, variant_label
from hbsim.contract import TUNE_JSON, VALIDATION_SUITE
from hbsim.records import canonical_json, done_ids, load_cells, read_tune
from hbsim.run_knobs import seed_list
from policies import POLICIES
from policies.errors import UserError
from policies.validate import MAX_SEEDS

TUNE_KEYS = ("seeds", "target", "knobs")
TARGETS = (VALIDATION_SUITE,)
RULE = ("largest mean over tuning seeds of the mean validation reward at the final step; ties: the point "
        "listed first ([tune.knobs] keys sorted, values in file order)")


@dataclass(frozen=True)
class TuneSpec:
    """A validated [tune] table: tuning seeds, target suite, knob -> values swept per design."""

    seeds: list[int]
    target: str
    knobs: dict


def parse_tune(raw, path: str, test_seeds: list[int], spec_raw: dict) -> TuneSpec | None:
    """The [tune] table of a grid file (None when absent); SpecError naming the key otherwise."""
    if raw is None:
        return None

    def err(key: str, problem: str):
        raise SpecError(f"{path}: key {key!r}: {problem}")

    if not isinstance(raw, dict):
        err("tune", "is not a table: expected [tune] with seeds, target and [tune.knobs]")
    unknown = sorted(set(raw) - set(TUNE_KEYS))
    if unknown:
        err(f"tune.{unknown[0]}", f"unknown key; valid keys: {', '.join(TUNE_KEYS)}")
    try:
        seeds = seed_list("tune.seeds", raw.get("seeds"), count=False)
    except UserError as exc:
        err("tune.seeds", str(exc))
    if len(seeds) + len(test_seeds) > MAX_SEEDS:
        err("tune.seeds", f"{len(seeds)} tuning seeds and {len(test_seeds)} test seeds are not allowed: expected "
                          f"at most {MAX_SEEDS} seeds in one grid, both phases together")
    overlap = sorted(set(seeds) & set(test_seeds))
    if overlap:
        err("tune.seeds", f"{overlap} are also test seeds (seeds = {test_seeds}); allowed: tuning seeds disjoint "
                          "from the test seeds")
    target = raw.get("target", VALIDATION_SUITE)
    if target not in TARGETS:
        err("tune.target", f"{target!r} is not allowed: expected one of {', '.join(TARGETS)}")
    knobs = raw.get("knobs")
    if not isinstance(knobs, dict) or not knobs:
        err("tune.knobs", f"{knobs!r} is not allowed: expected a table of \"env.<knob>\" / \"policy.<knob>\" = "
                          "[values]")
    if spec_raw.get("sweep"):
        err("tune", "a grid with [tune] has no [sweep]: put the knobs to compare in [tune.knobs]")
    env = spec_raw.get("env") or {}
    if env.get("kind") == REAL_KIND:
        err("tune", "real runs have no validation split; allowed: a synthetic env kind")
    if not env.get("n_validation_tasks"):
        err("env.n_validation_tasks", f"{env.get('n_validation_tasks')!r} is not allowed with [tune]: expected "
                                      "an integer >= 1 (the tuning split the target reads)")
    return TuneSpec(seeds=seeds, target=target, knobs=dict(knobs))


# -- the two phases' grids --------------------------------------------------------------
def _design(spec: GridSpec, i: int, **changes) -> GridSpec:
    """Design i of a tuned grid as a grid of its own (other fields replaced by `changes`)."""
    return dataclasses.replace(spec, policies=[spec.policies[i]], tune=None, _cells=None, **changes)


def design_label(pol: dict) -> str:
    knobs = {k: v for k, v in pol.items() if k not in ("name", "label")}
    return variant_label(pol.get("label"), pol.get("name"), knobs, "")


def tuning_cells(spec: GridSpec) -> dict[str, list]:
    """design label -> its tuning cells (every tune point x tuning seed), file order."""
    check_cells(cell_bound(spec), spec.path)
    out, knobs = {}, spec.tune.knobs
    names = [p.get("name") for p in spec.policies]
    for key in sorted(knobs):
        scope, _, knob = key.partition(".")
        if scope == "policy" and not any(n in POLICIES and knob in POLICIES[n].KNOBS for n in names):
            raise SpecError(f"{spec.path}: key 'tune.knobs.{key}': no design of the grid ({', '.join(map(str, names))}) "
                            f"has knob {knob!r}")
    for i, pol in enumerate(spec.policies):
        label = design_label(pol)
        table = POLICIES[pol["name"]].KNOBS if pol.get("name") in POLICIES else {}
        own = {k: v for k, v in knobs.items() if not k.startswith("policy.") or k[len("policy."):] in table}
        if label in out:
            raise SpecError(f"{spec.path}: key 'policies[{i}].label': label {label!r} is used twice; give each "
                            "design a distinct label")
        try:
            out[label] = plan_cells(_design(spec, i, sweep=own, seeds=spec.tune.seeds))
        except SpecError as exc:
            raise SpecError(str(exc).replace("key 'sweep.", "key 'tune.knobs.")) from None
    return out


def tuning_spec(spec: GridSpec) -> GridSpec:
    """The tuning phase as one grid (DIR/tune/): every design's tuning cells."""
    cells = [c for group in tuning_cells(spec).values() for c in group]
    return dataclasses.replace(spec, tune=None, sweep=dict(spec.tune.knobs), seeds=list(spec.tune.seeds),
                               _cells=cells)


def test_spec(spec: GridSpec, selection: dict) -> GridSpec:
    """The test phase as one grid (DIR/cells/): each design at its selected setting on the test seeds."""
    cells = []
    for i, pol in enumerate(spec.policies):
        label = design_label(pol)
        if label not in selection["designs"]:
            raise UserError(f"{TUNE_JSON}: the tuning record selects no setting for design {label!r} (it has "
                            f"{', '.join(map(repr, selection['designs'])) or 'none'}); remove it and rerun "
                            "`hb grid run` (the finished tuning cells are kept)")
        setting = selection["designs"][label]["setting"]
        env = {**spec.env, **{k[4:]: v for k, v in setting.items() if k.startswith("env.")}}
        policy = {**pol, "label": label, **{k[7:]: v for k, v in setting.items() if k.startswith("policy.")}}
        design = _design(spec, i, env=env, sweep={})
        design.policies = [policy]
        cells += plan_cells(design)
    return dataclasses.replace(spec, _cells=cells)


# -- selection ------------------------------------------------------------------------
def select(spec: GridSpec, tune_dir) -> dict:
    """The selection record (module doc) from the finished tuning cells in `tune_dir`."""
    groups = tuning_cells(spec)
    ids = {c.id for cells in groups.values() for c in cells}
    missing = ids - done_ids(tune_dir)
    if missing:
        raise UserError(f"{tune_dir}: {len(missing)} tuning cells are not finished; rerun `hb grid run`")
    _, ev = load_cells(tune_dir, only=ids, eval_columns=["run_id", "step", "suite", "task", "attempt", "reward"])
    ev = ev[ev["suite"] == spec.tune.target]
    ev = ev[ev["step"] == ev.groupby("run_id")["step"].transform("max")]
    ev = ev.drop_duplicates(["run_id", "step", "task", "attempt"])  # a budget evaluation at the final step
    per_run = ev.groupby("run_id")["reward"].mean()
    designs = {}
    for label, cells in groups.items():
        points: dict[str, dict] = {}
        for c in cells:
            point = points.setdefault(canonical_json(c.sweep), {"setting": dict(c.sweep), "scores": []})
            if c.id not in per_run.index:
                raise UserError(f"{tune_dir}: tuning cell {c.id} ({c.label}, seed {c.seed}) has no "
                                f"{spec.tune.target!r} evaluation; the env needs n_validation_tasks >= 1")
            point["scores"].append(float(per_run[c.id]))
        rows = [{"setting": p["setting"], "score": float(np.mean(p["scores"])), "seeds": len(p["scores"])}
                for p in points.values()]
        best = max(range(len(rows)), key=lambda j: (rows[j]["score"], -j))
        designs[label] = {"setting": rows[best]["setting"], "score": rows[best]["score"], "points": rows}
    return {"seeds": spec.tune.seeds, "test_seeds": spec.seeds, "target": spec.tune.target,
            "knobs": spec.tune.knobs, "rule": RULE, "designs": designs}


def read_selection(root) -> dict | None:
    """DIR/tune.json, shape checked (`hbsim.records.read_tune`, the one reader); None when absent."""
    return read_tune(root)


def recorded_test_spec(spec: GridSpec, root) -> GridSpec:
    """A tuned grid's test phase as recorded in DIR/tune.json (no cells before the selection)."""
    selection = read_selection(root)
    return test_spec(spec, selection) if selection else dataclasses.replace(spec, _cells=[])


__all__ = ["RULE", "TuneSpec", "parse_tune", "read_selection", "recorded_test_spec", "select",
           "test_spec", "tuning_cells", "tuning_spec"]
