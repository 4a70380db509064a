#!/usr/bin/env bash
# The wheel as a user gets it: build it from this checkout's files, install it (not
# editable, base package only: no torch) into a fresh venv, and run `hb` from a folder
# outside the checkout, so nothing of the source tree is importable.
#   scripts/wheel_smoke.sh            (make wheel-smoke; .ci/run after make test)
# PY picks the interpreter (default python3); the work folder is removed at the end
# unless KEEP=1.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hb-wheel-smoke.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
step() { echo "wheel-smoke: $*" >&2; }

# a copy of the tracked and untracked-but-not-ignored files: no stale build/ of the checkout
mkdir "$WORK/src"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - 2>/dev/null) \
    | tar -xf - -C "$WORK/src"
step "building the wheel"
"$PY" -m pip wheel -q --no-deps "$WORK/src" -w "$WORK/dist"
WHEEL=$(ls "$WORK"/dist/harnessbandit-*.whl)
"$PY" - "$WHEEL" <<'PYEOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
packages = sorted({n.rsplit("/", 1)[0].replace("/", ".") for n in names if n.endswith("/__init__.py")})
grids = [n for n in names if n.startswith("ablations/examples/") and n.endswith(".toml")]
scenarios = [n for n in names if n.startswith("hbsim/scenarios/") and n.endswith(".toml")]
print(f"wheel-smoke: {sys.argv[1].rsplit('/', 1)[-1]}: packages {', '.join(packages)}; {len(grids)} grid files; "
      f"{len(scenarios)} scenario files", file=sys.stderr)
assert "hbsim.envs" in packages and "ablations/examples/demo_grid.toml" in grids, (packages, grids)
# the license travels with the wheel: the file and the metadata (PEP 639)
wheel = zipfile.ZipFile(sys.argv[1])
meta = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
assert "License-Expression: MIT" in meta and any(n.endswith("licenses/LICENSE") for n in names), meta[:800]
assert "harnessbandit" in packages and "harnessbandit/origin.py" in names, packages
print("wheel-smoke: license MIT (LICENSE and License-Expression in the metadata); the harnessbandit package",
      file=sys.stderr)
assert "hbsim/scenarios/table1.toml" in scenarios and len(scenarios) >= 12, scenarios
PYEOF
"$PY" -m venv "$WORK/venv"
step "installing it into a fresh venv"
"$WORK/venv/bin/python" -m pip install -q -c "$ROOT/constraints.txt" "$WHEEL"

mkdir "$WORK/outside"
cd "$WORK/outside"                                      # the checkout is not on sys.path here
HB="$WORK/venv/bin/hb"
export OPENBLAS_NUM_THREADS=1
where=$("$WORK/venv/bin/python" -c "import hbsim; print(hbsim.__file__)")
case "$where" in "$WORK/venv/"*) ;; *) echo "wheel-smoke: hbsim imported from $where, not the venv" >&2; exit 1;; esac
grids=$("$WORK/venv/bin/python" -c "import ablations; print(ablations.EXAMPLES)")
# each command's output goes to a log (printed whole if it fails); `shown` prints its key lines
LOG="$WORK/log"
hb() {
    local t0=$SECONDS
    if ! "$HB" "$@" >"$LOG" 2>&1; then cat "$LOG" >&2; echo "wheel-smoke: FAILED: hb $*" >&2; exit 1; fi
    step "hb $* ($((SECONDS - t0)) s)"
}
shown() { grep -E "$1" "$LOG" | head -n "${2:-3}" | sed 's/^/    /' >&2; }
hb policies
shown "^(uniform|harnessbandit|rank) "
hb sim --env bernoulli --policy uniform --seeds 1 --steps 5 --out sim
shown "^(policy|uniform) "
hb scenarios
shown "^table1 "
hb sim --scenario table1 --policy oracle --policy uniform --seeds 1 --steps 5 --jobs 1
shown "^(oracle|uniform) "
hb grid run "$grids/bench_grid.toml" --out bench --jobs 2
shown "cells, .* failed"
hb grid collect bench
shown "^wrote "
hb report bench --baseline uniform --resamples 200 --k 1
shown "^report: "
hb demo --out demo
shown "^demo: (grid '|total)|^report: .*index.html"
test -f demo/report/index.html && test -f bench/report/index.html && test -f sim/uniform/seed0/run.json
# the doors (docs/EXTENDING.md): a user's policy module and scenario file outside the package,
# through --plugin in two worker processes, and the second console script
mkdir "$WORK/plug" && cp "$ROOT/examples/my_policy.py" "$ROOT/examples/my_scenario.toml" "$WORK/plug/"
PYTHONPATH="$WORK/plug" hb --plugin my_policy sim --scenario "$WORK/plug/my_scenario.toml" --policy greedy_l \
    --policy uniform --seeds 2 --steps 5 --jobs 2 --out plug
shown "^(greedy_l|uniform) "
test -f plug/greedy_l/seed0/run.json
hb scenarios --check "$WORK/plug/my_scenario.toml"
shown "^oracle - uniform"
# a user's own folders named like packages of the distribution: `from harnessbandit import ...` still works,
# and one line names the folders
mkdir -p "$WORK/outside/shadow/policies" "$WORK/outside/shadow/reports"
touch "$WORK/outside/shadow/policies/__init__.py" "$WORK/outside/shadow/reports/__init__.py"
(cd "$WORK/outside/shadow" && "$WORK/venv/bin/python" -c "from harnessbandit import POLICIES, build_report; assert len(POLICIES) > 10" \
    2>"$LOG") || { cat "$LOG" >&2; echo "wheel-smoke: FAILED: from harnessbandit import ... beside policies/ and reports/" >&2; exit 1; }
grep -q "have the names of harnessbandit's packages 'policies' and 'reports'" "$LOG" && [ "$(wc -l <"$LOG")" = 1 ] \
    || { cat "$LOG" >&2; echo "wheel-smoke: FAILED: no one line naming the shadowing folders" >&2; exit 1; }
step "from harnessbandit import ... beside folders named policies/ and reports/: works, one line names them"
# a command that needs an extra the base install lacks: one line naming it, exit 2, nothing written
set +e; "$HB" real --preset tiny --steps 1 --out noextra >"$LOG" 2>&1; code=$?; set -e
[ "$code" = 2 ] && [ "$(cat "$LOG")" = "error: hb real needs the optional extra: pip install 'harnessbandit[torch]'" ] \
    && [ ! -e noextra ] || { cat "$LOG" >&2; echo "wheel-smoke: FAILED: hb real without the torch extra" >&2; exit 1; }
step "hb real without the torch extra: one line naming it"
"$WORK/venv/bin/harnessbandit" policies >"$LOG" 2>&1 || { cat "$LOG" >&2; echo "wheel-smoke: FAILED: harnessbandit policies" >&2; exit 1; }
step "ok: hb policies, sim, scenarios, grid run/collect, report, demo, a plugin policy and a scenario file ran from the installed wheel"
