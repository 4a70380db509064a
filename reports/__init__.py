"""Paired per-task statistics, figures and HTML/Markdown reports (SPEC §7 files only).

    from reports import build_report, headline_table
    result = build_report("runs/grid", baseline="uniform", out="runs/grid/report")
    print(headline_table(result))

`reports` imports none of the other packages of this repository; it reads the
`train.parquet` / `eval.parquet` / `run.json` files that runs and grids write.
"""
from reports.build import ReportResult, build_report, headline_table
from reports.load import Frames, make_frames, read_dir

__all__ = ["Frames", "ReportResult", "build_report", "headline_table", "make_frames", "read_dir"]
