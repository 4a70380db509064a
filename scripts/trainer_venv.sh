#!/usr/bin/env bash
# Build (or refresh) the separate environment of one real-package test (docs/VERL.md, docs/SKYRL.md):
#   scripts/trainer_venv.sh KIND [VENV]      (PY: the interpreter, default python3)
# KIND   venv            package          pins
# verl   .venv-verl      verl 0.7.1       constraints-verl.txt     (numpy < 2)
# verl09 .venv-verl09    verl 0.9.1       constraints-verl09.txt   (numpy 2, transformers 5, TransferQueue)
# skyrl  .venv-skyrl     skyrl 0.4.0      constraints-skyrl.txt    (numpy 2, transformers 5)
# Each package is installed with --no-deps and beside it exactly what its driver-side import path
# (trainer, dataset, collate, checkpoint) and the test driver need, never a CUDA wheel (torch is
# the CPU wheel on this machine's disk, pinned). skyrl 0.4.0 declares Requires-Python >=3.12 and
# this machine has 3.11 only: it is installed with --ignore-requires-python; its code compiles on
# 3.11 and its trainer imports once typing.TypedDict is typing_extensions' (SKYRL_311 below). The stamp VENV/.installed (make's target,
# rebuilt when the constraints file or this script changes) is written only after the import check.
# On CI (CI set) a failed build fails; elsewhere it warns and the tests of that package skip, saying so.
set -uo pipefail
cd "$(dirname "$0")/.."
KIND=${1:?usage: scripts/trainer_venv.sh verl|verl09|skyrl [VENV]}
PY=${PY:-python3}
COMMON="torch numpy pyarrow datasets tensordict omegaconf hydra-core torchdata ray transformers pandas dill packaging \
tqdm pillow pytest"
PRELUDE=""
# skyrl 0.4.0 declares Python >= 3.12: on 3.11 pydantic refuses its typing.TypedDict models, so the
# check (and the test driver, tests/real_runs/integrations/real_runs_skyrl_driver.py) first
# points typing.TypedDict at typing_extensions' (what 3.12's typing.TypedDict is)
SKYRL_311="import sys, typing, typing_extensions; sys.version_info < (3, 12) and setattr(typing, 'TypedDict', typing_extensions.TypedDict); "
case "$KIND" in
  verl)   VENV=${2:-.venv-verl}; PINS=constraints-verl.txt
          DEPS="$COMMON codetiming cachetools"; NODEPS="verl peft accelerate"; EXTRA=""
          CHECK="import verl.trainer.main_ppo, verl.trainer.ppo.ray_trainer, verl.experimental.agent_loop, verl.utils.dataset.rl_dataset" ;;
  verl09) VENV=${2:-.venv-verl09}; PINS=constraints-verl09.txt
          DEPS="$COMMON codetiming cachetools transferqueue pyzmq msgspec pylatexenc uvicorn fastapi"; NODEPS="verl peft accelerate"; EXTRA=""
          CHECK="import verl.trainer.main_ppo, verl.trainer.main_ppo_v0, verl.trainer.ppo.ray_trainer, verl.trainer.ppo.v1.trainer_sync, verl.utils.dataset.rl_dataset" ;;
  skyrl)  VENV=${2:-.venv-skyrl}; PINS=constraints-skyrl.txt; PRELUDE="$SKYRL_311"
          DEPS="$COMMON loguru jaxtyping safetensors tokenizers rich typer cloudpathlib zstandard xxhash polars wandb tensorboard func_timeout \
          aiohttp orjson pybase64"
          NODEPS="skyrl skyrl-gym peft accelerate"; EXTRA="--ignore-requires-python"
          CHECK="import skyrl.train.trainer, skyrl.train.utils.callbacks, skyrl.train.dataset, skyrl.train.entrypoints.main_base" ;;
  *) echo "scripts/trainer_venv.sh: KIND=$KIND is not allowed: expected verl, verl09 or skyrl" >&2; exit 2 ;;
esac
PIP="$VENV/bin/python -m pip install -q -c $PINS"
# every step chained with && (bash ignores `set -e` inside `if ! (build)`, so a failed import
# check must stop the chain itself, never reach the stamp)
build() {
  rm -f "$VENV/.installed"
  { test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"; } &&
  $PIP $DEPS &&
  $PIP --no-deps $EXTRA $NODEPS &&
  "$VENV/bin/python" -c "$PRELUDE$CHECK" &&
  touch "$VENV/.installed"
}
if ! (build); then
  if [ -n "${CI:-}" ]; then
    echo "make: building $VENV ($KIND) failed on CI (its real-package tests need it)" >&2
    exit 1
  fi
  echo "make: building $VENV ($KIND) failed; its real-package tests will skip (CI fails instead)" >&2
fi
exit 0
