"""The kind marker of an output folder, written: claimed FIRST (`claim_output_dir`: state
"incomplete", the command line), completed LAST (`complete_output_dir`: state "complete" and
every file this process wrote there), and `output_dir`, the context that does both and undoes
a claim whose body refused before writing anything (module doc of `hbsim.contract.folders`,
which checks a folder before any work and reads the markers).
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from contextlib import contextmanager
from pathlib import Path

from hbsim.contract import KIND_FILE
from hbsim.contract.atomic import atomic_write, remove_temp, track_writes, tracked_writes, untrack_writes, visible
from hbsim.contract.folders import _existing_ancestor, check_subfolders, read_marker
from policies.errors import UserError


def claim_output_dir(path: str | os.PathLike, kind: str, config_hash: str | None = None,
                     tool: str | None = None) -> Path:
    """Create the folder (as mkdir does under the user's umask), remove the temporaries a
    killed writer left in it, its direct subfolders and every folder hb writes in a `kind`
    folder (`check_subfolders`: e.g. DIR/stress/figures; `remove_temp`), and record its
    kind in `.hb-kind.json` with state "incomplete" and this command (atomic replace), the
    files an earlier call listed kept. Call it before the tool's first other write; from
    here this process's atomic writes under the folder are listed by `complete_output_dir`."""
    root = Path(path)
    created = _existing_ancestor(root.absolute())
    root.mkdir(parents=True, exist_ok=True)
    marker_before = (root / KIND_FILE).read_bytes() if (root / KIND_FILE).is_file() else None
    try:
        previous = read_marker(root) or {}
    except UserError:
        if (root / KIND_FILE).is_dir():
            raise
        previous = {}  # an unreadable marker is replaced
    direct = [p for p in visible(root) if p.is_dir() and not p.is_symlink()]
    for folder in dict.fromkeys([root, *direct, *check_subfolders(root, kind)]):   # every depth hb writes at
        remove_temp(folder)
    command = shlex.join(["hb", *sys.argv[1:]]) if os.path.basename(sys.argv[0]) in ("hb", "harnessbandit", "cli.py") else None
    record = {"kind": kind, "config_hash": config_hash, "tool": tool or f"hb {kind}", "state": "incomplete",
              "command": command, "files": list(previous.get("files") or [])}
    mine = (json.dumps(record, sort_keys=True) + "\n").encode()
    for attempt in range(3):
        try:
            atomic_write(root / KIND_FILE, mine)
            break
        except FileNotFoundError:    # a concurrent refused command undid its claim of the same new folder
            if attempt == 2:
                raise
            root.mkdir(parents=True, exist_ok=True)
    track_writes(root)
    _claims[root.resolve()] = (created, marker_before, [p.name for p in visible(root)], mine)
    return root


#: claimed folder -> (its nearest ancestor that existed before, the marker's bytes before, its entries,
#: the marker this process wrote)
_claims: dict[Path, tuple[Path, bytes | None, list[str]]] = {}


@contextmanager
def output_dir(path: str | os.PathLike, kind: str, config_hash: str | None = None, tool: str | None = None,
               finished=lambda: True):
    """`claim_output_dir`, then the body writes, then `complete_output_dir`. When the body
    raises before anything was written there (no atomic write of this process, no new
    entry; e.g. a bad --baseline found while loading), the claim is undone: the folders it created are removed, or the marker restored, so a
    refusal leaves the disk as it was; after a write the marker stays "incomplete". Nested in
    an `output_dir` of the same folder (`hb stress` collects inside its profile's), it only
    yields: the outer one completes the marker with both's files. `finished()` (asked at the
    end) False: the marker lists the files but keeps state "incomplete" (`hb grid collect` of
    a grid whose cells are not all done)."""
    if Path(os.path.realpath(path)) in _active:      # inside the same folder's own `output_dir`: that one claims
        yield Path(path)
        return
    root = claim_output_dir(path, kind, config_hash, tool)
    key = root.resolve()
    _active.add(key)
    try:
        yield root
    except BaseException:
        existed, marker, entries, mine = _claims.pop(key)
        if not tracked_writes(key) and [p.name for p in visible(root)] == entries:   # nothing written yet
            _undo_claim(root, existed, marker, mine)
        raise
    finally:
        _active.discard(key)
    complete_output_dir(root, finished=finished())


#: the folders inside an `output_dir` of this process now (a nested one for the same folder is a no-op)
_active: set[Path] = set()


def _undo_claim(root: Path, existed: Path, marker: bytes | None, mine: bytes) -> None:
    untrack_writes(root)
    try:
        if (root / KIND_FILE).read_bytes() != mine:
            return                   # another command claimed the folder since: its marker stays
    except OSError:
        return
    if marker is not None:
        atomic_write(root / KIND_FILE, marker)
        return
    (root / KIND_FILE).unlink(missing_ok=True)
    for folder in [root.absolute(), *root.absolute().parents]:
        if folder == existed or not folder.is_relative_to(existed):
            break
        try:
            folder.rmdir()           # only empty folders: whatever else appeared stays
        except OSError:
            break


def complete_output_dir(path: str | os.PathLike, files: list | None = None, *, finished: bool = True) -> Path:
    """Mark a claimed folder complete (its command's last write): state "complete" and
    `files` = what the marker listed + every file this process wrote there since
    `claim_output_dir` + `files` (paths, absolute or relative to the folder)."""
    root = Path(path)
    record = read_marker(root)
    if record is None:
        raise RuntimeError(f"{root}: complete_output_dir before claim_output_dir")
    base = root.resolve()
    names = set(record.get("files") or []) | untrack_writes(base)
    for f in files or []:
        f = Path(f)
        names.add((f.resolve().relative_to(base) if f.is_absolute() else f).as_posix())
    names = {n for n in names if n.rsplit("/", 1)[-1] != KIND_FILE}     # markers, its own and a tune/'s
    record.update(state="complete" if finished else "incomplete", files=sorted(n for n in names if (root / n).exists()))
    atomic_write(root / KIND_FILE, json.dumps(record, sort_keys=True) + "\n")
    return root
