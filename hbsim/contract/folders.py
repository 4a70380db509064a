"""Output folders: the one place that checks where a tool may write and records, in each
folder's marker, what kind of output it holds and which files hb wrote there.

Every folder an `hb` tool writes into has a KIND (`hbsim.contract.KINDS`), recorded in
the marker file `.hb-kind.json` ({"kind", "config_hash", "tool", "state", "command",
"files"}). The marker is written FIRST, before the tool's first other write, with state
"incomplete" and the command line (`claim_output_dir`), and completed LAST (state
"complete", `files`: every file hb wrote there, relative; `complete_output_dir`): a
folder whose command was killed still says it is ours and is resumed (or overwritten)
by the rerun, and `--force` removes only files the marker lists.

    sim     `hb sim --out DIR`: DIR/<label>/seed<seed>/ run directories
    run     `hb real --out DIR`: one run directory (+ checkpoints/)
    grid    `hb grid run` / `hb demo`: grid.json, cells/, failed/, collected tables
    report  `hb report --out DIR` / `hb validity --out DIR`: index.html, report.md, CSVs, figures
    study   `hb validity DIR --study FILE`: DIR/<env>/<label>/seed<seed>/ run directories

`check_output_dir` runs before any work and writes nothing: a path that is a file, not
writable or too long, or that lies inside another hb folder (through symlinks too; only a
report folder may be a direct child of the grid, run, sim or study folder it reports on,
and never lie in a grid's cells/), is refused; a missing or empty folder is new; a folder with our
marker of the same kind (and config hash, where the tool records one) is resumed; any
other non-empty folder -- another kind, another config, or a folder hb did not create --
is refused unless the tool's `--force` is given. Folders written before markers existed
are adopted when their contents are unmistakably ours (`legacy_kind`).

Claiming a folder (the marker written first), completing it and undoing a refused claim is
`hbsim.contract.markers`. Files are written with `hbsim.contract.atomic` (atomic replace under the user's umask, temporaries
a killed writer left removed by the rerun); a claimed folder is tracked there, so
`complete_output_dir` lists every file this process wrote in it.
Standard library, `policies`, `hbsim.contract`, `hbsim.contract.atomic` and `hbsim.contract.shapes` only.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from hbsim.contract import shapes
from hbsim.contract.atomic import (_is_temp, atomic_write, remove_temp, track_writes, tracked_writes, untrack_writes,
                          visible)
from hbsim.contract import (CELLS, CHECKPOINT, EVAL_FILE, GRID_JSON, KIND_FILE, KIND_FOLDERS, KIND_OUTPUTS, KINDS,
                            TUNE_DIR, REPORT_INDEX, REPORT_MARKDOWN, RUN_JSON, TRAIN_FILE)
from policies.errors import UserError
from policies.validate import MAX_NAME_BYTES, check_choice

#: the longest path hb adds below a run's folder: a run directory's temporary and the temporary of
#: its longest file (`.tmp-seed4294967295-<pid>-XXXXXXXX/.tmp-counterfactual.parquet-<pid>-XXXXXXXX.parquet`),
#: a report's `rliable/` or `figures/` file, DIR/stress/figures/...: 96 bytes
RUN_PATH_BYTES = 96
#: bytes kept free below PATH_MAX for what a tool creates inside its output folder: the longest
#: names hb adds, a study's <env>/<label>/ (each a user's name of up to MAX_NAME_BYTES), then the
#: run directory's own path (RUN_PATH_BYTES)
PATH_RESERVE = 2 * (MAX_NAME_BYTES + 1) + RUN_PATH_BYTES

# -- paths -----------------------------------------------------------------------------------
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
    base = base if base.is_dir() else base.parent
    name_max, path_max = _pathconf(base, "PC_NAME_MAX", 255), _pathconf(base, "PC_PATH_MAX", 4096)
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
    for below in [root, *root.parents]:         # the missing part of the path: a broken link or a loop there
        if below == probe:
            break
        expect_folder(below, flag, root)
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


def expect_folder(path: Path, flag: str = "--out", root: Path | None = None) -> None:
    """Where hb expects a folder (to create or to write into): nothing, or a real folder.
    UserError, one line, for a file, a symbolic link (hb would write wherever it points; only
    the --out itself may be a link), a broken link or a link loop."""
    where = f"{flag} {str(root if root is not None else path)!r}"
    if root not in (None, path):
        where += f": {str(path)!r}"
    if path.is_symlink():
        try:
            target = path.resolve(strict=True)
        except (OSError, RuntimeError):    # missing target, or a loop (RuntimeError before 3.13)
            raise UserError(f"{where} is a broken symbolic link (or a link loop) where hb expects a folder; "
                            "nothing was written: remove the link or choose another path") from None
        if root is not None and path != root:
            raise UserError(f"{where} is a symbolic link (to {str(target)!r}) where hb writes a folder of its "
                            "own: hb does not write through links below --out; nothing was written: replace the "
                            "link by a folder or choose a new path")
    if _exists(path) and not path.is_dir():
        raise UserError(f"{where} is a file where hb expects a folder; nothing was written: move it away or "
                        "choose a new path")


def _matching(root: Path, pattern: str) -> list[Path]:
    """The visible entries below `root` matching a KIND_FOLDERS / KIND_OUTPUTS pattern
    ('/'-separated names, `*` in a name: any), without following symbolic links."""
    found = [root]
    for name in pattern.split("/"):
        below = []
        for folder in found:
            if folder != root and (folder.is_symlink() or not folder.is_dir()):
                continue
            if any(c in name for c in "*?["):
                below += [p for p in visible(folder) if fnmatch.fnmatchcase(p.name, name)]
            elif os.path.lexists(folder / name):
                below.append(folder / name)
        found = below
    return found


def check_subfolders(root: Path, kind: str, flag: str = "--out") -> list[Path]:
    """Every folder hb writes into inside a `kind` folder (`contract.KIND_FOLDERS`) that exists
    must be a real folder (`expect_folder`; an entry a wildcard matches only when it is a
    link: a user's file beside them is no concern); returns those folders, root first."""
    folders = [root]
    for pattern in KIND_FOLDERS[kind]:
        for path in _matching(root, pattern):
            wild = "*" in pattern.rsplit("/", 1)[-1]
            if not wild or path.is_symlink():
                expect_folder(path, flag, root)
            if path.is_dir() and not path.is_symlink():
                folders.append(path)
    return folders


def foreign_outputs(root: Path, kind: str, record: dict | None) -> list[str]:
    """The entries of `root` with a name hb writes in a `kind` folder (`contract.KIND_OUTPUTS`)
    that its marker does not list as hb's (relative paths, sorted): what `--force` would replace."""
    listed = set((record or {}).get("files") or [])
    found = set()
    for pattern in KIND_OUTPUTS[kind]:
        for path in _matching(root, pattern):
            rel = path.relative_to(root).as_posix()
            parts = rel.split("/")
            if any("/".join(parts[:i]) in listed for i in range(1, len(parts) + 1)):
                continue
            if path.is_dir() and not path.is_symlink() and any(f.startswith(rel + "/") for f in listed):
                continue
            found.add(rel)
    return sorted(found)


# -- kinds -----------------------------------------------------------------------------------
def read_marker(path: str | os.PathLike) -> dict | None:
    """The marker record of a folder ({"kind", "config_hash", "tool"}), or None."""
    marker = Path(path) / KIND_FILE
    if not marker.is_file():
        if marker.exists() or marker.is_symlink():
            raise UserError(f"{marker}: the folder marker is not a file (a folder or a broken link); "
                            "remove it and run again")
        return None
    record = shapes.read_record(marker, None, "folder marker", "expected the JSON hb writes")
    remedy = "expected the JSON hb writes: remove it and run again"
    shapes.check(marker, record, shapes.MARKER, "folder marker", remedy)
    if record["kind"] not in KINDS:
        raise UserError(f"{marker}: kind={record['kind']!r} is unknown; valid kinds: {', '.join(KINDS)}")
    shapes.strings(marker, record.get("files") or [], "folder marker", remedy, "files")
    return record


_SEED_DIR = re.compile(r"seed\d+")


def legacy_kind(path: str | os.PathLike) -> str | None:
    """The kind of a folder written before markers existed, when unmistakably ours:
    grid (grid.json), run (run.json or checkpoints/last.pt), report (index.html + report.md),
    sim (every entry a <label>/ folder of seed<N>/ run directories, or a report folder),
    study (every entry a sim folder: <env>/<label>/seed<N>/)."""
    p = Path(path)
    if (p / GRID_JSON).is_file():
        return "grid"
    if (p / RUN_JSON).is_file() or (p / CHECKPOINT).is_file():
        return "run"
    if (p / REPORT_INDEX).is_file() and (p / REPORT_MARKDOWN).is_file():
        return "report"
    entries = visible(p)
    if entries and all(e.is_dir() and legacy_kind(e) == "sim" for e in entries):
        return "study"
    runs = 0
    for entry in entries:
        if not entry.is_dir():
            return None
        if _kind_of(entry) == "report":
            continue
        seeds = visible(entry)
        if not seeds or not all(_SEED_DIR.fullmatch(s.name) and (s / RUN_JSON).is_file() for s in seeds):
            return None
        runs += len(seeds)
    return "sim" if runs else None


def _kind_of(path: Path) -> str | None:
    record = read_marker(path)
    return record["kind"] if record else legacy_kind(path)


def _hb_kind_here(path: Path) -> str | None:
    """The kind of `path` when it is an hb folder, from cheap evidence only (its marker,
    grid.json, run.json or a checkpoint); None for anything else, unreadable included."""
    try:
        record = read_marker(path)
    except UserError:
        return None
    if record:
        return record["kind"]
    if (path / GRID_JSON).is_file():
        return "grid"
    if (path / RUN_JSON).is_file() or (path / CHECKPOINT).is_file():
        return "run"
    return None


def _kind_phrase(path: Path, found: str) -> str:
    """What `_hb_kind_here` found at `path`, in words: KINDS' phrase, except a run directory
    known only by its run.json or checkpoint (one seed of `hb sim` or `hb validity --study`
    has no marker of its own), which is not said to be `hb real`'s."""
    if found == "run" and not (path / KIND_FILE).is_file():
        return "a run directory (it holds run.json or a checkpoint)"
    return KINDS[found]


#: ioctl FS_IOC_GETFLAGS and its immutable / append-only bits (Linux)
_GETFLAGS, _IMMUTABLE, _APPEND = 0x80086601, 0x10, 0x20


def _locked(path: Path) -> bool:
    """Whether `path` is immutable or append-only (chattr +i / +a): nothing can replace it."""
    import fcntl
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        buf = fcntl.ioctl(fd, _GETFLAGS, b"\0" * 8)
    except OSError:           # the file system has no such flags
        return False
    finally:
        os.close(fd)
    return bool(int.from_bytes(buf[:4], sys.byteorder) & (_IMMUTABLE | _APPEND))


def check_replaceable(root: Path, kind: str, flag: str = "--out") -> None:
    """Refuse, before any write, a folder whose files hb replaces cannot be replaced (an
    immutable or append-only file: chattr +i / +a): the command would stop half way,
    leaving some files new and some old. Checks the files of the folder (the marker included)
    and of every folder hb writes inside it (`check_subfolders`: figures/, stress/, ...)."""
    for folder in check_subfolders(root, kind, flag):
        if folder.name == CELLS:              # cells are written whole (a new folder renamed in)
            continue
        for entry in sorted(folder.iterdir()):
            if entry.is_file() and not entry.is_symlink() and _locked(entry):
                raise UserError(f"{flag} {str(root)!r}: {str(entry)!r} is immutable or append-only (chattr), so "
                                "hb cannot replace it; nothing was written: lift the flag or choose a new path")


def check_not_nested(path: str | os.PathLike, kind: str, flag: str = "--out") -> None:
    """Refuse an output folder inside another hb folder (symlinks resolved): its readers
    would take it for their own data (a run in GRID/cells/ breaks `hb grid collect`). A
    report folder may be a direct child of the folder it reports on (`hb report DIR`
    writes DIR/report), and a grid's tuning phase is a grid at GRID/tune (`ablations.tune`);
    never deeper and never inside a grid's cells/."""
    real = Path(os.path.realpath(path))
    for parent in real.parents:
        if parent.name == CELLS and _hb_kind_here(parent.parent) == "grid":
            raise UserError(f"{flag} {str(path)!r} lies inside {str(parent)!r}, the cells of a grid directory; "
                            f"nothing was written: choose a path outside it")
    for depth, parent in enumerate(real.parents):
        found = _hb_kind_here(parent)
        if found is None:
            continue
        if kind == "report" and depth == 0 and found != "report":
            return
        if kind == "grid" and depth == 0 and found == "grid" and real.name == TUNE_DIR:
            return
        raise UserError(f"{flag} {str(path)!r} lies inside {str(parent)!r}, which is {_kind_phrase(parent, found)}; "
                        f"nothing was written: choose a path outside it")


def check_output_file(path: str | os.PathLike, ours, *, force: bool = False, flag: str = "--out",
                      tool: str = "hb") -> str:
    """Validate a FILE a tool writes at the user's path (`hb twin fit --out TWIN.toml` and the
    figure beside it) BEFORE any work; writes nothing. The file's own mark says hb wrote it
    (`ours(path)`: e.g. the TOML's first line, the PNG's Software tag), as a marker does a
    folder's. Refused, one line: a path too long, a folder, a symbolic link (broken or not: hb
    replaces files, never links), a named pipe or device, a folder it cannot write, a path inside another hb folder
    (`check_not_nested`, never forced: a run directory, a grid's cells/), and (unless `force`)
    an existing file `ours` does not recognise. Returns "new" or "replace"."""
    path = Path(path)
    check_path_length(path, flag, reserve=RUN_PATH_BYTES)
    if path.is_symlink():
        raise UserError(f"{flag} {str(path)!r} is a symbolic link (to {os.readlink(path)!r}); hb replaces files, "
                        "never links; nothing was written: remove the link or choose another path")
    if path.is_dir():
        raise UserError(f"{flag} {str(path)!r} is a folder; expected the path of a file")
    if _exists(path) and not path.is_file():
        raise UserError(f"{flag} {str(path)!r} is not a regular file (a named pipe, a device or a socket); nothing "
                        "was written: choose another path")
    above = _existing_ancestor(path.parent)
    if above.exists() and not above.is_dir():       # the FILE's path names: check_writable would name the folder
        raise UserError(f"{flag} {str(path)!r} lies under {str(above)!r}, which is a file, not a folder; nothing was "
                        "written: choose another path")
    check_writable(path.parent, flag)
    check_not_nested(path, "file", flag)
    if not path.exists():
        return "new"
    if not force and not ours(path):
        raise UserError(f"{flag}: {str(path)!r} exists and was not written by {tool}; nothing was written: choose "
                        "another path or pass --force")
    return "replace"


def claim_output_file(path: str | os.PathLike) -> Path:
    """Before the first write of a file checked by `check_output_file`: its folder created
    (under the user's umask) and the temporaries of this file a killed writer left there
    removed (`remove_temp`; only this file's: the folder is the user's)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_temp(path.parent, path.name)
    return path


def check_output_dir(path: str | os.PathLike, kind: str, config_hash: str | None = None, *,
                     force: bool = False, flag: str = "--out", force_flag: str | None = "--force") -> str:
    """Validate the output folder of a `kind` tool BEFORE any work; writes nothing.

    Returns "new" (missing or empty), "resume" (ours, same kind and config hash, or one of
    them unrecorded; also when the marker says "incomplete": a killed command's folder)
    or "forced" (a conflict overridden by `force`). Raises UserError for a file, an
    unwritable or too long path, a path inside another hb folder (`check_not_nested`,
    never forced), and (unless `force`) a folder of another kind, of another config hash,
    or not created by hb. `force_flag` is the option the message suggests (None: the tool
    has none).
    """
    check_choice("kind", kind, KINDS)
    root = Path(path)
    check_path_length(root, flag)
    check_writable(root, flag)
    check_not_nested(root, kind, flag)
    expect_folder(root, flag)
    if not root.exists() or not any(not _is_temp(e) for e in root.iterdir()):   # a killed claim's temporary only
        return "new"
    check_replaceable(root, kind, flag)
    record = read_marker(root)
    found = record["kind"] if record else legacy_kind(root)
    if found is None:
        example = ", ".join(p.name for p in visible(root)[:3]) or "hidden files"
        problem = f"is a non-empty folder that hb did not create (no {KIND_FILE}; it holds {example})"
    elif found != kind:
        problem = f"is {KINDS[found]}, not {KINDS[kind]}"
    elif config_hash is not None and record and record.get("config_hash") not in (None, config_hash):
        problem = (f"holds {KINDS[kind]} of another configuration (config hash {record['config_hash']}, "
                   f"this call {config_hash})")
    else:
        return "resume"
    if force:
        theirs = foreign_outputs(root, kind, record)
        if theirs:
            more = f" (and {len(theirs) - 1} more)" if len(theirs) > 1 else ""
            raise UserError(f"{flag} {str(root)!r} {problem}: {force_flag or '--force'} writes into it but never "
                            f"replaces a file hb did not write, and {theirs[0]!r}{more} is a name hb writes there; "
                            "nothing was written: move it away or choose a new path")
        return "forced"
    remedy = f"choose a new path or pass {force_flag}" if force_flag else "choose a new path"
    raise UserError(f"{flag} {str(root)!r} {problem}; nothing was written: {remedy}")


def written_files(path: str | os.PathLike) -> set[Path]:
    """The files the marker of `path` lists as written by hb (those still there)."""
    try:
        record = read_marker(path) or {}
    except UserError:
        return set()
    return {Path(path) / f for f in record.get("files") or [] if (Path(path) / f).is_file()}


def check_resume_dir(path: str | os.PathLike, checkpoint: str = CHECKPOINT, flag: str = "--out") -> Path:
    """The latest `checkpoint` (a glob relative to DIR, e.g. "trl/checkpoint-*/harnessbandit.pt")
    of the run directory DIR that `--resume` continues; writes nothing. UserError, naming
    what to do, for a missing, empty or foreign folder, or one without a checkpoint (resuming
    it would silently start from nothing)."""
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
        what = f"is {KINDS[found]}" if found else f"was not created by hb (no {KIND_FILE}, no {RUN_JSON})"
        raise UserError(f"--resume {flag} {str(root)!r} {what}, not a run directory; nothing was written")
    found = sorted((p for p in root.glob(checkpoint) if p.is_file() and not p.parent.name.startswith(".")),
                   key=_step_key)
    if not found:
        raise UserError(f"--resume {flag} {str(root)!r} holds no checkpoint ({checkpoint}): the run stopped "
                        f"before its first checkpoint; drop --resume and use a new --out to start over")
    return found[-1]


_CHECKPOINT_STEP = re.compile(r"checkpoint-(\d+)")


def checkpoint_step(folder: str | os.PathLike) -> int | None:
    """N of a `checkpoint-N` folder (TRL's, by its name); None for a folder of another name."""
    m = _CHECKPOINT_STEP.fullmatch(Path(folder).name)
    return int(m.group(1)) if m else None


def _step_key(path: Path) -> tuple:
    """Sort key of checkpoint files: the step number of their `checkpoint-N` folder, numerically."""
    step = checkpoint_step(Path(path).parent)
    return (-1 if step is None else step, str(path))


def stale_collected_tables(root: str | os.PathLike) -> str | None:
    """Why the collected tables of grid directory `root` are stale, or None when they
    are current (or absent, or `root` is not a grid): a cell finished after them."""
    root = Path(root)
    tables = [root / EVAL_FILE, root / TRAIN_FILE]
    cells = root / CELLS
    if not (root / GRID_JSON).is_file() or not cells.is_dir() or not all(t.is_file() for t in tables):
        return None
    collected = min(t.stat().st_mtime_ns for t in tables)
    newer = [c.name for c in cells.iterdir() if not c.name.startswith(".")
             and (c / RUN_JSON).is_file() and (c / RUN_JSON).stat().st_mtime_ns > collected]
    if not newer:
        return None
    return (f"{len(newer)} cell(s) finished after the collected tables were written "
            f"(e.g. {sorted(newer)[0]})")
