"""Issue 41: `hb twin fit` killed with SIGKILL at each of its writes (the test hook
`HB_FAULT_AT=N` of `hbsim.contract.atomic`: 1 = TWIN.toml, 2 = TWIN.png, each after the data went to
its temporary and before the rename), then run again: the rerun's TOML is byte for byte the
uninterrupted one's, the figure is there, and no temporary is left beside them. Every test
starts processes, so all are marked slow."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hbsim import contract
from hbsim.contract import atomic

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
SIM = ["sim", "--scenario", "trap", "--policy", "uniform", "--seeds", "2", "--steps", "12", "--counterfactual", "4",
       "--eval-every", "4", "--jobs", "1"]


def hb(*args, cwd: Path, fault: int | None = None):
    env = {k: v for k, v in os.environ.items() if k not in (atomic.FAULT_ENV, "HB_DEBUG")}
    env.update(PYTHONPATH=str(REPO), OPENBLAS_NUM_THREADS="1")
    if fault is not None:
        env[atomic.FAULT_ENV] = str(fault)
    return subprocess.run([sys.executable, "-m", "hbsim.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The fit's logs and an uninterrupted fit of them (ref/twin.toml, ref/twin.png)."""
    root = tmp_path_factory.mktemp("twin-faults")
    proc = hb(*SIM, "--out", "logs", cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = hb("twin", "fit", "logs", "--out", "ref/twin.toml", "--holdout", "0", cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


@pytest.mark.parametrize("at", [1, 2])          # the TOML, the figure
def test_twin_fit_killed_then_rerun(reference, at):
    out = reference / f"out{at}"
    proc = hb("twin", "fit", "logs", "--out", out / "twin.toml", "--holdout", "0", cwd=reference, fault=at)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-3000:])
    assert [p for p in out.iterdir() if contract.TMP_PREFIX in p.name]          # the kill left its temporary
    assert (out / "twin.toml").exists() == (at == 2)
    proc = hb("twin", "fit", "logs", "--out", out / "twin.toml", "--holdout", "0", cwd=reference)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["twin.png", "twin.toml"]       # no temporary left
    want = (reference / "ref" / "twin.toml").read_text().replace("ref/twin", f"out{at}/twin")
    assert (out / "twin.toml").read_text().replace(str(out), f"out{at}") == want.replace(str(reference / "ref"), f"out{at}")
