"""The twin fit (issue 30, `hb twin fit`): run logs in, a `twin`-kind scenario out. Pure: tables
in, a scenario dict out (reading folders and writing files is `ablations.twin_cli`). Five
modules, one direction (`A <- B`: B imports A): `logs` (what a fit reads: `observations`)
<- `model` (the replay) <- `simulate` (the twin env's section and its runs on the logged
schedules) <- `fitting` (`fit`, `quality_table`, `standard_errors`) <- `worlds` (`scenario`,
`world_quantities`, `world_distance`); this package re-exports their names.

What it reads -- only what a real run can log (SPEC §7, §10): the train table's allocation
(`alloc_<harness>`), groups generated / retained and the retained groups' mean `reward`; the
groups table (`groups.parquet`, one row per generated group before the filter: harness,
size, success, retained, cost) where the run wrote one; the eval table (held-out tasks per
training harness, the held-out harness); the what-if probes' realised changes
(`counterfactual.parquet`: `real_train`, `real_heldout_harness`, `t_grad`); harness names and
costs. Never a synthetic world's truth: no `true_*`, `gain*`, `regret`, `oracle_arm` column,
no `cos_*`, no env section of run.json.

The model it fits is the scenario model (hbsim/envs/scenario.py) with one bias b_h, core
reading read_h and ceiling ceil_h per harness (hbsim/envs/twin.py), the harness x category
affinity and the bias jitter 0 (absorbed into b_h), and the held-out harness's coverage and
alignment 0. Fitted: b_h, read_h, ceil_h, the core's rate lr (only where the probes logged T,
which fixes read's scale; else lr = 1: without T only lr read_h read_j is identified),
skill_lr, max_step, forget, interference (only with mixed steps or a mixed probe),
heldout_bias, heldout_read; estimated apart: the task-difficulty spread (difficulty_std, from the
dispersion of per-task eval success), noise and dead harnesses (below), costs per harness.

The fit replays the LOGGED schedule of every run through the scenario model's expected step
(`replay`: the env's own `expected_state` equations, the tasks replaced by K Gauss-Hermite
nodes of the difficulty law, the categories by their symmetric mean, so the core z is one
number per run) and minimises the standardised residuals of every observation
(`scipy.optimize.least_squares`):

    groups     mean success of each step's generated groups per harness (groups table), or
               the retained groups' mean reward (train table: E[p - p^G] / E[keep]) and
               the keep rate groups_retained / groups_generated of a pure step
    eval       mean success per harness (held-out tasks) and of the held-out harness
    probes     real_train and real_heldout_harness of every what-if step (pure and mixed)
               against the expected one-step change from the replayed state, and each
               probe's T against the closed-form sketch cosine (`sketch_transfer`)

then corrected for the gap between that mean path and the twin env's realised paths
(`simulate`: the twin env run on every logged schedule; the replay's predictions shifted by
simulate - replay at the current values, refitted; docs/TWIN.md "The simulation's
correction").

A noise harness (success flat, between 0.15 and 0.85, whatever is trained) gets role `noise`
(noise_p its mean success); a harness that never succeeds gets role `dead`. Fit quality
(`quality`) is measured on HELD-OUT steps: the fit sees the first (1 - holdout) of every
run's steps, the table scores its predictions of the rest (the twin written is then refitted
on all steps). The world's quantities (`world_quantities`): initial success per harness,
ceilings, the one-step transfer matrix (expected change of harness j's success from a pure
step on h), forgetting, interference, spread, costs, pool-size-to-steps ratio; the same
function, applied to any scenario's env section, gives the features of the distance that
picks the closest shipped scenario (`world_distance`).
"""
from __future__ import annotations

from hbsim.twin.fitting import (BOUNDS, KEEP_SD_FACTOR, QUANTITIES, SCALARS, SIGN_Z, Fit, Layout, Objective, first,
                                fit, initial_params, quality_table, reads_from_transfer, standard_errors)
from hbsim.twin.logs import MIXED_ARM, N_NODES, TRUTH_PREFIXES, Observations, difficulty_spread, observations
from hbsim.twin.model import (N_CATEGORIES, Params, expected_step, per_run, replay, sketch_transfer,
                              state_parts)
from hbsim.twin.simulate import simulate, twin_env
from hbsim.twin.worlds import (DEFAULT_POOL, FEATURE_QUANTILES, scenario, world_distance, world_features,
                               world_quantities)

__all__ = ["BOUNDS", "DEFAULT_POOL", "FEATURE_QUANTILES", "Fit", "KEEP_SD_FACTOR", "Layout", "MIXED_ARM",
           "N_CATEGORIES", "N_NODES", "Objective", "Observations", "Params", "QUANTITIES", "SCALARS", "SIGN_Z",
           "TRUTH_PREFIXES", "difficulty_spread", "expected_step", "first", "fit", "initial_params", "observations",
           "per_run", "quality_table", "reads_from_transfer", "replay", "scenario", "simulate", "sketch_transfer",
           "standard_errors", "state_parts", "twin_env", "world_distance", "world_features", "world_quantities"]
