"""The run knobs: `RUN_KNOBS`, the one table of a run's settings (`seed`, `steps`,
`eval_every`, `eval_budget`, `batch_groups`, `counterfactual`, `policy_seed`, and `seeds`,
the seed count of a command that runs many), each knob's one parse, and the one way every
command hands them what the user typed.

Where a run knob comes from decides the name its error shows, never how it is parsed:

    a flag                        `--eval-budget foo`            error names --eval-budget
    --set                         `--set eval_budget=foo`        error names eval_budget
    a grid or study file key      `eval_budget = "foo"`          "FILE: key 'eval_budget': ..."

`run_values(flags, sets)` checks each value once by its knob (`RUN_KNOBS[key].check`) under
that name and refuses a knob given both as a flag and by --set. `seed_list` is the one
parse of a file's `seeds` (a count or a list of seeds).

`split_sets` is the one `--set KEY=VALUE` grammar of `hb sim` and `hb real` (both backends):
VALUE by `policies.validate.parse_value` (JSON: numbers, true/false, lists, "quoted"; none
for unset; any other text the plain string -- so `--set env.lr=0.5`, `lr = 0.5` in a grid's
[env] and `{"lr": 0.5}` in a run config give the same value), KEY one of

    policy.KNOB                   the policy's knob (each selected policy's table checks it)
    env.KNOB, or a bare KNOB      the env's knob (`hb real --backend trl`: a TRL knob)
    a run knob                    RUN_KNOBS, only those the command takes by --set

Each command then only routes the three sections into its run config.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from hbsim.contract import BUDGET_UNITS
from policies.base import BATCH_GROUPS
from policies.errors import UserError
from policies.knobs import Knob, Knobs
from policies.validate import MAX_SEED, MAX_SEEDS, MAX_STEPS, comma_items, parse_sets


def parse_budget(name: str, value) -> str:
    """`eval_budget`'s parse: "UNIT:M1,M2,..." (or {"unit": UNIT, "at": [M1, ...]}) with UNIT
    one of BUDGET_UNITS and milestones positive finite numbers -> the canonical string (unit,
    milestones sorted and deduplicated, integral ones without a decimal point)."""
    unit, at = None, None
    if isinstance(value, str) and ":" in value:
        unit, _, rest = value.partition(":")
        at = comma_items(rest)
    elif isinstance(value, dict) and set(value) == {"unit", "at"} and isinstance(value["at"], (list, tuple)):
        unit, at = value["unit"], list(value["at"])
    try:
        milestones = sorted({float(x) for x in at if not isinstance(x, bool)}) if at else []
        ok = unit in BUDGET_UNITS and milestones and len(milestones) == len(at) and all(
            np.isfinite(m) and 0 < m <= 1e15 for m in milestones)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise UserError(f"{name}={value!r} is not allowed: expected {parse_budget.allowed}")
    return f"{unit}:" + ",".join(str(int(m)) if m == int(m) else repr(m) for m in milestones)


parse_budget.allowed = (f'"UNIT:M1,M2,..." with UNIT one of {", ".join(BUDGET_UNITS)} and distinct milestones '
                        'in (0, 1e15], e.g. "groups:500,1000"')


def budget_milestones(eval_budget: str | None) -> tuple[str | None, list[float]]:
    """A canonical `eval_budget` (parse_budget's) -> (unit, milestones ascending); (None, []) when off."""
    if not eval_budget:
        return None, []
    unit, _, rest = eval_budget.partition(":")
    return unit, [float(x) for x in comma_items(rest)]


#: the run settings: the one place their defaults, bounds and parses are written
RUN_KNOBS = Knobs({
    "seed": Knob(0, "the run's seed (environment streams and the policy's generator)", 0, MAX_SEED),
    "steps": Knob(150, "optimizer steps of the run", 1, MAX_STEPS),
    "eval_every": Knob(None, "also evaluate every N steps (none: only after the final step)", 1, MAX_STEPS,
                       type=int, optional=True),
    "eval_budget": Knob(None, "also evaluate when the run's cumulative cost first crosses each milestone "
                              "(\"groups|tokens|seconds:M1,M2,...\"; none: off)", type=str, optional=True,
                        parse=parse_budget),
    "batch_groups": BATCH_GROUPS,       # the policies' select(batch_groups) bound: policies.base
    "counterfactual": Knob(None, "a what-if pure step on every harness every k-th step (none: off)", 1, MAX_STEPS,
                           type=int, optional=True),
    "policy_seed": Knob(None, "the policy's seed where it differs from the env's (none: seed)", 0, MAX_SEED,
                        type=int, optional=True),
    "seeds": Knob(10, "seeds 0..N-1 of a command that runs many (hb sim)", 1, MAX_SEEDS),
}, owner="the run config")
#: the top-level keys of one run's config (`counterfactual`, `policy_seed`, `eval_budget` only when set)
CONFIG_KNOBS = RUN_KNOBS.without("seeds")
#: run keys left out of a config when unset
OPTIONAL_RUN_KEYS = ("counterfactual", "policy_seed", "eval_budget")


def flag(key: str) -> str:
    """The command-line flag of run knob `key`: eval_budget -> --eval-budget."""
    return "--" + key.replace("_", "-")


def run_values(flags: Mapping[str, Any] | None = None, sets: Mapping[str, Any] | None = None) -> dict:
    """{knob: checked value} of the run knobs a command was given: `flags` (knob -> the
    flag's value, None when not typed) named as the flag (`--eval-budget`), `sets` (knob ->
    a --set value) named as the key (`eval_budget`). UserError for an unknown knob, a bad
    value, or a knob given both ways."""
    out = {}
    for key, value in (flags or {}).items():
        RUN_KNOBS.check_names([key])
        if value is not None:
            out[key] = RUN_KNOBS[key].check(flag(key), value)
    for key, value in (sets or {}).items():
        RUN_KNOBS.check_names([key])
        if key in out:
            raise UserError(f"{flag(key)} and --set {key}=... are not allowed together: set {key} in one place")
        out[key] = RUN_KNOBS[key].check(key, value)
    return out


def seed_list(name: str, value: Any, *, count: bool = True) -> list[int]:
    """The seeds of a file's `name` key: a count N (`seeds` of RUN_KNOBS: seeds 0..N-1; only
    with `count`) or a non-empty list of at most MAX_SEEDS distinct seeds, each a `seed`
    (0 <= seed < 2^32); UserError naming `name` otherwise."""
    if not isinstance(value, list):
        if count:
            return list(range(RUN_KNOBS["seeds"].check(name, value)))
        raise UserError(f"{name}={value!r} is not allowed: expected a non-empty list of distinct seeds")
    if len(value) > MAX_SEEDS:
        raise UserError(f"a list of {len(value)} seeds is not allowed for {name}: expected at most {MAX_SEEDS}")
    if not value or len(set(map(repr, value))) != len(value):
        expected = "a count or a non-empty list of distinct seeds" if count else "a non-empty list of distinct seeds"
        raise UserError(f"{name}={value!r} is not allowed: expected {expected}")
    return [RUN_KNOBS["seed"].check(f"{name}[{i}]", s) for i, s in enumerate(value)]


@dataclass(frozen=True)
class Sets:
    """A command's --set KEY=VALUE items by section (values parsed, not yet checked)."""

    env: dict = field(default_factory=dict)
    policy: dict = field(default_factory=dict)
    run: dict = field(default_factory=dict)


def split_sets(items: Iterable[str], run_keys: Iterable[str] = ()) -> Sets:
    """--set items -> Sets (the grammar: module docstring; a repeated key keeps its last
    value). `run_keys`: the run knobs this command takes by --set; another run knob is refused
    (one line naming the ones allowed)."""
    run_keys = tuple(run_keys)
    sets = Sets()
    for key, value in parse_sets(items).items():
        scope, dot, knob = key.partition(".")
        if dot and scope in ("env", "policy"):
            if not knob:
                raise UserError(f"--set {key}=... is not allowed: expected {scope}.KNOB=VALUE")
            (sets.env if scope == "env" else sets.policy)[knob] = value
        elif key in RUN_KNOBS:
            if key not in run_keys:
                raise UserError(f"--set {key}=... is not allowed here: the run knobs --set takes here are "
                                f"{', '.join(run_keys) or 'none'}")
            sets.run[key] = value
        else:
            sets.env[key] = value
    return sets


def from_command(args, flags: Iterable[str], run_keys: Iterable[str]) -> tuple[Sets, dict]:
    """(Sets of `args.set`, run_values of the flags and of the run knobs among the --set items)
    of a command's argparse namespace: `flags` are knob names whose flag's dest is the knob's
    name (None when not typed), `run_keys` the run knobs its --set takes."""
    sets = split_sets(args.set, run_keys)
    return sets, run_values({key: getattr(args, key) for key in flags}, sets.run)


__all__ = ["CONFIG_KNOBS", "OPTIONAL_RUN_KEYS", "RUN_KNOBS", "Sets", "budget_milestones", "flag", "from_command",
           "parse_budget", "run_values", "seed_list", "split_sets"]
