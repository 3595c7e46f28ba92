#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Is a single durable request bound by the disk's sync latency? On one
# fresh `errand serve` (SQLite, every commit fsynced) per measurement:
#   - device: fdatasync after appending 5 and 40 WAL-sized frames (24-byte
#     header + 4 KiB page, as SQLite writes them) to a file beside the store,
#     300 times each: the floor of one commit;
#   - rtt: single enqueues one at a time on one keep-alive connection
#     (median, p90, p99): one commit's whole path;
#   - conns: `errand bench --scenario enqueue` at each of CONNS connections,
#     with the server's CPU seconds and its commit and batch-size counters
#     from /metrics (a throughput that grows with connections while the
#     CPU stays below the cores is latency-bound).
# Prints JSON lines and appends them to bench/results/commit-bound-<time>.jsonl.
#   bench/commit_bound.sh [ERRAND_BIN]
# Knobs: CONNS ("16 32 64 128 256"), N (60000), DIR (where the store goes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-build-rel/errand}
CONNS=${CONNS:-"16 32 64 128 256"}
N=${N:-60000}
mkdir -p bench/results
raw=bench/results/commit-bound-$(date -u +%Y%m%dT%H%M%SZ).jsonl
tmp=$(mktemp -d "${DIR:-/tmp}/commit-bound.XXXXXX")
pid=
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

emit() { echo "$1" | tee -a "$raw"; }

start() {
    rm -f "$tmp"/db*
    "$BIN" serve --listen 127.0.0.1:0 --store "sqlite:$tmp/db" --durability full 2>"$tmp/serve.log" &
    pid=$!
    for _ in $(seq 200); do grep -q '"listening"' "$tmp/serve.log" && break; sleep 0.05; done
    url=http://$(grep -o '"listen":"[^"]*"' "$tmp/serve.log" | head -1 | cut -d'"' -f4)
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
metric() { curl -s "$url/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

emit "$(python3 - "$tmp/sync.test" <<'EOF'
import json, os, sys, time
path = sys.argv[1]
out = {"measure": "device"}
for frames in (5, 40):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    off, ts = 32, []
    for _ in range(300):
        for _ in range(frames):
            os.pwrite(fd, b"h" * 24, off)
            os.pwrite(fd, b"x" * 4096, off + 24)
            off += 4120
        t = time.perf_counter()
        os.fdatasync(fd)
        ts.append(time.perf_counter() - t)
    os.close(fd)
    os.unlink(path)
    ts.sort()
    out["append_%d_frames_ms" % frames] = {"median": round(ts[150] * 1e3, 3),
                                           "p90": round(ts[270] * 1e3, 3)}
print(json.dumps(out))
EOF
)"

start
emit "$(python3 - "$url" <<'EOF'
import http.client, json, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port)
ts = []
for i in range(1000):
    t = time.perf_counter()
    c.request("POST", "/v1/queues/rtt/jobs", body=json.dumps({"name": "n", "payload": {"i": i}}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    assert r.status == 201, r.status
    ts.append(time.perf_counter() - t)
ts.sort()
print(json.dumps({"measure": "rtt", "requests": 1000, "median_ms": round(ts[500] * 1e3, 3),
                  "p90_ms": round(ts[900] * 1e3, 3), "p99_ms": round(ts[990] * 1e3, 3)}))
EOF
)"
stop

for c in $CONNS; do
    start
    line=$("$BIN" bench --server "$url" --scenario enqueue --jobs "$N" --connections "$c" 2>/dev/null)
    cpu=$(awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$pid/stat")
    commits=$(metric errand_store_commit_seconds_count)
    commit_s=$(metric errand_store_commit_seconds_sum)
    small=$(curl -s "$url/metrics" | grep '^errand_store_commit_batch_size_bucket{le="4"}' | awk '{print $2}')
    stop
    emit "$(echo "$line" | sed "s/}\$/,\"measure\":\"conns\",\"server_cpu_s\":$cpu,\"commits\":$commits,\"commit_seconds\":$commit_s,\"batches_of_4_or_less\":$small}/")"
done
echo "raw: $raw" >&2
