"""One BLAS thread where processes compete for the cores: the grid runner's workers and
the `hb real` process (numpy's OpenBLAS threads spinning against torch's: the scheduler's
time per step rose from 0.3 ms to 3-9 ms and the step from 241 to 292 ms on 2 cores).

A variable the user set wins: with any of USER_VARS in the environment nothing is
changed. Imports nothing heavy (it runs before numpy is imported where it can).

`keep_freed_memory`, for the real runs (`hb real`, a grid's real cells): glibc's malloc keeps
what is freed for the next allocation instead of handing it back to the kernel (a SmolLM2
step allocates and frees logits of ~190 MB several times; each fresh mapping is paid again
in page faults: 20 million in a 30-step run, ~40 of its 600 CPU-seconds in the kernel).
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

#: glibc's mallopt parameters (malloc.h): the heap's top is trimmed above this many free bytes;
#: at most this many blocks are served by mmap
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
#: the variables with which a user tunes glibc's malloc (then `keep_freed_memory` leaves it)
MALLOC_VARS = ("GLIBC_TUNABLES", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_",
               "MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX")

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


def keep_freed_memory() -> bool:
    """This process's malloc (glibc only) serves every block from its heap (no mmap, so a
    large block freed is not unmapped) and trims the heap's top only above 2 GiB free, so
    memory freed is reused without new page faults; the resident size stays near its peak.
    Nothing is changed where the user tuned malloc (MALLOC_VARS) or the C library is not
    glibc. Returns whether it was set."""
    if any(name in os.environ for name in MALLOC_VARS):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        return False
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
