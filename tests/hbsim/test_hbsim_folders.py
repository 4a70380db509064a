"""hbsim.folders in process: the one atomic write, the umask helpers, output-folder kinds,
markers and --resume checks (the CLI side of these is tests/test_user_inputs.py)."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hbsim import contract, folders
from policies.errors import UserError


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
    assert folders.atomic_write(target, "a,b\n1,2\n") == target
    assert target.read_text() == "a,b\n1,2\n"
    folders.atomic_write(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    seen = []

    def writer(tmp: Path) -> None:
        seen.append(tmp)
        tmp.write_text("via callback")
    folders.atomic_write(target, writer)
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
        folders.atomic_write(target, half_written)
    assert target.read_text() == "original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
    with pytest.raises(TypeError):
        folders.atomic_write(target, 3.5)                 # not bytes, text or a writer
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
        assert folders.remove_temp(tmp_path) == 2
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "cell-d"])
        assert folders.remove_temp(tmp_path, target="cell-z") == 0 and live.exists()
    finally:
        writer.kill()
        writer.wait()
    assert folders.remove_temp(tmp_path) == 1 and [p.name for p in tmp_path.iterdir()] == ["cell-d"]


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
        while folders._proc_state(writer.pid)[0] != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert folders._proc_state(writer.pid)[0] == "Z"    # not reaped: os.kill(pid, 0) still succeeds
        os.kill(writer.pid, 0)
        assert folders.remove_temp(tmp_path) == 1 and not temp.exists()
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
        state, started = folders._proc_state(other.pid)
        assert state in "RS" and abs(started - time.time()) < 30
        old = _temp_of(tmp_path, other.pid, "cell-a", age_s=3600)
        recent = _temp_of(tmp_path, other.pid, "cell-b")          # written after it started: its own
        assert folders.remove_temp(tmp_path) == 1
        assert not old.exists() and recent.exists()
    finally:
        other.kill()
        other.wait()


def test_write_json_atomic_format(tmp_path):
    path = folders.write_json_atomic(tmp_path / "grid.json", {"b": 1, "a": [Path("x")]})
    assert path.read_text() == '{\n "a": [\n  "x"\n ],\n "b": 1\n}\n'


# -- the umask ------------------------------------------------------------------------------
def test_umask_027_gives_0750_folders_and_0640_files(tmp_path, umask027):
    assert folders.current_umask() == 0o027 and folders._probed_umask() == 0o027
    assert (folders.dir_mode(), folders.file_mode()) == (0o750, 0o640)
    assert os.umask(0o027) == 0o027                      # reading it did not change it
    assert _mode(folders.atomic_write(tmp_path / "f.txt", "x")) == 0o640       # mkstemp alone gives 0600
    made = folders.make_temp_dir(tmp_path / "cell")                          # mkdtemp alone gives 0700
    assert _mode(made) == 0o750 and made.name.startswith(f"{contract.TMP_PREFIX}cell-") and not any(made.iterdir())
    claimed = folders.claim_output_dir(tmp_path / "new" / "grid", "grid")
    assert _mode(claimed) == 0o750 and _mode(claimed / contract.KIND_FILE) == 0o640


def test_claim_output_dir_marker(tmp_path):
    root = folders.claim_output_dir(tmp_path / "s", "sim", "h1", tool="hb sim")
    assert (root / contract.KIND_FILE).read_text() == ('{"command": null, "config_hash": "h1", "files": [], '
                                                       '"kind": "sim", "state": "incomplete", "tool": "hb sim"}\n')
    folders.atomic_write(root / "a.txt", "a")                          # written after the claim: listed
    (root / "mine.txt").write_text("not hb's")                         # not through atomic_write: not listed
    folders.complete_output_dir(root)
    assert folders.read_marker(root) == {"kind": "sim", "config_hash": "h1", "tool": "hb sim", "command": None,
                                         "state": "complete", "files": ["a.txt"]}
    assert folders.written_files(root) == {root / "a.txt"}
    folders.claim_output_dir(root, "sim", "h1", tool="hb sim")         # a rerun keeps the list, incomplete again
    assert folders.read_marker(root)["state"] == "incomplete" and folders.read_marker(root)["files"] == ["a.txt"]
    (root / "a.txt").unlink(), (root / "mine.txt").unlink()
    (root / contract.KIND_FILE).write_text('{"kind": "nope"}')
    with pytest.raises(UserError, match="kind='nope' is unknown; valid kinds: sim, run, grid, report, study"):
        folders.read_marker(root)
    folders.claim_output_dir(root, "sim", "h1", tool="hb sim")           # an unreadable marker is replaced
    assert folders.read_marker(root)["kind"] == "sim"
    assert sorted(p.name for p in root.iterdir()) == [contract.KIND_FILE]


# -- kinds, markers, --resume -----------------------------------------------------------------
def test_check_resume_dir(tmp_path):
    def refused(path, needle):
        with pytest.raises(UserError, match=needle):
            folders.check_resume_dir(path)
    refused(tmp_path / "nope", "does not exist")
    (tmp_path / "f").write_text("x")
    refused(tmp_path / "f", "is a file")
    folders.claim_output_dir(tmp_path / "e", "run")
    refused(tmp_path / "e", "holds no checkpoint")       # ours (marker) but never checkpointed
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "grid.json").write_text("{}")
    refused(tmp_path / "g", "is a grid directory, not a run directory")
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "notes.txt").write_text("x")
    refused(tmp_path / "u", "was not created by hb")
    (tmp_path / "e" / "checkpoints").mkdir()
    (tmp_path / "e" / "checkpoints" / "last.pt").write_bytes(b"")
    assert folders.check_resume_dir(tmp_path / "e") == tmp_path / "e" / "checkpoints" / "last.pt"
    trl = "trl/checkpoint-*/harnessbandit.pt"             # a glob: TRL's checkpoint-N folders
    with pytest.raises(UserError, match="holds no checkpoint"):
        folders.check_resume_dir(tmp_path / "e", trl)
    (tmp_path / "e" / "trl" / "checkpoint-3").mkdir(parents=True)
    (tmp_path / "e" / "trl" / "checkpoint-3" / "harnessbandit.pt").write_bytes(b"")
    assert folders.check_resume_dir(tmp_path / "e", trl) == tmp_path / "e" / "trl" / "checkpoint-3" / "harnessbandit.pt"


def test_check_output_dir_states(tmp_path):
    assert folders.check_output_dir(tmp_path / "new", "sim", "h1") == "new"
    folders.claim_output_dir(tmp_path / "s", "sim", "h1")
    assert folders.check_output_dir(tmp_path / "s", "sim", "h1") == "resume"
    with pytest.raises(UserError, match="another configuration.*pass --force"):
        folders.check_output_dir(tmp_path / "s", "sim", "h2")
    assert folders.check_output_dir(tmp_path / "s", "sim", "h2", force=True) == "forced"
    with pytest.raises(UserError, match="choose a new path$"):
        folders.check_output_dir(tmp_path / "s", "run", force_flag=None)
    (tmp_path / "legacy" / "uniform" / "seed0").mkdir(parents=True)
    (tmp_path / "legacy" / "uniform" / "seed0" / "run.json").write_text("{}")
    assert folders.legacy_kind(tmp_path / "legacy") == "sim"
    (tmp_path / "study" / "bernoulli").mkdir(parents=True)
    (tmp_path / "legacy").rename(tmp_path / "study" / "bernoulli")
    assert folders.legacy_kind(tmp_path / "study") == "study"      # <env>/<label>/seed<N>/: hb validity --study
    assert folders.check_output_dir(tmp_path / "study", "study") == "resume"
    (tmp_path / "study" / "bernoulli" / "notes.txt").write_text("x")
    assert folders.legacy_kind(tmp_path / "study" / "bernoulli") is None
    assert folders.legacy_kind(tmp_path / "study") is None
