"""Value checks and the `--set` parser: every check of a user's number, name or KEY=VALUE.

Each check raises `policies.errors.UserError` (one line naming the field, the bad value
and what is allowed; `hb` prints it and exits 2). The module imports only the standard
library and `policies.errors`, so it sits at the root of the dependency graph and every
package may import it. Output folders (kinds, markers, resume, writable paths) are
`hbsim.contract.folders`; the knob tables built on these checks are `policies.knobs`.
"""
from __future__ import annotations

import json
import math
import operator
from typing import Any, Iterable

from policies.errors import UserError

# -- size bounds (generous, but a typo of a few digits is refused instead of hanging) --
MAX_STEPS = 1_000_000        # optimizer steps of one run
MAX_SEEDS = 10_000           # seeds of one `hb sim` call or grid
MAX_SEED = 2**32 - 1         # a seed value (numpy's SeedSequence accepts any, we keep 32 bits)
MAX_JOBS = 1024              # worker processes
MAX_BATCH_GROUPS = 100_000   # groups per optimizer step
MAX_RESAMPLES = 1_000_000    # bootstrap / permutation resamples
#: rows of one evaluation of a synthetic run ((held-out tasks x (harnesses + 1) + validation tasks x
#: harnesses) x attempts): each knob in range, their product could ask for hundreds of GiB
MAX_EVAL_ROWS = 10_000_000
#: eval rows of one run, every evaluation together (its eval table is held in memory)
MAX_RUN_EVAL_ROWS = 50_000_000


# -- values ------------------------------------------------------------------------------
def _interval(low, high) -> str:
    if low is not None and high is not None:
        return f" in [{low}, {high}]"
    return f" >= {low}" if low is not None else (f" <= {high}" if high is not None else "")


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """`value` as an int in [low, high] (None: unbounded); bools and floats are refused."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise UserError(f"{name}={value!r} is not allowed: expected an integer{_interval(low, high)}") from None
    if (low is not None and number < low) or (high is not None and number > high):
        raise UserError(f"{name}={value!r} is not allowed: expected an integer{_interval(low, high)}")
    return int(number)


def check_float(name: str, value: Any, low: float | None = None, high: float | None = None, *,
                low_open: bool = False, high_open: bool = False) -> float:
    """`value` as a finite float in the interval (open ends where asked)."""
    lo = "" if low is None else f"{'(' if low_open else '['}{low}, "
    hi = "" if high is None else f"{high}{')' if high_open else ']'}"
    allowed = "a finite number" + (f" in {lo or '(-inf, '}{hi or 'inf)'}" if lo or hi else "")
    try:
        if isinstance(value, bool):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name}={value!r} is not allowed: expected {allowed}") from None
    if not math.isfinite(number):
        raise UserError(f"{name}={value!r} is not allowed: expected {allowed}")
    if low is not None and (number <= low if low_open else number < low):
        raise UserError(f"{name}={value!r} is out of range: expected {allowed}")
    if high is not None and (number >= high if high_open else number > high):
        raise UserError(f"{name}={value!r} is out of range: expected {allowed}")
    return number


def check_choice(name: str, value: Any, choices: Iterable) -> Any:
    """`value` if it is one of `choices`; else the error lists the valid names."""
    choices = list(choices)
    if value not in choices:
        raise UserError(f"{name}={value!r} is unknown; valid names: {', '.join(map(str, choices))}")
    return value


#: the longest name (a label, an env name) that becomes a folder of an output path
MAX_NAME_BYTES = 200


def check_name(name: str, value: Any) -> str:
    """A name that becomes one folder of an output path (a policy label, a study's env):
    a non-empty string, at most MAX_NAME_BYTES bytes, without '/', '\\', control
    characters or a leading '.' (so '..', hidden and absolute names are refused)."""
    allowed = (f"a non-empty name of at most {MAX_NAME_BYTES} bytes without '/', '\\', control characters "
               "or a leading '.'")
    if not isinstance(value, str) or not value or value.startswith(".") or len(value.encode()) > MAX_NAME_BYTES \
            or any(c in "/\\" or ord(c) < 32 or ord(c) == 127 for c in value):
        raise UserError(f"{name}={value!r} is not allowed: expected {allowed}")
    return value


# -- the `--set KEY=VALUE` parser ---------------------------------------------------------
def comma_items(text: str, keep_empty: bool = False) -> list[str]:
    """The one comma-list parse of a knob's or an option's text: "a, b,c" -> ["a", "b", "c"]
    (each item stripped); a blank text -> []. Empty items are dropped, or with `keep_empty`
    kept (as "") so the caller's check refuses "a,,b"."""
    if not text.strip():
        return []
    items = [item.strip() for item in text.split(",")]
    return items if keep_empty else [item for item in items if item]


def parse_value(text: str) -> Any:
    """The one value grammar of `--set KEY=VALUE` (and `hb scenarios --policy NAME:KNOB=VALUE`):
    `text` stripped, then JSON when it parses (numbers, true/false, null, lists, objects,
    "quoted"), None for None/none, else the plain string. The same value a grid file writes
    in TOML (0.5, true, [0, 1], "rank") reads the same here."""
    text = text.strip()
    if text in ("None", "none"):
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_sets(items: Iterable[str], flag: str = "--set") -> dict[str, Any]:
    """["env.lr=0.5", "policy.tau=0.1"] -> {"env.lr": 0.5, "policy.tau": 0.1} (in order;
    a repeated key keeps its last value; values by `parse_value`). Which keys a command takes
    and where they go: `hbsim.run_knobs.split_sets`."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"{flag} {item!r} is not allowed: expected KEY=VALUE")
        out[key] = parse_value(raw)
    return out
