"""The one validation module: value checks, the `--set` parser and output-folder checks.

Every user-facing check of the project lives here and raises `policies.errors.UserError`
(one line naming the field, the bad value and what is allowed; `hb` prints it and exits
2). The module imports only the standard library and `policies.errors`, so it sits at the
root of the dependency graph and every package (reports included) may import it.

Output folders. Every folder an `hb` tool writes into has a KIND, recorded in the marker
file `.hb-kind.json` ({"kind", "config_hash", "tool"}) written when the tool first writes:

    sim     `hb sim --out DIR`: DIR/<label>/seed<seed>/ run directories
    run     `hb real --out DIR`: one run directory (+ checkpoints/)
    grid    `hb grid run` / `hb demo`: grid.json, cells/, failed/, collected tables
    report  `hb report --out DIR` / `hb validity --out DIR`: index.html, report.md, CSVs, figures
    study   `hb validity DIR --study FILE`: DIR/<env>/<label>/seed<seed>/ run directories

`check_output_dir` runs before any work and writes nothing: a path that is a file, not
writable or too long is refused; a missing or empty folder is new; a folder with our
marker of the same kind (and config hash, where the tool records one) is resumed; any
other non-empty folder -- another kind, another config, or a folder hb did not create --
is refused unless the tool's `--force` is given. Folders written before markers existed
are adopted when their contents are unmistakably ours (`legacy_kind`).
"""
from __future__ import annotations

import json
import math
import operator
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterable

from policies.errors import UserError

# -- size bounds (generous, but a typo of a few digits is refused instead of hanging) --
MAX_STEPS = 1_000_000        # optimizer steps of one run
MAX_SEEDS = 10_000           # seeds of one `hb sim` call or grid
MAX_SEED = 2**32 - 1         # a seed value (numpy's SeedSequence accepts any, we keep 32 bits)
MAX_JOBS = 1024              # worker processes
MAX_BATCH_GROUPS = 100_000   # groups per optimizer step
MAX_RESAMPLES = 1_000_000    # bootstrap / permutation resamples

#: marker file of an output folder, and the kinds it may record
KIND_FILE = ".hb-kind.json"
KINDS = {"sim": "an `hb sim` folder of run directories", "run": "a run directory (`hb real`)",
         "grid": "a grid directory", "report": "a report folder",
         "study": "an `hb validity --study` folder of run directories"}
#: bytes kept free below PATH_MAX for the files a tool creates inside its output folder
PATH_RESERVE = 96


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


# -- the `--set KEY=VALUE` parser ---------------------------------------------------------
def parse_value(text: str) -> Any:
    """JSON when it parses (numbers, true/false/null, lists, "quoted"), None for None/none,
    else the plain string."""
    if text in ("None", "none"):
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_sets(items: Iterable[str], flag: str = "--set") -> dict[str, Any]:
    """["env.lr=0.5", "policy.tau=0.1"] -> {"env.lr": 0.5, "policy.tau": 0.1} (in order;
    a repeated key keeps its last value). Each tool routes the keys it accepts."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"{flag} {item!r} is not allowed: expected KEY=VALUE")
        out[key] = parse_value(raw)
    return out


# -- output folders ---------------------------------------------------------------------
def current_umask() -> int:
    """The process umask, read without changing it where Linux allows."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # pragma: no cover - not Linux
    os.umask(mask)
    return mask


def dir_mode() -> int:
    """The mode a plain mkdir would give under the user's umask (for mkdtemp'd folders)."""
    return 0o777 & ~current_umask()


def _exists(path: Path) -> bool:
    try:
        path.stat()
    except OSError:  # missing, or a name too long to look up
        return False
    return True


def _existing_ancestor(path: Path) -> Path:
    probe = path
    while not _exists(probe) and probe.parent != probe:
        probe = probe.parent
    return probe


def _pathconf(path: Path, name: str, default: int) -> int:
    try:
        value = os.pathconf(path, name)
    except (OSError, ValueError, AttributeError):
        return default
    return value if value and value > 0 else default


def check_path_length(path: str | os.PathLike, flag: str = "--out", reserve: int = PATH_RESERVE) -> None:
    """Each component <= NAME_MAX bytes and the absolute path <= PATH_MAX - `reserve`
    bytes (room for the files created inside), from os.pathconf or 255 / 4096."""
    absolute = Path(os.path.abspath(path))
    base = _existing_ancestor(absolute)
    name_max = _pathconf(base if base.is_dir() else base.parent, "PC_NAME_MAX", 255)
    path_max = _pathconf(base if base.is_dir() else base.parent, "PC_PATH_MAX", 4096)
    for part in absolute.parts:
        if len(os.fsencode(part)) > name_max:
            raise UserError(f"{flag} {str(path)[:60]!r}...: the name {part[:40]!r}... has {len(os.fsencode(part))} "
                            f"bytes; allowed: at most {name_max} per folder name")
    total = len(os.fsencode(str(absolute)))
    if total > path_max - reserve:
        raise UserError(f"{flag} {str(path)[:60]!r}...: the path has {total} bytes; allowed: at most "
                        f"{path_max - reserve} (PATH_MAX {path_max} less room for the files inside)")


def check_writable(path: str | os.PathLike, flag: str = "--out") -> None:
    """Refuse a path that is a file, or a folder that is not (or cannot be created) writable.

    An existing folder is checked with access(2) and not touched; for a folder still to
    be created, a probe file is created and removed in its nearest existing ancestor.
    """
    root = Path(path)
    probe = _existing_ancestor(root)
    if probe.exists() and not probe.is_dir():
        what = "is a file" if probe == root else f"lies under {str(probe)!r}, which is a file"
        raise UserError(f"{flag} {str(root)!r} {what}, not a folder; choose a folder path")
    if probe == root:
        if not os.access(root, os.R_OK | os.W_OK | os.X_OK):
            raise UserError(f"{flag} {str(root)!r}: the folder is not writable (or not readable); "
                            "choose a writable folder")
        return
    try:
        fd, name = tempfile.mkstemp(prefix=".hb-probe-", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise UserError(f"{flag} {str(root)!r}: cannot create it: {str(probe)!r} is not writable "
                        f"({exc.strerror or exc}); choose a writable folder") from None


def read_marker(path: str | os.PathLike) -> dict | None:
    """The marker record of a folder ({"kind", "config_hash", "tool"}), or None."""
    marker = Path(path) / KIND_FILE
    if not marker.is_file():
        return None
    try:
        record = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{marker}: unreadable folder marker ({exc}); expected the JSON hb writes") from None
    if not isinstance(record, dict) or record.get("kind") not in KINDS:
        raise UserError(f"{marker}: kind={record.get('kind') if isinstance(record, dict) else record!r} "
                        f"is unknown; valid kinds: {', '.join(KINDS)}")
    return record


_SEED_DIR = re.compile(r"seed\d+")


def _visible(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if not p.name.startswith("."))


def legacy_kind(path: str | os.PathLike) -> str | None:
    """The kind of a folder written before markers existed, when unmistakably ours:
    grid (grid.json), run (run.json or checkpoints/last.pt), report (index.html + report.md),
    sim (every entry a <label>/ folder of seed<N>/ run directories, or a report folder),
    study (every entry a sim folder: <env>/<label>/seed<N>/)."""
    p = Path(path)
    if (p / "grid.json").is_file():
        return "grid"
    if (p / "run.json").is_file() or (p / "checkpoints" / "last.pt").is_file():
        return "run"
    if (p / "index.html").is_file() and (p / "report.md").is_file():
        return "report"
    entries = _visible(p)
    if entries and all(e.is_dir() and legacy_kind(e) == "sim" for e in entries):
        return "study"
    runs = 0
    for entry in _visible(p):
        if not entry.is_dir():
            return None
        if _kind_of(entry) == "report":
            continue
        seeds = _visible(entry)
        if not seeds or not all(_SEED_DIR.fullmatch(s.name) and (s / "run.json").is_file() for s in seeds):
            return None
        runs += len(seeds)
    return "sim" if runs else None


def _kind_of(path: Path) -> str | None:
    record = read_marker(path)
    return record["kind"] if record else legacy_kind(path)


def _remedy(force_flag: str | None) -> str:
    return f"choose a new path or pass {force_flag}" if force_flag else "choose a new path"


def check_output_dir(path: str | os.PathLike, kind: str, config_hash: str | None = None, *,
                     force: bool = False, flag: str = "--out", force_flag: str | None = "--force") -> str:
    """Validate the output folder of a `kind` tool BEFORE any work; writes nothing.

    Returns "new" (missing or empty), "resume" (ours, same kind and config hash, or one of
    them unrecorded) or "forced" (a conflict overridden by `force`). Raises UserError for
    a file, an unwritable or too long path, and (unless `force`) a folder of another kind,
    of another config hash, or not created by hb. `force_flag` is the option the message
    suggests (None: the tool has none).
    """
    check_choice("kind", kind, KINDS)
    root = Path(path)
    check_path_length(root, flag)
    check_writable(root, flag)
    if not root.exists() or not any(root.iterdir()):
        return "new"
    record = read_marker(root)
    found = record["kind"] if record else legacy_kind(root)
    if found is None:
        example = ", ".join(p.name for p in _visible(root)[:3]) or "hidden files"
        problem = f"is a non-empty folder that hb did not create (no {KIND_FILE}; it holds {example})"
    elif found != kind:
        problem = f"is {KINDS[found]}, not {KINDS[kind]}"
    elif config_hash is not None and record and record.get("config_hash") not in (None, config_hash):
        problem = (f"holds {KINDS[kind]} of another configuration (config hash {record['config_hash']}, "
                   f"this call {config_hash})")
    else:
        return "resume"
    if force:
        return "forced"
    raise UserError(f"{flag} {str(root)!r} {problem}; nothing was written: {_remedy(force_flag)}")


def claim_output_dir(path: str | os.PathLike, kind: str, config_hash: str | None = None,
                     tool: str | None = None) -> Path:
    """Create the folder (as mkdir does under the user's umask) and record its kind in
    `.hb-kind.json` (atomic replace; left as is when it already says the same)."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    record = {"kind": kind, "config_hash": config_hash, "tool": tool or f"hb {kind}"}
    try:
        if read_marker(root) == record:
            return root
    except UserError:
        pass  # an unreadable marker is replaced
    tmp = root / f".{KIND_FILE}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(record, sort_keys=True) + "\n")
    os.replace(tmp, root / KIND_FILE)
    return root


def check_resume_dir(path: str | os.PathLike, checkpoint: str = "checkpoints/last.pt",
                     flag: str = "--out") -> Path:
    """Refuse `--resume` of a run directory that cannot be resumed; returns the checkpoint path.

    Call it before any work when the user asked to resume a run (e.g. `hb real --resume
    --out DIR`). Raises UserError, naming the folder and what to do, when DIR
    * does not exist, or is not a folder ("nothing to resume; drop --resume to start"),
    * is empty,
    * is not a run directory of ours (another kind per `.hb-kind.json`, or a folder hb did
      not create),
    * is ours but holds no `checkpoint` (relative to DIR, a glob pattern such as
      "trl/checkpoint-*/harnessbandit.pt"): the run never reached its first checkpoint, so
      resuming it would silently start from nothing.
    Nothing is written.
    """
    root = Path(path)
    if not root.exists():
        raise UserError(f"--resume {flag} {str(root)!r}: the folder does not exist, so there is nothing to "
                        f"resume; drop --resume to start a new run")
    if not root.is_dir():
        raise UserError(f"--resume {flag} {str(root)!r} is a file, not a run directory")
    if not any(root.iterdir()):
        raise UserError(f"--resume {flag} {str(root)!r}: the folder is empty, so there is nothing to resume; "
                        f"drop --resume to start a new run")
    found = _kind_of(root)
    if found != "run":
        what = f"is {KINDS[found]}" if found else f"was not created by hb (no {KIND_FILE}, no run.json)"
        raise UserError(f"--resume {flag} {str(root)!r} {what}, not a run directory; nothing was written")
    found = sorted(p for p in root.glob(checkpoint) if p.is_file())
    if not found:
        raise UserError(f"--resume {flag} {str(root)!r} holds no checkpoint ({checkpoint}): the run stopped "
                        f"before its first checkpoint; drop --resume and use a new --out to start over")
    return found[-1]


# -- collected grid tables ----------------------------------------------------------------
def stale_collected_tables(root: str | os.PathLike) -> str | None:
    """Why the collected tables of grid directory `root` are stale, or None when they
    are current (or absent, or `root` is not a grid): a cell finished after them."""
    root = Path(root)
    tables = [root / "eval.parquet", root / "train.parquet"]
    cells = root / "cells"
    if not (root / "grid.json").is_file() or not cells.is_dir() or not all(t.is_file() for t in tables):
        return None
    collected = min(t.stat().st_mtime_ns for t in tables)
    newer = [c.name for c in cells.iterdir() if not c.name.startswith(".")
             and (c / "run.json").is_file() and (c / "run.json").stat().st_mtime_ns > collected]
    if not newer:
        return None
    return (f"{len(newer)} cell(s) finished after the collected tables were written "
            f"(e.g. {sorted(newer)[0]})")
