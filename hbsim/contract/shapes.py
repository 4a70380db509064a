"""The shape of every record hb reads back (one validator per record kind): a JSON file
that parses is not yet the record hb wrote. Each reader hands what it parsed to `check`
with the record kind's table before it uses a field, so a record of the wrong shape (a
list, a field of another type, a design without its setting) is one line naming the file
and the field, never a traceback, and it is found before any work starts.

    MARKER        .hb-kind.json (hbsim.contract.folders.read_marker)
    GRID_RECORD   DIR/grid.json (hbsim.contract.records.read_grid_record; each `planned` entry [id, label, seed])
    RUN_RECORD    run.json of a run directory (hbsim.contract.records.read_meta)
    TUNE_RECORD   DIR/tune.json of a tuned grid (hbsim.contract.records.read_tune; ablations.tune, reports.budget)

A table maps a field to its type (or tuple of types); a field whose name ends in "?" may
be absent (or null). `each` checks every value of a mapping or list field against a table
of its own. `read_record(path, shape, what, remedy)` is the one reader of a JSON record:
parsed (an unreadable file is one line) and, given a shape, checked. Standard library and
`policies.errors` only.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from policies.errors import UserError

NUMBER = (int, float)
MARKER = {"kind": str, "config_hash?": str, "tool?": str, "state?": str, "command?": str, "files?": list}
GRID_RECORD = {"name?": str, "names?": list, "spec?": dict, "planned?": list}
GRID_SPEC = {"path?": str, "raw?": dict}
RUN_RECORD = {"config?": dict, "config_hash?": str, "label?": str, "policy?": str, "seed?": int, "grid?": dict}
RUN_GRID = {"sweep?": dict, "label?": str, "cell_id?": str, "name?": str}
RUN_CONFIG = {"env?": dict, "policy?": dict}
#: a running real grid cell's last finished step (`real_runs.resume.cell_checkpoints` writes it)
CELL_PROGRESS_RECORD = {"step": int, "steps": int, "seconds_step": NUMBER, "time": str}
TUNE_RECORD = {"seeds": list, "test_seeds": list, "target": str, "knobs": dict, "designs": dict, "rule?": str}
TUNE_DESIGN = {"setting": dict, "score?": NUMBER, "points?": list}


def check(path: str | os.PathLike, record: Any, table: dict, what: str, remedy: str, where: str = "") -> dict:
    """`record` (parsed JSON) as the `table` says, or UserError: '<path>: <what> of the wrong
    shape (<where><field> is ..., expected ...); <remedy>'. Returns the record."""
    def bad(problem: str):
        raise UserError(f"{path}: {what} of the wrong shape ({problem}); {remedy}")

    if not isinstance(record, dict):
        bad(f"{where or 'the record'} is a JSON {type(record).__name__}, expected an object")
    for key, types in table.items():
        name, optional = key.rstrip("?"), key.endswith("?")
        value = record.get(name)
        if value is None and optional:
            continue
        if name not in record:
            bad(f"{where}{name} is missing")
        if not isinstance(value, types) or isinstance(value, bool) and bool not in _tuple(types):
            expected = " or ".join(t.__name__ for t in _tuple(types))
            bad(f"{where}{name}={_short(value)} is a {type(value).__name__}, expected {expected}")
    return record


def read_record(path: str | os.PathLike, shape: dict | None, what: str, remedy: str) -> Any:
    """The JSON record at `path`, parsed, and checked against `shape` (`check`; None: parsed
    only, the caller checks a record of several shapes). An unreadable file (missing, not
    UTF-8, not JSON) is UserError '<path>: unreadable <what> (<why>); <remedy>'."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise UserError(f"{path}: unreadable {what} ({str(exc)[:200]}); {remedy}") from None
    return record if shape is None else check(path, record, shape, what, remedy)


def each(path, values: Any, table: dict, what: str, remedy: str, where: str) -> None:
    """Every value of the mapping (or list) `values` as `table` says (`check`)."""
    items = values.items() if isinstance(values, dict) else enumerate(values)
    for key, value in items:
        check(path, value, table, what, remedy, f"{where}[{key!r}].")


def strings(path, values: list, what: str, remedy: str, where: str) -> None:
    """A list field whose entries must all be strings (a marker's files)."""
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise UserError(f"{path}: {what} of the wrong shape ({where}[{i}]={_short(value)} is a "
                            f"{type(value).__name__}, expected str); {remedy}")


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
