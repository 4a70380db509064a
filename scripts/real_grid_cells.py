"""Run the cells of a real grid (`[env] kind = "real"`) as `hb real` runs, each resumable
mid-run, seed-major, N at a time, each with its own per-step log. (`hb grid run` also
continues a killed real cell from its checkpoint, DIR/running/<id>/, but shows cells, not
steps.) Here every cell is `hb real ... --out OUT/<label>-s<seed>/ --checkpoint-every 5`
(a cell killed continues from its last checkpoint: `--resume`), with the config `hb real`
resolves checked to hash as the grid's cell before anything starts (the same run).

    python scripts/real_grid_cells.py ablations/examples/lm_fixed_arms.toml --out runs/lm-fixed --jobs 2

Order: every policy of seed 0 first (in the file's order), then seed 1, ... A complete run is
skipped; a run with a checkpoint is resumed; its checkpoint is removed once the run is
complete (model, reference and Adam: ~2 GB for SmolLM2-135M). Each run's stderr goes to
OUT/logs/<label>-s<seed>.log, this script's lines to stderr. OUT is a folder of `hb real`
run folders: `python -m reports.transfer OUT` reads it; `hb report` reads a grid, so the
design comparison goes through `hb grid run` (docs/REAL_RUNS.md), or through this script with
`--grid DIR`: every complete run is also written as the grid's cell DIR/cells/<id>/ (its tables,
run.json with the `grid` record `hb grid run` writes), so `hb grid collect DIR` and
`hb report DIR` read the runs as one grid:

    python scripts/real_grid_cells.py ablations/examples/lm_grid.toml --out runs/lm-runs --grid runs/lm-grid

`--only LABEL ...` runs the cells of those policies first (the scheduling designs before the
fixed arms, say); a later run without it does the rest.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUN_FLAGS = {"steps": "--steps", "seed": "--seed", "eval_every": "--eval-every", "counterfactual": "--counterfactual"}
RUN_SETS = ("batch_groups", "eval_budget")


def cell_args(config: dict, out: Path) -> list[str]:
    """The `hb real` arguments of a grid cell's resolved config."""
    args = ["--out", str(out)]
    env = {k: v for k, v in config["env"].items() if k not in ("kind", "n_harnesses")}
    from real_runs.native.presets import preset_knobs
    preset = env.pop("preset")
    args += ["--preset", preset, "--device", env.pop("device")]
    defaults = preset_knobs(preset).defaults()
    for key, value in env.items():
        if value != defaults.get(key):
            args += ["--set", f"env.{key}={json.dumps(value)}"]
    policy = dict(config["policy"])
    args += ["--policy", policy.pop("name"), "--label", policy.pop("label")]
    for key, value in policy.items():
        args += ["--set", f"policy.{key}={json.dumps(value)}"]
    for key, flag in RUN_FLAGS.items():
        if config.get(key) is not None:
            args += [flag, str(config[key])]
    for key in RUN_SETS:
        if config.get(key) is not None:
            args += ["--set", f"{key}={json.dumps(config[key])}"]
    return args


def main(argv=None) -> int:
    from ablations.plan import seed_major
    from ablations.spec import load_spec
    from hbsim.contract import CELLS, CHECKPOINT
    from hbsim.contract.records import config_hash, is_complete
    from real_runs.cli import add_arguments, build_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid")
    parser.add_argument("--out", required=True)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--grid", dest="grid_dir", help="also write each complete run as a cell of this grid directory")
    parser.add_argument("--only", nargs="+", metavar="LABEL",
                        help="run only the cells of these policy labels (the grid folder still plans every cell)")
    args = parser.parse_args(argv)
    spec = load_spec(args.grid)
    cells = seed_major(spec.cells())
    labels = sorted({cell.label for cell in cells})
    unknown = sorted(set(args.only or ()) - set(labels))
    if unknown:
        print(f"error: --only: no policy labelled {', '.join(unknown)} in {args.grid}; its labels are "
              f"{', '.join(labels)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    hb = argparse.ArgumentParser()
    add_arguments(hb)
    def folder_of(cell) -> Path:                    # one run folder per cell: LABEL-sSEED
        return out / f"{cell.label}-s{cell.seed}"

    todo = []
    for cell in cells:
        folder = folder_of(cell)
        argv_cell = cell_args(cell.config, folder)
        ns = hb.parse_args(argv_cell)
        if config_hash(build_config(ns)) != cell.id:
            print(f"error: cell {cell.id} ({cell.label}, seed {cell.seed}) does not resolve to the same config "
                  "through hb real", file=sys.stderr)
            return 2
        if not is_complete(folder) and (not args.only or cell.label in args.only):
            todo.append((cell, folder, argv_cell))
    grid = None
    if args.grid_dir:
        from ablations import store
        grid = Path(args.grid_dir)
        store.open_grid(grid, spec.name, {"path": spec.path, "raw": spec.raw},
                        planned=[[c.id, c.label, c.seed] for c in cells])
        for cell in cells:
            if is_complete(folder_of(cell)):
                add_cell(grid, spec, cell, folder_of(cell))
    done = sum(is_complete(folder_of(cell)) for cell in cells)
    print(f"{done} of {len(cells)} cells complete; running {len(todo)}"
          f"{' (--only ' + ' '.join(args.only) + ')' if args.only else ''}, {args.jobs} at a time", file=sys.stderr)
    (out / "logs").mkdir(exist_ok=True)
    running: list[tuple] = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    while todo or running:
        while todo and len(running) < args.jobs:
            cell, folder, argv_cell = todo.pop(0)
            resume = ["--resume"] if (folder / CHECKPOINT).exists() else []
            log = open(out / "logs" / f"{folder.name}.log", "a")
            proc = subprocess.Popen([sys.executable, "-m", "hbsim.cli", "real", *argv_cell, *resume,
                                     "--checkpoint-every", "5"],
                                    stdout=log, stderr=log, env=env)
            print(f"{time.strftime('%H:%M:%S')} started {cell.label} seed {cell.seed} -> {folder} (pid {proc.pid}"
                  f"{', resumed' if resume else ''})", file=sys.stderr, flush=True)
            running.append((proc, cell, folder, log))
        time.sleep(5)
        for item in list(running):
            proc, cell, folder, log = item
            if proc.poll() is None:
                continue
            running.remove(item)
            log.close()
            ok = proc.returncode == 0 and is_complete(folder)
            if ok:
                shutil.rmtree(folder / Path(CHECKPOINT).parent, ignore_errors=True)
                if grid is not None:
                    add_cell(grid, spec, cell, folder)
            print(f"{time.strftime('%H:%M:%S')} {'finished' if ok else f'FAILED (exit {proc.returncode})'} "
                  f"{cell.label} seed {cell.seed}", file=sys.stderr, flush=True)
    if grid is not None and all(is_complete(grid / CELLS / c.id) for c in cells):
        from hbsim.contract import markers
        markers.complete_output_dir(grid)
    return 0


def add_cell(grid: Path, spec, cell, run_dir: Path) -> None:
    """The complete `hb real` run `run_dir` as the cell grid/cells/<id>/ (written atomically,
    once): its tables, and run.json with what `hb grid run` adds (`ablations.runner.cell_meta`)."""
    from ablations.runner import cell_meta
    from hbsim.contract import CELLS
    from hbsim.contract.atomic import write_dir_atomic
    from hbsim.contract.records import fill_run_dir, is_complete, read_run

    if is_complete(grid / CELLS / cell.id):
        return
    result = read_run(run_dir)
    result.meta.update(cell_meta(spec, cell))
    write_dir_atomic(grid / CELLS / cell.id, lambda tmp: fill_run_dir(result, tmp), keep=is_complete)


if __name__ == "__main__":
    sys.exit(main())
