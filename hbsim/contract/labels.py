"""Run labels and part names: the one grammar that builds and parses them.

A run's label is its policy's name, with the knobs a grid sweeps, and the part of a grid of
parts (`hb stress`, a grid file with [[parts]]) it belongs to:

    name                      a policy at its defaults (or a label the user chose)
    name[k=v,k2=v2]           a sweep point (`variant_label`: knobs sorted, values as JSON)
    name[k=v][part=P]         the same in part P (`part_suffix`)

A part of `hb stress` is a scenario at an axis (`part_name`): `NAME` at the shipped axis,
`NAME@3x` (horizon x3), `NAME@lr0.5` (step size x0.5), `NAME@3x@lr0.5`, and the tuned
fixed-arm part beside each, `NAME+fixed` (`FIXED_PART`); `part_scenario` reads the scenario
back. The policy names the references read (`reports.readings.references`) are constants
here, so a report names them without importing `policies`' registry.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

import pandas as pd

from hbsim.contract.names import PART
from hbsim.contract.records import canonical_json

#: the policy names the references and the stress profile read in run labels
ORACLE, FIXED, UNIFORM, BEST_FIXED, MIXED = "oracle", "fixed", "uniform", "best_fixed", "mixed"
#: the suffix of the tuned fixed-arm part beside each `hb stress` part (`NAME+fixed`)
FIXED_PART = "+fixed"


def format_value(value: Any) -> str:
    """How a sweep value reads in a label (numpy values as plain JSON)."""
    return value if isinstance(value, str) else canonical_json(value)


def variant_label(base: str | None, name: str, knobs: dict, suffix: str) -> str:
    """A cell's label: `base` (a label the user gave) or `name[k=v,...]` of the swept knobs,
    then `[suffix]` where a sweep point needs one."""
    if base is None:
        base = name
        if knobs:
            base += "[" + ",".join(f"{k}={format_value(knobs[k])}" for k in sorted(knobs)) + "]"
    return f"{base}[{suffix}]" if suffix else base


def part_suffix(name: str) -> str:
    """`[part=NAME]`: what the labels of part NAME's cells end in."""
    return f"[{PART}={name}]"


def has_part(label: str) -> bool:
    """Whether a label carries a `[part=NAME]` suffix (a cell of a grid of parts)."""
    return f"[{PART}=" in str(label)


def strip_part(labels: pd.Series) -> pd.Series:
    """Labels without their `[part=NAME]` suffix (labels without one unchanged)."""
    return labels.astype(str).str.replace(r"\[part=[^\]]*\]$", "", regex=True)


def of_part(frame: pd.DataFrame, column: str, part: str) -> pd.DataFrame:
    """The rows of `frame` whose `column` label ends in part's suffix, the suffix removed."""
    suffix = part_suffix(part)
    mine = frame[frame[column].astype(str).str.endswith(suffix)].copy()
    mine[column] = mine[column].astype(str).str[: -len(suffix)]
    return mine


def parse_label(label: str) -> tuple[str, dict[str, str]]:
    """`name[k=v,...][...]` -> (name, {k: v} of every bracket); a bare label: (label, {})."""
    match = re.fullmatch(r"([^\[]+)(?:\[(.*)\])*", str(label))
    name = match.group(1) if match else str(label)
    return name, dict(kv.split("=", 1) for kv in re.findall(r"[\w.]+=[^,\]]+", str(label)))


def part_name(scenario: str, horizon: int, step_scale: float) -> str:
    """The part of a scenario at an axis: its name at the shipped axis, `NAME@3x`, `NAME@lr0.5`."""
    return scenario + (f"@{horizon}x" if horizon != 1 else "") + (f"@lr{step_scale:g}" if step_scale != 1 else "")


def part_scenario(part: str) -> str:
    """The scenario of a part name (`trap@3x@lr0.5`, `trap+fixed`, `trap` -> `trap`)."""
    return re.split(r"[@\[:/ +]", str(part), maxsplit=1)[0]


def scenarios_of(parts: Iterable[str]) -> list[str]:
    """The distinct scenarios of part names, in order."""
    return list(dict.fromkeys(part_scenario(p) for p in parts))
