#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Same-session before/after: alternates two Release builds (each with its
# own errand and noop_worker) through bench/run.sh (enqueue single and bulk,
# the HTTP fetch loop, pickup latency) and bench/worker.sh (one liberrand
# worker at default prefetch and 2000), ROUNDS times, swapping which build
# goes first each round. Appends every JSON line, tagged with "build", to
# bench/results/before-after-<time>.jsonl and prints medians per build.
#   bench/before_after.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR
# Knobs: ROUNDS (3), N (100000 jobs per measurement), CONCS ("10 50").
set -eu
cd "$(dirname "$0")/.."
A=$1
B=$2
ROUNDS=${ROUNDS:-3}
N=${N:-100000}
CONCS=${CONCS:-"10 50"}
mkdir -p bench/results
out=bench/results/before-after-$(date -u +%Y%m%dT%H%M%SZ).jsonl
tag() { sed "s/}\$/,\"build\":\"$1\",\"pair\":$2}/" >>"$out"; }
one() { # name build_dir round
    ERRAND_BIN=$2/errand RUNS=1 N=$N ./bench/run.sh 2>/dev/null | tag "$1" "$3"
    RUNS=1 JOBS=$N CONCS="$CONCS" PREFETCHES="default 2000" bench/worker.sh "$2" | tag "$1" "$3"
}
r=1
while [ "$r" -le "$ROUNDS" ]; do
    if [ $((r % 2)) -eq 1 ]; then
        one before "$A" "$r"; one after "$B" "$r"
    else
        one after "$B" "$r"; one before "$A" "$r"
    fi
    r=$((r + 1))
done
python3 bench/before_after_report.py "$out"
echo "raw: $out" >&2
