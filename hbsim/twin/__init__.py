"""The twin fit (issue 30, `hb twin fit`): run logs in, a `twin`-kind scenario out. Pure: tables
in, a scenario dict out (reading folders and writing files is `ablations.twin_cli`). Four
modules, one direction (`A <- B`: B imports A): `logs` (what a fit reads: `observations`)
<- `model` (the replay) <- `fitting` (`fit`, `quality_table`) <- `worlds` (`scenario`,
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
reading read_h and ceiling ceil_h per harness (hbsim/envs/twin.py), the core's rate fixed at
lr = 1 (only lr read_h read_j is identified: (lr, read) and (lr c^2, read / c) give the same
worlds), the harness x category affinity and the bias jitter 0 (absorbed into b_h), and the
held-out harness's coverage and alignment 0. Fitted: b_h, read_h, ceil_h, skill_lr,
max_step, forget, interference (only with mixed steps or a mixed probe), heldout_bias,
heldout_read; estimated apart: the task-difficulty spread (difficulty_std, from the
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
               against the expected one-step change from the replayed state

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

from hbsim.twin.fitting import (BOUNDS, KEEP_SD_FACTOR, QUANTITIES, SCALARS, Fit, Layout, Objective, first, fit,
                                initial_params, quality_table)
from hbsim.twin.logs import MIXED_ARM, N_NODES, TRUTH_PREFIXES, Observations, difficulty_spread, observations
from hbsim.twin.model import (N_CATEGORIES, Params, expected_step, per_run, replay, sketch_transfer,
                              state_parts)
from hbsim.twin.worlds import (DEFAULT_POOL, FEATURE_QUANTILES, scenario, world_distance, world_features,
                               world_quantities)

__all__ = ["BOUNDS", "DEFAULT_POOL", "FEATURE_QUANTILES", "Fit", "KEEP_SD_FACTOR", "Layout", "MIXED_ARM",
           "N_CATEGORIES", "N_NODES", "Objective", "Observations", "Params", "QUANTITIES", "SCALARS", "TRUTH_PREFIXES",
           "difficulty_spread", "expected_step", "first", "fit", "initial_params", "observations", "per_run",
           "quality_table", "replay", "scenario", "sketch_transfer", "state_parts", "world_distance", "world_features",
           "world_quantities"]
