#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# One session of the Faktory benchmark (bench/README.md): for each round, a
# fresh `errand serve` (Release build, default settings: SQLite, every commit
# fsynced) measured with the faktory-worker Node client over Faktory and with
# the peers' errand-node.js over HTTP; the same Node runs against
# stub-server.js (the client's ceiling); and BullMQ on Redis with AOF through
# the peers' own scripts, run from a copy of ../shared/bench/peers (PEERS_DIR,
# after `npm ci` there). errand-faktory-c is the same rows with the C client
# bench/faktory/faktory_bench.c (cmake -DERRAND_BENCH_FAKTORY=ON; FAKTORY_BENCH
# names the binary). errand-faktory-w and stub-w: the processing rows with c
# Workers of concurrency 1 (BENCH_FK_WORKERS). errand-faktory-nopf: errand-faktory
# with --faktory-prefetch 1 (no prefetch). errand-faktory-seqjid: errand-faktory's
# single pushes with jids in push order instead of the client's uuids, a
# diagnostic of the id index's share. errand-faktory-nosync: errand-faktory
# with --durability normal, a diagnostic of the disk's share (never a result). Appends JSON lines to bench/results/faktory-<time>.jsonl
# and prints the peers' median table. BENCH_FK_TIMES=1 adds the Node client's
# PUSH, FETCH and ACK round trips to its lines, and errand's CPU a job by
# thread and commits a job (faktory-node.js). BENCH_PIN=1 runs the servers
# (errand, the stub, Redis) on CPU 0 and the clients on CPU 1, and names
# the systems with "-pinned": a diagnostic of what sharing the two cores
# costs, never a result.
#
#   PEERS_DIR=/tmp/peers ./bench/faktory/run.sh
#   RUNS=1 BENCH_N=5000 PEERS_DIR=/tmp/peers SYSTEMS="errand-faktory stub" ./bench/faktory/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${ERRAND_BIN:-build-rel/errand}
RUNS=${RUNS:-3}
SYSTEMS=${SYSTEMS:-errand-faktory errand-http stub bullmq-aof}
PEERS_DIR=${PEERS_DIR:?set PEERS_DIR to a copy of ../shared/bench/peers with npm ci done}
ERRAND_NODE=${ERRAND_NODE:-../shared/bench/errand-node.js}
FAKTORY_BENCH=${FAKTORY_BENCH:-build-rel/faktory_bench}
export BENCH_N=${BENCH_N:-20000} BENCH_PROC_CONCS=${BENCH_PROC_CONCS:-10,50}
export BENCH_PEERS=$PEERS_DIR
srv=() cli=() sfx=
if [[ -n "${BENCH_PIN:-}" ]]; then srv=(taskset -c 0) cli=(taskset -c 1) sfx=-pinned; fi
mkdir -p bench/results
ts=$(date -u +%Y%m%dT%H%M%SZ)
raw=$PWD/bench/results/faktory-$ts.jsonl
tmp=$(mktemp -d)
pid=
cleanup() {
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    [[ " $SYSTEMS " == *" bullmq-aof "* ]] && (cd "$PEERS_DIR" && ./servers.sh stop redis-aof >/dev/null) || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# Starts errand; sets pid, http_url and fk_url from the "listening" log lines.
start_errand() {
    rm -rf "$tmp/db"; mkdir -p "$tmp/db"
    "${srv[@]}" "$BIN" serve --listen 127.0.0.1:0 --faktory-listen 127.0.0.1:0 \
        --store "sqlite:$tmp/db/bench.db" "$@" 2>"$tmp/serve.log" &
    pid=$!
    local hp= fp=
    for _ in $(seq 200); do
        hp=$(grep '"msg":"listening"' "$tmp/serve.log" | grep -o '"listen":"[^"]*"' | grep -o '[0-9]*"$' | tr -d '"' || true)
        fp=$(grep '"msg":"faktory listening"' "$tmp/serve.log" | grep -o '"listen":"[^"]*"' | grep -o '[0-9]*"$' | tr -d '"' || true)
        [[ -n "$hp" && -n "$fp" ]] && break
        sleep 0.05
    done
    [[ -n "$hp" && -n "$fp" ]] || { cat "$tmp/serve.log" >&2; exit 1; }
    http_url=http://127.0.0.1:$hp
    fk_url=tcp://127.0.0.1:$fp
    export ERRAND_METRICS_URL=$http_url/metrics
}

start_stub() {
    "${srv[@]}" node bench/faktory/stub-server.js 0 >"$tmp/stub.out" &
    pid=$!
    for _ in $(seq 100); do
        grep -q listen "$tmp/stub.out" 2>/dev/null && break
        sleep 0.05
    done
    fk_url=tcp://$(grep -o '"listen":"[^"]*"' "$tmp/stub.out" | cut -d'"' -f4)
}

stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; unset ERRAND_METRICS_URL; }

{
    echo "date: $ts"; uname -srm; nproc; uptime
    echo "node $(node --version)"
    node -e 'console.log("faktory-worker", require("./tests/faktory/node_modules/faktory-worker/package.json").version)'
    node -e 'console.log("bullmq", require(process.argv[1] + "/node_modules/bullmq/package.json").version)' "$PEERS_DIR"
    redis-server --version
    git log -1 --format='errand %H %s' | cut -c1-120
} >"${raw%.jsonl}-versions.txt" 2>&1

for r in $(seq "$RUNS"); do
    for s in $SYSTEMS; do
        echo "== round $r $s" >&2
        case $s in
        errand-faktory)
            start_errand
            timeout 900 "${cli[@]}" node bench/faktory/faktory-node.js errand-faktory$sfx "$pid" "$fk_url" >>"$raw"
            stop ;;
        errand-faktory-seqjid)
            # diagnostic only: the pushes with jids in push order, not uuids
            start_errand
            BENCH_PHASES=enqueue_single BENCH_FK_JIDS=seq \
                timeout 900 "${cli[@]}" node bench/faktory/faktory-node.js errand-faktory-seqjid$sfx "$pid" "$fk_url" >>"$raw"
            stop ;;
        errand-faktory-nopf)
            start_errand --faktory-prefetch 1
            timeout 900 "${cli[@]}" node bench/faktory/faktory-node.js errand-faktory-nopf$sfx "$pid" "$fk_url" >>"$raw"
            stop ;;
        errand-faktory-nosync)
            # diagnostic only: commits not fsynced, to tell the disk's share
            start_errand --durability normal
            timeout 900 "${cli[@]}" node bench/faktory/faktory-node.js errand-faktory-nosync$sfx "$pid" "$fk_url" >>"$raw"
            stop ;;
        errand-faktory-w)
            start_errand
            BENCH_PHASES=process BENCH_FK_WORKERS=1000 \
                timeout 900 "${cli[@]}" node bench/faktory/faktory-node.js errand-faktory$sfx "$pid" "$fk_url" >>"$raw"
            stop ;;
        stub-w)
            start_stub
            BENCH_PHASES=process BENCH_FK_WORKERS=1000 \
                timeout 900 "${cli[@]}" node bench/faktory/faktory-node.js faktory-stub$sfx "$pid" "$fk_url" >>"$raw"
            stop ;;
        errand-http)
            start_errand
            timeout 900 "${cli[@]}" node "$ERRAND_NODE" errand-http$sfx "$pid" "$http_url" >>"$raw"
            stop ;;
        stub)
            start_stub
            BENCH_PHASES=enqueue_single,enqueue_bulk,process \
                timeout 900 "${cli[@]}" node bench/faktory/faktory-node.js faktory-stub$sfx "$pid" "$fk_url" >>"$raw"
            stop ;;
        errand-faktory-c)
            start_errand
            q=0 phases=("push ${BENCH_ENQ_CONC:-64}" "pushb 1")
            for cc in ${BENCH_PROC_CONCS//,/ }; do phases+=("process $cc"); done
            for phase in "${phases[@]}"; do
                set -- $phase
                q=$((q + 1))
                "${cli[@]}" "$FAKTORY_BENCH" --port "${fk_url##*:}" --phase "$1" --conc "$2" --jobs "$BENCH_N" \
                    --batch "${BENCH_BULK:-1000}" --queue "c$r-$q" --label "errand-faktory-c$sfx" \
                    --server-pid "$pid" >>"$raw"
            done
            stop ;;
        bullmq-aof)
            (cd "$PEERS_DIR" && ./servers.sh start redis-aof >&2 &&
                { [[ -z "$sfx" ]] || taskset -a -cp 0 "$(./servers.sh pid redis-aof)" >/dev/null; } &&
                timeout 900 "${cli[@]}" node bench-bullmq.js "bullmq-aof$sfx" "$(./servers.sh pid redis-aof)" >>"$raw";
                ./servers.sh stop redis-aof >&2) ;;
        *) echo "unknown system $s" >&2; exit 2 ;;
        esac
    done
done

node "$PEERS_DIR/summarize.js" "$raw" | tee "${raw%.jsonl}-summary.md"
echo "raw: $raw" >&2
