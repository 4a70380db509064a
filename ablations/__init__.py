"""Ablation grids: a TOML file of policy variants x sweep points x seeds, run resumably
on local worker processes or a Ray cluster, collected into the SPEC §7 tables: a grid's
cells (`plan`), its `[tune]` table (`tune`), the file (`spec`), the grid directory
(`store`), the one multi-run path (`runner.run_many`, `run_grid`, `run_tuned`), and the
commands that run many runs (`hb sim`, `grid`, `demo`, `stress`, `scenarios`, `validity`,
`calibrate`).

    spec = ablations.load_spec("ablations/examples/paper_grid.toml")
    ablations.run_grid(spec, "runs/paper", jobs=2)      # or run_many(tasks): any batch of runs
    train_df, eval_df = hbsim.contract.records.load_cells("runs/paper")

`EXAMPLES` is the folder of the shipped grid and study files (package data, so an
installed wheel has them too): `hb grid run "$(python -c 'import ablations;
print(ablations.EXAMPLES)')/bench_grid.toml" --out runs/bench`.
"""
from pathlib import Path

from harnessbandit.origin import pin as _pin

_pin()   # the distribution's package names resolve to the installed packages (harnessbandit/origin.py)

from ablations.plan import Cell, GridSpec, SpecError
from ablations.runner import BACKENDS, RunReport, run_grid, run_many
from ablations.spec import load_spec, parse_spec
from ablations.store import collect

#: the shipped grid and study files (ablations/examples/*.toml, package data)
EXAMPLES = Path(__file__).resolve().parent / "examples"

__all__ = ["BACKENDS", "EXAMPLES", "Cell", "GridSpec", "RunReport", "SpecError", "collect", "load_spec", "parse_spec",
           "run_grid", "run_many"]
