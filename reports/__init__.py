"""Paired per-task statistics, figures and HTML/Markdown reports (SPEC §7 files only).

    from reports import build_report, headline_table
    result = build_report("runs/grid", baseline="uniform", out="runs/grid/report")
    print(headline_table(result))

`reports` reads the `train.parquet` / `eval.parquet` / `run.json` files that runs and
grids write, through the data contract of `hbsim` (`hbsim.contract` names,
`hbsim.contract.records` readers, `hbsim.contract.folders` output folders, `hbsim.contract.atomic` writes), the
shared maths of `hbsim` (`reports.readings.intervals`, the references of `reports.readings.references` and
`reports.readings.summary`) and the checks of `policies`; it imports neither `ablations` nor `real_runs`.
The public names are imported lazily so that `hb report marginals` stays light.
"""
from __future__ import annotations

import importlib

from harnessbandit.origin import pin as _pin

_pin()   # the distribution's package names resolve to the installed packages (harnessbandit/origin.py)

_EXPORTS = {"ReportResult": "reports.build", "build_report": "reports.build", "headline_table": "reports.text",
            "conclusion": "reports.text", "suite_sentences": "reports.text", "lead_text": "reports.text",
            "Frames": "reports.load", "make_frames": "reports.load", "read_dir": "reports.load"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'reports' has no attribute {name!r}")
