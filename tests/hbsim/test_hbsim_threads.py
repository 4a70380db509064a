"""hbsim.contract.threads (one BLAS thread for grid workers and `hb real`)."""
from __future__ import annotations

import os
import platform

import pytest

from hbsim.contract import threads


@pytest.fixture
def clean_env(monkeypatch):
    for name in threads.WORKER_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_pin_sets_every_worker_variable(clean_env):
    assert threads.pin_one_thread() is True
    assert {n: os.environ[n] for n in threads.WORKER_VARS} == dict.fromkeys(threads.WORKER_VARS, "1")


def test_a_user_setting_wins(clean_env):
    clean_env.setenv("OMP_NUM_THREADS", "3")
    assert threads.pin_one_thread(this_process=True) is False
    assert "OPENBLAS_NUM_THREADS" not in os.environ and os.environ["OMP_NUM_THREADS"] == "3"


def test_numpy_only_leaves_torch_variables(clean_env):
    assert threads.pin_one_thread(threads.NUMPY_VARS)
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in os.environ and "MKL_NUM_THREADS" not in os.environ


def test_this_process_sets_the_loaded_openblas(clean_env):
    before = threads.openblas_threads()
    if before is None:
        pytest.skip("numpy without a loaded OpenBLAS")
    try:
        assert threads.set_openblas_threads(2) >= 1 and threads.openblas_threads() == 2
        assert threads.pin_one_thread(threads.NUMPY_VARS, this_process=True)
        assert threads.openblas_threads() == 1
    finally:
        threads.set_openblas_threads(before)


#: in a fresh interpreter: page faults of allocating and touching 200 MB a second time, after freeing it
_REFAULT = """
import resource, sys
import ctypes
import numpy as np
from hbsim.contract import threads
ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)   # PR_SET_THP_DISABLE: 4 KiB pages whatever the machine's THP setting
print(threads.keep_freed_memory() if sys.argv[1] == "keep" else "off")
a = np.ones(25_000_000); del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
a = np.ones(25_000_000)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _refaults(how: str, **env) -> tuple[str, int]:
    import subprocess
    import sys
    from pathlib import Path
    clean = {k: v for k, v in os.environ.items() if k not in threads.MALLOC_VARS}
    out = subprocess.run([sys.executable, "-c", _REFAULT, how], capture_output=True, text=True, check=True,
                         env={**clean, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), **env}).stdout.split()
    return out[0], int(out[1])


@pytest.mark.slow
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")
def test_keep_freed_memory_reuses_a_freed_block_without_page_faults():
    """200 MB freed and allocated again: by default glibc unmaps it and the second touch
    faults in all ~48,800 pages again; with keep_freed_memory it is reused (a few faults).
    A user's malloc setting wins (nothing set, the faults are back)."""
    assert _refaults("off")[1] > 40_000
    kept = _refaults("keep")
    assert kept[0] == "True" and kept[1] < 1_000, kept
    user = _refaults("keep", MALLOC_ARENA_MAX="2")
    assert user[0] == "False" and user[1] > 40_000, user
