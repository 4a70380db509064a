"""`harnessbandit_robust`: the fused scheduler (SPEC §3) with the knobs beyond the paper
(SPEC §10, `policies.scored.ROBUST_KNOBS`) set to the combination chosen by the grid
`[tune]` machinery on 9 tuning scenarios and tuning seeds, then frozen here.

What it changes from the paper, and why (each follows from a signal's definition):

* `empty_step = "zero"`: a step that kept no group has no reward variance, so its mean |A|
  is 0; scoring it 0 (instead of skipping the Q update) stops dead, locked and departed
  harnesses from keeping the largest Q;
* `undefined_q = "prior"`, `q_prior = 0.5`: an arm never scored takes the middle of the
  normalised scale, not the best arm's value;
* `learnability_source = "progress"`: L~ is measured learning progress (the |fast - slow|
  EMAs of the harness's training success on all its generated groups), not |advantage|,
  which is largest on noise harnesses (success 1/2, nothing to learn) and stays high on
  plateaus;
* `noise_z = 2`: that progress is discounted while it is smaller than two binomial
  standard errors of one step's success rate (jitter, not learning);
* `tau = 0.1`, `epsilon = 0.05`: a sharper law than the paper's 0.3 and 0.15, so a good
  ranking is also a different allocation.

The four swept values (learnability_source, noise_z, tau, epsilon) were chosen by

    hb grid run ablations/examples/robust_tune.toml --out DIR --jobs 1
    python scripts/robust_tune.py ablations/examples/robust_tune.toml DIR

(tuning scenarios anchor, forgetting, interference, kitchen, many, misaligned, noise,
table1, unlock; tuning seeds 100-102; the validation split of 12 training tasks; criterion:
the largest mean over tuning scenarios of the gain over uniform in units of the scenario's
largest |gain|; selected criterion +0.563 of 24 points). The test scenarios, never used for
tuning, are TEST_SCENARIOS; the test seeds are those `hb stress` runs (0-5).
"""
from __future__ import annotations

from policies.scored import SCORED_KNOBS, ScoredPolicy

#: the frozen setting (module docstring): the fixed mechanism knobs and the four tuned ones
ROBUST_SETTING = {"empty_step": "zero", "undefined_q": "prior", "q_prior": 0.5,
                  "learnability_source": "progress", "noise_z": 2.0, "tau": 0.1, "epsilon": 0.05}
#: the command that chose the tuned values
TUNE_COMMAND = ("hb grid run ablations/examples/robust_tune.toml --out DIR --jobs 1 && "
                "python scripts/robust_tune.py ablations/examples/robust_tune.toml DIR")
#: the scenarios the claim is tested on (never in the tuning grid)
TEST_SCENARIOS = ("trap", "dead", "saturation", "coverage", "churn")
#: the scenarios the setting was tuned on
TUNING_SCENARIOS = ("anchor", "forgetting", "interference", "kitchen", "many", "misaligned", "noise", "table1",
                    "unlock")


class HarnessBanditRobust(ScoredPolicy):
    """The fused scheduler with the robustness knobs at the tuned setting (module docstring);
    every knob can still be overridden like harnessbandit's."""

    name = "harnessbandit_robust"
    summary = ("beyond the paper: harnessbandit with empty steps scored 0, a neutral prior for undefined Q, "
               "learning progress (noise-checked) as L, tau 0.1, epsilon 0.05; tuned on 9 scenarios")
    source = f"this project (issue 29); settings chosen by: {TUNE_COMMAND}"
    departures = (
        "an empty step scores L = 0 where the paper skips the Q update (empty_step=zero)",
        "an undefined Q takes q_prior = 0.5 where the paper takes the largest defined Q (undefined_q=prior)",
        "L~ is learning progress |fast - slow| of the harness's training success, discounted below 2 standard "
        "errors (learnability_source=progress, noise_z=2), where the paper uses mean |advantage|",
        "a sharper law: tau 0.1 and epsilon 0.05 where the paper uses 0.3 and 0.15",
    )
    KNOBS = SCORED_KNOBS.with_defaults(**ROBUST_SETTING)
    #: a new policy: its config lists every knob (no earlier configs to keep)
    QUIET_DEFAULTS: dict = {}
