"""The scenario suite (issue 18 item 4): named environments shipped as package data, one TOML
file per scenario in this folder (`hb scenarios` lists them, `hb sim --scenario NAME` runs one).

A scenario file has

    name = "trap"                   # = the file's stem
    summary = "..."                 # one paragraph: what it tests, which signal should win and why
    target = "train"                # the oracle's target and the truth the suite check reads
    seeds = 6                       # shipped seed count (seeds 0..N-1)
    steps = 100                     # optimizer steps per run
    batch_groups = 8                # optional (default: the run default)
    lr_note = "..."                 # how the learning rate was chosen (command and numbers)
    [env]                           # env kind + knobs (every knob of that kind's table)
    kind = "scenario"

    from hbsim.scenarios import SCENARIOS, scenario_config
    SCENARIOS["trap"].env                   # {"kind": "scenario", ...}
    scenario_config("trap", {"name": "oracle", "target": "train"}, seed=0)   # a partial run config
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: the tomli backport (a dependency there)
    import tomli as tomllib

from policies.errors import UserError

#: the folder of the shipped scenario files (package data)
FOLDER = Path(__file__).resolve().parent
#: the truth columns of the final train row that each target reads (hbsim.envs.base extras)
TARGET_COLUMNS = {"heldout_tasks": "true_heldout_tasks", "heldout_harness": "true_heldout_harness"}
KEYS = ("name", "summary", "target", "seeds", "steps", "batch_groups", "lr_note", "env")


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

    def run(self) -> dict:
        """The run knobs of the scenario (steps, batch_groups where set)."""
        out = {"steps": self.steps}
        if self.batch_groups is not None:
            out["batch_groups"] = self.batch_groups
        return out


def _load(path: Path) -> Scenario:
    with open(path, "rb") as fh:
        raw = tomllib.load(fh)
    unknown = sorted(set(raw) - set(KEYS))
    missing = [k for k in ("name", "summary", "target", "seeds", "steps", "env") if k not in raw]
    if unknown or missing or raw.get("name") != path.stem:
        raise ValueError(f"{path}: scenario file with unknown keys {unknown}, missing {missing} "
                         f"or a name other than {path.stem!r}")
    return Scenario(**{k: raw[k] for k in KEYS if k in raw})


def _all() -> dict[str, Scenario]:
    return {p.stem: _load(p) for p in sorted(FOLDER.glob("*.toml"))}


#: name -> Scenario, every shipped scenario file, sorted by name
SCENARIOS: dict[str, Scenario] = _all()


def get(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise UserError(f"scenario={name!r} is unknown; valid scenarios: {', '.join(SCENARIOS)}")
    return SCENARIOS[name]


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


__all__ = ["FOLDER", "SCENARIOS", "Scenario", "get", "scenario_config", "target_truth"]
