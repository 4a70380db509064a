"""Issue 21: a command killed at any write leaves nothing that a later command trusts.

Every writing command is killed with SIGKILL at its N-th write (the test hook
`HB_FAULT_AT=N` of `hbsim.contract.folders`: the process kills itself after the data went to the
temporary file or folder and before the rename), at chosen points (the marker, a run
directory, a collected table, a CSV, a figure, a checkpoint), then run again; the rerun's
tables must be identical to those of an uninterrupted run, and no temporary may be left.
Plus: Ctrl-C of a grid with worker processes, and a full disk (a small tmpfs, where this
machine lets us mount one). Every test starts processes, so all are marked slow.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from ablations_testkit import grid_text, study_text
from hbsim import contract
from hbsim.contract import atomic, folders
from reports import offload
from hbsim.contract.records import done_ids

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
#: columns that differ between identical runs (ids and timings; as the baseline compare)
VOLATILE = ("run_id",)
GRID = grid_text(name="faults", steps=3, seeds=2, policies=[{"name": "uniform"}, {"name": "round_robin"}])
STUDY = study_text(steps=3, seeds=2)
SIM = ["sim", "--policy", "uniform", "--policy", "round_robin", "--seeds", "2", "--steps", "3", "--jobs", "1",
       "--set", "env.n_tasks=12", "--set", "env.n_heldout_tasks=4"]
REPORT = ["--baseline", "uniform", "--resamples", "50", "--k", "1"]
VALIDITY = ["--min-step", "0", "--resamples", "5", "--jobs", "1"]
CAL = ["calibrate", "--blocks", "2", "--seeds", "2", "--steps", "3", "--resamples", "5", "--jobs", "1"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("warm-cache")


def hb(*args, cwd: Path, fault: int | None = None, cache: Path | None = None, timeout: int = 900):
    env = {k: v for k, v in os.environ.items() if k not in (atomic.FAULT_ENV, "HB_DEBUG")}
    env.update(PYTHONPATH=str(REPO), OPENBLAS_NUM_THREADS="1")
    if cache is not None:
        env["HB_CACHE_DIR"] = str(cache)
    if fault is not None:
        env[atomic.FAULT_ENV] = str(fault)
    return subprocess.run([sys.executable, "-m", "hbsim.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def ok(proc) -> str:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def killed(proc) -> None:
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-3000:])


def tables(root: Path, *, volatile: tuple[str, ...] = ()) -> dict[str, pd.DataFrame]:
    """Every parquet and CSV table under `root` by relative path, without the volatile
    columns (ids, timings: `seconds_*`, `overhead_frac`)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".parquet", ".csv") or not path.is_file():
            continue
        df = pd.read_parquet(path) if path.suffix == ".parquet" else _csv(path)
        drop = [c for c in df.columns if c in VOLATILE + volatile or str(c).startswith("seconds")
                or c == "overhead_frac"]
        out[str(path.relative_to(root))] = df.drop(columns=drop)
    return out


def _csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:      # an empty table (no rows, no columns)
        return pd.DataFrame()


def assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=True, obj=name)


def no_temporaries(root: Path) -> None:
    left = [str(p) for p in root.rglob("*") if contract.TMP_PREFIX in p.name]
    assert not left, left


# -- hb sim -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reference_sim(tmp_path_factory) -> tuple[Path, str]:
    """The uninterrupted `hb sim` (its folder, its stdout), once for every kill point."""
    root = tmp_path_factory.mktemp("sim-ref")
    return root / "ref", ok(hb(*SIM, "--out", "ref", cwd=root))


@pytest.mark.parametrize("at", [1, 3, 6])     # the marker, the 2nd run directory, the marker completed
def test_sim_killed_then_rerun(tmp_path, reference_sim, at):
    ref, want = reference_sim
    killed(hb(*SIM, "--out", "out", cwd=tmp_path, fault=at))
    assert ok(hb(*SIM, "--out", "out", cwd=tmp_path)) == want
    assert_same(tables(tmp_path / "out"), tables(ref))
    no_temporaries(tmp_path / "out")
    assert folders.read_marker(tmp_path / "out")["state"] == "complete"


# -- hb grid run, hb grid collect ---------------------------------------------------------
@pytest.fixture(scope="module")
def reference_grid(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ref")
    (root / "g.toml").write_text(GRID)
    ok(hb("grid", "run", "g.toml", "--out", "grid", "--jobs", "1", cwd=root))
    ok(hb("grid", "collect", "grid", cwd=root))
    ok(hb("report", "grid", *REPORT, cwd=root))
    return root


@pytest.mark.parametrize("at", [2, 4])        # grid.json, the 2nd cell
def test_grid_run_killed_then_rerun(tmp_path, reference_grid, at):
    (tmp_path / "g.toml").write_text(GRID)
    killed(hb("grid", "run", "g.toml", "--out", "grid", "--jobs", "1", cwd=tmp_path, fault=at))
    ok(hb("grid", "run", "g.toml", "--out", "grid", "--jobs", "1", cwd=tmp_path))
    ok(hb("grid", "collect", "grid", cwd=tmp_path))
    got, want = tables(tmp_path / "grid"), tables(reference_grid / "grid")
    assert_same({k: v for k, v in got.items() if "/" not in k}, {k: v for k, v in want.items() if "/" not in k})
    no_temporaries(tmp_path / "grid")
    marker = folders.read_marker(tmp_path / "grid")        # issue 33: a grid's marker completes, listing its files
    cells = sorted(f"cells/{c}" for c in done_ids(tmp_path / "grid"))
    assert marker["state"] == "complete" and marker["files"] == [*cells, "eval.parquet", "grid.json", "train.parquet"]


@pytest.mark.parametrize("at", [2, 3])        # train.parquet, eval.parquet (1: the marker's claim)
def test_grid_collect_killed_then_rerun(tmp_path, reference_grid, at):
    grid = tmp_path / "grid"
    shutil.copytree(reference_grid / "grid" / "cells", grid / "cells")
    shutil.copy(reference_grid / "grid" / "grid.json", grid / "grid.json")
    shutil.copy(reference_grid / "grid" / contract.KIND_FILE, grid / contract.KIND_FILE)
    killed(hb("grid", "collect", grid, cwd=tmp_path, fault=at))
    assert any(contract.TMP_PREFIX in p.name for p in grid.iterdir())      # the killed write's temporary
    assert folders.read_marker(grid)["state"] == "incomplete"              # the killed collect's claim
    ok(hb("grid", "collect", grid, cwd=tmp_path))
    for name in ("train.parquet", "eval.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(grid / name), pd.read_parquet(reference_grid / "grid" / name))
    no_temporaries(grid)
    marker = folders.read_marker(grid)
    assert marker["state"] == "complete" and {"train.parquet", "eval.parquet"} <= set(marker["files"])


# -- hb stress (issue 33) -------------------------------------------------------------------
#: --quick: the shipped axis, 2 tuning seeds (18 cells); the profile and its figure as in the default run
STRESS = ["stress", "--quick", "--scenarios", "trap", "--policies", "mixed", "--seeds", "2", "--jobs", "1"]


def _stress_cells_of(ref: Path, dst: Path) -> Path:
    """dst <- ref's finished cells and tuning (its grid.json, tune.json and marker too), without
    the collected tables and the profile: the state in which a run has just finished its cells."""
    top = {"stress", "train.parquet", "eval.parquet"}
    shutil.copytree(ref, dst, ignore=lambda folder, names: top & set(names) if Path(folder) == ref else set())
    return dst


def test_stress_killed_while_writing_its_figure_then_rerun(tmp_path, monkeypatch):
    """The kill -9 during the profile's figure (DIR/stress/figures/, two levels below --out):
    the rerun removes that temporary, and its profile equals an uninterrupted run's.

    The grid's cells run once (the uninterrupted reference); the counted, the killed and the
    rerun commands start from a copy of its cells (`_stress_cells_of`), so each of them
    collects the tables and writes the profile, the writes the kill is aimed at. The write
    that leaves the figure's temporary is found in the counted run (in this process: the
    temporary exists when `atomic._fault_point` is reached), so one kill hits it."""
    from hbsim.cli import main
    ok(hb(*STRESS, "--out", "ref", cwd=tmp_path))
    ref = tmp_path / "ref"
    figures = lambda root: root / "stress" / "figures"                      # noqa: E731
    temps = lambda root: list(figures(root).glob(".tmp-share.png-*"))     # noqa: E731
    monkeypatch.setenv(atomic.FAULT_ENV, str(10 ** 9))      # counts this process's writes, kills at none
    monkeypatch.chdir(tmp_path)
    at_figure, fault_point = [], atomic._fault_point

    def counting():
        fault_point()
        if figures(tmp_path / "count").is_dir() and temps(tmp_path / "count"):
            at_figure.append(atomic._writes)
    monkeypatch.setattr(atomic, "_fault_point", counting)
    before = atomic._writes
    assert main([*STRESS, "--out", str(_stress_cells_of(ref, tmp_path / "count"))]) == 0
    monkeypatch.setattr(atomic, "_fault_point", fault_point)
    monkeypatch.delenv(atomic.FAULT_ENV)
    assert len(at_figure) == 1, at_figure                    # the figure is written once
    assert not temps(tmp_path / "count")
    at = at_figure[0] - before
    figure_temp = []
    for candidate in (at, at - 1, at + 1, at - 2, at + 2):   # the same writes in a fresh process, or nearly
        shutil.rmtree(tmp_path / "out", ignore_errors=True)
        killed(hb(*STRESS, "--out", _stress_cells_of(ref, tmp_path / "out"), cwd=tmp_path, fault=candidate))
        figure_temp = temps(tmp_path / "out")
        if figure_temp:
            break
    assert figure_temp, "no kill point left the figure's temporary"
    assert folders.read_marker(tmp_path / "out")["state"] == "incomplete"
    assert not (tmp_path / "out" / "stress" / "figures" / "share.png").exists()
    ok(hb(*STRESS, "--out", "out", cwd=tmp_path))
    no_temporaries(tmp_path / "out")
    assert (tmp_path / "out" / "stress" / "profile.csv").read_bytes() == (tmp_path / "ref" / "stress" /
                                                                          "profile.csv").read_bytes()
    marker = folders.read_marker(tmp_path / "out")
    assert marker["state"] == "complete" and {"stress/figures/share.png", "stress/index.html", "stress/profile.csv",
                                              "eval.parquet", "grid.json"} <= set(marker["files"])


# -- hb report ------------------------------------------------------------------------------
@pytest.mark.parametrize("at", [1, 5, 20])    # the marker, a CSV, a figure
def test_report_killed_then_rerun(tmp_path, reference_grid, at):
    grid = tmp_path / "grid"
    shutil.copytree(reference_grid / "grid", grid, ignore=shutil.ignore_patterns("report"))
    killed(hb("report", grid, *REPORT, cwd=tmp_path, fault=at))
    marker = folders.read_marker(grid / "report")     # None: killed while writing the marker itself
    assert (marker is None) == (at == 1) and (marker is None or marker["state"] == "incomplete")
    ok(hb("report", grid, *REPORT, cwd=tmp_path))
    assert_same(tables(grid / "report"), tables(reference_grid / "grid" / "report"))
    assert folders.read_marker(grid / "report")["state"] == "complete"
    no_temporaries(grid / "report")


# -- hb validity --study --out ---------------------------------------------------------------
@pytest.fixture(scope="module")
def reference_study(tmp_path_factory) -> tuple[Path, str]:
    """The uninterrupted `hb validity --study` (the folder holding ref and ref-out, its stdout)."""
    root = tmp_path_factory.mktemp("study-ref")
    (root / "s.toml").write_text(STUDY)
    return root, ok(hb("validity", "ref", "--study", "s.toml", "--out", "ref-out", *VALIDITY, cwd=root))


@pytest.mark.parametrize("at", [2, 4, 7])     # a study run, the study's marker completed, a CSV of --out
def test_validity_study_killed_then_rerun(tmp_path, reference_study, at):
    root, want = reference_study
    (tmp_path / "s.toml").write_text(STUDY)
    killed(hb("validity", "st", "--study", "s.toml", "--out", "st-out", *VALIDITY, cwd=tmp_path, fault=at))
    got = ok(hb("validity", "st", "--study", "s.toml", "--out", "st-out", *VALIDITY, cwd=tmp_path))
    assert got.replace(str(tmp_path), str(root)).replace("st-out", "ref-out") == want   # it prints the page's path
    assert_same(tables(tmp_path / "st"), tables(root / "ref"))
    assert_same(tables(tmp_path / "st-out"), tables(root / "ref-out"))
    no_temporaries(tmp_path / "st")
    no_temporaries(tmp_path / "st-out")


# -- hb calibrate --csv -----------------------------------------------------------------------
def test_calibrate_killed_then_rerun(tmp_path):
    want = ok(hb(*CAL, "--csv", "ref/p.csv", cwd=tmp_path))
    killed(hb(*CAL, "--csv", "out/p.csv", cwd=tmp_path, fault=1))
    assert not (tmp_path / "out" / "p.csv").exists()        # killed before the rename: no half CSV
    assert ok(hb(*CAL, "--csv", "out/p.csv", cwd=tmp_path)) == want
    assert (tmp_path / "out" / "p.csv").read_bytes() == (tmp_path / "ref" / "p.csv").read_bytes()
    no_temporaries(tmp_path / "out")


# -- hb real (native, tiny preset) and hb real --backend trl ------------------------------
REAL = ["real", "--preset", "tiny", "--policy", "uniform", "--steps", "2", "--device", "cpu",
        "--checkpoint-every", "1",            # the small world of tests/real_runs/test_real_runs_cli.py
        "--set", "warm_steps=2", "--set", "n_train_tasks=30", "--set", "n_heldout_tasks=5",
        "--set", "eval_tasks=1", "--set", "eval_attempts=1", "--set", "max_new_tokens=8"]


@pytest.fixture(scope="module")
def reference_real(tmp_path_factory, cache) -> Path:
    """The uninterrupted `hb real` run, once for both kill points; it also fills the warm-start cache."""
    root = tmp_path_factory.mktemp("real-ref")
    ok(hb(*REAL, "--out", "ref", cwd=root, cache=cache))
    return root / "ref"


@pytest.mark.parametrize("at, resume", [(2, False), (3, True)])   # the step-1 checkpoint, the step-2 one
def test_real_killed_then_rerun(tmp_path, cache, reference_real, at, resume):
    killed(hb(*REAL, "--out", "run", cwd=tmp_path, cache=cache, fault=at))
    ok(hb(*REAL, "--out", "run", *(["--resume"] if resume else []), cwd=tmp_path, cache=cache))
    assert_same(tables(tmp_path / "run"), tables(reference_real))
    no_temporaries(tmp_path / "run")
    assert folders.read_marker(tmp_path / "run")["state"] == "complete"


REAL_GRID = grid_text(name="realfault", steps=3, seeds=1, policies=[{"name": "uniform"}], top_extra={"batch_groups": 2},
                      env={"kind": "real", "preset": "tiny", "warm_steps": 2, "n_train_tasks": 30, "n_heldout_tasks": 5,
                           "eval_tasks": 1, "eval_attempts": 1, "max_new_tokens": 8})
GRID_REAL = ["grid", "run", "g.toml", "--out", "grid", "--jobs", "1", "--checkpoint-every", "1"]


@pytest.fixture(scope="module")
def reference_real_grid(tmp_path_factory, cache) -> Path:
    root = tmp_path_factory.mktemp("real-grid-ref")
    (root / "g.toml").write_text(REAL_GRID)
    ok(hb(*GRID_REAL, cwd=root, cache=cache))
    return root / "grid"


# the writes: grid record and marker, then per step the checkpoint (not at the last step) and progress.json
@pytest.mark.parametrize("at, resumed", [(5, 1), (7, 2)])    # at the step-2 checkpoint; at step 3's progress
def test_real_grid_killed_mid_cell_continues_from_its_checkpoint(tmp_path, cache, reference_real_grid, at, resumed):
    """`hb grid run` of a real grid: a cell killed mid-run continues from DIR/running/<id>/'s
    checkpoint (not from step 0) and ends with the uninterrupted grid's tables; meanwhile
    `hb grid status` shows the step the cell reached."""
    (tmp_path / "g.toml").write_text(REAL_GRID)
    killed(hb(*GRID_REAL, cwd=tmp_path, cache=cache, fault=at))
    assert not done_ids(tmp_path / "grid") and list((tmp_path / "grid" / contract.RUNNING).glob("*/checkpoints/last.pt"))
    status = ok(hb("grid", "status", "grid", cwd=tmp_path, cache=cache))
    assert re.search(rf"^    [0-9a-f]{{16}}: uniform, seed 0  \(under way: step {resumed}/3, last step [0-9.]+ s, at "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\)$", status, re.M), status
    ok(hb(*GRID_REAL, cwd=tmp_path, cache=cache))
    (cell,) = (tmp_path / "grid" / contract.CELLS).iterdir()
    assert f"resumed at step {resumed}," in (cell / contract.LOG).read_text()
    assert_same(tables(tmp_path / "grid" / contract.CELLS), tables(reference_real_grid / contract.CELLS))
    assert not (tmp_path / "grid" / contract.RUNNING).exists() and not (reference_real_grid / contract.RUNNING).exists()
    no_temporaries(tmp_path / "grid")


TRL = ["real", "--backend", "trl", "--policy", "uniform", "--steps", "2", "--device", "cpu",
       "--checkpoint-every", "1"]


def test_trl_killed_while_saving_a_checkpoint_resumes_from_the_complete_one(tmp_path):
    pytest.importorskip("trl")
    ok(hb(*TRL, "--out", "ref", cwd=tmp_path))
    killed(hb(*TRL, "--out", "run", cwd=tmp_path, fault=3))       # checkpoint-2 made, its harnessbandit.pt not
    assert (tmp_path / "run" / "trl" / "checkpoint-2").is_dir()
    assert not (tmp_path / "run" / "trl" / "checkpoint-2" / "harnessbandit.pt").exists()
    proc = hb(*TRL, "--out", "run", "--resume", cwd=tmp_path)
    ok(proc)
    assert "removed" in proc.stderr and "incomplete checkpoint" in proc.stderr
    assert_same(tables(tmp_path / "run"), tables(tmp_path / "ref"))


# -- Ctrl-C of a grid with worker processes -----------------------------------------------
def _processes_with(field: int, value: int) -> list[int]:
    """The live processes whose /proc/PID/stat field (after the name: 1 ppid, 3 session) is `value`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[field]) == value and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _session_processes(sid: int) -> list[int]:
    return _processes_with(3, sid)


BIG = GRID.replace("seeds = 2", "seeds = 30").replace("steps = 3", "steps = 60")


@pytest.fixture(scope="module")
def reference_big_grid(tmp_path_factory) -> Path:
    """The 60-cell grid run uninterrupted (one worker) and collected, once for both presses."""
    root = tmp_path_factory.mktemp("big-ref")
    (root / "g.toml").write_text(BIG)
    ok(hb("grid", "run", "g.toml", "--out", "ref", "--jobs", "1", cwd=root))
    ok(hb("grid", "collect", "ref", cwd=root))
    return root / "ref"


@pytest.mark.parametrize("presses", [1, 3])
def test_ctrl_c_stops_the_workers_and_the_rerun_completes(tmp_path, reference_big_grid, presses):
    (tmp_path / "g.toml").write_text(BIG)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(atomic.FAULT_ENV, None)
    proc = subprocess.Popen([sys.executable, "-m", "hbsim.cli", "grid", "run", "g.toml", "--out", "grid", "--jobs",
                             "2"], cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    cells = tmp_path / "grid" / "cells"
    deadline = time.monotonic() + 300
    while not (cells.is_dir() and atomic.visible(cells)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    for _ in range(presses):                       # a terminal's Ctrl-C: SIGINT to the whole group
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.1)
    _, err = proc.communicate(timeout=60)          # a hang fails here
    # 130 from hb; -SIGINT when a later press lands while the interpreter exits (still a stop)
    assert proc.returncode in (130, -signal.SIGINT) and "interrupted" in err, err[-3000:]
    time.sleep(2.5)                                # an orphan watch checks once a second
    assert _session_processes(proc.pid) == []      # no worker or forkserver outlives hb
    done = len(atomic.visible(cells))
    assert done < 60                               # it stopped: the queue was not worked through
    ok(hb("grid", "run", "g.toml", "--out", "grid", "--jobs", "1", cwd=tmp_path))
    ok(hb("grid", "collect", "grid", cwd=tmp_path))
    for name in ("train.parquet", "eval.parquet"):
        got = tables(tmp_path / "grid")[name]
        pd.testing.assert_frame_equal(got, tables(reference_big_grid)[name])
    no_temporaries(tmp_path / "grid")


# -- kill -9 of the hb process alone (not its group), and the report's helper ----------------
def _start(args: list[str], cwd: Path, **extra_env) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in (atomic.FAULT_ENV, "HB_DEBUG", offload.KILL_ENV)}
    env.update(PYTHONPATH=str(REPO), OPENBLAS_NUM_THREADS="1", **extra_env)
    return subprocess.Popen([sys.executable, "-m", "hbsim.cli", *args], cwd=cwd, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _children(pid: int) -> list[int]:
    return _processes_with(1, pid)


def _gone_within(sid: int, seconds: float) -> list[int]:
    """The processes of session `sid` still alive after `seconds` (hb's session: every
    process hb started, whatever became of their parents)."""
    deadline = time.monotonic() + seconds
    while _session_processes(sid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _session_processes(sid)


def _wait_until(condition, proc, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    assert condition(), "the command never reached the moment to kill it"


KILL_ALONE = {
    "sim": (["sim", "--policy", "uniform", "--policy", "round_robin", "--seeds", "30", "--steps", "60", "--jobs", "2",
             "--out", "out"]),
    "grid run": (["grid", "run", "g.toml", "--out", "out", "--jobs", "2"]),
    "stress": (["stress", "--quick", "--scenarios", "trap,dead", "--jobs", "2", "--out", "out"]),
}


@pytest.mark.parametrize("command", sorted(KILL_ALONE))
def test_kill_9_of_hb_alone_leaves_no_process_behind(tmp_path, command):
    """hb killed with -9 while its two workers run (the forkserver, the resource tracker and
    both workers alive): within a few seconds no process hb started is left (each worker
    watches hb itself; then the forkserver and the tracker see their pipes close)."""
    args = KILL_ALONE[command]
    (tmp_path / "g.toml").write_text(BIG)
    proc = _start(args, tmp_path)
    _wait_until(lambda: len(_session_processes(proc.pid)) >= 4, proc)   # hb, tracker, forkserver, a worker
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone_within(proc.pid, 5.0) == []


@pytest.fixture(scope="module")
def one_process_report(tmp_path_factory, reference_grid) -> Path:
    """The reference grid's report made in one process (`--jobs 1`), once for every kill moment."""
    root = tmp_path_factory.mktemp("one-process-report")
    ok(hb("report", reference_grid / "grid", *REPORT, "--jobs", "1", "--out", root / "one", cwd=root))
    return root / "one"


@pytest.mark.parametrize("kill_at", [0, 1, 2])
def test_report_helper_killed_at_several_moments(tmp_path, reference_grid, one_process_report, kill_at):
    """The report's forked helper killed with -9 in its start-up or at its 1st or 2nd call:
    the report still ends (exit 0), says so in one line, and its tables and figures are
    the bytes of a one-process report."""
    proc = _start(["report", str(reference_grid / "grid"), *REPORT, "--jobs", "2", "--out", "two"], tmp_path,
                  **{offload.KILL_ENV: str(kill_at)})
    out, err = proc.communicate(timeout=600)                 # a hang fails here
    assert proc.returncode == 0, err[-3000:]
    assert offload.DIED in err and "Traceback" not in err
    assert_same(tables(tmp_path / "two"), tables(one_process_report))
    pngs = lambda root: {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*.png"))}  # noqa: E731
    assert pngs(tmp_path / "two") == pngs(one_process_report) != {}
    assert _gone_within(proc.pid, 5.0) == []


def test_kill_9_of_hb_report_alone_ends_its_helper(tmp_path, reference_grid):
    proc = _start(["report", str(reference_grid / "grid"), *REPORT, "--resamples", "20000", "--jobs", "2",
                   "--out", "r"], tmp_path)
    _wait_until(lambda: _children(proc.pid) != [], proc)    # the forked helper is at work
    time.sleep(0.5)
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone_within(proc.pid, 5.0) == []


def test_ctrl_c_while_the_forkserver_starts_prints_no_traceback(tmp_path):
    """Ctrl-C (SIGINT to the whole group) the moment hb's first helper process exists: the
    forkserver is importing its preload list then. hb says "interrupted" (130) and no
    process prints a traceback."""
    (tmp_path / "g.toml").write_text(BIG)
    proc = _start(["grid", "run", "g.toml", "--out", "out", "--jobs", "2"], tmp_path)
    _wait_until(lambda: len(_session_processes(proc.pid)) >= 2, proc, seconds=120)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (130, -signal.SIGINT), err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert _gone_within(proc.pid, 5.0) == []


# -- a full disk ---------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """mount(size) -> a fresh tmpfs of `size` bytes (unmounted afterwards); skips where the
    machine does not let this process mount one (not root, no CAP_SYS_ADMIN, no tmpfs)."""
    mounts = []

    def mount(size: int) -> Path:
        where = tmp_path / f"disk{len(mounts)}"
        where.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here ({proc.stderr.strip() or proc.returncode}): "
                        "the disk-full case is not tested on this machine")
        mounts.append(where)
        return where
    yield mount
    for where in mounts:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _one_line_disk_full(proc) -> None:
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]   # after progress lines
    assert errors == [proc.stderr.splitlines()[-1]] and errors[0].startswith("error: the disk is full"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_disk_full_during_report(tmp_path, reference_grid, small_disk):
    disk = small_disk(64 * 1024)
    proc = hb("report", reference_grid / "grid", *REPORT, "--out", disk / "report", cwd=tmp_path)
    _one_line_disk_full(proc)
    no_temporaries(disk)
    assert folders.read_marker(disk / "report")["state"] == "incomplete"


def test_disk_full_during_grid_run_stops_it_and_the_rerun_resumes(tmp_path, reference_grid, small_disk):
    cell = next(p for p in (reference_grid / "grid" / "cells").iterdir() if p.is_dir())
    per_cell = sum(-(-p.stat().st_size // 4096) * 4096 for p in cell.iterdir())     # tmpfs pages
    disk = small_disk(4 * 1024 * 1024)
    (tmp_path / "g.toml").write_text(grid_text(name="full", steps=3, seeds=6,
                                               policies=[{"name": "uniform"}, {"name": "round_robin"}]))
    with open(disk / "filler", "wb") as fh:        # room for grid.json, the marker and about two cells
        fh.write(b"\0" * max(0, shutil.disk_usage(disk).free - 2 * per_cell - 16384))
    proc = hb("grid", "run", tmp_path / "g.toml", "--out", disk / "grid", "--jobs", "2", cwd=tmp_path)
    _one_line_disk_full(proc)
    assert f"writing '{disk / 'grid' / 'cells'}/" in proc.stderr     # names the run directory it could not write
    no_temporaries(disk)
    done = len(done_ids(disk / "grid"))
    assert done < 12
    (disk / "filler").unlink()
    again = ok(hb("grid", "run", tmp_path / "g.toml", "--out", disk / "grid", "--jobs", "2", cwd=tmp_path))
    assert f"12 cells, {done} already done, {12 - done} run, 0 failed" in again
    assert len(done_ids(disk / "grid")) == 12 and not list((disk / "grid" / "failed").iterdir())


def test_disk_full_during_collect(tmp_path, reference_grid, small_disk):
    cells = reference_grid / "grid" / "cells"
    size = sum(p.stat().st_size for p in cells.rglob("*") if p.is_file())
    disk = small_disk(2 * size + 4096 * (len(list(cells.rglob("*"))) + 64))
    grid = disk / "grid"
    shutil.copytree(cells, grid / "cells")
    shutil.copy(reference_grid / "grid" / "grid.json", grid / "grid.json")
    with open(disk / "filler", "wb") as fh:        # leave 8 KiB: less than the collected tables need
        fh.write(b"\0" * max(0, shutil.disk_usage(disk).free - 8192))
    proc = hb("grid", "collect", grid, cwd=tmp_path)
    _one_line_disk_full(proc)
    no_temporaries(grid)
    assert not (grid / "eval.parquet").exists()
