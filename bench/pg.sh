#!/bin/sh
# SPDX-License-Identifier: MIT
#
# PostgreSQL store benchmark, durable (fsync on, synchronous_commit on,
# --durability full): on ONE throwaway cluster it starts itself
# (scripts/pg, own state file and port), interleaved per round:
#   - errand (each binary in ERRANDS): bulk enqueue, batches of 1000 one at a
#     time (`errand bench --scenario bulk --connections 1`); processing with
#     one bench/noop_worker at c=10 and c=50, default worker settings; and
#     one node with two workers (c=10 each) against two nodes on the same
#     schema with one worker each (with the machine's and the processes' CPU);
#   - graphile-worker and pg-boss from the peers directory (PEERS, a copy
#     of ../shared/bench/peers with node_modules), on the same cluster.
# Every errand measurement uses a fresh schema. Prints JSON lines (also to
# OUT). Usage: bench/pg.sh [BUILD_DIR...]   (default: build-rel)
# Knobs: JOBS (20000), RUNS (3), PEERS (/tmp/peers-pg), PGBOSS_N (4000),
# SYSTEMS ("errand graphile pgboss"), ROWS (errand's rows: "bulk process nodes"),
# ERRAND_PG_PORT (56200), OUT, and PROFILE
# (a directory: each nodes round is also recorded system-wide with
# `perf record -a -g`, summarised by bench/pg_profile.sh).
set -eu
cd "$(dirname "$0")/.."
BUILDS=${*:-build-rel}
JOBS=${JOBS:-20000}
RUNS=${RUNS:-3}
PEERS=${PEERS:-/tmp/peers-pg}
PGBOSS_N=${PGBOSS_N:-4000}
SYSTEMS=${SYSTEMS:-"errand graphile pgboss"}
ROWS=${ROWS:-"bulk process nodes"}
OUT=${OUT:-bench/results/pg-$(date -u +%Y%m%dT%H%M%SZ).jsonl}
TMP=$(mktemp -d /tmp/errand-pgbench.XXXXXX)
export ERRAND_PG_STATE=$TMP/pg.state ERRAND_PG_PORT=${ERRAND_PG_PORT:-56200}
PIDS=
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    scripts/pg stop >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

BASE=$(scripts/pg start)
PORT=$(echo "$BASE" | sed 's|.*:\([0-9]*\)/.*|\1|')
PSQL="psql -h 127.0.0.1 -p $PORT -U postgres -qAt"
for db in graphile pgboss; do $PSQL -d postgres -c "CREATE DATABASE $db" >/dev/null; done
$PSQL -d postgres -c "SELECT 'fsync=' || current_setting('fsync') || ' synchronous_commit='
    || current_setting('synchronous_commit') || ' ' || version()" >&2
: >"$OUT"
emit() { echo "$1" | tee -a "$OUT"; }
SEQ=0

# start_node BIN SCHEMA: a server on port 0; sets NODE_PID, NODE_URL
start_node() {
    SEQ=$((SEQ + 1))
    log=$TMP/serve-$SEQ.log
    "$1" serve --listen 127.0.0.1:0 --store "$BASE?schema=$2" --durability full \
        --log-level info 2>"$log" &
    NODE_PID=$!
    PIDS="$PIDS $NODE_PID"
    i=0
    while ! grep -q '"listening"' "$log" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 600 ] && { echo "server did not start in 30 s" >&2; exit 1; }
        sleep 0.05
    done
    NODE_URL=http://$(grep -o '"listen":"[^"]*"' "$log" | head -1 | cut -d'"' -f4)
}
stop_nodes() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    PIDS=
}
# CPU: the machine's busy ticks and all ticks (/proc/stat), and the ticks
# of the processes named (utime + stime, all threads); 100 ticks a second.
machine_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9; exit}' /proc/stat; }
proc_ticks() {
    for p in "$@"; do cat "/proc/$p/stat" 2>/dev/null; done |
        sed 's/^.*) //' | awk '{s += $12 + $13} END {print s + 0}'
}
tag() { sed "s|^{|{\"system\":\"errand\",\"build\":\"$1\",\"run\":$2,|"; }
now_ms() { date +%s%3N; }

want() { case " $ROWS " in *" $1 "*) return 0 ;; esac; return 1; }

errand_round() { # BUILD RUN
    bin=$1/errand
    w=$1/noop_worker
    if want bulk; then
        start_node "$bin" "s${SEQ}x"
        emit "$("$bin" bench --server "$NODE_URL" --scenario bulk --queue bulk --jobs "$JOBS" \
            --connections 1 --batch 1000 --label bulk | tag "$1" "$2")"
        stop_nodes
    fi
    want process && for c in 10 50; do
        start_node "$bin" "s${SEQ}x"
        "$bin" bench --server "$NODE_URL" --scenario bulk --queue w --jobs "$JOBS" >/dev/null
        emit "$("$w" --server "$NODE_URL" --queue w --concurrency "$c" --jobs "$JOBS" \
            --label "process-c$c" | tag "$1" "$2")"
        stop_nodes
    done
    # nodes: 1 = two workers on one node, 2 = one worker on each of two nodes.
    # A worker stopping at its half still sends the outcomes its handlers
    # finished (up to its prefetch, at most 10000, past the half), so JOBS +
    # 12000 are queued: neither worker can run out before its half. A worker
    # that has not finished in 300 s fails the run instead of hanging it.
    want nodes && for nodes in 1 2; do
        schema="s${SEQ}x"
        start_node "$bin" "$schema"
        u1=$NODE_URL
        u2=$u1
        [ "$nodes" = 2 ] && { start_node "$bin" "$schema"; u2=$NODE_URL; }
        "$bin" bench --server "$u1" --scenario bulk --queue m --jobs $((JOBS + 12000)) >/dev/null
        nodes_pids=$PIDS
        set -- "$1" "$2" $(machine_ticks) "$(proc_ticks $nodes_pids)" "$(proc_ticks $(pgrep -x postgres))"
        prof=
        if [ -n "${PROFILE:-}" ]; then
            mkdir -p "$PROFILE"
            perf record -a -g -F 499 -o "$PROFILE/$(basename "$1")-r$2-nodes$nodes.data" \
                >/dev/null 2>&1 &
            prof=$!
        fi
        t0=$(now_ms)
        timeout 300 "$w" --server "$u1" --queue m --concurrency 10 --jobs $((JOBS / 2)) --label a \
            >"$TMP/a.json" &
        a=$!
        timeout 300 "$w" --server "$u2" --queue m --concurrency 10 --jobs $((JOBS / 2)) --label b \
            >"$TMP/b.json" &
        b=$!
        wait $a; wait $b
        wall=$(($(now_ms) - t0))
        [ -n "$prof" ] && { kill -INT "$prof"; wait "$prof" || true; }
        # to the later worker's last acknowledged outcome (each worker's own
        # "seconds", as in the process rows): releasing the prefetched jobs
        # at its stop is not counted
        ms=$(cat "$TMP/a.json" "$TMP/b.json" | sed -n 's/.*"seconds":\([0-9.]*\).*/\1/p' |
            awk '$1 > m {m = $1} END {printf "%d", m * 1000}')
        # over the whole wall time: busy share of both cores; errand's nodes
        # and PostgreSQL in % of one core
        cpu=$(echo "$3 $4 $5 $6 $(machine_ticks) $(proc_ticks $nodes_pids) $(proc_ticks $(pgrep -x postgres)) $wall" |
            awk '{printf "\"machine_busy_pct\":%.1f,\"errand_cpu_pct\":%.1f,\"postgres_cpu_pct\":%.1f",
                100 * ($5 - $1) / ($6 - $2), ($7 - $3) * 1000 / $9, ($8 - $4) * 1000 / $9}')
        emit "{\"system\":\"errand\",\"build\":\"$1\",\"run\":$2,\"label\":\"nodes-$nodes\",\"nodes\":$nodes,\"workers\":2,\"concurrency\":10,\"jobs\":$JOBS,\"ms\":$ms,\"wall_ms\":$wall,\"jobs_per_s\":$((JOBS * 1000 / ms)),$cpu}"
        stop_nodes
    done
    return 0
}

peer() { # NAME SCRIPT RUN N
    pm=$(head -1 "$(sed -n 's/^PGDIR=//p' "$ERRAND_PG_STATE")/data/postmaster.pid")
    (cd "$PEERS" && PG_PORT=$PORT BENCH_N=$4 BENCH_LAT_SECS=1 timeout 900 node "$2" "$1" "$pm") |
        grep '^{' | sed "s|^{|{\"run\":$3,|" | while read -r l; do emit "$l"; done
}

for run in $(seq "$RUNS"); do
    for sys in $SYSTEMS; do
        case $sys in
        errand) for b in $BUILDS; do errand_round "$b" "$run"; done ;;
        graphile) peer graphile-worker bench-graphile.js "$run" "$JOBS" ;;
        pgboss) peer pgboss bench-pgboss.js "$run" "$PGBOSS_N" ;;
        esac
    done
done
echo "raw data: $OUT" >&2
