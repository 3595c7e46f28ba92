#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Pickup latency (enqueue -> a worker's fetch) at RATES jobs/s for SECS
# seconds, alone and with a bulk load of BULK jobs (batches of 1000, one
# connection, started 3 s in) beside it, for each binary given, interleaved
# round by round. Each measurement runs on a fresh `errand serve` (SQLite,
# --durability full). Prints one JSON line per measurement (the `errand
# bench` latency line plus binary, bulk, round, and the bulk's own
# jobs/s) and appends them to bench/results/tail-<time>.jsonl.
#
#   bench/tail.sh build-rel/errand /tmp/old/errand
# Knobs: ROUNDS (3), RATES ("500 1000"), SECS (20), BULK (100000).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ $# -ge 1 ]] || { echo "usage: bench/tail.sh ERRAND_BIN [ERRAND_BIN...]" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
RATES=${RATES:-"500 1000"}
SECS=${SECS:-20}
BULK=${BULK:-100000}
mkdir -p bench/results
raw=bench/results/tail-$(date -u +%Y%m%dT%H%M%SZ).jsonl
tmp=$(mktemp -d)
sp=
cleanup() { [[ -n "$sp" ]] && kill "$sp" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

measure() { # bin rate bulk round
    local bin=$1 rate=$2 bulk=$3 round=$4 url bp= bulk_rate=null
    rm -f "$tmp"/db*
    "$bin" serve --listen 127.0.0.1:0 --store "sqlite:$tmp/db" --durability full \
        --log-level info 2>"$tmp/serve.log" &
    sp=$!
    for _ in $(seq 200); do grep -q '"listening"' "$tmp/serve.log" && break; sleep 0.05; done
    url=http://$(grep -o '"listen":"[^"]*"' "$tmp/serve.log" | head -1 | cut -d'"' -f4)
    if [[ $bulk -gt 0 ]]; then
        (sleep 3; "$bin" bench --server "$url" --scenario bulk --queue bulk --jobs "$bulk" \
            --batch 1000 --connections 1 2>/dev/null >"$tmp/bulk.json") &
        bp=$!
    fi
    local out
    out=$("$bin" bench --server "$url" --scenario latency --rate "$rate" --duration "${SECS}s" \
        --connections 10 --batch 1 --queue lat 2>/dev/null)
    if [[ -n "$bp" ]]; then
        wait "$bp"
        bulk_rate=$(grep -o '"jobs_per_s":[0-9.]*' "$tmp/bulk.json" | cut -d: -f2)
    fi
    kill "$sp"; wait "$sp" 2>/dev/null || true; sp=
    echo "${out%\}},\"binary\":\"$bin\",\"bulk\":$bulk,\"bulk_jobs_per_s\":${bulk_rate:-null},\"round\":$round}" |
        tee -a "$raw"
}

for r in $(seq "$ROUNDS"); do
    for rate in $RATES; do
        for bulk in 0 "$BULK"; do
            for bin in "$@"; do
                measure "$bin" "$rate" "$bulk" "$r"
            done
        done
    done
done
echo "raw: $raw" >&2
