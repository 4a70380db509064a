"""Tuning apart from testing: a grid file's `[tune]` table (SPEC §8's hyper-parameter bias).

    seeds = [0, 1, 2, 3]          # the TEST seeds
    [env]
    kind = "bernoulli"
    n_validation_tasks = 40       # the tuning split (suite `validation`), needed by [tune]
    [[policies]]                  # each table is one design
    name = "harnessbandit"
    [tune]
    seeds = [100, 101]            # tuning seeds: a list, disjoint from the test seeds
    target = "validation"         # the selection target: validation, or (synthetic envs) train,
                                  # heldout_tasks or heldout_harness
    [tune.knobs]                  # swept per design, like [sweep] (a policy.* key only where it applies)
    "policy.tau" = [0.1, 0.3]
    "env.lr" = [1.0, 2.5]

`hb grid run` (`ablations.runner.run_tuned`) then (1) runs every design x tune point x tuning seed into DIR/tune/ (a grid
directory of its own, resumable), (2) selects each design's setting: the point with the
largest mean over tuning seeds of the cell's mean validation reward at its final step; a
tie goes to the point listed first (points in [tune.knobs] order: keys sorted, each key's
values in file order), and a design with one point keeps it; the selection is written to
DIR/tune.json (atomically, `hbsim.contract.atomic`); (3) runs each design at its selected setting on
the test seeds into DIR/cells/, labelled by the design alone (`harnessbandit`), so `hb
report DIR` sees only test runs and lists the settings (reports.budget.tuned_lines). A
rerun skips the finished cells of both phases and recomputes the same selection from them.

The target may also be one of the oracle's targets (`train`: the noise-free mean true
training success at the final step, `reports.readings.references.train_scores`; `heldout_tasks`,
`heldout_harness`: the suite's mean final reward) -- what `hb stress` selects its single best
fixed arm on. A grid of PARTS (`ablations.spec`) may tune some of its parts: the tuning phase
holds every tuned part's tuning cells, the selection (DIR/tune.json) has one record per tuned
part under "parts", and the test phase is each tuned part at its selection beside the other
parts' cells (`is_tuned`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ablations.plan import REAL_KIND, GridSpec, SpecError, cell_bound, check_cells, plan_cells
from hbsim.contract.labels import variant_label
from hbsim.contract import PART, TUNE_JSON, VALIDATION_SUITE
from hbsim.contract.records import canonical_json, done_ids, load_cells, read_tune
from reports.readings.references import train_scores
from hbsim.run_knobs import seed_list
from policies import POLICIES
from policies.errors import UserError
from policies.validate import MAX_SEEDS

TUNE_KEYS = ("seeds", "target", "knobs")
#: the selection targets: the validation split, and the oracle's targets of a synthetic env
TARGETS = (VALIDATION_SUITE, "train", "heldout_tasks", "heldout_harness")
RULE = ("largest mean over tuning seeds of the mean validation reward at the final step; ties: the point "
        "listed first ([tune.knobs] keys sorted, values in file order)")


def rule(target: str) -> str:
    """The selection rule of a target, in words (RULE for validation)."""
    what = {VALIDATION_SUITE: "the mean validation reward",
            "train": "the noise-free mean true training success"}.get(target, f"the mean {target} reward")
    return RULE.replace("the mean validation reward", what)


def is_tuned(spec: GridSpec) -> bool:
    """A grid with [tune], or a grid of parts with a tuned part: run in two phases."""
    return spec.tune is not None or any(p.tune is not None for p in spec.parts)


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
    if target == VALIDATION_SUITE and not env.get("n_validation_tasks"):
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
    """The tuning phase as one grid (DIR/tune/): every design's tuning cells (of a grid of
    parts: every tuned part's)."""
    if spec.parts:
        return dataclasses.replace(spec, _cells=[c for p in spec.parts if p.tune for c in tuning_spec(p).cells()])
    cells = [c for group in tuning_cells(spec).values() for c in group]
    return dataclasses.replace(spec, tune=None, sweep=dict(spec.tune.knobs), seeds=list(spec.tune.seeds),
                               _cells=cells)


def planned_configs(spec: GridSpec) -> list[dict]:
    """Every resolved config a run of `spec` plans before any selection: its cells and, with
    [tune], its tuning cells (what `hbsim.experiment.warmup_line` reads before a grid starts)."""
    cells = spec.cells() + (tuning_spec(spec).cells() if is_tuned(spec) else [])
    return [c.config for c in cells]


def test_spec(spec: GridSpec, selection: dict) -> GridSpec:
    """The test phase as one grid (DIR/cells/): each design at its selected setting on the test
    seeds (of a grid of parts: each tuned part so, beside the other parts)."""
    if spec.parts:
        parts = [test_spec(p, selection["parts"][p.part]) if p.tune else p for p in spec.parts]
        return dataclasses.replace(spec, parts=parts, _cells=None)
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
    """The selection record (module doc) from the finished tuning cells in `tune_dir` (of a
    grid of parts: {"parts": {part: its record}})."""
    tuned = [p for p in spec.parts if p.tune] if spec.parts else [spec]
    groups = {id(p): tuning_cells(p) for p in tuned}
    ids = {c.id for g in groups.values() for cells in g.values() for c in cells}
    missing = ids - done_ids(tune_dir)
    if missing:
        raise UserError(f"{tune_dir}: {len(missing)} tuning cells are not finished; rerun `hb grid run`")
    scores = _run_scores(tune_dir, ids, {p.tune.target for p in tuned})
    records = {p.part: _select_one(p, groups[id(p)], scores[p.tune.target], tune_dir) for p in tuned}
    return {"parts": records} if spec.parts else records[spec.part]


def _run_scores(tune_dir, ids: set[str], targets: set[str]) -> dict[str, pd.Series]:
    """target -> (run_id -> the run's score on it at its final step)."""
    train, ev = load_cells(tune_dir, only=ids, eval_columns=["run_id", "step", "suite", "task", "attempt", "reward"])
    out = {}
    for target in targets:
        if target == "train":
            truth = train_scores(train.assign(policy=train["run_id"]))
            out[target] = truth.set_index("policy")["score"]
            continue
        mine = ev[ev["suite"] == target]
        mine = mine[mine["step"] == mine.groupby("run_id")["step"].transform("max")]
        mine = mine.drop_duplicates(["run_id", "step", "task", "attempt"])  # a budget evaluation at the final step
        out[target] = mine.groupby("run_id")["reward"].mean()
    return out


def _select_one(spec: GridSpec, groups: dict, per_run: pd.Series, tune_dir) -> dict:
    """One grid's (or part's) selection record from its runs' scores."""
    designs = {}
    for label, cells in groups.items():
        points: dict[str, dict] = {}
        for c in cells:
            point = points.setdefault(canonical_json(c.sweep), {"setting": dict(c.sweep), "scores": []})
            if c.id not in per_run.index:
                raise UserError(f"{tune_dir}: tuning cell {c.id} ({c.label}, seed {c.seed}) has no "
                                f"{spec.tune.target!r} score; the env needs n_validation_tasks >= 1 (validation) "
                                "or the truth columns of a synthetic env (train)")
            point["scores"].append(float(per_run[c.id]))
        rows = [{"setting": {k: v for k, v in p["setting"].items() if k != PART}, "score": float(np.mean(p["scores"])),
                 "seeds": len(p["scores"])} for p in points.values()]
        best = max(range(len(rows)), key=lambda j: (rows[j]["score"], -j))
        designs[label] = {"setting": rows[best]["setting"], "score": rows[best]["score"], "points": rows}
    return {"seeds": spec.tune.seeds, "test_seeds": spec.seeds, "target": spec.tune.target,
            "knobs": spec.tune.knobs, "rule": rule(spec.tune.target), "designs": designs}


def read_selection(root) -> dict | None:
    """DIR/tune.json, shape checked (`hbsim.contract.records.read_tune`, the one reader); None when absent."""
    return read_tune(root)


def recorded_test_spec(spec: GridSpec, root) -> GridSpec:
    """A tuned grid's test phase as recorded in DIR/tune.json (no cells before the selection)."""
    selection = read_selection(root)
    return test_spec(spec, selection) if selection else dataclasses.replace(spec, _cells=[])


__all__ = ["RULE", "TuneSpec", "is_tuned", "parse_tune", "rule", "read_selection", "recorded_test_spec", "select",
           "test_spec", "tuning_cells", "tuning_spec"]
