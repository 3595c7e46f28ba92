#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Worker throughput beside beanstalkd's default, interleaved in one session:
# ROUNDS times, bench/worker.sh (one liberrand worker, JOBS no-op jobs, the
# prefetches of PREFETCHES, c=10 and 50) and then the beanstalkd peer
# (PEERS_DIR/bench-beanstalkd.js, the same job count; its "process" lines are
# the c=10 and c=50 rows) against a fresh `beanstalkd -b DIR` with its
# default fsync policy (at most every 50 ms) on a free port. Prints the JSON
# lines of both, each with "round" and the UTC time "t" it was printed.
# Usage: bench/worker_peers.sh PEERS_DIR [BUILD_DIR]
#   PEERS_DIR: a copy of ../shared/bench/peers after `npm ci`.
# Knobs: ROUNDS (3), JOBS (100000), PREFETCHES ("default =c 2000", as in worker.sh).
set -eu
PEERS=${1:?usage: bench/worker_peers.sh PEERS_DIR [BUILD_DIR]}
BUILD=${2:-build-rel}
ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-100000}
PREFETCHES=${PREFETCHES:-"default =c 2000"}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d /tmp/errand-wpeers.XXXXXX)
BP=
cleanup() { [ -n "$BP" ] && kill "$BP" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT INT TERM

tag() { # round: prefixes each JSON line with round and time
    while IFS= read -r line; do
        case $line in
            '{'*) printf '{"round":%s,"t":"%s",%s\n' "$1" "$(date -u +%H:%M:%S)" "${line#\{}" ;;
        esac
    done
}

for r in $(seq "$ROUNDS"); do
    JOBS=$JOBS RUNS=1 PREFETCHES=$PREFETCHES "$HERE/worker.sh" "$BUILD" 2>/dev/null | tag "$r"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    rm -rf "$TMP/bean"; mkdir -p "$TMP/bean"
    beanstalkd -l 127.0.0.1 -p "$port" -b "$TMP/bean" >"$TMP/bean.log" 2>&1 &
    BP=$!
    i=0
    until python3 -c "import socket; socket.create_connection(('127.0.0.1',$port),1)" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 100 ] && { echo "beanstalkd did not start" >&2; exit 1; }
        sleep 0.1
    done
    (cd "$PEERS" && BEAN_PORT=$port BENCH_N=$JOBS BENCH_LAT_SECS=1 \
        node bench-beanstalkd.js beanstalkd "$BP") | tag "$r"
    kill "$BP"; wait "$BP" 2>/dev/null || true; BP=
done
