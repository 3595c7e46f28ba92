#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The cost of fairness: `errand bench --scenario process` on a fresh SQLite
# server (the default store and settings) for jobs without groups, jobs
# spread over 100 groups, the same with weights, group limits and a queue
# rate limit that are enforced but never reached, and jobs over 10,000
# groups. Cases alternate within each round, so a noisy machine hurts them
# alike. STORE=postgres runs them on a fresh schema of PG_URL (default: the
# test cluster of scripts/pg) instead. One JSON line per run on stdout,
# appended to bench/results/fairness-<time>.jsonl.
#
#   ./bench/fairness.sh                     # 100,000 jobs, 3 rounds
#   N=20000 RUNS=1 STORE=postgres ./bench/fairness.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${ERRAND_BIN:-build-rel/errand}
N=${N:-100000}
RUNS=${RUNS:-3}
CONNS=${CONNS:-10}
BATCH=${BATCH:-100}
PORT=${PORT:-7491}
STORE=${STORE:-sqlite}
[[ $STORE == postgres ]] && PG_URL=${PG_URL:-$(./scripts/pg url)}
mkdir -p bench/results
out=bench/results/fairness-$(date -u +%Y%m%dT%H%M%SZ).jsonl
tmp=$(mktemp -d)
srv_pid=
cleanup() {
    [[ -n "$srv_pid" ]] && kill "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null || true
    [[ $STORE == postgres ]] && psql "$PG_URL" -Xqc "DROP SCHEMA IF EXISTS bench_fair CASCADE" \
        >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT

weights='{"g1": 3, "g2": 2, "g7": 5}'
limits='{"fairness": {"weights": '$weights'}, "group_limits": {"concurrency": 100000,
 "rate_limit": {"max": 1000000000, "per_ms": 1000}}, "rate_limit": {"max": 1000000000, "per_ms": 1000}}'

run_case() { # label groups settings-json
    rm -f "$tmp"/f.db*
    local surl="sqlite:$tmp/f.db"
    if [[ $STORE == postgres ]]; then
        psql "$PG_URL" -Xqc "DROP SCHEMA IF EXISTS bench_fair CASCADE" >/dev/null 2>&1
        surl="$PG_URL?schema=bench_fair"
    fi
    "$BIN" serve --listen 127.0.0.1:$PORT --store "$surl" --log-level warn \
        2>"$tmp/serve.log" &
    srv_pid=$!
    for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && break
        sleep 0.05
    done
    if [[ -n "$3" ]]; then
        curl -sf -X PUT -H 'Content-Type: application/json' -d "$3" \
            "http://127.0.0.1:$PORT/v1/queues/bench" >/dev/null
    fi
    "$BIN" bench --server "http://127.0.0.1:$PORT" --scenario process --jobs "$N" \
        --connections "$CONNS" --batch "$BATCH" --groups "$2" --label "$STORE, $1" | tee -a "$out"
    kill "$srv_pid"; wait "$srv_pid" || true; srv_pid=
}

for run in $(seq "$RUNS"); do
    run_case "no groups" 0 ""
    run_case "100 groups" 100 ""
    run_case "100 groups, weights and limits" 100 "$limits"
    run_case "10000 groups" 10000 ""
done
