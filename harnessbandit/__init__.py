"""harnessbandit's public Python API, in one import that your own folders cannot shadow.

    from harnessbandit import run_config, scenario_config, summarize, build_report, headline_frame

The distribution's code lives in five top-level packages (`policies`, `hbsim`, `ablations`,
`real_runs`, `reports`); this package re-exports their public names, each from its one home
(the table below), and pins those five names to the installed packages first
(`harnessbandit.origin`), so a folder of yours named `policies/` or `reports/` in the working
directory changes nothing here (one line says which folder would have shadowed which).
Names are imported lazily: `import harnessbandit` costs no numpy, pandas or torch.
docs/PYTHON.md documents each name.
"""
from __future__ import annotations

import importlib

from harnessbandit.origin import pin

pin()

#: public name -> (module, attribute): each name's one home
EXPORTS: dict[str, tuple[str, str]] = {
    # policies: the interface, the registry and the door for your own (docs/EXTENDING.md)
    "Policy": ("policies.base", "Policy"), "Feedback": ("policies.base", "Feedback"),
    "Allocation": ("policies.base", "Allocation"), "POLICIES": ("policies.registry", "POLICIES"),
    "register": ("policies.registry", "register"), "make_policy": ("policies.registry", "make"),
    "UserError": ("policies.errors", "UserError"), "Knob": ("policies.knobs", "Knob"),
    "Knobs": ("policies.knobs", "Knobs"),
    # hbsim: run configs, one run, synthetic environments, scenarios, run records (hbsim.contract)
    "resolve_config": ("hbsim.experiment", "resolve_config"), "run_config": ("hbsim.experiment", "run_config"),
    "run": ("hbsim.loop", "run"), "RunResult": ("hbsim.contract.records", "RunResult"),
    "read_run": ("hbsim.contract.records", "read_run"), "write_run": ("hbsim.contract.records", "write_run"),
    "make_env": ("hbsim.envs", "make_env"), "ENVS": ("hbsim.envs", "ENVS"),
    "SCENARIOS": ("hbsim.scenarios", "SCENARIOS"), "get_scenario": ("hbsim.scenarios", "get"),
    "scenario_config": ("hbsim.scenarios", "scenario_config"),
    "summarize": ("reports.readings.summary", "summarize"),
    "summary_table": ("reports.readings.summary", "summary_table"),
    # ablations: grid files and many runs
    "load_spec": ("ablations.spec", "load_spec"), "run_grid": ("ablations.runner", "run_grid"),
    "run_many": ("ablations.runner", "run_many"), "collect": ("ablations.store", "collect"),
    "EXAMPLES": ("ablations", "EXAMPLES"),
    # reports: the per-policy summary (reports.readings), the paired report and its views
    "build_report": ("reports.build", "build_report"), "ReportResult": ("reports.build", "ReportResult"),
    "headline_frame": ("reports.render", "headline_table"), "headline_table": ("reports.text", "headline_table"),
    "suite_sentences": ("reports.text", "suite_sentences"), "conclusion": ("reports.text", "conclusion"),
    "read_dir": ("reports.load", "read_dir"), "make_frames": ("reports.load", "make_frames"),
}

__all__ = sorted(EXPORTS)


def __getattr__(name: str):
    if name in EXPORTS:
        module, attr = EXPORTS[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value          # imported once
        return value
    raise AttributeError(f"module 'harnessbandit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(EXPORTS))
