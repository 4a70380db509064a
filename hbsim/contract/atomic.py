"""Atomic writes: the one place that replaces a file or a folder in one step, under the
user's umask, and cleans up after a killed writer.

Files are replaced with `atomic_write` (a hidden `.tmp-` file beside the target, renamed
over it; `exclusive=True`: linked into place, never replacing a file), folders with
`write_dir_atomic`; both give the mode a plain open() or mkdir would give (`file_mode`,
`dir_mode`, from `current_umask`, read without setting it). Temporaries are named
`.tmp-<name>-<pid>-XXXX`: `remove_temp` removes those whose writer no longer runs, so two
live commands on one folder never delete each other's. Every reader lists folders with
`visible` / `find_files` (no hidden or temporary entry). A folder can be tracked
(`track_writes`): every atomic write under it is listed, and every folder written whole
(`write_dir_atomic`, or a worker process's run directory: `record_written`), which is how an
output folder's marker knows what hb wrote (`hbsim.contract.folders`).

`STORAGE_ERRNOS` are the write errors of the storage (full disk, quota, read-only), which
stop a batch of runs at the first.

Test hook: with `HB_FAULT_AT=N` in the environment a process kills itself (SIGKILL) at
its N-th write, after the data went to the temporary and before it is renamed into place
(`_fault_point`, called by `atomic_write` and `write_dir_atomic` only; counted per
process). tests/test_fault_injection.py uses it; it has no other use.
Standard library, `policies.errors` and `hbsim.contract` only.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable, Union

from hbsim.contract import TMP_PREFIX, lifeline
from policies.errors import UserError


#: write errors of the storage, not of one run: a batch (`ablations.runner.run_many`) stops
#: at the first, since every later write would fail the same way
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})

#: what atomic_write writes: bytes, text (UTF-8), or a function that writes the path it is given
Content = Union[bytes, str, Callable[[Path], object]]


def current_umask() -> int:
    """The process umask, read without changing it (os.umask would, for every thread):
    from /proc on Linux, else from the mode of a probe folder made with mode 0777."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return _probed_umask()


def _probed_umask() -> int:
    """The umask as the bits a mkdir with mode 0777 loses (where /proc is not available)."""
    with tempfile.TemporaryDirectory(prefix=TMP_PREFIX) as parent:
        probe = os.path.join(parent, "probe")
        os.mkdir(probe, 0o777)
        return 0o777 & ~stat.S_IMODE(os.stat(probe).st_mode)


def dir_mode() -> int:
    """The mode a plain mkdir gives under the user's umask (mkdtemp gives 0700)."""
    return 0o777 & ~current_umask()


def file_mode() -> int:
    """The mode a plain open() gives under the user's umask (mkstemp gives 0600)."""
    return 0o666 & ~current_umask()


#: the test hook's environment variable (module doc); read by `_fault_point` only
FAULT_ENV = "HB_FAULT_AT"
_writes = 0
#: the files written under each tracked folder by this process (`track_writes`)
_written: dict[Path, set[str]] = {}


def track_writes(folder: str | os.PathLike) -> None:
    """From now on, list every file this process writes under `folder` through
    `atomic_write`, and every folder written whole (`write_dir_atomic`, `record_written`)
    (`hbsim.contract.markers.claim_output_dir` calls it; the marker lists them). Tracking a folder
    tracked already keeps what was listed (a tuned grid claims DIR again for its test phase)."""
    _written.setdefault(Path(folder).resolve(), set())


def tracked_writes(folder: str | os.PathLike) -> set[str]:
    """The files (relative posix paths) written under a tracked `folder` so far."""
    return set(_written.get(Path(folder).resolve(), ()))


def untrack_writes(folder: str | os.PathLike) -> set[str]:
    """Stop tracking `folder`; returns what was written under it (empty when untracked)."""
    return _written.pop(Path(folder).resolve(), set())


def _fault_point() -> None:
    """Test hook (module doc): SIGKILL this process at its HB_FAULT_AT-th write."""
    global _writes
    if not os.environ.get(FAULT_ENV):
        return
    _writes += 1
    lifeline.fault_point(FAULT_ENV, _writes)


def record_written(path: str | os.PathLike) -> None:
    """List `path` (a file, or a folder written whole, e.g. a run directory a worker process
    renamed into place) under every tracked folder holding it, as if this process wrote it."""
    _record_write(Path(path))


def _record_write(path: Path) -> None:
    for root, names in _written.items():
        try:
            names.add(path.resolve().relative_to(root).as_posix())
        except ValueError:
            continue


def atomic_write(path: str | os.PathLike, content: Content, *, exclusive: bool = False) -> Path:
    """Replace `path` in one step; returns it. `exclusive`: never replace an existing file
    (the temporary is hard-linked into place; UserError when `path` exists by then).

    `content` (bytes, text written as UTF-8, or a function that writes the path it is
    given: `df.to_parquet`, `torch.save`, `fig.savefig`) goes into a hidden temporary file
    beside `path` (`.tmp-<name>-XXXX<suffix>`: same folder, so the rename is atomic; same
    suffix, for writers that read the format from it), which gets `file_mode()` and is
    renamed over `path`. On any error the temporary file is removed and `path` is left as
    it was. The folder must exist.
    """
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=path.suffix, dir=path.parent)
    tmp = Path(name)
    try:
        if callable(content):
            os.close(fd)
            content(tmp)
        else:
            with os.fdopen(fd, "wb") as fh:
                fh.write(content.encode() if isinstance(content, str) else content)
        os.chmod(tmp, file_mode())
        _fault_point()
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise UserError(f"{str(path)!r} appeared while this command ran: nothing is overwritten; "
                                "choose a new path") from None
            tmp.unlink()
        else:
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _record_write(path)
    return path


def write_json_atomic(path: str | os.PathLike, obj) -> Path:
    """`obj` as indented JSON with sorted keys (non-JSON values as str), atomically."""
    return atomic_write(path, json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n")


def make_temp_dir(beside: str | os.PathLike) -> Path:
    """A new, empty, hidden folder next to `beside` (`.tmp-<name>-XXXX`, unique) with the
    mode a plain mkdir gives: fill it, then rename it into place."""
    beside = Path(beside)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(beside), dir=beside.parent))
    os.chmod(tmp, dir_mode())
    return tmp


def write_dir_atomic(final: str | os.PathLike, fill: Callable[[Path], None], *,
                     keep: Callable[[Path], bool] = lambda d: False) -> bool:
    """Write a directory atomically: `fill(tmp)` fills a new empty temporary directory next
    to `final` (`make_temp_dir`), which is then renamed to `final`. An existing `final` for
    which `keep(final)` holds is kept and False returned (e.g. another worker finished the
    same run first); any other existing `final` is moved aside in one rename and removed.
    Temporaries are removed either way, also when `fill` raises."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = make_temp_dir(final), None
    try:
        fill(tmp)
        _fault_point()
        if final.is_dir() and not keep(final):
            old = make_temp_dir(final)
            os.rename(final, old)                       # onto the empty temporary: atomic
        try:
            os.rename(tmp, final)
        except OSError:
            if final.is_dir():
                return False
            raise
        _record_write(final)
    finally:
        for p in (tmp, old):
            if p is not None and p.exists():
                shutil.rmtree(p, ignore_errors=True)
    return True


def _temp_prefix(path: Path) -> str:
    """`.tmp-<name>-<pid>-`: the writer's process id lets `remove_temp` tell a killed
    writer's temporary from one a live command (two commands on one folder) is writing."""
    return f"{TMP_PREFIX}{path.name}-{os.getpid()}-"


def _writer_alive(temp: Path) -> bool:
    """Whether the process that made temporary `temp` still runs (another than this one;
    names without a pid, from older versions, count as dead). On Linux a killed writer
    whose parent has not reaped it yet (a zombie: `kill -9` of a grid run leaves its
    workers so until init collects them) is dead, and so is a live process that started
    after the temporary was last written: its pid was reused (`_proc_state`)."""
    m = _TEMP_PID.search(temp.name)
    if m is None or int(m.group(1)) == os.getpid():
        return False
    pid = int(m.group(1))
    if not lifeline.alive(pid):
        return False
    state = _proc_state(pid)
    if state is None:        # no /proc (macOS), or it just exited
        return True
    status, started = state
    if status in "ZX":
        return False
    try:
        written = temp.lstat().st_mtime
    except OSError:
        return False         # already gone
    return started <= written + _START_SLACK_S


_START_SLACK_S = 2.0   # /proc's boot time has whole seconds: a writer starts at most this after it could


def _proc_state(pid: int) -> tuple[str, float] | None:
    """(state letter, start time in seconds since the epoch) of process `pid` from
    /proc/<pid>/stat (Linux); None where /proc cannot say."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return fields[0], boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, StopIteration):
        return None


_TEMP_PID = re.compile(r"-(\d+)-[A-Za-z0-9_]+(\.[^.]*)?$")


def remove_temp(folder: str | os.PathLike, target: str | None = None) -> int:
    """Remove the temporaries killed writers left in `folder` (not below it): hidden names
    holding TMP_PREFIX (ours; older write_run's `.<name>.tmp-*`) whose writer no longer
    runs; only those of the file `target` when given (a user's folder: `hb calibrate
    --csv`); returns how many."""
    mine = (lambda n: n.startswith(f"{TMP_PREFIX}{target}-")) if target else (lambda n: TMP_PREFIX in n)
    try:
        stale = [p for p in Path(folder).iterdir()
                 if p.name.startswith(".") and mine(p.name) and not _writer_alive(p)]
    except OSError:
        return 0
    for p in stale:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return len(stale)


def _is_temp(path: Path) -> bool:
    return path.name.startswith(".") and TMP_PREFIX in path.name


def visible(folder: str | os.PathLike) -> list[Path]:
    """The entries of `folder` every reader may see, sorted: no hidden name (temporaries,
    markers, probes); [] for a missing folder."""
    try:
        return sorted(p for p in Path(folder).iterdir() if not p.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []


def find_files(root: str | os.PathLike, name: str, depth: int) -> list[Path]:
    """Every file called `name` in `root` or its visible subfolders down to `depth` levels,
    sorted (the readers' one walk: never into hidden or temporary folders)."""
    root, found = Path(root), []
    if (root / name).is_file():
        found.append(root / name)
    if depth > 0:
        for entry in visible(root):
            if entry.is_dir():
                found.extend(find_files(entry, name, depth - 1))
    return sorted(found)
