"""One BLAS thread where processes compete for the cores: the grid runner's workers and
the `hb real` process (numpy's OpenBLAS threads spinning against torch's: the scheduler's
time per step rose from 0.3 ms to 3-9 ms and the step from 241 to 292 ms on 2 cores).

A variable the user set wins: with any of USER_VARS in the environment nothing is
changed. Imports nothing heavy (it runs before numpy is imported where it can).
"""
from __future__ import annotations

import ctypes
import os
import sys

#: numpy's OpenBLAS reads OPENBLAS_NUM_THREADS, then OMP_NUM_THREADS; torch MKL_NUM_THREADS / OMP_NUM_THREADS
USER_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

#: the variables a worker process gets (BLAS, OpenMP, MKL, Accelerate, numexpr)
WORKER_VARS = (*USER_VARS, "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")

#: numpy's BLAS only: torch keeps its own threads
NUMPY_VARS = ("OPENBLAS_NUM_THREADS",)

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
            "openblas_set_num_threads")


def user_set() -> bool:
    """True when the user set any thread variable (then every count is theirs)."""
    return any(name in os.environ for name in USER_VARS)


def pin_one_thread(names: tuple[str, ...] = WORKER_VARS, *, this_process: bool = False) -> bool:
    """Set ``names`` to 1 in os.environ (inherited by processes started later) unless the
    user set a thread variable; ``this_process``: also set numpy's OpenBLAS, when it is
    already loaded, to one thread through its own call (the variables take effect only
    at load). Returns whether anything was pinned."""
    if user_set():
        return False
    os.environ.update({name: "1" for name in names})
    if this_process and "numpy" in sys.modules:
        set_openblas_threads(1)
    return True


def _loaded_openblas() -> list:
    """The OpenBLAS libraries numpy / scipy loaded (found in /proc/self/maps; [] elsewhere)."""
    try:
        with open("/proc/self/maps") as fh:
            paths = sorted({line.split()[-1] for line in fh if "openblas" in line.rsplit("/", 1)[-1] and ".so" in line})
    except OSError:  # pragma: no cover - not Linux
        return []
    libs = []
    for path in paths:
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:  # pragma: no cover
            continue
    return libs


def set_openblas_threads(count: int) -> int:
    """Call set_num_threads of every loaded OpenBLAS; returns how many were set."""
    done = 0
    for lib in _loaded_openblas():
        setter = next((getattr(lib, n) for n in _SETTERS if hasattr(lib, n)), None)
        if setter is not None:
            setter(ctypes.c_int(count))
            done += 1
    return done


def openblas_threads() -> int | None:
    """Threads of the first loaded OpenBLAS (None: none loaded or no getter)."""
    for lib in _loaded_openblas():
        getter = next((getattr(lib, n.replace("set_", "get_")) for n in _SETTERS if hasattr(lib, n.replace("set_", "get_"))),
                      None)
        if getter is not None:
            return int(getter())
    return None
