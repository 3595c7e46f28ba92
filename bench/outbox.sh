#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Outbox relay throughput: N events (one route each, or ROUTES=2 for two
# jobs per event) are written to a fresh application database first, then
# a fresh `errand serve --outbox-db` drains them; the time from start to
# the last row published gives events/s and jobs/s. Runs on each errand
# store named in STORES (sqlite, postgres). Needs a PostgreSQL server:
# PG_URL (default: the test cluster of scripts/pg). One JSON line per run
# on stdout, appended to bench/results/outbox-<time>.jsonl.
#
#   ./bench/outbox.sh                      # 100,000 events, both stores, 3 rounds
#   N=20000 RUNS=1 STORES=sqlite ./bench/outbox.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${ERRAND_BIN:-build-rel/errand}
N=${N:-100000}
RUNS=${RUNS:-3}
ROUTES=${ROUTES:-1}
STORES=${STORES:-"sqlite postgres"}
PG_URL=${PG_URL:-$(./scripts/pg url)}
mkdir -p bench/results
out=bench/results/outbox-$(date -u +%Y%m%dT%H%M%SZ).jsonl
tmp=$(mktemp -d)
db=bench_outbox_$$
app=${PG_URL%/*}/$db
srv_pid=
cleanup() {
    [[ -n "$srv_pid" ]] && kill "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null || true
    psql "$PG_URL" -Xqc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
    psql "$PG_URL" -Xqc "DROP SCHEMA IF EXISTS bench_outbox CASCADE" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

if [[ $ROUTES == 2 ]]; then
    echo '{"e": [{"queue": "a", "name": "x"}, {"queue": "b", "name": "y"}]}' >"$tmp/routes.json"
else
    echo '{"e": [{"queue": "a", "name": "x"}]}' >"$tmp/routes.json"
fi

for store in $STORES; do
    for run in $(seq "$RUNS"); do
        psql "$PG_URL" -Xqc "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" \
            >/dev/null 2>&1
        "$BIN" outbox install --db "$app" >/dev/null
        psql "$app" -Xqc "INSERT INTO outbox_events (topic, payload)
                          SELECT 'e', jsonb_build_object('n', i, 'order', 'o-' || i)
                          FROM generate_series(1, $N) AS i" >/dev/null
        if [[ $store == postgres ]]; then
            psql "$PG_URL" -Xqc "DROP SCHEMA IF EXISTS bench_outbox CASCADE" >/dev/null 2>&1
            surl="$PG_URL?schema=bench_outbox"
        else
            rm -f "$tmp"/e.db*
            surl="sqlite:$tmp/e.db"
        fi
        t0=$(date +%s.%N)
        "$BIN" serve --listen 127.0.0.1:0 --store "$surl" --outbox-db "$app" \
            --outbox-routes "$tmp/routes.json" --log-level warn 2>"$tmp/serve.log" &
        srv_pid=$!
        while :; do
            left=$(psql "$app" -XAtc "SELECT count(*) FROM outbox_events WHERE published_at IS NULL")
            [[ $left == 0 ]] && break
            sleep 0.05
        done
        t1=$(date +%s.%N)
        kill "$srv_pid"; wait "$srv_pid" || true; srv_pid=
        python3 - "$store" "$N" "$ROUTES" "$t0" "$t1" <<'PY' | tee -a "$out"
import json, sys
store, n, routes, t0, t1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
secs = t1 - t0
print(json.dumps({"bench": "outbox_drain", "store": store, "events": n, "routes": routes,
                  "secs": round(secs, 3), "events_per_s": round(n / secs),
                  "jobs_per_s": round(n * routes / secs)}))
PY
    done
done
