#!/usr/bin/env bash
# Capture every table a redesign must keep: stdout of the main commands and their output
# folders, into OUT. Run once before and once after a change, then compare:
#     bash scripts/capture_numbers.sh /tmp/before ; (change) ; bash scripts/capture_numbers.sh /tmp/after
#     python scripts/compare_reports.py /tmp/before /tmp/after --skip "*.err"
# HB (default: hb on PATH) is the command under test.
set -euo pipefail
OUT=${1:?usage: capture_numbers.sh OUT}
HB=${HB:-hb}
mkdir -p "$OUT"
run() {  # name, then the command's arguments: stdout to OUT/name.txt
    local name=$1; shift
    echo "capture: $name" >&2
    HB_REPORT_JOBS=1 $HB "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err" || echo "exit $?" >> "$OUT/$name.txt"
}
run policies policies
run sim_bernoulli sim --env bernoulli --policy all --seeds 3 --steps 60 --out "$OUT/sim_bernoulli"
run sim_share sim --env bernoulli --policy uniform --policy oracle --policy harnessbandit --policy mixed \
    --seeds 4 --steps 80 --set policy.target=heldout_harness --out "$OUT/sim_share"
run sim_trap sim --scenario trap --policy harnessbandit --policy oracle --policy uniform --seeds 3 --out "$OUT/sim_trap"
run scenarios scenarios
run scenario_check scenarios table1 --check
run marginals report marginals --n 161 --a 67 --b 62
run demo demo --out "$OUT/demo" --jobs 2
run report_primary report "$OUT/demo" --baseline mixed-2 --primary pass@3 --out "$OUT/report_primary" --jobs 1
run sim_budget sim --env bernoulli --policy uniform --policy mixed --policy harnessbandit --seeds 4 --steps 60 \
    --eval-budget groups:150,300 --out "$OUT/sim_budget"
run report_budget report "$OUT/sim_budget" --baseline uniform --budget groups --out "$OUT/report_budget" --jobs 1
run stress stress --quick --scenarios trap,dead,noise --seeds 2 --out "$OUT/stress" --jobs 2
run stress_part report "$OUT/stress" --part trap --baseline uniform --jobs 1
echo "capture: done -> $OUT" >&2
