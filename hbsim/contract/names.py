"""The data contract (SPEC §7): every file, folder and column name that runs, grids and
reports share, defined once. Names only: reading and writing them is `hbsim.contract.records`
(run directories, a grid's cells collected into one table), creating and checking
output folders is `hbsim.contract.folders`, replacing files atomically `hbsim.contract.atomic`.

A run directory (one `hb sim` run, `hb real --out DIR`, a grid cell):

    train.parquet            one row per optimizer step: ROW_KEYS, then signals, sampling law,
                             allocation, cost ledger and env extras (docs/ARCHITECTURE.md)
    eval.parquet             one row per evaluation attempt: EVAL_TABLE
    run.json                 the run record; written last, so a run directory is complete
                             exactly when it holds one
    groups.parquet           one row per group generated at a step, before the group filter:
                             GROUP_COLUMNS (every backend; hbsim.loop.StepRecorder)
    counterfactual.parquet   with --counterfactual (hbsim.counterfactual)
    checkpoints/last.pt      `hb real`'s checkpoint (real_runs.native.checkpoint)

A grid directory (`hb grid run`, `hb demo`; written by `ablations.store`):

    grid.json                the grid's name (+ every name admitted by --force) and its spec
    cells/<id>/              a complete run directory (+ log.txt)
    cells/.tmp-*             a cell being written (hidden: never read, removed by the next run)
    failed/<id>/log.txt      the traceback of a failed cell
    tune/                    a grid file with [tune]: the tuning cells (a grid directory of their own)
    tune.json                ... and each design's selected setting (ablations.tune)
    train.parquet, eval.parquet   every cell's rows, after `hb grid collect`

Every output folder records its KIND in `.hb-kind.json` (`hbsim.contract.folders`): written first
with state "incomplete" and the command, completed last with the files hb wrote.
"""
from __future__ import annotations

# -- a run directory ---------------------------------------------------------------------
TRAIN_FILE = "train.parquet"
EVAL_FILE = "eval.parquet"
RUN_JSON = "run.json"
RUN_FILES = (TRAIN_FILE, EVAL_FILE, RUN_JSON)      # in the order they are moved in: run.json last
COUNTERFACTUAL_FILE = "counterfactual.parquet"
GROUPS_FILE = "groups.parquet"
#: the optional files of a run directory (written when the run has them), before RUN_FILES
OPTIONAL_FILES = (GROUPS_FILE, COUNTERFACTUAL_FILE)
CHECKPOINT = "checkpoints/last.pt"
#: `hb real --backend trl`: the policy/recorder state in each of TRL's checkpoint folders
TRL_STATE = "harnessbandit.pt"
TRL_CHECKPOINT = f"trl/checkpoint-*/{TRL_STATE}"

# -- columns -----------------------------------------------------------------------------
#: the first columns of every train and eval row (the loop adds them)
ROW_KEYS = ("run_id", "policy", "seed", "step")
#: the train column of the norm of the parameter update each step applied (0 when the step
#: optimized nothing; NaN where a trainer does not measure it): `StepResult.update_norm`
UPDATE_NORM = "update_norm"
#: the columns of a `TrainingAdapter.evaluate()` frame, one row per attempt
EVAL_COLUMNS = ("suite", "task", "category", "harness", "attempt", "reward", "success")
#: the columns of an eval table
EVAL_TABLE = (*ROW_KEYS, *EVAL_COLUMNS)
#: the columns of the groups table (GROUPS_FILE): one row per group GENERATED at a step (fresh
#: groups only, leftovers were rows of the step that generated them), BEFORE the group filter:
#: `harness` (name, as in the eval table), `arm` (its index), `group` (0-based index of the group
#: within the step, in generation order), `size` (rollouts G), `success` (mean over the group's
#: rollouts of reward >= 1, in [0, 1]), `reward_mean`, `reward_std` (population std over the G
#: rollouts), `mean_abs_adv` (mean |advantage| of the run's advantage kind, SPEC §2.1),
#: `retained` (kept by the group filter), `chosen` (the harness was in the step's allocation),
#: `cost` (the group's generation cost in tokens: generated tokens in real runs, the env's
#: `group_tokens` in synthetic ones, 0 where unset)
GROUP_COLUMNS = (*ROW_KEYS, "harness", "arm", "group", "size", "success", "reward_mean", "reward_std",
                 "mean_abs_adv", "retained", "chosen", "cost")
#: the eval suites of the synthetic envs (their held-out tasks on the training harnesses, and on
#: the held-out harness); with `train` they are the oracle's targets (`policies.clairvoyant.TARGETS`)
SUITES = ("heldout_tasks", "heldout_harness")
#: the suite of the tuning split (env knob `n_validation_tasks`): a grid's [tune] target, never in a report
VALIDATION_SUITE = "validation"

# -- equal-cost evaluation (run knob `eval_budget`) -------------------------------------
#: budget unit -> the train (cost ledger) column whose cumulative sum it counts (`seconds`
#: where `cost_seconds` is nan, i.e. nothing is simulated: seconds_rollout + seconds_tools)
BUDGET_UNITS = {"groups": "groups_generated", "tokens": "tokens", "seconds": "cost_seconds"}
#: the extra columns of the eval rows of a budget evaluation (absent from tables of runs
#: without `eval_budget`; null on the ordinary rows of a run with it): the unit, the
#: milestone crossed, and the cumulative cost at the step it was first crossed
BUDGET_UNIT, BUDGET_VALUE, COST_REACHED = "budget_unit", "budget_value", "cost_reached"
BUDGET_COLUMNS = (BUDGET_UNIT, BUDGET_VALUE, COST_REACHED)

# -- a grid directory --------------------------------------------------------------------
GRID_JSON = "grid.json"
CELLS = "cells"
FAILED = "failed"
LOG = "log.txt"                 # a cell's or a failure's log
TUNE_DIR = "tune"               # a tuned grid's tuning cells (DIR/tune/cells/<id>/)
TUNE_JSON = "tune.json"         # a tuned grid's selection
RUNNING = "running"             # a real grid's cells while they run: DIR/running/<id>/checkpoints/last.pt
CELL_PROGRESS = "progress.json"  # ... and DIR/running/<id>/progress.json: the step it reached (CELL_PROGRESS_RECORD)
TMP_PREFIX = ".tmp-"            # temporary files and folders (hidden: every reader skips them)
#: a grid of parts (`hb stress`: one part per scenario): the column of the collected tables
#: naming each row's part, and the suffix its cells' policy labels end in
#: (`hbsim.contract.labels.part_suffix`)
PART = "part"


# -- a report folder, and the marker and kinds of every output folder --------------------
REPORT_INDEX = "index.html"
REPORT_MARKDOWN = "report.md"
KIND_FILE = ".hb-kind.json"
KINDS = {"sim": "an `hb sim` folder of run directories", "run": "a run directory (`hb real`)",
         "grid": "a grid directory", "report": "a report folder",
         "study": "an `hb validity --study` folder of run directories",
         "twin_check": "an `hb twin check` folder (check.json, check.md)"}

# -- the folders and files each kind of output folder holds ---------------------------
STRESS_DIR = "stress"           # a grid's `hb stress` profile (index.html, profile.csv, profile.md, figures/)
FIGURES_DIR = "figures"         # a report's (and the stress profile's) figures
RLIABLE_DIR = "rliable"         # a report's rliable export
#: the folders hb writes into inside each kind of output folder (patterns relative to it, '/'
#: separated, `*` one name): each that exists must be a real folder, not a file, a symlink or a
#: broken link (`hbsim.contract.folders.check_subfolders`); temporaries a kill left are removed from each
KIND_FOLDERS = {
    "grid": (CELLS, FAILED, TUNE_DIR, STRESS_DIR, f"{STRESS_DIR}/{FIGURES_DIR}", RUNNING, f"{RUNNING}/*",
             f"{RUNNING}/*/checkpoints"),
    "report": (FIGURES_DIR, RLIABLE_DIR),
    "run": ("checkpoints", "trl"),
    "sim": ("*", "*/seed*"),
    "study": ("*", "*/*", "*/*/seed*"),
    "twin_check": (),
}
#: the names hb may write in each kind of folder (patterns as above): `--force` refuses a folder
#: holding one of them that hb did not write (`hbsim.contract.folders.check_output_dir`)
KIND_OUTPUTS = {
    "grid": (GRID_JSON, TRAIN_FILE, EVAL_FILE, TUNE_JSON, f"{CELLS}/*", f"{FAILED}/*", f"{TUNE_DIR}/*",
             f"{STRESS_DIR}/*", f"{STRESS_DIR}/{FIGURES_DIR}/*", f"{RUNNING}/*"),
    "report": (REPORT_INDEX, REPORT_MARKDOWN, "*.csv", "*.json", "*.html", f"{FIGURES_DIR}/*", f"{RLIABLE_DIR}/*"),
    "run": (*RUN_FILES, COUNTERFACTUAL_FILE, LOG, "checkpoints/*", "trl/*"),
    "sim": ("*/seed*", "*/seed*/*"),
    "study": ("*/*/seed*", "*/*/seed*/*"),
    "twin_check": ("check.json", "check.md"),
}
