# SPDX-License-Identifier: MIT
#
# The measuring side of bench/soak.sh: the producer, the /metrics scraper and
# the per-minute samples. Arguments: port, server pid, database path,
# duration (s), warm-up (s), enqueue rate (jobs/s).

import http.client
import json
import os
import sys
import threading
import time

port, pid, db, duration, warmup, rate = sys.argv[1:]
port, pid, duration, warmup, rate = int(port), int(pid), int(duration), int(warmup), int(rate)
stop = threading.Event()
lock = threading.Lock()
latencies = []   # enqueue latencies (ms) of the current minute
errors = {"enqueue": 0, "scrape": 0}


def conn():
    return http.client.HTTPConnection("127.0.0.1", port, timeout=30)


def producer():
    c = conn()
    n = 0
    t0 = time.monotonic()
    while not stop.is_set():
        k = n % 20
        payload = ({"outcome": "permanent"} if k == 0 else
                   {"outcome": "retry_later"} if k == 1 else
                   {"outcome": "transient"} if k in (2, 3) else {})
        body = json.dumps({"name": "soak", "payload": payload,
                           "max_attempts": 1 if k == 2 else 2})
        s = time.monotonic()
        try:
            c.request("POST", "/v1/queues/soak/jobs", body,
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            ok = r.status == 201
        except (OSError, http.client.HTTPException):
            ok = False
            c.close()
            c = conn()
        with lock:
            if ok:
                latencies.append((time.monotonic() - s) * 1000)
            else:
                errors["enqueue"] += 1
        n += 1
        wait = t0 + n / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)


def scraper():
    c = conn()
    while not stop.is_set():
        try:
            c.request("GET", "/metrics")
            r = c.getresponse()
            r.read()
            if r.status != 200:
                raise OSError(r.status)
        except (OSError, http.client.HTTPException):
            with lock:
                errors["scrape"] += 1
            c.close()
            c = conn()
        stop.wait(1.0)


def proc_value(key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def counts():
    c = conn()
    c.request("GET", "/v1/queues/soak")
    r = c.getresponse()
    b = json.loads(r.read())
    c.close()
    return b.get("queue", b).get("counts", {})


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * p))], 2)


threads = [threading.Thread(target=producer), threading.Thread(target=scraper)]
for t in threads:
    t.start()
samples = []
start = time.monotonic()
try:
    for minute in range(1, duration // 60 + 1):
        stop.wait(max(0.0, start + minute * 60 - time.monotonic()))
        with lock:
            lat, latencies[:] = list(latencies), []
            errs = dict(errors)
        wal = db + "-wal"
        s = {"minute": minute, "rss_kb": proc_value("VmRSS"),
             "fds": len(os.listdir("/proc/%d/fd" % pid)),
             "wal_bytes": os.path.getsize(wal) if os.path.exists(wal) else 0,
             "db_bytes": os.path.getsize(db),
             "enqueued": len(lat), "p50_ms": pct(lat, 0.50), "p99_ms": pct(lat, 0.99),
             "max_ms": round(max(lat), 2) if lat else None, "errors": errs,
             "counts": counts()}
        samples.append(s)
        print(json.dumps(s), flush=True)
finally:
    stop.set()
    for t in threads:
        t.join()

# The verdict: the minutes just after the warm-up against the last ones.
after = [s for s in samples if s["minute"] * 60 > warmup]
k = max(1, min(5, len(after) // 3))
first, last = after[:k], after[-k:]
verdict = {"verdict": True, "warmup_s": warmup, "minutes": len(samples), "compared": k}
floors = {"rss_kb": 4096, "fds": 4, "wal_bytes": 4 << 20, "p99_ms": 2.0}
for key, floor in floors.items():
    a = sum(s[key] or 0 for s in first) / k
    b = sum(s[key] or 0 for s in last) / k
    flat = b <= 1.5 * a + floor
    verdict[key] = {"first": round(a, 2), "last": round(b, 2), "flat": flat}
    verdict["verdict"] = verdict["verdict"] and flat
verdict["errors"] = samples[-1]["errors"] if samples else None
print(json.dumps(verdict), flush=True)
