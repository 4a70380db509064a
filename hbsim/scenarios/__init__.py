"""The scenario suite (issue 18 item 4): named environments shipped as package data, one TOML
file per scenario in this folder (`hb scenarios` lists them, `hb sim --scenario NAME` runs one),
and the one loader of a scenario file, the user's own included (docs/EXTENDING.md).

A scenario file has

    name = "trap"                   # = the file's stem
    summary = "..."                 # one paragraph: what it tests, what the oracle does, what designs did
    target = "train"                # the oracle's target and the truth the suite check reads
    seeds = 6                       # shipped seed count (seeds 0..N-1; at least 2)
    steps = 100                     # optimizer steps per run
    batch_groups = 8                # optional (default: the run default)
    lr_note = "..."                 # optional: how the learning rate was chosen (command and numbers)
    [env]                           # env kind + knobs (every knob of that kind's table)
    kind = "scenario"

`get(ref)` takes a shipped name or the path of a scenario file (a reference ending in .toml
or holding a /; relative paths are relative to `folder`, default the current folder); every
file, shipped or not, goes through `load`, which checks each key and builds the env once, so
a bad file is one UserError naming the file and the key. `Scenario.record()` says where a
scenario came from ({"name", "file", "sha256"} of the file's bytes): runs record it beside
their config (whose env, steps and batch size already hold everything that shapes them).

    from hbsim.scenarios import SCENARIOS, get, scenario_config
    SCENARIOS["trap"].env                   # {"kind": "scenario", ...}
    get("examples/my_scenario.toml").target
    scenario_config("trap", {"name": "oracle", "target": "train"}, seed=0)   # a partial run config
"""
from __future__ import annotations

import copy
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path


from hbsim.envs import make_env
from hbsim.experiment import resolve_synthetic
from hbsim.run_knobs import RUN_KNOBS
from hbsim.contract.tomlfile import read_toml
from policies.clairvoyant import TARGETS
from policies.errors import UserError
from policies.validate import MAX_SEEDS, check_int

#: the folder of the shipped scenario files (package data)
FOLDER = Path(__file__).resolve().parent
#: the truth columns of the final train row that each target reads (hbsim.envs.base extras)
TARGET_COLUMNS = {"heldout_tasks": "true_heldout_tasks", "heldout_harness": "true_heldout_harness"}
KEYS = ("name", "summary", "target", "seeds", "steps", "batch_groups", "lr_note", "env")
REQUIRED = ("name", "summary", "target", "seeds", "steps", "env")
#: a scenario check pairs seeds: at least two
MIN_SEEDS = 2


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    target: str
    seeds: int
    steps: int
    env: dict = field(default_factory=dict)
    lr_note: str = ""
    batch_groups: int | None = None
    file: str = ""          # the absolute path of its file ("" for one built in code)
    sha256: str = ""        # of the file's bytes

    def run(self) -> dict:
        """The run knobs of the scenario (steps, batch_groups where set)."""
        out = {"steps": self.steps}
        if self.batch_groups is not None:
            out["batch_groups"] = self.batch_groups
        return out

    def record(self) -> dict:
        """Where the scenario came from: {"name", "file", "sha256"}."""
        return {"name": self.name, "file": self.file, "sha256": self.sha256}


def load(path: str | os.PathLike) -> Scenario:
    """Read and check one scenario file (module docstring); UserError naming the file and key."""
    shown = os.fspath(path)
    raw, data = read_toml(path, "scenario")

    def err(key: str, problem: str):
        raise UserError(f"{shown}: key {key!r}: {problem}")

    for key in sorted(set(raw) - set(KEYS)):
        err(key, f"unknown key; valid keys: {', '.join(KEYS)}")
    for key in REQUIRED:
        if key not in raw:
            err(key, f"missing; a scenario file sets {', '.join(REQUIRED)} (and optionally batch_groups, lr_note)")
    stem = Path(path).stem
    if raw["name"] != stem:
        err("name", f"{raw['name']!r} is not allowed: expected the file's stem, {stem!r}")
    if not isinstance(raw["summary"], str) or not raw["summary"].strip():
        err("summary", f"{raw['summary']!r} is not allowed: expected a non-empty string")
    if not isinstance(raw.get("lr_note", ""), str):
        err("lr_note", f"{raw['lr_note']!r} is not allowed: expected a string")
    if raw["target"] not in TARGETS:
        err("target", f"{raw['target']!r} is not allowed: expected one of {', '.join(TARGETS)}")
    checks = {"seeds": lambda v: check_int("seeds", v, MIN_SEEDS, MAX_SEEDS),
              "steps": lambda v: RUN_KNOBS.check("steps", v), "batch_groups": lambda v: RUN_KNOBS.check("batch_groups", v)}
    for key, check in checks.items():
        try:
            if key in raw:
                check(raw[key])
        except UserError as exc:
            err(key, str(exc))
    _check_env(err, raw["env"])
    return Scenario(**{k: raw[k] for k in KEYS if k in raw}, file=os.path.abspath(path),
                    sha256=hashlib.sha256(data).hexdigest())


def _check_env(err, env) -> None:
    """The [env] table: a synthetic kind (or preset) and its knobs, each checked by the kind's
    table, then the env built once (its cross-knob checks)."""
    if not isinstance(env, dict) or not isinstance(env.get("kind"), str):
        err("env", f"{env!r} is not allowed: expected an [env] table with kind = \"...\" and its knobs")
    try:
        knobs = resolve_synthetic(dict(env))
        make_env(knobs.pop("kind"), seed=0, **knobs)
    except ValueError as exc:       # UserError included: a knob's own message names it
        text = str(exc).strip().splitlines()
        err("env", text[0] if text else type(exc).__name__)


def is_file_reference(ref: str) -> bool:
    """A scenario reference names a file when it ends in .toml or holds a path separator."""
    return ref.lower().endswith(".toml") or "/" in ref or os.sep in ref


def _all() -> dict[str, Scenario]:
    return {p.stem: load(p) for p in sorted(FOLDER.glob("*.toml"))}


#: name -> Scenario, every shipped scenario file, sorted by name
SCENARIOS: dict[str, Scenario] = _all()


def is_shipped(sc: Scenario) -> bool:
    """Whether `sc` is the shipped scenario of its name (not a user's file, even one of the
    same name or content): a run names it by its name, a user's file by its path."""
    return SCENARIOS.get(sc.name) == sc


def get(ref: str, folder: str | os.PathLike | None = None) -> Scenario:
    """A shipped scenario by name, or the scenario file at path `ref` (relative to `folder`,
    default the current folder); UserError naming the valid names or the file's problem."""
    if not isinstance(ref, str) or not ref.strip():
        raise UserError(f"scenario={ref!r} is not allowed: expected a scenario name or the path of a .toml file")
    if is_file_reference(ref):
        return load(Path(folder or ".") / Path(ref).expanduser())
    if ref not in SCENARIOS:
        raise UserError(f"scenario={ref!r} is unknown; valid scenarios: {', '.join(SCENARIOS)}, or the path of "
                        "a scenario file (NAME.toml)")
    return SCENARIOS[ref]


def scenario_config(name: str, policy: dict, seed: int = 0, **env_overrides) -> dict:
    """A partial run config of scenario `name` for `policy` ({"name", **knobs}) at `seed`."""
    sc = get(name)
    return {"env": {**copy.deepcopy(sc.env), **env_overrides}, "policy": dict(policy), "seed": seed, **sc.run()}


def target_truth(train, target: str, harnesses: list[str]):
    """The noise-free value of `target` per row of a train table: the mean of the
    true_<harness> columns for train, the true_heldout_* column for a suite."""
    if target == "train":
        return train[[f"true_{h}" for h in harnesses]].mean(axis=1)
    return train[TARGET_COLUMNS[target]]


__all__ = ["FOLDER", "SCENARIOS", "Scenario", "get", "is_file_reference", "is_shipped", "load", "scenario_config", "target_truth"]
