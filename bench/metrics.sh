#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The cost of /metrics with a large backlog: a fresh server (Release build,
# default settings, SQLite or STORE=postgres) gets N jobs (default
# 1,000,000) spread over Q queues (default 100) by bulk enqueue, then sits
# idle for IDLE seconds and is scraped once a second for SCRAPES seconds.
# It reports the scrape latency (p50, p99, max), the server's CPU (% of one
# core, from /proc) while idle and while scraped, the scrape size, and the
# background sample's duration (errand_queue_stats_duration_seconds). One
# JSON line on stdout, appended to bench/results/metrics-<time>.jsonl.
#
#   ./bench/metrics.sh
#   N=200000 SCRAPES=20 STORE=postgres ./bench/metrics.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${ERRAND_BIN:-build-rel/errand}
N=${N:-1000000}
Q=${Q:-100}
IDLE=${IDLE:-30}
SCRAPES=${SCRAPES:-60}
PORT=${PORT:-7493}
STORE=${STORE:-sqlite}
[[ $STORE == postgres ]] && PG_URL=${PG_URL:-$(./scripts/pg url)}
mkdir -p bench/results
out=bench/results/metrics-$(date -u +%Y%m%dT%H%M%SZ).jsonl
tmp=$(mktemp -d)
srv_pid=
cleanup() {
    [[ -n "$srv_pid" ]] && kill "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null || true
    [[ $STORE == postgres ]] && psql "$PG_URL" -Xqc "DROP SCHEMA IF EXISTS bench_metrics CASCADE" \
        >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT

if [[ $STORE == postgres ]]; then
    psql "$PG_URL" -Xqc "DROP SCHEMA IF EXISTS bench_metrics CASCADE" >/dev/null 2>&1 || true
    url="$PG_URL?schema=bench_metrics"
    [[ $PG_URL == *\?* ]] && url="$PG_URL&schema=bench_metrics"
else
    url="sqlite:$tmp/errand.db"
fi
"$BIN" serve --listen "127.0.0.1:$PORT" --store "$url" --log-level warn 2>"$tmp/server.log" &
srv_pid=$!
python3 - "$PORT" "$srv_pid" "$N" "$Q" "$IDLE" "$SCRAPES" "$STORE" <<'PY' | tee -a "$out"
import http.client, json, os, sys, time

port, pid, n, nq, idle, scrapes, store = sys.argv[1:]
port, pid, n, nq, idle, scrapes = map(int, (port, pid, n, nq, idle, scrapes))
tick = os.sysconf("SC_CLK_TCK")

def cpu():
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / tick

conn = None
for _ in range(100):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        break
    except OSError:
        time.sleep(0.1)

def call(method, path, body=None):
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status >= 300:
        raise SystemExit("%s %s -> %d %s" % (method, path, r.status, data[:200]))
    return data

t0 = time.monotonic()
batch = [{"name": "x", "payload": {"i": 1}}] * 1000
for i in range(n // 1000):
    call("POST", "/v1/queues/q%03d/jobs" % (i % nq), {"jobs": batch})
load_s = time.monotonic() - t0

def metric(text, name):
    for ln in text.splitlines():
        if ln.startswith(name + " "):
            return float(ln.split()[1])
    return None

# wait for a sample that shows the whole backlog
deadline = time.monotonic() + 600
while True:
    text = call("GET", "/metrics").decode()
    waiting = sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
                  if ln.startswith("errand_queue_jobs{") and 'state="waiting"' in ln)
    if waiting >= n or time.monotonic() > deadline:
        break
    time.sleep(0.5)

c0, w0 = cpu(), time.monotonic()
time.sleep(idle)
idle_cpu = (cpu() - c0) / (time.monotonic() - w0) * 100

lat, size, durs = [], 0, []
c0, w0 = cpu(), time.monotonic()
for i in range(scrapes):
    start = time.monotonic()
    text = call("GET", "/metrics").decode()
    lat.append((time.monotonic() - start) * 1000)
    size = len(text)
    d = metric(text, "errand_queue_stats_duration_seconds")
    if d is not None:
        durs.append(d * 1000)
    time.sleep(max(0, 1 - (time.monotonic() - start)))
scraped_cpu = (cpu() - c0) / (time.monotonic() - w0) * 100
lat.sort()
print(json.dumps({
    "store": store, "jobs": n, "queues": nq, "load_s": round(load_s, 1),
    "waiting_seen": int(waiting), "scrapes": scrapes,
    "scrape_ms_p50": round(lat[len(lat) // 2], 2),
    "scrape_ms_p99": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
    "scrape_ms_max": round(lat[-1], 2), "scrape_bytes": size,
    "cpu_idle_pct": round(idle_cpu, 2), "cpu_scraped_pct": round(scraped_cpu, 2),
    "sample_ms_median": round(sorted(durs)[len(durs) // 2], 1) if durs else None,
}))
PY
