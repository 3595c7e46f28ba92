#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Worker benchmark: no-op jobs processed per second by ONE liberrand worker
# process (bench/noop_worker.c) at concurrency 10 and 50 against one
# `errand serve` with durable commits (--durability full) on a fresh SQLite
# file per measurement. Each measurement bulk-enqueues JOBS jobs first
# (`errand bench --scenario bulk`), then times the worker from its start to
# the server's acknowledgement of the last outcome. Prints one JSON line per
# measurement. Usage: bench/worker.sh [BUILD_DIR]   (default: build-rel)
# Knobs: JOBS (20000), RUNS (3), CONCS ("10 50"), PREFETCHES ("default 500 2000"; "=c": the
# prefetch = concurrency, the default before adaptive prefetch).
set -eu
BUILD=${1:-build-rel}
ERRAND=$BUILD/errand
WORKER=$BUILD/noop_worker
JOBS=${JOBS:-20000}
RUNS=${RUNS:-3}
CONCS=${CONCS:-"10 50"}
PREFETCHES=${PREFETCHES:-"default 500 2000"}
[ -x "$ERRAND" ] && [ -x "$WORKER" ] || {
    echo "build first: cmake --build $BUILD --target errand noop_worker" >&2; exit 2; }
TMP=$(mktemp -d /tmp/errand-wbench.XXXXXX)
SP=
cleanup() { [ -n "$SP" ] && kill "$SP" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT INT TERM

start_server() {
    rm -f "$TMP"/db*
    "$ERRAND" serve --listen 127.0.0.1:0 --store "sqlite:$TMP/db" --durability full \
        --log-level info 2>"$TMP/serve.log" &
    SP=$!
    i=0
    while ! grep -q '"listening"' "$TMP/serve.log" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 400 ] && { echo "server did not start in 20 s" >&2; exit 1; }
        sleep 0.05
    done
    ADDR=$(grep -o '"listen":"[^"]*"' "$TMP/serve.log" | head -1 | cut -d'"' -f4)
    URL=http://$ADDR
}

stop_server() { kill "$SP"; wait "$SP" 2>/dev/null || true; SP=; }

for run in $(seq "$RUNS"); do
    for c in $CONCS; do
        for p in $PREFETCHES; do
            start_server
            "$ERRAND" bench --server "$URL" --scenario bulk --queue wbench --jobs "$JOBS" >/dev/null
            case $p in
                default) pf=-1 ;;          # noop_worker's default: auto (before: = concurrency)
                =c) pf=$c ;;               # = concurrency, the default before adaptive prefetch
                *) pf=$p ;;
            esac
            "$WORKER" --server "$URL" --queue wbench --concurrency "$c" --prefetch "$pf" \
                --jobs "$JOBS" --label "run$run"
            stop_server
        done
    done
    # The server's own ceiling on this machine: its C bench client, one connection.
    start_server
    "$ERRAND" bench --server "$URL" --scenario bulk --queue ceiling --jobs "$JOBS" >/dev/null
    "$ERRAND" bench --server "$URL" --scenario process --queue ceiling --jobs "$JOBS" \
        --connections 1 --batch 500 --label "server-ceiling-run$run"
    stop_server
done
