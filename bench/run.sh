#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Runs errand's HTTP benchmark scenarios against a fresh `errand serve`
# (SQLite, durability full unless DURABILITY is set) and, when PEERS names
# them and a copy of ../shared/bench/peers is given in PEERS_DIR, the peers
# in the same session. Prints one JSON line per scenario to stdout and
# appends them to bench/results/raw-<time>.jsonl.
#
#   ./bench/run.sh                       # errand only, 3 rounds
#   RUNS=1 N=5000 ./bench/run.sh         # quick
#   PEERS="bullmq-aof beanstalkd" PEERS_DIR=/tmp/peers ./bench/run.sh
#   DEPTH="10000 1000000" RUNS=1 ./bench/run.sh   # latency and processing beside a backlog
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${ERRAND_BIN:-build-rel/errand}
RUNS=${RUNS:-3}
N=${N:-20000}
DURABILITY=${DURABILITY:-full}
LAT_SECS=${LAT_SECS:-10}
PEERS=${PEERS:-}
DEPTH=${DEPTH:-}
PEERS_DIR=${PEERS_DIR:-}
mkdir -p bench/results
ts=$(date -u +%Y%m%dT%H%M%SZ)
raw=bench/results/raw-$ts.jsonl
tmp=$(mktemp -d)
srv_pid=
cleanup() {
    [[ -n "$srv_pid" ]] && kill "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

start_server() {
    rm -f "$tmp"/bench.db*
    "$BIN" serve --listen 127.0.0.1:0 --store "sqlite:$tmp/bench.db" --durability "$DURABILITY" \
        --log-level info 2>"$tmp/serve.log" &
    srv_pid=$!
    for _ in $(seq 100); do
        port=$(grep -o '"listen":"127.0.0.1:[0-9]*"' "$tmp/serve.log" | grep -o '[0-9]*"$' | tr -d '"' || true)
        [[ -n "$port" ]] && break
        sleep 0.05
    done
    url=http://127.0.0.1:$port
}

stop_server() {
    kill "$srv_pid"; wait "$srv_pid" || true; srv_pid=
}

# server CPU% over a scenario: utime+stime ticks of the server process
cpu_ticks() { awk '{print $14+$15}' "/proc/$srv_pid/stat"; }

run() { # label args...
    local label=$1; shift
    local t0 c0 t1 c1 out
    c0=$(cpu_ticks); t0=$(date +%s.%N)
    out=$("$BIN" bench --server "$url" --label "$label" "$@")
    t1=$(date +%s.%N); c1=$(cpu_ticks)
    local hz; hz=$(getconf CLK_TCK)
    local cpu; cpu=$(awk -v a="$c0" -v b="$c1" -v s="$t0" -v e="$t1" -v hz="$hz" \
        'BEGIN { printf "%.0f", (b - a) / hz / (e - s) * 100 }')
    out=${out%\}}",\"system\":\"errand\",\"durability\":\"$DURABILITY\",\"server_cpu_pct\":$cpu,\"round\":$r}"
    echo "$out" | tee -a "$raw"
}

if [[ -n "$DEPTH" ]]; then
    # one server per depth: the backlog is enqueued (untimed) and left
    # waiting in another queue while latency and processing are measured
    for r in $(seq 1 "$RUNS"); do
        for d in $DEPTH; do
            start_server
            run "latency 500/s x ${LAT_SECS}s (c=10), $d stored" --scenario latency --rate 500 \
                --duration "${LAT_SECS}s" --connections 10 --batch 1 --queue d$d --preload "$d" \
                --server-pid "$srv_pid" --timeout 900s
            run "process c=50, $d stored" --scenario process --jobs "$N" --connections 5 --batch 10 \
                --queue dp$d --server-pid "$srv_pid"
            stop_server
        done
    done
    echo "raw: $raw" >&2
    exit 0
fi

# Each system starts on a settled disk: what the previous one left dirty is
# written back first, so its flushing does not slow the next one's fsyncs.
settle() { sync; sleep "${SETTLE_SECS:-5}"; }

for r in $(seq 1 "$RUNS"); do
    settle
    start_server
    run "enqueue single (64 in flight)" --scenario enqueue --jobs "$N" --connections 64 --queue e$r
    run "enqueue bulk (batch 1000)" --scenario bulk --jobs "$N" --connections 1 --batch 1000 --queue b$r
    for c in "1 1 1" "10 2 5" "50 5 10"; do
        set -- $c
        run "process c=$1" --scenario process --jobs "$N" --connections "$2" --batch "$3" --queue p$1r$r
    done
    run "latency 500/s x ${LAT_SECS}s (c=10)" --scenario latency --rate 500 --duration "${LAT_SECS}s" \
        --connections 10 --batch 1 --queue l$r
    stop_server
    if [[ -n "$PEERS" && -n "$PEERS_DIR" ]]; then
        settle
        (cd "$PEERS_DIR" && RUNS=1 SYSTEMS="$PEERS" BENCH_N="$N" BENCH_LAT_SECS="$LAT_SECS" ./run-all.sh \
            >"$tmp/peers-$r.log" 2>&1) || echo "peers round $r failed; see $PEERS_DIR/results" >&2
    fi
done
echo "raw: $raw" >&2
