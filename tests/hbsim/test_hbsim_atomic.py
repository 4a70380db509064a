"""hbsim.contract.atomic in process: the one atomic write, the umask helpers and the temporaries a
killed writer leaves (the kill itself: tests/test_fault_injection.py)."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hbsim import contract

from hbsim.contract import atomic, folders

from hbsim.contract import markers


@pytest.fixture
def umask027():
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)



# -- the one atomic write --------------------------------------------------------------------
def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "table.csv"
    assert atomic.atomic_write(target, "a,b\n1,2\n") == target
    assert target.read_text() == "a,b\n1,2\n"
    atomic.atomic_write(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    seen = []

    def writer(tmp: Path) -> None:
        seen.append(tmp)
        tmp.write_text("via callback")
    atomic.atomic_write(target, writer)
    assert target.read_text() == "via callback"
    tmp = seen[0]     # a hidden sibling with the target's suffix (savefig reads the format from it)
    assert tmp.parent == tmp_path and tmp.name.startswith(f"{contract.TMP_PREFIX}table.csv-")
    assert tmp.suffix == ".csv"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]


def test_atomic_write_keeps_the_original_when_the_writer_raises(tmp_path):
    target = tmp_path / "run.json"
    target.write_text("original")

    def half_written(tmp: Path) -> None:
        tmp.write_text("partial")
        raise RuntimeError("disk full")
    with pytest.raises(RuntimeError, match="disk full"):
        atomic.atomic_write(target, half_written)
    assert target.read_text() == "original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
    with pytest.raises(TypeError):
        atomic.atomic_write(target, 3.5)                 # not bytes, text or a writer
    assert target.read_text() == "original" and len(list(tmp_path.iterdir())) == 1


def _temp_of(folder: Path, pid: int, name: str, age_s: float = 0.0) -> Path:
    """A cell temporary folder as `make_temp_dir` names it, made by process `pid`, last
    written `age_s` seconds ago."""
    temp = folder / f"{contract.TMP_PREFIX}{name}-{pid}-abc123xy"
    temp.mkdir()
    (temp / "train.parquet").write_bytes(b"partial")
    if age_s:
        then = time.time() - age_s
        os.utime(temp, (then, then))
    return temp


@pytest.mark.slow  # starts a process
def test_remove_temp_keeps_a_live_writers_and_removes_dead_ones(tmp_path):
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.05)
        live = _temp_of(tmp_path, writer.pid, "cell-a")
        dead = _temp_of(tmp_path, 2**22 + 7, "cell-b")          # above any pid_max: no such process
        legacy = tmp_path / f".cell-c{contract.TMP_PREFIX}x"    # older versions: no pid in the name
        legacy.write_text("x")
        visible = tmp_path / "cell-d"
        visible.mkdir()
        assert atomic.remove_temp(tmp_path) == 2
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "cell-d"])
        assert atomic.remove_temp(tmp_path, target="cell-z") == 0 and live.exists()
    finally:
        writer.kill()
        writer.wait()
    assert atomic.remove_temp(tmp_path) == 1 and [p.name for p in tmp_path.iterdir()] == ["cell-d"]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="zombies and start times are read from Linux's /proc")
def test_remove_temp_counts_an_unreaped_killed_writer_as_dead(tmp_path):
    """kill -9 of a grid run leaves its workers as zombies until init reaps them; the
    rerun must still remove their temporaries (CI failed on exactly this)."""
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.05)
        temp = _temp_of(tmp_path, writer.pid, "cell-a")
        writer.kill()
        deadline = time.monotonic() + 10
        while atomic._proc_state(writer.pid)[0] != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert atomic._proc_state(writer.pid)[0] == "Z"    # not reaped: os.kill(pid, 0) still succeeds
        os.kill(writer.pid, 0)
        assert atomic.remove_temp(tmp_path) == 1 and not temp.exists()
    finally:
        writer.kill()
        writer.wait()


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="zombies and start times are read from Linux's /proc")
def test_remove_temp_sees_a_reused_pid(tmp_path):
    """A live process that started after the temporary was last written cannot have
    written it: the killed writer's pid was reused."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.05)
        state, started = atomic._proc_state(other.pid)
        assert state in "RS" and abs(started - time.time()) < 30
        old = _temp_of(tmp_path, other.pid, "cell-a", age_s=3600)
        recent = _temp_of(tmp_path, other.pid, "cell-b")          # written after it started: its own
        assert atomic.remove_temp(tmp_path) == 1
        assert not old.exists() and recent.exists()
    finally:
        other.kill()
        other.wait()


def test_write_json_atomic_format(tmp_path):
    path = atomic.write_json_atomic(tmp_path / "grid.json", {"b": 1, "a": [Path("x")]})
    assert path.read_text() == '{\n "a": [\n  "x"\n ],\n "b": 1\n}\n'


# -- the umask ------------------------------------------------------------------------------
def test_umask_027_gives_0750_folders_and_0640_files(tmp_path, umask027):
    assert atomic.current_umask() == 0o027 and atomic._probed_umask() == 0o027
    assert (atomic.dir_mode(), atomic.file_mode()) == (0o750, 0o640)
    assert os.umask(0o027) == 0o027                      # reading it did not change it
    assert _mode(atomic.atomic_write(tmp_path / "f.txt", "x")) == 0o640       # mkstemp alone gives 0600
    made = atomic.make_temp_dir(tmp_path / "cell")                          # mkdtemp alone gives 0700
    assert _mode(made) == 0o750 and made.name.startswith(f"{contract.TMP_PREFIX}cell-") and not any(made.iterdir())
    claimed = markers.claim_output_dir(tmp_path / "new" / "grid", "grid")
    assert _mode(claimed) == 0o750 and _mode(claimed / contract.KIND_FILE) == 0o640
