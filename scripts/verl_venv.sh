#!/usr/bin/env bash
# Build (or refresh) the separate verl environment of the real-verl test:
#   scripts/verl_venv.sh [VENV]        (default .venv-verl; PY: the interpreter, default python3)
# verl 0.7.1 needs numpy < 2, so it cannot share .venv. verl is installed with --no-deps and
# beside it exactly what its import path (RayPPOTrainer, main_ppo, the agent loop, the RL
# dataset's collate) and the driver need; constraints-verl.txt pins verl, torch (the CPU wheel),
# numpy and the two packages whose newer releases need numpy 2. On CI (CI set) a failed build
# fails; elsewhere it warns and the test skips, saying so.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-verl}
PY=${PY:-python3}
PIP="$VENV/bin/python -m pip install -q -c constraints-verl.txt"
build() {
  set -e
  test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"
  $PIP torch numpy pyarrow datasets tensordict omegaconf hydra-core torchdata codetiming ray transformers \
    pandas dill packaging tqdm pillow cachetools pytest
  $PIP --no-deps verl peft accelerate
  "$VENV/bin/python" -c "import verl.trainer.main_ppo, verl.trainer.ppo.ray_trainer, verl.experimental.agent_loop, \
verl.utils.dataset.rl_dataset"
  touch "$VENV/.installed"
}
if ! (build); then
  if [ -n "${CI:-}" ]; then
    echo "make venv-verl: building $VENV failed on CI (the real-verl test needs it)" >&2
    exit 1
  fi
  echo "make venv-verl: building $VENV failed; the real-verl test will skip (CI fails instead)" >&2
fi
exit 0
