"""Runner throughput: the same grid with --jobs 1 and --jobs 2 (pytest-benchmark).

The grid is ablations/examples/bench_grid.toml (200 cells of 60 steps); in the default test run it
is cut to 2 seeds (16 cells) so the suite stays quick. The README's figures come from

    HB_BENCH_FULL=1 python -m pytest tests/ablations/test_ablations_bench.py \
        --benchmark-enable --benchmark-only
or from `hb grid run ablations/examples/bench_grid.toml --out DIR --jobs 1|2`.
"""
from __future__ import annotations

import itertools
import os
import shutil
try:
    import tomllib
except ImportError:  # Python 3.10: the tomli backport (a dependency there)
    import tomli as tomllib

import pytest

import ablations
from hbsim.contract.records import done_ids

FULL = os.environ.get("HB_BENCH_FULL") == "1"


def _spec():
    raw = tomllib.loads((ablations.EXAMPLES / "bench_grid.toml").read_text())
    if not FULL:
        raw["seeds"] = 2
    return ablations.parse_spec(raw, "ablations/examples/bench_grid.toml")


@pytest.mark.parametrize("jobs", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_grid_throughput(benchmark, tmp_path, jobs):
    spec = _spec()
    counter = itertools.count()

    def fresh_dir():
        out = tmp_path / f"run{next(counter)}"
        shutil.rmtree(out, ignore_errors=True)
        return (out,), {}

    def run(out):
        return ablations.run_grid(spec, out, jobs=jobs)

    report = benchmark.pedantic(run, setup=fresh_dir, rounds=1, iterations=1)
    n = len(spec.cells())
    assert report.ran == n == (200 if FULL else 16) and not report.failed
    benchmark.extra_info.update({"cells": n, "steps": spec.steps, "jobs": jobs})
    last = tmp_path / f"run{next(counter) - 1}"
    assert len(done_ids(last)) == n
