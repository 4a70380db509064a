"""The task world sub-package imports no torch; the one per-harness task pool; the named
random streams."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from policies.errors import UserError
from real_runs import streams
from real_runs.world.pool import TaskPool

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_the_task_world_imports_no_torch():
    code = ("import sys, pkgutil, importlib, real_runs.world as w\n"
            "names = [m.name for m in pkgutil.iter_modules(w.__path__)]\n"
            "for n in names: importlib.import_module('real_runs.world.' + n)\n"
            "import real_runs.native.presets, real_runs.integrations.signals, real_runs.streams\n"
            "print(sorted(names), 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["['answers',", "'episode',", "'harnesses',", "'pool',", "'syntax',", "'tasks',",
                                   "'workspace',", "'worlds']", "False"]


def test_pool_passes_are_permutations_from_the_named_stream():
    pool = TaskPool([np.arange(5)] * 2, seed=7, stream=streams.TASK_POOL)
    first, second = pool.draw(1, 5), pool.draw(1, 5)
    assert sorted(first) == sorted(second) == list(range(5))
    legacy = np.random.default_rng([7, 21, 1])       # the native trainer's stream before it had a name
    assert first == legacy.permutation(5).tolist() and second == legacy.permutation(5).tolist()
    assert pool.draw(0, 3) == np.random.default_rng([7, 21, 0]).permutation(5)[:3].tolist()


def test_pool_state_round_trip_continues_the_same_draws():
    pool = TaskPool([np.arange(4), np.arange(10, 13)], seed=1, stream=streams.ROW_POOL)
    pool.draw(0, 6)
    saved = pool.state_dict()
    ahead = pool.draw(0, 5) + pool.draw(1, 4)
    other = TaskPool([np.arange(4), np.arange(10, 13)], seed=1, stream=streams.ROW_POOL)
    other.load_state_dict(saved)
    assert other.draw(0, 5) + other.draw(1, 4) == ahead
    assert set(ahead[5:]) == {10, 11, 12}


def test_pool_of_a_dataset_column():
    pool = TaskPool.of_column(["a", "b", "a", "c", "a"], ["a", "c"], seed=0)
    assert sorted(pool.draw(0, 3)) == [0, 2, 4] and pool.draw(1, 2) == [3, 3]
    with pytest.raises(UserError, match="harness='d' has no row"):
        TaskPool.of_column(["a", "b"], ["a", "d"], seed=0)


def test_stream_seeds():
    assert streams.torch_seed(3, streams.EVAL, 5) == int(
        np.random.SeedSequence([3, 41, 5]).generate_state(1, dtype=np.uint64)[0] >> 1)
    assert 0 <= streams.torch_seed(0, streams.ROLLOUT, 0) < 2**63
    assert streams.torch_seed32(0, streams.WARM_INIT) == int(np.random.SeedSequence([0, 11]).generate_state(1)[0])
    ids = [streams.TASKS, streams.WARM_INIT, streams.WARM_BATCH, streams.TASK_POOL, streams.ROW_POOL,
           streams.ROLLOUT, streams.EVAL]
    assert len(set(ids)) == len(ids)
