"""Running the missing cells of a grid on a backend.

Backends are a registry (name -> function(tasks, jobs, on_done, **options)):
* `local`: `--jobs 1` runs cells in this process; more jobs use a
  `ProcessPoolExecutor` whose workers are forked from a forkserver that imported hbsim
  once, and are reused for every cell (no Python start per cell).
* `ray`: one Ray task per cell. Without an address a local Ray instance with `jobs`
  CPUs is started; with `ray_address` the runner joins that cluster and the workers
  write into the (shared) output directory themselves.

Every cell is independent and seeded by its config, so results do not depend on the
backend, the number of workers or the order cells finish in.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ablations import store, worker
from ablations.spec import GridSpec
from policies.errors import UserError


@dataclass
class RunReport:
    """What `run_grid` did. failed: (cell id, one-line reason, log path)."""

    total: int
    skipped: int
    ran: int = 0
    failed: list[tuple[str, str, str]] = field(default_factory=list)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def make_tasks(spec: GridSpec, out: str | os.PathLike, only: set[str] | None = None) -> list[dict]:
    """One task dict per cell (see ablations.worker), in plan order."""
    out = str(Path(out).resolve())
    return [{"id": c.id, "config": c.config, "label": c.label, "seed": c.seed, "sweep": c.sweep,
             "grid": spec.name, "out": out, "plugins": spec.plugins}
            for c in spec.cells() if only is None or c.id in only]


def run_grid(spec: GridSpec, out: str | os.PathLike, *, jobs: int | None = None, backend: str = "local",
             ray_address: str | None = None, force_mixed: bool = False,
             progress: Callable[[int, int, int], None] | None = None) -> RunReport:
    """Run every cell of `spec` missing from `out`.

    progress(done, total, failed) is called after every finished cell (done counts the
    cells already present too).
    """
    if backend not in BACKENDS:
        raise UserError(f"--backend {backend!r} is unknown; valid backends: {', '.join(BACKENDS)}")
    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise UserError(f"--jobs {jobs!r} is not allowed: expected an integer >= 1")
    store.check_writable(out)
    store.open_grid(out, spec.name, {"path": spec.path, "raw": spec.raw}, force_mixed=force_mixed)
    store.clean_tmp(out)
    cells = spec.cells()
    done = store.done_ids(out)
    tasks = make_tasks(spec, out, only={c.id for c in cells} - done)
    report = RunReport(total=len(cells), skipped=len(cells) - len(tasks))
    if progress:
        progress(report.skipped, report.total, 0)
    if not tasks:
        return report

    def on_done(answer: dict) -> None:
        report.ran += 1
        if not answer["ok"]:
            report.failed.append((answer["id"], answer["reason"], answer.get("log", "")))
        if progress:
            progress(report.skipped + report.ran, report.total, len(report.failed))

    BACKENDS[backend](tasks, jobs or default_jobs(), on_done, ray_address=ray_address)
    return report


# -- local ---------------------------------------------------------------------------
#: imported once by the forkserver, so every forked worker starts with them loaded
PRELOAD = ["ablations.worker", "hbsim.experiment", "hbsim.records", "hbsim.envs.bernoulli",
           "hbsim.envs.drifting", "hbsim.envs.student", "pyarrow.parquet"]

#: one BLAS/OpenMP thread per worker: N workers x (spinning) BLAS threads on N cores made
#: every cell ~2.5x slower with --jobs 2 on a 2-core machine
SINGLE_THREAD_ENV = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                            "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")}


def _single_thread_workers() -> None:
    """Workers (forked from a forkserver started after this) inherit these; user settings win."""
    for name, value in SINGLE_THREAD_ENV.items():
        os.environ.setdefault(name, value)


def warm_up(backend: str = "local", jobs: int | None = None) -> None:
    """Start the forkserver now (it imports PRELOAD in the background) so that its start-up
    overlaps with planning the grid; a no-op where no worker pool will be used."""
    if backend != "local" or (jobs or default_jobs()) == 1 or "forkserver" not in mp.get_all_start_methods():
        return
    _single_thread_workers()
    _pool_context()
    from multiprocessing import forkserver
    forkserver.ensure_running()


def _pool_context():
    methods = mp.get_all_start_methods()
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return mp.get_context("spawn")  # pragma: no cover - not Linux


def run_local(tasks: list[dict], jobs: int, on_done: Callable[[dict], None], **_) -> None:
    if jobs == 1 or len(tasks) == 1:
        for task in tasks:
            on_done(worker.execute(task))
        return
    jobs = min(jobs, len(tasks))
    _single_thread_workers()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=_pool_context()) as pool:
        pending = {pool.submit(worker.execute, t): t for t in tasks}
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    task = pending.pop(fut)
                    on_done(_answer(fut, task))
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _answer(fut, task: dict) -> dict:
    """A future's answer; a worker that died (segfault, OOM kill) fails its cell."""
    try:
        return fut.result()
    except Exception as exc:  # noqa: BLE001 - BrokenProcessPool and friends
        reason = f"{type(exc).__name__}: worker process failed ({exc})"
        log = store.write_failure(task["out"], task["id"], reason + "\n")
        return {"id": task["id"], "ok": False, "seconds": 0.0, "reason": reason, "log": str(log)}


# -- ray -----------------------------------------------------------------------------
def run_ray(tasks: list[dict], jobs: int, on_done: Callable[[dict], None], *,
            ray_address: str | None = None, **_) -> None:
    try:
        import ray
    except ImportError as exc:
        raise UserError(f"--backend ray needs the ray package (pip install 'harnessbandit[ray]'): {exc}") from None
    kwargs = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False,
              "runtime_env": {"env_vars": {k: os.environ.get(k, v) for k, v in SINGLE_THREAD_ENV.items()}}}
    if ray_address:
        kwargs["address"] = ray_address
    else:
        kwargs["num_cpus"] = jobs
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(**kwargs)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(worker.execute)
        limit = jobs if not ray_address else max(jobs, int(ray.cluster_resources().get("CPU", jobs)))
        queue = list(reversed(tasks))
        pending: dict = {}
        while queue or pending:
            while queue and len(pending) < limit:
                task = queue.pop()
                pending[remote.remote(task)] = task
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                task = pending.pop(ref)
                try:
                    answer = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - the worker died
                    reason = f"{type(exc).__name__}: ray task failed ({str(exc).splitlines()[0]})"
                    log = store.write_failure(task["out"], task["id"], f"{exc}\n")
                    answer = {"id": task["id"], "ok": False, "seconds": 0.0, "reason": reason, "log": str(log)}
                on_done(answer)
    finally:
        if started_here:
            ray.shutdown()


BACKENDS: dict[str, Callable] = {"local": run_local, "ray": run_ray}
