"""SkyRL's side of the integration (docs/SKYRL.md) in the parts that run without SkyRL
installed: the supported range, the `harnessbandit.*` arguments, the sampler over the
prompt rows' `env_class`, a step's view from SkyRL's training batch, the config refusals.
No skyrl import (the entry point `skyrl_main` checks the installed version before importing
SkyRL, Hydra or Ray).
"""
from __future__ import annotations

import numpy as np

from policies.errors import UserError
from real_runs.integrations.verl_sampler import (SKYRL_KNOBS, HarnessCurriculumCore, installed_version,
                                                 step_view, version_tuple)

#: the SkyRL releases whose trainer has the seams used here (RayPPOTrainer.
#: _build_train_dataloader_and_compute_training_steps, TrainingCallback, PromptDataset.dataframe)
SKYRL_SUPPORTED = ((0, 4), (0, 5))
SKYRL_RANGE = "skyrl >=0.4,<0.5"
PREFIX = "harnessbandit."


def skyrl_problem(version: str | None, python: tuple = (3, 12)) -> str | None:
    """Why the SkyRL entry point cannot run on skyrl `version` under Python `python` (None:
    it can). Pure."""
    if version is None:
        return f"the SkyRL entry point needs {SKYRL_RANGE}; skyrl is not installed: pip install 'skyrl[fsdp]==0.4.0'"
    low, high = SKYRL_SUPPORTED
    if not low <= version_tuple(version) < high:
        return f"the SkyRL entry point needs {SKYRL_RANGE}; found skyrl {version} (docs/SKYRL.md)"
    if tuple(python[:2]) < (3, 12):
        return (f"skyrl {version} needs Python >= 3.12 (its pydantic models use 3.12's typing.TypedDict); this is "
                f"Python {python[0]}.{python[1]}")
    return None


def installed_problem() -> str | None:
    import sys
    return skyrl_problem(installed_version("skyrl"), sys.version_info[:2])


def split_arguments(argv: list[str]) -> tuple[dict, list[str]]:
    """(`harnessbandit.*` settings as a mapping, SkyRL's own overrides) of the command line;
    values are parsed as YAML scalars/lists (`harnessbandit.harnesses=[a,b]`, `...steps=40`)."""
    import yaml
    mine, theirs = {}, []
    for arg in argv:
        if arg.startswith(PREFIX) or arg.startswith("+" + PREFIX):
            name, sep, value = arg.lstrip("+")[len(PREFIX):].partition("=")
            if not sep or not name:
                raise UserError(f"argument {arg!r} is not allowed: expected {PREFIX}NAME=VALUE "
                                f"(knobs: {', '.join(SKYRL_KNOBS)})")
            try:
                parsed = yaml.safe_load(value) if value else value
            except yaml.YAMLError:
                parsed = value
            node, parts = mine, name.split(".")
            for part in parts[:-1]:                    # policy_knobs.tau=0.2
                node = node.setdefault(part, {})
            node[parts[-1]] = parsed
        else:
            theirs.append(arg)
    return mine, theirs


def dynamic_sampling_problem(kind) -> str | None:
    if kind is not None:
        return (f"trainer.algorithm.dynamic_sampling.type={kind!r} is not allowed with the harness scheduler: it "
                "draws several batches per step, each ignoring the step's feedback; leave it null (the group "
                "filter is harnessbandit.keep_band / min_abs_adv)")
    return None


def env_classes(dataset, key: str, default: str | None) -> list:
    """Each row's env_class in SkyRL's PromptDataset (its `dataframe`), None -> `default`."""
    table = getattr(dataset, "dataframe", dataset)
    try:
        column = list(table[key])
    except (KeyError, ValueError, TypeError):
        raise UserError(f"SkyRL dataset has no {key!r} column: each prompt row names its harness there "
                        "(docs/SKYRL.md, section 1)") from None
    return [default if v is None else v for v in column]


def make_sampler(dataset, settings: dict, *, batch_size: int, env_class_key: str = "env_class",
                 default_env: str | None = None) -> HarnessCurriculumCore:
    """The project's sampler over SkyRL's prompt dataset: harness = each row's env_class."""
    cfg = SKYRL_KNOBS.settings(settings)
    table = {cfg.harness_key: env_classes(dataset, env_class_key, default_env)}
    core = HarnessCurriculumCore.__new__(HarnessCurriculumCore)
    core._settle(table, cfg, SKYRL_KNOBS, int(batch_size), "the SkyRL trainer",
                 "pass them as harnessbandit.harnesses=[...] harnessbandit.steps=N")
    core.env_class = table[cfg.harness_key]
    return core


def unique_uids(prompts: list) -> list:
    """SkyRL's collated prompts with each uid made unique within the step (`ROW#k`, k the
    prompt's position): SkyRL's uid is the dataset row, and a row drawn twice in one step (the
    sampler's pass over a harness's rows ends mid-step) would merge two GRPO groups."""
    for k, prompt in enumerate(prompts):
        prompt["uid"] = f"{prompt['uid']}#{k}"
    return prompts


def row_of(uid) -> int:
    """The dataset row of a uid (`ROW` or `ROW#k`)."""
    return int(str(uid).split("#", 1)[0])


def skyrl_view(core: HarnessCurriculumCore, rewards, uids, response_mask, *, pad_size: int = 0,
               last_step=None):
    """The step view of SkyRL's TrainingInputBatch read before its advantages: `rewards`
    (rows, tokens) token-level, `uids` (SkyRL's PromptDataset uid = the dataset row index),
    the padding rows dropped; with step-wise trajectories only each trajectory's last step."""
    rewards = np.asarray(rewards, dtype=np.float64)
    mask = np.asarray(response_mask)
    n = len(rewards) - int(pad_size)
    rows = np.arange(n)
    if last_step is not None:
        rows = rows[np.asarray(last_step, dtype=bool)[:n]]
    uids = [str(uids[i]) for i in rows]
    harness = [core.env_class[row_of(u)] for u in uids]
    return step_view(rewards[rows].reshape(len(rows), -1).sum(axis=1), uids, harness,
                     harness_key=core.harness_key, response_mask=mask[rows])
