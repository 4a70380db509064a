"""Shared by the user-input tests (tests/test_user_*.py): the `hb` fixture that runs a command
in this process and restores what it may change, `hb_process` (the console script in a
process of its own), `tree_hash` (a folder unchanged) and the small commands they run."""
from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ablations_testkit import grid_text

TINY_GRID = grid_text(name="tiny", steps=3, seeds=1, policies=[{"name": "uniform"}, {"name": "round_robin"}])
HUGE = "99999999999999999999"
TOO_LONG = "x" * 300                   # one folder name over NAME_MAX (255)
SIM = ["sim", "--policy", "uniform", "--seeds", "1", "--steps", "2", "--jobs", "1",
       "--set", "env.n_tasks=12", "--set", "env.n_heldout_tasks=4"]
REAL = ["real", "--preset", "tiny", "--policy", "uniform", "--steps", "1", "--device", "cpu"]
TRL = ["real", "--backend", "trl", "--policy", "uniform", "--steps", "1", "--device", "cpu"]
GRID_RUN = ["grid", "run", "--jobs", "1"]        # one job: no worker pool started in the test process
CAL = ["calibrate", "--blocks", "1", "--seeds", "2", "--steps", "2", "--resamples", "5", "--jobs", "1"]


REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def hb(monkeypatch, capsys, tmp_path):
    """`hb(*args) -> (exit code, stdout, stderr)`, run in this process by `hbsim.cli.main`
    from tmp_path; what a command may change process-wide is restored afterwards."""
    from hbsim.cli import main
    monkeypatch.delenv("HB_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)                     # a relative default output lands in tmp_path
    environ, mask = dict(os.environ), os.umask(0o022)
    os.umask(mask)
    threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None

    def run(*args):
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err
    yield run
    os.environ.clear()
    os.environ.update(environ)
    os.umask(mask)
    if threads is not None:
        sys.modules["torch"].set_num_threads(threads)


def hb_process(*args) -> subprocess.CompletedProcess:
    """`hb ARGS` through the console script installed beside this interpreter (this checkout's code)."""
    script = Path(sys.executable).with_name("hb")
    if not script.exists():
        pytest.skip(f"no `hb` console script beside {sys.executable} (pip install the package)")
    env = {k: v for k, v in os.environ.items() if k != "HB_DEBUG"}
    env.update(OPENBLAS_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))
    return subprocess.run([str(script), *map(str, args)], capture_output=True, text=True, timeout=300, env=env)


def tree_hash(root: Path) -> str | None:
    """sha256 over every path (relative), its mode and (files) its content; None if absent."""
    if not root.exists():
        return None
    digest = hashlib.sha256()
    paths = [root] + sorted(root.rglob("*")) if root.is_dir() else [root]
    for p in paths:
        st = p.lstat()
        digest.update(f"{p.relative_to(root) if p != root else '.'}:{stat.S_IMODE(st.st_mode):o}".encode())
        if p.is_file():
            digest.update(p.read_bytes())
    return digest.hexdigest()
