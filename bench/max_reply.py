#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# What --max-reply costs and saves. Prints JSON lines.
#   rss:   200 jobs of 500 KB (100 MB) on SQLite; 4 clients list them all at
#          once (limit 1000, following next_cursor) while /healthz is polled;
#          the server's peak RSS (VmHWM), the slowest /healthz and the wall
#          time, with the cap off (--max-reply 1g) and at its default.
#   fetch: 20 000 small jobs taken by fetches of max 1000, ms a fetch, on
#          SQLite and (with ERRAND_TEST_PG_URL) PostgreSQL, both settings.
#   slow:  100 jobs of 500 KB on SQLite at the default cap; 4 clients list
#          them all at once, each reading its 8 MiB pages slowly (64 KiB,
#          then 5 ms), while /healthz is polled every 10 ms: its slowest,
#          p99 and median answer, and the server's peak RSS.
# `max_reply.py [rss|fetch|slow]...` runs those (default: all three).
# ERRAND_BIN names the server (a Release build: build-rel/errand).

import http.client
import json
import os
import secrets
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from harness import PG_URL, Server, psql, with_params  # noqa: E402

SETTINGS = (("off (1g)", ["--max-reply", "1g"]), ("default (8m)", []))


def status_mb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) // 1024
    return -1


def beside_health(port, reader, clients=4, settle=0.0):
    """Runs `clients` threads of reader(port, got) while another polls
    /healthz every 10 ms; returns (got, the /healthz latencies sorted, wall s)."""
    got, lat, stop = [], [], threading.Event()

    def health():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while not stop.is_set():
            t = time.perf_counter()
            c.request("GET", "/healthz")
            c.getresponse().read()
            lat.append(time.perf_counter() - t)
            time.sleep(0.01)

    h = threading.Thread(target=health)
    h.start()
    time.sleep(settle)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=reader, args=(port, got)) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    stop.set()
    h.join()
    lat.sort()
    return got, lat, wall


def list_all(port, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    cursor, jobs, pages, nbytes = None, 0, 0, 0
    while True:
        path = "/v1/queues/big/jobs?limit=1000" + ("&cursor=" + cursor if cursor else "")
        c.request("GET", path)
        data = c.getresponse().read()
        b = json.loads(data)
        jobs, pages, nbytes = jobs + len(b["jobs"]), pages + 1, nbytes + len(data)
        cursor = b["next_cursor"]
        if not cursor:
            out.append({"jobs": jobs, "pages": pages, "bytes": nbytes})
            return


def rss(label, args):
    s = Server(args=args).start()
    try:
        pad = "x" * (500 * 1000)
        for i in range(200):
            st, b, _ = s.enqueue("big", {"name": "n", "payload": {"i": i, "pad": pad}})
            assert st == 201, (st, b)
        before = status_mb(s.proc.pid, "VmRSS")
        got, lat, wall = beside_health(s.port, list_all)
        print(json.dumps({"bench": "rss", "max_reply": label, "per_client": got[0],
                          "rss_before_mb": before, "rss_peak_mb": status_mb(s.proc.pid, "VmHWM"),
                          "healthz_max_ms": round(lat[-1] * 1000), "wall_s": round(wall, 2)}))
    finally:
        s.cleanup()


def fetch(store, label, args):
    s = Server(store=store, args=args).start() if store else Server(args=args).start()
    try:
        jobs = [{"name": "n", "payload": {"i": i}} for i in range(1000)]
        for _ in range(20):
            st, b, _ = s.post("/v1/queues/q/jobs", {"jobs": jobs})
            assert st in (200, 201), (st, b)
        n, k, t = 0, 0, time.perf_counter()
        while True:
            got = s.fetch_jobs("q", max=1000)
            if not got:
                break
            n, k = n + len(got), k + 1
        ms = (time.perf_counter() - t) / k * 1000
        print(json.dumps({"bench": "fetch", "store": "postgres" if store else "sqlite",
                          "max_reply": label, "jobs": n, "fetches": k,
                          "ms_per_fetch": round(ms, 2)}))
    finally:
        s.cleanup()


def list_slowly(port, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    cursor, jobs, pages, chunked = None, 0, 0, 0
    while True:
        path = "/v1/queues/big/jobs?limit=1000" + ("&cursor=" + cursor if cursor else "")
        c.request("GET", path)
        r = c.getresponse()
        chunked += r.getheader("transfer-encoding") == "chunked"
        parts = []
        while True:
            d = r.read(65536)
            if not d:
                break
            parts.append(d)
            time.sleep(0.005)
        b = json.loads(b"".join(parts))
        jobs, pages = jobs + len(b["jobs"]), pages + 1
        cursor = b["next_cursor"]
        if not cursor:
            out.append({"jobs": jobs, "pages": pages, "chunked_pages": chunked})
            return


def slow():
    s = Server().start()
    try:
        pad = "x" * (500 * 1000)
        for i in range(100):
            st, b, _ = s.enqueue("big", {"name": "n", "payload": {"i": i, "pad": pad}})
            assert st == 201, (st, b)
        got, lat, wall = beside_health(s.port, list_slowly, settle=0.2)
        print(json.dumps({"bench": "slow", "per_client": got[0], "healthz_n": len(lat),
                          "healthz_max_ms": round(lat[-1] * 1000, 1),
                          "healthz_p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 1),
                          "healthz_p50_ms": round(lat[len(lat) // 2] * 1000, 2),
                          "rss_peak_mb": status_mb(s.proc.pid, "VmHWM"),
                          "wall_s": round(wall, 2)}))
    finally:
        s.cleanup()


if __name__ == "__main__":
    what = sys.argv[1:] or ["rss", "fetch", "slow"]
    if "slow" in what:
        slow()
    if "rss" in what:
        for label, args in SETTINGS:
            rss(label, args)
    if "fetch" not in what:
        sys.exit(0)
    stores = [None]
    if PG_URL:
        stores.append("pg")
    for store in stores:
        for _ in range(3):
            for label, args in SETTINGS:
                schema = "errand_mrbench" + secrets.token_hex(3)
                try:
                    fetch(with_params(PG_URL, schema=schema) if store else None, label, args)
                finally:
                    if store:
                        psql('DROP SCHEMA IF EXISTS "%s" CASCADE' % schema)
