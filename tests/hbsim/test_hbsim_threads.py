"""hbsim.threads (one BLAS thread for grid workers and `hb real`) and the t quantile of
hbsim.summary (no scipy.special on the `hb sim` path)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from hbsim import threads
from hbsim.summary import t_quantile


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


@pytest.mark.parametrize("df, p, expected", [(1, 0.975, 12.706204736174707), (2, 0.975, 4.302652729749464),
                                             (4, 0.975, 2.7764451051977934), (19, 0.975, 2.0930240544083096),
                                             (2, 0.75, 0.816496580927726)])
def test_t_quantile_matches_tables(df, p, expected):
    # df = 2: closed form sqrt(2) (2p - 1) / sqrt(1 - (2p - 1)^2); others: scipy.special.stdtrit
    assert t_quantile(p, df) == pytest.approx(expected, rel=1e-12)


def test_t_quantile_closed_form_df2():
    for p in np.linspace(0.55, 0.999, 9):
        a = 2 * p - 1
        assert t_quantile(p, 2) == pytest.approx(np.sqrt(2) * a / np.sqrt(1 - a * a), rel=1e-12)
