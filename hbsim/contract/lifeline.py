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
- `interrupts_blocked()`: SIGINT blocked (not lost: held pending) while hb starts a
  helper process, so that a Ctrl-C pressed during its start-up (the forkserver importing its
  preload list, a forked helper before its initializer) is hb's to handle and prints no
  traceback there: the helper starts with SIGINT blocked (the mask is inherited through
  fork and exec alike) and ignores it for good once it can (`ignore_interrupts_here`; the
  forkserver ignores it after its imports), while hb receives the press the moment the
  block ends. multiprocessing's resource tracker starts itself the same way, and must
  start first: its start-up lifts the block of the thread that starts it.
- `interrupts_ignored()`: SIGINT ignored, for a stop that must finish (killing the workers)
  whatever is pressed meanwhile.
- `interrupts_deferred()`: a Ctrl-C while hb hands work to its helpers (and so starts
  them) is held until the hand-over is done, then raised, so no helper is left started
  but unknown to the code that stops them.
- `wait_first(futures)`: `concurrent.futures.wait(..., FIRST_COMPLETED)` that a Ctrl-C
  cannot break in the middle: `wait` takes every future's lock one by one, and a
  KeyboardInterrupt raised between two of them left those locks held by hb's main thread,
  so the executor's manager thread, cancelling or failing those futures at the stop,
  blocked on them for good and hb never exited (seen in CI: "interrupted", then a hang).
  It waits in short slices with SIGINT deferred, so a press is raised between slices.
- `stop_executor(executor)`: a `ProcessPoolExecutor`'s queue cancelled and its workers
  killed now, for a stop (Ctrl-C, an error, a cancelled report) that must not wait for
  their current work.
- `forkserver_context(preload)` / `fork_context()`: the start method of hb's worker pools (a
  forkserver that imported `preload` once, started with SIGINT blocked; `ablations.runner`)
  and of the report's forked helper (`fork`, where forking is safe: `can_fork`; `reports.offload`).
- `alive(pid)`: the one liveness check of a process (`exit_with`'s watch; the temporaries
  `hbsim.contract.atomic` removes only when their writer is gone).
- `catch_signals(signals, handler)` / `restore_signals(previous)`: a handler for a run that
  stops after its current step (`hb real`'s checkpointer), in the main thread only.
- `fault_point(env, count)`: the one test hook that kills this process (SIGKILL) when the
  environment variable `env` equals `count` (`HB_FAULT_AT`: the N-th atomic write;
  `HB_HELPER_KILL_AT`: the report helper's N-th call).

Standard library only.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import select
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, CancelledError, wait
from multiprocessing import forkserver, resource_tracker

#: how often the fallback watch (no pidfd) looks whether hb is still there, in seconds
POLL_SECONDS = 0.5


def alive(pid: int, same_user: bool = False) -> bool:
    """Whether process `pid` exists (signal 0). A pid held by another user's process counts
    as alive, or with `same_user` as gone (the process we watch was ours: its pid was reused)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return not same_user
    return True


def _gone(pid: int) -> bool:
    return not alive(pid, same_user=True)


def fault_point(env: str, count: int) -> None:
    """Test hook (module doc): SIGKILL this process when $env is `count`."""
    at = os.environ.get(env)
    if at and at.strip() == str(count):
        os.kill(os.getpid(), signal.SIGKILL)


def can_fork() -> bool:
    """Whether a helper may be forked: Linux with the `fork` start method (macOS can fork, but
    libraries there are not fork-safe)."""
    return sys.platform.startswith("linux") and fork_context() is not None


def fork_context():
    """The start method of a helper that inherits its state at the fork (`reports.offload`);
    None where the platform has no `fork` (Windows)."""
    return mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None


def forkserver_context(preload: list[str]):
    """The workers' start method: a forkserver that imported `preload` once, started here with
    SIGINT blocked (`interrupts_blocked`: a Ctrl-C during its imports is hb's to handle, no
    traceback there; the forkserver and every worker forked from it inherit the block);
    `spawn` where there is no forkserver."""
    if "forkserver" not in mp.get_all_start_methods():  # pragma: no cover - not Linux
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(preload)
    resource_tracker.ensure_running()      # first: its own start lifts a SIGINT block
    with interrupts_blocked():
        forkserver.ensure_running()
    return ctx


def catch_signals(signals, handler) -> dict:
    """Install `handler` for each of `signals` (in the main thread; elsewhere nothing) ->
    the previous handlers, for `restore_signals`."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, handler) for s in signals}


def restore_signals(previous: dict) -> None:
    for s, handler in previous.items():
        signal.signal(s, handler)


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
def interrupts_blocked():
    """SIGINT blocked in this thread inside the block: a press stays pending and is
    delivered at its end (or at once, to another thread of this process that does not
    block it: Python then raises KeyboardInterrupt here as usual, so no press is lost).
    A process started inside inherits the mask, through fork and exec alike (module doc)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def ignore_interrupts_here() -> None:
    """In a helper process started inside `interrupts_blocked`: SIGINT ignored for good,
    then unblocked (a press held pending is dropped): Ctrl-C is hb's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


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


#: the longest a Ctrl-C waits for `wait_first` to raise it, in seconds
WAIT_SLICE = 0.2


@contextlib.contextmanager
def interrupts_deferred():
    """A Ctrl-C inside the block is held until its end, then raised (KeyboardInterrupt), so
    a block that starts helper processes is never left half done: every process it started
    is then known to whoever stops them. In the main thread; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt


def wait_first(futures, slice_seconds: float = WAIT_SLICE) -> list[tuple]:
    """(future, value, exception) for each future of `futures` that is done, once at least
    one is; `value` is None where `exception` is not. A Ctrl-C is raised between slices of
    `slice_seconds`, never while a future's lock is held (module doc): the outcomes are read
    inside the deferral too, as ``result()`` takes the lock. A cancelled future's exception
    is a `CancelledError`."""
    while True:
        with interrupts_deferred():
            done, _ = wait(futures, timeout=slice_seconds, return_when=FIRST_COMPLETED)
            outcomes = [_outcome(f) for f in done]
        if outcomes:
            return outcomes


def _outcome(future) -> tuple:
    if future.cancelled():
        return future, None, CancelledError()
    error = future.exception()
    return future, None if error is not None else future.result(), error


def stop_executor(executor) -> None:
    """Stop a `concurrent.futures.ProcessPoolExecutor` now: its queue cancelled and its
    worker processes killed and reaped, without waiting for their current work. It reads
    the executor's private process table (the standard library offers no public way before
    Python 3.14's ``terminate_workers``) before ``shutdown``, which forgets it. A stop must
    finish: further Ctrl-C is ignored until the workers are gone."""
    with interrupts_ignored():
        processes = list((getattr(executor, "_processes", None) or {}).values())
        executor.shutdown(wait=False, cancel_futures=True)
        for proc in processes:
            with contextlib.suppress(Exception):
                proc.kill()
        for proc in processes:
            with contextlib.suppress(Exception):
                proc.join(timeout=5)
