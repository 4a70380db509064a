"""hbsim: the offline laboratory -- GRPO maths, the one training loop, synthetic
environments and the scenario suite, the data contract and its I/O (`hbsim.contract`: names,
labels, run records, record shapes, atomic writes, output folders and their markers, process
handling), the run knobs and their one `--set` grammar and the `hb` dispatcher (`hbsim.cli`; each subcommand lives in the package that owns it:
`hb sim` in `ablations.sim_cli`).

Heavy pieces are imported lazily so `python -m hbsim.cli` stays quick.
"""
from __future__ import annotations

import importlib

from harnessbandit.origin import pin as _pin

_pin()   # the distribution's package names resolve to the installed packages (harnessbandit/origin.py)

_LAZY = {
    "Loop": "hbsim.loop", "RunResult": "hbsim.contract.records", "run": "hbsim.loop",
    "write_run": "hbsim.contract.records", "read_run": "hbsim.contract.records", "config_hash": "hbsim.contract.records",
    "run_config": "hbsim.experiment", "resolve_config": "hbsim.experiment",
    "make_env": "hbsim.envs", "ENVS": "hbsim.envs",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hbsim' has no attribute {name!r}")
