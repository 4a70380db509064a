"""Ablation grids: a TOML file of policy variants x sweep points x seeds, run resumably
on local worker processes or a Ray cluster, collected into the SPEC §7 tables.

    spec = ablations.load_spec("examples/paper_grid.toml")
    ablations.run_grid(spec, "runs/paper", jobs=2)      # or run_many(tasks): any batch of runs
    train_df, eval_df = ablations.load("runs/paper")
"""
from ablations.collect import collect, load
from ablations.runner import BACKENDS, RunReport, run_grid, run_many
from ablations.spec import Cell, GridSpec, SpecError, load_spec, parse_spec

__all__ = ["BACKENDS", "Cell", "GridSpec", "RunReport", "SpecError", "collect", "load", "load_spec",
           "parse_spec", "run_grid", "run_many"]
