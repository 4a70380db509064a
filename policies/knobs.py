"""The one knob schema: every configurable value of the project is a row of a `Knobs` table.

A `Knob` is (default, doc, range or choices); a `Knobs` table names the knobs of one
component -- a policy, an environment, a real-run preset, the TRL config, the run config
itself (`steps`, `seeds`, `batch_groups`, ...) -- and is the only place their defaults and
bounds are written. It

* validates once, at build: `table.resolve(values)` fills defaults, refuses an unknown key
  naming the valid ones, and checks every value with the one message format of
  `policies.validate` (`policy.tau=0 is out of range: expected a finite number in (0, 1e9]`);
* documents itself: `table.listing()` gives `hb policies`, `--help` and docstring lines;
* derives variants without copies: `table.without("alpha")`, `table.with_defaults(lr=1e-4)`,
  `table | {"gamma": Knob(...)}`.

Standard library and `policies.validate` only, so every package may use it.
"""
from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from policies.errors import UserError
from policies.validate import check_float, check_int


@dataclass(frozen=True)
class Knob:
    """One knob: its default, a doc line, and what is allowed.

    `type` is the default's type unless given (needed when the default is None);
    `optional` allows None (an "unset" value such as `max_memory_age = None`); `low`/`high`
    bound numbers (open ends with `low_open`/`high_open`); `choices` lists the valid values;
    `parse` replaces the type check for a structured value (it returns the canonical value
    or raises UserError with the name it is given)."""

    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    type: type | None = None
    optional: bool = False
    low_open: bool = False
    high_open: bool = False
    parse: Callable[[str, Any], Any] | None = None

    @property
    def kind(self) -> type:
        return self.type or type(self.default)

    def check(self, name: str, value: Any) -> Any:
        """`value` coerced to the knob's type (ints accepted for floats), or UserError."""
        if value is None and self.optional:
            return None
        if self.parse is not None:
            return self.parse(name, value)
        kind = self.kind
        if self.choices is not None:
            if isinstance(value, bool) != (kind is bool) or value not in self.choices:
                raise UserError(f"{name}={value!r} is not allowed: expected {self.allowed()}")
            return kind(value) if kind in (int, float, str) else value
        if kind is bool:
            if type(value).__name__ not in ("bool", "bool_"):
                raise UserError(f"{name}={value!r} is not allowed: expected true or false")
            return bool(value)
        if kind is int:
            return check_int(name, value, self.low, self.high)
        if kind is float:
            if isinstance(value, str):
                raise UserError(f"{name}={value!r} is not allowed: expected {self.allowed()}")
            return check_float(name, value, self.low, self.high, low_open=self.low_open, high_open=self.high_open)
        if not isinstance(value, kind):
            raise UserError(f"{name}={value!r} is not allowed: expected {self.allowed()}")
        return value

    def allowed(self) -> str:
        """What the knob accepts, in words."""
        if self.parse is not None:
            text = getattr(self.parse, "allowed", "see its doc")
        elif self.choices is not None:
            text = "one of " + ", ".join("'' (none)" if c == "" else str(c) for c in self.choices)
        elif self.kind is bool:
            text = "true or false"
        elif self.kind in (int, float):
            lo = "(-inf" if self.low is None else f"{'(' if self.low_open else '['}{self.low}"
            hi = "inf)" if self.high is None else f"{self.high}{')' if self.high_open else ']'}"
            word = "an integer" if self.kind is int else "a finite number"
            text = f"{word} in {lo}, {hi}"
        else:
            text = f"a {self.kind.__name__}"
        return text + (" or none" if self.optional else "")


class Knobs(Mapping):
    """An ordered, immutable table name -> Knob of one component.

    `scope` prefixes every message and listing key (`policy`, `env`, `trl`, or "" for the
    run config's top-level keys); `owner` names the component in the unknown-key message
    ("policy 'harnessbandit'")."""

    def __init__(self, knobs: Mapping[str, Knob] | None = None, *, scope: str = "", owner: str | None = None):
        self._knobs = dict(knobs or {})
        self.scope = scope
        self.owner = owner or (scope or "the run config")
        self._record: type | None = None

    # -- Mapping ------------------------------------------------------------------
    def __getitem__(self, name: str) -> Knob:
        return self._knobs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._knobs)

    def __len__(self) -> int:
        return len(self._knobs)

    def __repr__(self) -> str:
        return f"Knobs({self.owner}: {', '.join(self._knobs) or 'none'})"

    # -- values -------------------------------------------------------------------
    def key(self, name: str) -> str:
        """The knob's name as a user writes it (`policy.tau`, `env.lr`, `steps`)."""
        return f"{self.scope}.{name}" if self.scope else name

    def defaults(self) -> dict:
        return {name: knob.default for name, knob in self._knobs.items()}

    def check_names(self, names) -> None:
        """UserError for the first name the table does not have, listing the valid ones."""
        unknown = [n for n in names if n not in self._knobs]
        if unknown:
            valid = ", ".join(self._knobs) or "none"
            raise UserError(f"{self.owner} has no knob {unknown[0]!r}; valid knobs: {valid}")

    def check(self, name: str, value: Any) -> Any:
        self.check_names([name])
        return self._knobs[name].check(self.key(name), value)

    def resolve(self, values: Mapping[str, Any] | None = None) -> dict:
        """Every knob's value, in table order: defaults overridden by `values`, each checked."""
        values = dict(values or {})
        self.check_names(values)
        return {name: knob.check(self.key(name), values[name]) if name in values else knob.default
                for name, knob in self._knobs.items()}

    def settings(self, values: Mapping[str, Any] | None = None):
        """`resolve(values)` as a frozen record with attribute access (`cfg.tau`)."""
        return self.record(self.resolve(values))

    def record(self, resolved: Mapping[str, Any]):
        """The frozen record (a slots dataclass) of values that are already checked; knobs
        missing from `resolved` take their defaults (a variant's table may lack knobs that
        its family's code still reads)."""
        if self._record is None:
            fields = [(name.replace("-", "_"), Any) for name in self._knobs]
            self._record = dataclasses.make_dataclass("Settings", fields, frozen=True, slots=True)
        return self._record(*(resolved[n] if n in resolved else k.default for n, k in self._knobs.items()))

    # -- variants -----------------------------------------------------------------
    def _derive(self, knobs: dict, scope: str | None, owner: str | None) -> "Knobs":
        return Knobs(knobs, scope=self.scope if scope is None else scope,
                     owner=self.owner if owner is None else owner)

    def without(self, *names: str, owner: str | None = None) -> "Knobs":
        """The table minus `names` (a variant that never reads them)."""
        self.check_names(names)
        return self._derive({k: v for k, v in self._knobs.items() if k not in names}, None, owner)

    def with_defaults(self, owner: str | None = None, **defaults) -> "Knobs":
        """The same knobs with other defaults (each checked against its knob)."""
        self.check_names(defaults)
        knobs = dict(self._knobs)
        for name, value in defaults.items():
            knobs[name] = dataclasses.replace(knobs[name], default=knobs[name].check(self.key(name), value))
        return self._derive(knobs, None, owner)

    def __or__(self, more: Mapping[str, Knob]) -> "Knobs":
        """The table with `more` knobs appended (or replaced, keeping their position)."""
        return self._derive({**self._knobs, **dict(more)}, None, None)

    def named(self, owner: str | None = None, scope: str | None = None) -> "Knobs":
        """The same knobs under another owner/scope."""
        return self._derive(dict(self._knobs), scope, owner)

    # -- documentation ------------------------------------------------------------
    def listing(self, indent: str = "") -> list[str]:
        """One line per knob: `name = default: doc (allowed)`."""
        return [f"{indent}{name} = {knob.default!r}: {knob.doc} ({knob.allowed()})"
                for name, knob in self._knobs.items()]

    def docstring(self, doc: str | None) -> str:
        """`doc` with a "Knobs:" section generated from the table (for a class docstring)."""
        return (doc or "").rstrip() + "\n\n    Knobs:\n" + "\n".join(self.listing("    ")) + "\n"


def int_list(low: int = 0, high: int | None = None, *, min_len: int = 0, distinct: bool = True):
    """A `Knob.parse` for a list of integers in [low, high] (None: unbounded), at least
    `min_len` long, distinct if asked; returns a list of Python ints."""
    def parse(name: str, value: Any) -> list[int]:
        allowed = parse.allowed
        if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
            raise UserError(f"{name}={value!r} is not allowed: expected {allowed}")
        items = list(value)
        if any(isinstance(x, bool) or not hasattr(x, "__index__") for x in items):
            raise UserError(f"{name}={value!r} is not allowed: expected {allowed}")
        items = [operator.index(x) for x in items]
        if (len(items) < min_len or any(x < low for x in items) or (high is not None and any(x > high for x in items))
                or (distinct and len(set(items)) != len(items))):
            raise UserError(f"{name}={value!r} is not allowed: expected {allowed}")
        return items
    upper = "inf" if high is None else high
    parse.allowed = (f"a list of {'distinct ' if distinct else ''}integers in [{low}, {upper}]"
                     + (f" with at least {min_len} item{'s' * (min_len != 1)}" if min_len else ""))
    return parse
