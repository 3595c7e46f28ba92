#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# The shop example under chaos, at size: places N orders (default 10,000)
# through the Orders API while workers, errand, the API and the fakes are
# SIGKILLed at random, waits until every order is done, then checks from
# the shop's database and the fakes' own SQLite records that every order
# was paid once, shipped once (and that the carrier never saw more creates
# in a sliding second than the shipping limit + 1), awarded its points once
# and sent one mail. Writes a Markdown report (bench/shop_chaos.md).
#
#   bench/shop_chaos.py [--orders N] [--ship-rate R] [--build DIR] [--db URL] [--report PATH]
#
# --db: a PostgreSQL server (default $ERRAND_TEST_PG_URL); a database
# shop_chaos_PID is created and dropped. --build: a CMake build directory
# (default build-clang, the Release build scripts/test makes).

import argparse
import collections
import json
import os
import platform
import random
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "examples", "shop"))
import shoplib  # noqa: E402


def psql(url, sql):
    out = subprocess.run(["psql", url, "-X", "-A", "-t", "-F", "|", "-q", "-v", "ON_ERROR_STOP=1",
                          "-c", sql], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError("psql: %s" % out.stderr)
    return [line.split("|") for line in out.stdout.splitlines() if line]


def lite(shop, kind, sql):
    con = sqlite3.connect(os.path.join(shop.workdir, kind + ".db"), timeout=60)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def with_db(url, db):
    u = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + db, u.query, u.fragment))


def progress(shop, db):
    r = psql(db, "SELECT count(*) FILTER (WHERE status = 'paid'),"
                 " count(shipment_id) FROM orders")[0]
    pts = psql(db, "SELECT coalesce(sum(points), 0) FROM loyalty_accounts")[0][0]
    mails = lite(shop, "mail", "SELECT count(*) FROM mails")[0][0]
    return int(r[0]), int(r[1]), int(pts), mails


def check(shop, db, orders, expect, rate):
    """[(what, ok, detail)] of every property the run must have."""
    out = []
    n = len(orders)
    pay = {r[0]: r[1:] for r in psql(db, "SELECT o.id, o.status, p.status, p.authorization_id,"
                                         " o.amount, coalesce(o.shipment_id, '') FROM orders o"
                                         " JOIN payments p ON p.order_id = o.id")}
    bad = [o for o in orders if o not in pay or pay[o][0] != "paid" or pay[o][1] != "captured"]
    out.append(("every order paid and its payment captured", not bad, "%d not" % len(bad)))
    charges = lite(shop, "gateway", "SELECT auth, count(*), min(at), sum(amount) FROM charges"
                                    " GROUP BY auth")
    by_auth = {a: (c, at, amt) for a, c, at, amt in charges}
    twice = [a for a, (c, _, _) in by_auth.items() if c != 1]
    missing = [o for o in orders if pay.get(o) and pay[o][2] not in by_auth]
    wrong = [o for o in orders if pay.get(o) and pay[o][2] in by_auth
             and by_auth[pay[o][2]][2] != orders[o]]
    out.append(("one charge per order, of the order's amount", not (twice or missing or wrong),
                "%d charged twice, %d not charged, %d wrong amount"
                % (len(twice), len(missing), len(wrong))))
    late = [a for a, at in lite(shop, "gateway", "SELECT auth, at FROM capture_calls")
            if a in by_auth and at > by_auth[a][1]]
    out.append(("no capture sent after the gateway had charged", not late,
                "%d late capture calls" % len(late)))
    ev = dict(psql(db, "SELECT aggregate_id, count(*) FROM outbox_events"
                       " WHERE topic = 'payment.captured' GROUP BY 1"))
    out.append(("one payment.captured per order",
                all(ev.get(o) == "1" for o in orders) and len(ev) == n,
                "%d events for %d orders" % (sum(int(v) for v in ev.values()), n)))
    ships = lite(shop, "carrier", "SELECT reference, count(*), min(id) FROM shipments"
                                  " GROUP BY reference")
    sref = {r: (c, sid) for r, c, sid in ships}
    dup = [r for r, (c, _) in sref.items() if c != 1]
    unshipped = [o for o in orders if "order-" + o not in sref]
    mismatch = [o for o in orders if "order-" + o in sref and sref["order-" + o][1] != pay[o][4]]
    out.append(("one carrier shipment per order, the one the order stores",
                not (dup or unshipped or mismatch) and len(sref) == n,
                "%d shipped twice, %d not shipped, %d mismatched"
                % (len(dup), len(unshipped), len(mismatch))))
    ats = [a for (a,) in lite(shop, "carrier", "SELECT at FROM shipments ORDER BY at")]
    j = worst = 0
    for i, a in enumerate(ats):
        while ats[j] <= a - 1.0:
            j += 1
        worst = max(worst, i - j + 1)
    out.append(("carrier creates in any sliding second <= limit + 1 (%d)" % (rate + 1),
                worst <= rate + 1, "most in one second: %d" % worst))
    got = {c: int(p) for c, p in psql(db, "SELECT customer_id, points FROM loyalty_accounts")}
    claims = int(psql(db, "SELECT count(*) FROM processed_messages"
                          " WHERE consumer = 'loyalty.award-points'")[0][0])
    out.append(("points awarded once per order", got == expect and claims == n,
                "%d customers differ, %d claims" % (sum(1 for c in expect
                                                        if got.get(c) != expect[c]), claims)))
    keys = {k for (k,) in lite(shop, "mail", "SELECT key FROM mails")}
    deliveries = lite(shop, "mail", "SELECT count(*) FROM deliveries")[0][0]
    out.append(("one mail per order", keys == {"order.placed:" + o for o in orders},
                "%d mails, %d deliveries (repeats deduplicated by Idempotency-Key)"
                % (len(keys), deliveries)))
    st, dead = shoplib.http("GET", shop.url["errand"] + "/v1/dead?limit=10")
    out.append(("no dead letters", st == 200 and not dead["jobs"],
                "%s" % [j["id"] for j in (dead or {}).get("jobs", [])]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", type=int, default=10000)
    ap.add_argument("--ship-rate", type=int, default=50)
    ap.add_argument("--build", default=os.path.join(REPO, "build-clang"))
    ap.add_argument("--db", default=os.environ.get("ERRAND_TEST_PG_URL"))
    ap.add_argument("--report", default=os.path.join(REPO, "bench", "shop_chaos.md"))
    ap.add_argument("--seed", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=8)
    a = ap.parse_args()
    if not a.db:
        raise SystemExit("give --db postgres://… or set ERRAND_TEST_PG_URL")
    bins = shoplib.bins_from(os.path.abspath(a.build))
    dbname = "shop_chaos_%d" % os.getpid()
    psql(a.db, "CREATE DATABASE %s" % dbname)
    db = with_db(a.db, dbname)
    work = tempfile.mkdtemp(prefix="errand-shop-chaos-")
    shop = None
    try:
        subprocess.run([bins["errand"], "outbox", "install", "--db", db, "--notify"], check=True,
                       capture_output=True, timeout=60)
        with open(os.path.join(shoplib.HERE, "queues.json")) as f:
            queues = json.load(f)
        queues["shipping"]["rate_limit"]["max"] = a.ship_rate
        numbers = (3000, 5000, 8000)
        fakes = {"gateway": ["--fail-rate", "0.05", "--lost-reply-rate", "0.05"],
                 "mail": ["--fail-rate", "0.05"], "carrier": ["--fail-rate", "0.02"]}
        shop = shoplib.Shop(work, bins, db, db + "?schema=errand&pool_size=8", queues=queues,
                            numbers=numbers, fake_args=fakes,
                            worker_env={"SHOP_CRASH_AFTER_CAPTURE": "0.005"})
        shop.start()
        rnd = random.Random(a.seed)
        victims = list(shop.procs)
        kills = collections.Counter()
        stop = threading.Event()

        def chaos():
            r = random.Random(a.seed + 1)
            while not stop.wait(r.uniform(0.5, 2.0)):
                name = r.choice(victims)
                shop.kill(name)
                kills[name] += 1
                time.sleep(r.uniform(0.1, 1.0))
                shop.revive(name)

        t0 = time.monotonic()
        th = threading.Thread(target=chaos, daemon=True)
        th.start()
        plan = [(i, 1000 + rnd.randrange(100000), "cust-%d" % rnd.randrange(500))
                for i in range(a.orders)]
        orders, expect, lock = {}, collections.Counter(), threading.Lock()

        def client(k):
            for i, amount, cust in plan[k::a.clients]:
                oid = shop.place("tenant-%d" % (i % 5), cust, amount, "chaos-%d" % i)
                with lock:
                    orders[oid] = amount
                    expect[cust] += amount // 100

        cl = [threading.Thread(target=client, args=(k,)) for k in range(a.clients)]
        for t in cl:
            t.start()
        timeline = []
        while True:
            time.sleep(5)
            with lock:
                placed = len(orders)
            p = progress(shop, db)
            timeline.append((time.monotonic() - t0, placed) + p)
            print("%6.0f s  placed %d  paid %d  shipped %d  points %d  mails %d"
                  % timeline[-1], flush=True)
            if placed == a.orders and p[0] == p[1] == a.orders and p[3] >= a.orders \
                    and p[2] == sum(expect.values()):
                break
            if time.monotonic() - t0 > 3600:
                print("gave up after an hour", flush=True)
                break
        for t in cl:
            t.join()
        stop.set()
        th.join()
        took = time.monotonic() - t0
        deaths = {n: len(p.deaths) for n, p in shop.procs.items() if p.deaths}
        results = check(shop, db, orders, dict(expect), a.ship_rate)
    finally:
        if shop:
            shop.stop_all()
        psql(a.db, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % dbname)
    ok = all(r[1] for r in results)
    lines = ["# The shop under chaos: %d orders" % a.orders, "",
             "Written by `bench/shop_chaos.py --orders %d --ship-rate %d` (seed %d) on %s, "
             "%s, %d CPUs, PostgreSQL at `%s`, binaries of `%s`."
             % (a.orders, a.ship_rate, a.seed, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                platform.platform(), os.cpu_count(), urllib.parse.urlsplit(a.db).netloc,
                os.path.relpath(os.path.abspath(a.build), REPO)), "",
             "**Result: %s.** %d orders, all done after %.0f s; the shipping queue's limit "
             "was %d/s (raised from the example's 4/s so the run ends in minutes)."
             % ("every check passed" if ok else "FAILED", a.orders, took, a.ship_rate), "",
             "Setup: %d client threads place orders through the Orders API (each retried with "
             "its Idempotency-Key until answered); job timeout %d ms < grace %d ms < lease %d ms; "
             "the example's queue settings otherwise (12 attempts, capped backoff 1 s .. 10 min, "
             "jitter 0.5). The gateway fails 5 %% of requests with 503 and drops 5 %% of capture "
             "replies after charging; the mail service fails 5 %%, the carrier 2 %%; payments "
             "workers kill themselves after 0.5 %% of captures, before the database write."
             % (a.clients, numbers[0], numbers[1], numbers[2]), "",
             "## Kills", "",
             "SIGKILL every 0.5–2 s to a random process, restarted 0.1–1 s later: %d in all."
             % sum(kills.values()), "", "| process | SIGKILLs | other deaths (crash after capture) |",
             "|---|---|---|"]
    for name in sorted(set(kills) | set(deaths)):
        lines.append("| %s | %d | %d |" % (name, kills.get(name, 0), deaths.get(name, 0)))
    lines += ["", "## Checks", "", "| check | | detail |", "|---|---|---|"]
    for what, good, detail in results:
        lines.append("| %s | %s | %s |" % (what, "pass" if good else "**FAIL**", detail))
    lines += ["", "## Progress", "", "| s | placed | paid | shipped | points | mails |",
              "|---|---|---|---|---|---|"]
    step = max(1, len(timeline) // 30)
    for row in timeline[::step] + ([timeline[-1]] if (len(timeline) - 1) % step else []):
        lines.append("| %.0f | %d | %d | %d | %d | %d |" % row)
    with open(a.report, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
