"""hbsim.contract.threads (one BLAS thread for grid workers and `hb real`)."""
from __future__ import annotations

import os

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
