"""The one path that runs many runs: `hb grid run`, `hb demo`, `hb sim`, `hb validity
--study` and `hb calibrate` hand their runs to `run_many` as tasks, plain dicts:

    {"id": unique name, "config": resolved run config, "dir": run directory to write, or
     None (the RunResult comes back in the answer); optional "replace" (rerun a complete
     run), "meta" (extra run.json keys), "log" (write log.txt), "failures" (a folder, the
     grid's, keeping failed/<id>/log.txt), "plugins" (modules to import first: `run_many` adds
     every plugin module this process loaded, `policies.registry.loaded_plugins`), "summary"
     (the answer carries the run's summary rows, `ablations.worker`)}

`run_many` removes the hidden temporaries killed writers left next to the run
directories, skips runs already complete with the same config (resume) and runs the rest
on a backend; each run directory is written into a temporary directory and renamed into
place (`hbsim.contract.atomic.write_dir_atomic`), so a killed run never leaves a half-written one. Backends
(name -> function(tasks, jobs, on_done, **options)): `local` runs `--jobs 1` in this
process, more in a `ProcessPoolExecutor` of reused workers (one BLAS thread each) forked
from a forkserver that imported hbsim once; `ray` runs one Ray task per run, on a local
instance with `jobs` CPUs or on the cluster at `ray_address` (its workers write into the
shared output folder). Runs are seeded by their configs: results do not depend on the
backend, the number of workers or the order runs finish in. A run the storage refused (a
full disk, a quota, a read-only file system: `hbsim.contract.atomic.STORAGE_ERRNOS`) stops the batch
with that OSError, which `hb` prints as one line: the complete runs stay, the rerun resumes.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import ablations.store as store
import ablations.tune as tune
import ablations.worker as worker
from ablations.plan import REAL_KIND, GridSpec, seed_major
from hbsim.contract import atomic, folders, lifeline, threads
from hbsim.contract import markers
from hbsim.contract import CELLS, PART, RUNNING, TUNE_DIR, TUNE_JSON
from hbsim.contract.records import config_hash, is_complete, read_meta
from policies.errors import UserError, require_extra
from policies.registry import loaded_plugins
from policies.validate import MAX_JOBS, check_int


@dataclass
class RunReport:
    """What `run_many` did. failed: the answers of the failed runs (id, reason, log, traceback)."""

    total: int
    skipped: int
    ran: int = 0
    failed: list[dict] = field(default_factory=list)

    def check(self) -> None:
        """Raise RuntimeError naming every failed run, with the first one's traceback."""
        if self.failed:
            ids = ", ".join(a["id"] for a in self.failed)
            if self.failed[0].get("user_error"):        # the user's bug, named in one line (its log has the traceback)
                raise UserError(f"{len(self.failed)} of {self.total} runs failed ({ids}); the finished ones are kept "
                                f"(a rerun resumes): {self.failed[0]['user_error']}")
            raise RuntimeError(f"{len(self.failed)} of {self.total} runs failed ({ids}); the finished ones are kept "
                               f"(a rerun resumes); {self.failed[0]['traceback']}")


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


# -- the command-line options of every multi-run command ----------------------------------
def add_run_options(parser: argparse.ArgumentParser) -> None:
    """--jobs, --backend and --ray-address (checked by `check_run_options`)."""
    parser.add_argument("--jobs", type=int, default=None, help=f"worker processes (default: cores = {default_jobs()})")
    parser.add_argument("--backend", default="local", help=f"one of {', '.join(BACKENDS)} (default: local)")
    parser.add_argument("--ray-address", default=None, help="join this Ray cluster (default: start a local one)")


#: seconds `check_ray_address` waits for the cluster's port to answer
RAY_CONNECT_TIMEOUT = 5.0


def check_run_options(jobs: int | None, backend: str, ray_address: str | None = None, *,
                      spec: GridSpec | None = None) -> None:
    """--jobs bounded, --backend known, a --ray-address that answers, and the extra a grid's
    real cells need (`[env] kind = "real"`: torch) installed (before any write)."""
    if spec is not None and any(c.config["env"].get("kind") == REAL_KIND for c in spec.cells()):
        require_extra("torch", f'grid {spec.name!r} (real cells: [env] kind = "real")', "torch")
    if jobs is not None:
        check_int("--jobs", jobs, 1, MAX_JOBS)
    if backend not in BACKENDS:
        raise UserError(f"--backend {backend!r} is unknown; valid backends: {', '.join(BACKENDS)}")
    if backend == "ray":
        require_extra("ray", "--backend ray", "ray")
    if ray_address is not None:
        if backend != "ray":
            raise UserError(f"--ray-address {ray_address!r} is only used with --backend ray; add --backend ray")
        check_ray_address(ray_address)


def check_ray_address(address: str, timeout: float = RAY_CONNECT_TIMEOUT) -> None:
    """`host:port` or `ray://host:port` must accept a TCP connection within `timeout`
    seconds ("auto" is left to Ray, which fails at once when no cluster runs here): a
    wrong address is one line, not a grid folder and retries forever."""
    if address == "auto":
        return
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--ray-address {address!r} is not allowed: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise UserError(f"--ray-address {address!r}: no Ray cluster answers there within {timeout:g}s "
                        f"({exc.strerror or exc}); nothing was written: start the cluster or fix the address") from None


def workers(jobs: int | None, n: int) -> int:
    """How many workers `n` runs get."""
    return max(1, min(jobs or default_jobs(), n))


# -- resume and run ------------------------------------------------------------------
def pending(tasks: list[dict], remedy: str = "choose a new output folder") -> list[dict]:
    """The tasks still to run: no directory, `replace`, or no complete run in it yet. A
    complete run of another config, or a file in a run's place, raises UserError naming
    `remedy` (call this before writing anything)."""
    todo = []
    for task in tasks:
        path = Path(task["dir"]) if task.get("dir") else None
        if path is not None and path.exists() and not path.is_dir():
            raise UserError(f"{str(path)!r} is a file, not a run directory; {remedy}")
        for parent in path.parents if path is not None else ():
            if parent.is_dir():
                break
            folders.expect_folder(parent, "run directory", path)     # a file or a broken link on the way
        if path is None or task.get("replace") or not is_complete(path):
            todo.append(task)
            continue
        saved = read_meta(path).get("config_hash")
        if saved != config_hash(task["config"]):
            raise UserError(f"{str(path)!r} already holds a different run (config hash {saved}, this one "
                            f"{config_hash(task['config'])}); nothing was written: {remedy}")
    return todo


def run_many(tasks: list[dict], *, jobs: int | None = None, backend: str = "local", ray_address: str | None = None,
             progress: Callable[[int, int, int], None] | None = None,
             on_done: Callable[[dict], None] | None = None) -> RunReport:
    """Run the `pending` tasks (module doc). on_done(answer) sees each answer (ablations.worker);
    progress(done, total, failed) is called at the start and after each run (done counts
    the runs already complete too)."""
    check_run_options(jobs, backend, ray_address)
    here = loaded_plugins()     # `hb --plugin`, a grid's plugins: a worker's registry is this one's
    tasks = [{**t, "plugins": list(dict.fromkeys([*t.get("plugins", []), *here]))} if here else t for t in tasks]
    parents = sorted({Path(t["dir"]).parent for t in tasks if t.get("dir")})
    for folder in parents:
        atomic.remove_temp(folder)
    todo = pending(tasks)
    for task in tasks:              # a complete run of the same config (a killed earlier call's): hb's, listed
        if task.get("dir") and task not in todo:
            atomic.record_written(task["dir"])
    report = RunReport(total=len(tasks), skipped=len(tasks) - len(todo))
    if progress:
        progress(report.skipped, report.total, 0)
    if not todo:
        return report

    dirs = {t["id"]: t.get("dir") for t in todo}

    def done(answer: dict) -> None:
        report.ran += 1
        if answer["ok"] and dirs.get(answer["id"]):     # a worker's run directory: the marker lists it
            atomic.record_written(dirs[answer["id"]])
        elif answer.get("log"):
            atomic.record_written(answer["log"])
        if not answer["ok"]:
            report.failed.append(answer)
            code = answer.get("errno")
            if code in atomic.STORAGE_ERRNOS:     # every later run would fail alike: stop the workers
                raise OSError(code, os.strerror(code), dirs.get(answer["id"]))
        if on_done:
            on_done(answer)
        if progress:
            progress(report.skipped + report.ran, report.total, len(report.failed))

    try:
        BACKENDS[backend](todo, jobs or default_jobs(), done, ray_address=ray_address)
    finally:
        # again: workers of a killed earlier run may still have been exiting at the start (they
        # notice the dead parent within a second), and a stopped batch killed its own workers
        for folder in parents:
            atomic.remove_temp(folder)
    return report


#: a real grid cell's checkpoint interval in steps (`hb grid run --checkpoint-every`)
REAL_CHECKPOINT_EVERY = 5


def run_grid(spec: GridSpec, out: str | os.PathLike, *, jobs: int | None = None, backend: str = "local",
             ray_address: str | None = None, force_mixed: bool = False,
             progress: Callable[[int, int, int], None] | None = None,
             on_done: Callable[[dict], None] | None = None,
             checkpoint_every: int = REAL_CHECKPOINT_EVERY) -> RunReport:
    """Run every cell of `spec` missing from the grid directory `out`, seed-major (`seed_major`):
    DIR/cells/<id>/ with log.txt, failures in DIR/failed/ (`run_many`; each answer carries its
    summary rows). A
    real cell (`[env] kind = "real"`) checkpoints into DIR/running/<id>/ after its first step
    and every `checkpoint_every` steps (0: never), and a rerun continues it from there."""
    check_run_options(jobs, backend, ray_address, spec=spec)
    cells = spec.cells()
    store.open_grid(out, spec.name, {"path": spec.path, "raw": spec.raw}, force_mixed=force_mixed,
                    planned=[[c.id, c.label, c.seed] for c in cells])
    out = Path(out).resolve()
    tasks = [{"id": c.id, "config": c.config, "dir": str(out / CELLS / c.id), "log": True, "failures": str(out),
              "summary": True, "plugins": spec.plugins, "meta": cell_meta(spec, c),
              **({"resume_dir": str(out / RUNNING / c.id), "checkpoint_every": checkpoint_every}
                 if c.config["env"].get("kind") == REAL_KIND and checkpoint_every else {})}
             for c in seed_major(cells)]
    report = run_many(tasks, jobs=jobs, backend=backend, ray_address=ray_address, progress=progress, on_done=on_done)
    markers.complete_output_dir(out)        # the marker last, with every file and cell written
    return report


def cell_meta(spec: GridSpec, cell) -> dict:
    """What a grid adds to a cell's run.json: `grid` (its name, the cell's id, sweep, label and
    seed) and, for a cell whose env came from a scenario file, `scenario` (name, file, sha256)."""
    scenario = {p.part: p.scenario for p in spec.parts} if spec.parts else {None: spec.scenario}   # `[env] scenario`
    record = scenario.get(cell.sweep.get(PART))
    return {"grid": {"name": spec.name, "cell_id": cell.id, "sweep": cell.sweep, "label": cell.label,
                     "seed": cell.seed}, **({"scenario": record} if record else {})}


def run_tuned(spec: GridSpec, out: str | os.PathLike, **options):
    """A grid with a [tune] table, both phases (`ablations.tune`): the tuning cells into
    DIR/tune/, the selection into DIR/tune.json, then the test phase into DIR/cells/; returns
    (tuning RunReport, test RunReport or None, selection or None). `options`: `run_grid`'s."""
    check_run_options(options.get("jobs"), options.get("backend", "local"), spec=spec)
    out = Path(out)
    recorded = tune.read_selection(out)          # shape checked before any work
    store.open_grid(out, spec.name, {"path": spec.path, "raw": spec.raw}, force_mixed=options.get("force_mixed", False))
    tuned = run_grid(tune.tuning_spec(spec), out / TUNE_DIR, **options)
    if tuned.failed:
        return tuned, None, None
    selection = json.loads(json.dumps(tune.select(spec, out / TUNE_DIR)))      # as it reads back
    if recorded != selection:
        atomic.write_json_atomic(out / TUNE_JSON, selection)
    return tuned, run_grid(tune.test_spec(spec, selection), out, **options), selection


# -- progress ------------------------------------------------------------------------
class ProgressBar:
    """`[#####.....] 37/200 cells  4.1 cells/s  ETA 0:00:40` on stderr (`noun`: cells, runs),
    redrawn in place on a terminal; elsewhere (logs, CI) one line per ~10% or 5 s. `note`: one
    `warning: ` line written before the first bar, i.e. once every check passed and the runs start
    (`hb sim`, `hb grid run`, `hb stress`: `hbsim.experiment.warmup_line`)."""

    def __init__(self, stream=None, width: int = 30, noun: str = "cells", note: str | None = None):
        self.stream, self.width, self.noun, self.note = stream or sys.stderr, width, noun, note
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.first_done: int | None = None      # the first call sets it and the start time
        self.start = self.last_print = 0.0
        self.last_done = -1

    def __call__(self, done: int, total: int, failed: int) -> None:
        if self.note:
            self.stream.write(f"warning: {self.note}\n")
            self.note = None
        now = time.perf_counter()
        if self.first_done is None or done < self.last_done:    # the first call, or a new batch (run_tuned's test phase)
            self.first_done = done
            self.start = now
        ran = done - self.first_done
        elapsed = now - self.start
        rate = ran / elapsed if elapsed > 0 and ran else 0.0
        eta = (total - done) / rate if rate > 0 else float("nan")
        final = done >= total
        if not self.tty and not final and done != self.first_done:
            step = max(1, total // 10)
            if done // step == self.last_done // step and now - self.last_print < 5:
                return
        filled = int(self.width * done / total) if total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        text = (f"[{bar}] {done}/{total} {self.noun}  {rate:.1f} {self.noun}/s  ETA {_hms(eta)}"
                + (f"  ({failed} failed)" if failed else ""))
        end = "\n" if final or not self.tty else ""
        self.stream.write(("\r" if self.tty else "") + text + end)
        self.stream.flush()
        self.last_print, self.last_done = now, done


def _hms(seconds: float) -> str:
    if seconds != seconds:  # nan
        return "--:--:--"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


# -- local ---------------------------------------------------------------------------
#: imported once by the forkserver, so every forked worker starts with them loaded
PRELOAD = ["ablations.worker", "hbsim.experiment", "hbsim.contract.records", "hbsim.envs.bernoulli",
           "hbsim.envs.drifting", "hbsim.envs.student", "pyarrow.parquet"]

#: one BLAS/OpenMP thread per worker (`hbsim.contract.threads`): N workers x (spinning) BLAS threads
#: on N cores made every cell ~2.5x slower with --jobs 2 on a 2-core machine
SINGLE_THREAD_ENV = {name: "1" for name in threads.WORKER_VARS}


def _pool_context():
    """The workers' start method: a forkserver that imported PRELOAD once, started here with
    SIGINT blocked (`hbsim.contract.lifeline.interrupts_blocked`: a Ctrl-C during its imports is hb's
    to handle, no traceback there; the forkserver and every worker forked from it inherit
    the block)."""
    return lifeline.forkserver_context(PRELOAD)


def _worker_init(hb_pid: int) -> None:
    """In each pool worker: Ctrl-C is hb's to handle (it stops the workers, see
    `_stop_pool`), and the worker ends as soon as hb (``hb_pid``) is gone, killed with -9
    included (`hbsim.contract.lifeline.exit_with`: it watches hb itself, not the forkserver that is
    its parent), instead of finishing the queue as an orphan; the run directory it was
    writing stays a hidden temporary that the rerun removes."""
    lifeline.ignore_interrupts_here()
    lifeline.exit_with(hb_pid)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Ctrl-C or an error in the parent: cancel the queue and kill the workers now (each
    run directory is written atomically: a killed run leaves a temporary, which the rerun
    removes), with further Ctrl-C ignored until they are gone."""
    lifeline.stop_executor(pool)


def run_local(tasks: list[dict], jobs: int, on_done: Callable[[dict], None], **_) -> None:
    if jobs == 1 or len(tasks) == 1:
        for task in tasks:
            on_done(worker.execute(task))
        return
    threads.pin_one_thread()   # inherited by the workers; user settings win
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=_pool_context(),
                             initializer=_worker_init, initargs=(os.getpid(),)) as pool:
        pending_runs: dict = {}
        try:
            with lifeline.interrupts_deferred():    # workers start here: none half started at a Ctrl-C
                pending_runs.update({pool.submit(worker.execute, t): t for t in tasks})
            while pending_runs:
                for fut, answer, error in lifeline.wait_first(pending_runs):   # a Ctrl-C cannot hang it
                    task = pending_runs.pop(fut)
                    if error is not None:           # the worker died (segfault, OOM kill): its run fails
                        reason = f"{type(error).__name__}: worker process failed ({error})"
                        answer = worker.failure(task, reason, reason + "\n")
                    on_done(answer)
        except BaseException:
            _stop_pool(pool)
            raise


# -- ray -----------------------------------------------------------------------------
def run_ray(tasks: list[dict], jobs: int, on_done: Callable[[dict], None], *,
            ray_address: str | None = None, **_) -> None:
    import ray                               # installed: check_run_options required the extra
    kwargs = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False,
              "runtime_env": {"env_vars": {k: os.environ.get(k, v) for k, v in SINGLE_THREAD_ENV.items()}
                              if not threads.user_set() else {k: os.environ[k] for k in threads.WORKER_VARS
                                                              if k in os.environ}},
              **({"address": ray_address} if ray_address else {"num_cpus": jobs})}
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(**kwargs)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(worker.execute)
        limit = jobs if not ray_address else max(jobs, int(ray.cluster_resources().get("CPU", jobs)))
        queue = list(reversed(tasks))
        running: dict = {}
        while queue or running:
            while queue and len(running) < limit:
                task = queue.pop()
                running[remote.remote(task)] = task
            try:
                ready, _ = ray.wait(list(running), num_returns=1)
            except BaseException:       # Ctrl-C: stop the running tasks (their runs stay temporaries)
                for ref in running:
                    ray.cancel(ref, force=True)
                raise
            for ref in ready:
                task = running.pop(ref)
                try:
                    answer = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - the worker died
                    reason = f"{type(exc).__name__}: ray task failed ({str(exc).splitlines()[0]})"
                    answer = worker.failure(task, reason, f"{exc}\n")
                on_done(answer)
    finally:
        if started_here:
            ray.shutdown()


BACKENDS: dict[str, Callable] = {"local": run_local, "ray": run_ray}
