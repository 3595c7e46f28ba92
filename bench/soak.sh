#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# A soak: one server (Release build, default settings, SQLite) under steady
# load for DURATION seconds (default 1800): a producer enqueues RATE jobs a
# second (default 200) one request each, of which 5 % fail permanently, 5 %
# fail transiently with one attempt and 5 % with two (a retry, then dead), and
# 5 % retry later until max_started (100) makes them dead; two C workers
# (examples/c_worker.c) run them; retention deletes completed jobs
# after 60 s and dead ones after 120 s (every second); a scheduler fires
# every second; /metrics is scraped every second. Each minute one JSON line
# records the server's RSS, open fds, the WAL's size, the enqueue latency
# (p50, p99, max) of that minute and the job counts. The last line is the
# verdict: each of RSS, fds, WAL and p99 compared between the first minutes
# after WARMUP (default 300 s) and the last ones; flat means the last is at
# most 1.5 times the first (+ a small floor). Written to
# bench/results/soak-<time>.jsonl.
#
#   ./bench/soak.sh
#   DURATION=300 WARMUP=60 ./bench/soak.sh      # a short look
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${ERRAND_BIN:-build-rel/errand}
WORKER=${WORKER:-$(dirname "$BIN")/c_worker}
DURATION=${DURATION:-1800}
WARMUP=${WARMUP:-300}
RATE=${RATE:-200}
PORT=${PORT:-7494}
mkdir -p bench/results
out=bench/results/soak-$(date -u +%Y%m%dT%H%M%SZ).jsonl
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

"$BIN" serve --listen "127.0.0.1:$PORT" --store "sqlite:$tmp/errand.db" --log-level warn \
    --retention-interval 1s 2>"$tmp/server.log" &
srv=$!
pids+=("$srv")
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break
    sleep 0.1
done
for q in soak soak-cron; do
    curl -sf -X PUT "http://127.0.0.1:$PORT/v1/queues/$q" -H 'Content-Type: application/json' \
        -d '{"retention":{"completed":{"age_s":60},"dead":{"age_s":120}},
             "defaults":{"max_attempts":2,"backoff":{"type":"fixed","delay_ms":500}}}' >/dev/null
done
curl -sf -X PUT "http://127.0.0.1:$PORT/v1/schedulers/soak-tick" \
    -H 'Content-Type: application/json' \
    -d '{"cron":"* * * * * *","queue":"soak-cron","name":"tick"}' >/dev/null
for i in 1 2; do
    "$WORKER" --server "http://127.0.0.1:$PORT" --queue soak --queue soak-cron \
        --concurrency 8 2>"$tmp/worker$i.log" &
    pids+=("$!")
done
python3 bench/soak.py "$PORT" "$srv" "$tmp/errand.db" "$DURATION" "$WARMUP" "$RATE" |
    tee -a "$out"
grep -c . "$tmp/server.log" | xargs -I{} echo "server log lines: {}" >&2
