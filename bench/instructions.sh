#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Instructions a job, by server thread, under valgrind's callgrind: counts
# that a noisy machine does not disturb, so a before/after of CPU work holds
# in one run. For each binary and scenario the server (SQLite, a fresh file,
# --durability full) runs under `callgrind --separate-threads=yes` twice, for
# JOBS and for 2*JOBS jobs driven by `errand bench` of the same binary; the
# difference over JOBS is one job's cost, start-up and shutdown cancelling
# out. Threads are told apart by their functions: the loop (er_cli_serve),
# the writer (writer_batch), the reader (worker_main without writer_batch)
# and the upkeep thread (upkeep_main).
# Prints one JSON line a binary and scenario, also appended to
# bench/results/instructions-<time>.jsonl.
#   bench/instructions.sh build-rel/errand [/tmp/old/errand ...]
# Knobs: SCENARIOS ("enqueue bulk"), JOBS (2000; bulk: 50 times as many, in
# batches of 1000), CONNS (8, the single enqueues' connections).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ $# -ge 1 ]] || { echo "usage: bench/instructions.sh ERRAND_BIN [ERRAND_BIN...]" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "bench/instructions.sh: needs valgrind" >&2; exit 2; }
SCENARIOS=${SCENARIOS:-"enqueue bulk"}
JOBS=${JOBS:-2000}
CONNS=${CONNS:-8}
mkdir -p bench/results
raw=bench/results/instructions-$(date -u +%Y%m%dT%H%M%SZ).jsonl
tmp=$(mktemp -d)
vp=
cleanup() { [[ -n "$vp" ]] && kill "$vp" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

# run BIN SCENARIO JOBS: prints "loop writer reader upkeep" instructions
run() {
    local bin=$1 scenario=$2 jobs=$3 url f total kind
    rm -rf "$tmp/run" && mkdir "$tmp/run"
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$tmp/run/cg" \
        "$bin" serve --listen 127.0.0.1:0 --store "sqlite:$tmp/run/db" --durability full \
        --log-level info 2>"$tmp/run/log" &
    vp=$!
    for _ in $(seq 600); do grep -q '"listening"' "$tmp/run/log" && break; sleep 0.1; done
    url=http://$(grep -o '"listen":"[^"]*"' "$tmp/run/log" | head -1 | cut -d'"' -f4)
    case $scenario in
    enqueue) "$bin" bench --server "$url" --scenario enqueue --jobs "$jobs" \
                 --connections "$CONNS" --timeout 600s >/dev/null ;;
    bulk) "$bin" bench --server "$url" --scenario bulk --jobs "$jobs" --batch 1000 \
              --connections 1 --timeout 600s >/dev/null ;;
    *) echo "bench/instructions.sh: unknown scenario $scenario" >&2; exit 2 ;;
    esac
    kill -INT "$vp"; wait "$vp" || true; vp=
    declare -A by=([loop]=0 [writer]=0 [reader]=0 [upkeep]=0)
    for f in "$tmp"/run/cg-*; do
        total=$(sed -n 's/^totals: \([0-9]*\).*/\1/p' "$f" | head -1)
        if grep -q ' writer_batch$' "$f"; then kind=writer
        elif grep -q ' upkeep_main$' "$f"; then kind=upkeep
        elif grep -q ' worker_main$' "$f"; then kind=reader
        elif grep -q ' er_cli_serve$' "$f"; then kind=loop
        else continue; fi
        by[$kind]=$((by[$kind] + ${total:-0}))
    done
    echo "${by[loop]} ${by[writer]} ${by[reader]} ${by[upkeep]}"
}

for scenario in $SCENARIOS; do
    n=$JOBS
    [[ $scenario == bulk ]] && n=$((JOBS * 50))
    for bin in "$@"; do
        read -r l1 w1 r1 u1 < <(run "$bin" "$scenario" "$n")
        read -r l2 w2 r2 u2 < <(run "$bin" "$scenario" $((2 * n)))
        python3 - "$bin" "$scenario" "$n" "$l1" "$w1" "$r1" "$u1" "$l2" "$w2" "$r2" "$u2" <<'EOF' |
import json, sys
bin_, scenario, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
a = [int(x) for x in sys.argv[4:8]]
b = [int(x) for x in sys.argv[8:12]]
per = [round((y - x) / n) for x, y in zip(a, b)]
print(json.dumps({"binary": bin_, "scenario": scenario, "jobs": n,
                  "loop_ir_per_job": per[0], "writer_ir_per_job": per[1],
                  "reader_ir_per_job": per[2], "upkeep_ir_per_job": per[3],
                  "server_ir_per_job": sum(per)}))
EOF
            tee -a "$raw"
    done
done
echo "raw: $raw" >&2
