"""The one home of how hb's helper processes live and die with hb (docs/RELIABILITY.md).

Every process hb starts for a command -- the grid's pool workers (`ablations.runner`), the
forkserver they are forked from, multiprocessing's resource tracker and the report's
forked helper (`reports.offload`) -- must end when hb ends, however hb ends:

- `exit_with(pid)`: called in a helper process, a daemon thread ends it (``os._exit``)
  as soon as hb (process ``pid``) is gone, killed with -9 included. It watches hb itself,
  not its parent: a pool worker's parent is the forkserver, which stays alive as long as a
  worker holds its alive pipe, so "parent gone" never happens after a kill -9 of hb alone.
  When the workers have gone, the forkserver and the resource tracker see their pipes
  close and exit on their own.
- `interrupts_ignored()`: SIGINT ignored while hb starts its helper processes, so that
  a Ctrl-C pressed during their start-up (the forkserver importing its preload list, a
  worker unpickling its initializer) is hb's to handle and prints no traceback there: a
  process started while SIGINT is ignored inherits that, through exec too, and Python then
  installs no KeyboardInterrupt handler in it.
- `kill_processes(executor)`: the workers of a `ProcessPoolExecutor` killed now, for a
  stop (Ctrl-C, an error, a cancelled report) that must not wait for their current work.

Standard library only.
"""
from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time

#: how often the fallback watch (no pidfd) looks whether hb is still there, in seconds
POLL_SECONDS = 0.5


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # pragma: no cover - a pid reused by another user's process
        return True
    return False


def wait_for_exit(pid: int) -> None:
    """Block until process ``pid`` has ended (at once if it has already)."""
    try:
        fd = os.pidfd_open(pid)          # Linux >= 5.3: readable when the process ends
    except ProcessLookupError:
        return
    except (AttributeError, OSError):    # pragma: no cover - no pidfd here: poll
        while not _gone(pid):
            time.sleep(POLL_SECONDS)
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def exit_with(pid: int, code: int = 1) -> None:
    """In a helper process: end it with ``code`` as soon as process ``pid`` (hb) is gone.
    Whatever it was writing stays a hidden temporary that the command's rerun removes."""
    if pid == os.getpid():
        return

    def watch() -> None:
        wait_for_exit(pid)
        os._exit(code)
    threading.Thread(target=watch, daemon=True, name="hb-lifeline").start()


@contextlib.contextmanager
def interrupts_ignored():
    """SIGINT ignored inside the block (in the main thread; elsewhere a no-op), then the
    previous handler back: start helper processes inside it (module doc)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def kill_processes(executor) -> None:
    """Kill the worker processes of a `concurrent.futures.ProcessPoolExecutor` now and
    reap them (its private process table: the standard library offers no public way
    before Python 3.14's ``terminate_workers``)."""
    processes = list((getattr(executor, "_processes", None) or {}).values())
    for proc in processes:
        with contextlib.suppress(Exception):
            proc.kill()
    for proc in processes:
        with contextlib.suppress(Exception):
            proc.join(timeout=5)
