# SPDX-License-Identifier: MIT
#
# The shop example (examples/shop) end to end, on a fresh PostgreSQL
# database: orders placed through the Orders API while workers, fakes,
# errand and the API are killed at random all end paid once, shipped once,
# with points once and one mail; a capture run twice charges once and emits
# one payment.captured; a worker killed after the gateway captured and
# before the database write does not capture again; a cancelled order is
# voided; an expired authorization is a dead letter; the worker refuses the
# three numbers in the wrong order. Needs ERRAND_TEST_PG_URL.

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "shop"))
from harness import PG_SKIP, PG_SKIP_WHY, PG_URL, errand_bin, psql, run_errand  # noqa: E402
from harness import with_params  # noqa: E402
import shoplib  # noqa: E402
from test_outbox import app_sql, app_url  # noqa: E402

ORDERS = int(os.environ.get("SHOP_TEST_ORDERS", "100"))
SHIP_RATE = 10  # creates per second at the carrier (raised from 4 to keep the test short)
MIN_KILLS = 15
NUMBERS = (2000, 3000, 5000)  # job timeout < grace < lease, short for the test


def build_dir():
    return os.environ.get("ERRAND_BUILD_DIR") or os.path.dirname(errand_bin())


def fast_queues():
    """queues.json with short backoffs (a killed fake must not stall the test
    for minutes) and the test's shipping rate; every other field as shipped."""
    with open(os.path.join(shoplib.HERE, "queues.json")) as f:
        q = json.load(f)
    for settings in q.values():
        settings["defaults"]["backoff"].update({"delay_ms": 200, "max_delay_ms": 2000})
    q["shipping"]["rate_limit"]["max"] = SHIP_RATE
    return q


def wait_for(fn, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = fn()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


def fake_rows(shop, kind, sql):
    con = sqlite3.connect(os.path.join(shop.workdir, kind + ".db"), timeout=30)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


class ShopCase(unittest.TestCase):
    """A running shop on a fresh database, for a test class: PREFIX names the
    database and the work directory, shop_kwargs() the shoplib.Shop options."""
    PREFIX = "shop"

    @classmethod
    def shop_kwargs(cls):
        return {}

    @classmethod
    def setUpClass(cls):
        if not PG_URL:
            raise RuntimeError("ERRAND_TEST_PG_URL is not set (ERRAND_TEST_PG_SKIP=1 skips)")
        cls.dbname = "%s_%d_%d" % (cls.PREFIX, os.getpid(), int(time.time() * 1000) % 10**7)
        psql("CREATE DATABASE %s" % cls.dbname)
        cls.db_url = app_url(cls.dbname)
        cls.workdir = tempfile.mkdtemp(prefix="errand-%s-" % cls.PREFIX)
        try:
            rc, out, err = run_errand(["outbox", "install", "--db", cls.db_url, "--notify"],
                                      timeout=60)
            assert rc == 0, (rc, out, err)
            cls.shop = shoplib.Shop(cls.workdir, shoplib.bins_from(build_dir()), cls.db_url,
                                    with_params(cls.db_url, schema="errand", pool_size=8),
                                    queues=fast_queues(), numbers=NUMBERS,
                                    **cls.shop_kwargs())
            cls.shop.start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "shop", None):
            cls.shop.stop_all()
        psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % cls.dbname)
        if not os.environ.get("ERRAND_KEEP_TMP"):
            shutil.rmtree(cls.workdir, ignore_errors=True)


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class ShopTest(ShopCase):
    @classmethod
    def shop_kwargs(cls):
        return {"workers": shoplib.WORKERS,
                "worker_env": {"SHOP_CONCURRENCY": "4", "SHOP_CRASH_AFTER_CAPTURE": "0.08"},
                "fake_args": {"gateway": ["--fail-rate", "0.05", "--lost-reply-rate", "0.1"],
                              "mail": ["--fail-rate", "0.05"]}}

    def sql(self, q):
        return app_sql(self.db_url, q)

    def errand(self, method, path, body=None):
        return shoplib.http(method, self.shop.url["errand"] + path, body)

    def order_auth(self, order):
        return self.sql("SELECT authorization_id FROM payments WHERE order_id = '%s'"
                        % order)[0][0]

    def wait_status(self, order, status, timeout=60):
        wait_for(lambda: self.sql("SELECT status FROM payments WHERE order_id = '%s'"
                                  % order)[0][0] == status, timeout, "%s %s" % (order, status))

    def jobs_of(self, queue, state):
        st, body = self.errand("GET", "/v1/queues/%s/jobs?state=%s&limit=1000" % (queue, state))
        self.assertEqual(st, 200, body)
        return body["jobs"]

    # ---- 2a. the API and the queues' settings (after 1, which counts every order) ----

    def test_2a_queue_settings_merge_onto_the_servers(self):
        st, q = self.errand("GET", "/v1/queues/payments")
        self.assertEqual(st, 200, q)
        got = q["queue"]["settings"]
        self.assertEqual(got["defaults"]["max_attempts"], 12)
        self.assertEqual(got["defaults"]["backoff"]["type"], "capped")
        self.assertEqual(got["retention"]["dead"], "keep")
        self.assertEqual(got["max_stalled"], 3)  # not in queues.json: the server's default
        st, q = self.errand("GET", "/v1/queues/shipping")
        self.assertEqual(q["queue"]["settings"]["rate_limit"]["max"], SHIP_RATE)
        st, q = self.errand("GET", "/v1/queues/notifications")
        self.assertEqual(q["queue"]["settings"]["dispatch"]["url"], self.shop.url["mail"] + "/send")
        st, q = self.errand("GET", "/v1/queues/bulk")
        self.assertEqual(q["queue"]["settings"]["group_limits"]["concurrency"], 2)

    def test_2b_api_idempotency_key_and_bad_requests(self):
        api = self.shop.url["api"]
        auth = self.shop.authorize(2500)
        body = {"tenant": "t", "customer_id": "c-idem", "amount": 2500, "authorization_id": auth}
        st1, a = shoplib.http("POST", api + "/orders", body, {"Idempotency-Key": "idem-1"})
        st2, b = shoplib.http("POST", api + "/orders", body, {"Idempotency-Key": "idem-1"})
        self.assertEqual((st1, st2), (202, 200), (a, b))
        self.assertEqual(a["order_id"], b["order_id"])
        self.assertEqual(self.sql("SELECT count(*) FROM outbox_events WHERE aggregate_id = '%s'"
                                  " AND topic = 'order.placed'" % a["order_id"]), [["1"]])
        st, _ = shoplib.http("POST", api + "/orders", dict(body, amount=0))
        self.assertEqual(st, 400)
        st, _ = shoplib.http("POST", api + "/orders/not-a-uuid-at-all-not-a-uuid-at-all/cancel",
                             {})
        self.assertEqual(st, 404)
        self.wait_status(a["order_id"], "captured")
        st, _ = shoplib.http("POST", api + "/orders/%s/cancel" % a["order_id"], {})
        self.assertEqual(st, 409)  # paid: refunds are a person's call

    # ---- 1. many orders, everything killed at random ----

    def test_1_orders_survive_random_kills(self):
        shop, t0 = self.shop, time.monotonic()
        victims = [n for n in shop.procs]
        stop = threading.Event()
        kills = []

        def chaos():
            rnd = random.Random(15)
            while not stop.wait(rnd.uniform(0.3, 1.0)):
                name = rnd.choice(victims)
                shop.kill(name)
                kills.append(name)
                time.sleep(rnd.uniform(0.1, 0.5))
                shop.revive(name)

        th = threading.Thread(target=chaos, daemon=True)
        th.start()
        orders, expect = {}, {}
        try:
            for i in range(ORDERS):
                amount = 1000 + 137 * i
                customer = "cust-%d" % (i % 17)
                oid = shop.place("tenant-%d" % (i % 3), customer, amount, "req-%d" % i)
                orders[oid] = amount
                expect[customer] = expect.get(customer, 0) + amount // 100
            # a few more kills while the jobs run
            wait_for(lambda: len(kills) >= MIN_KILLS, 60, "%d kills" % MIN_KILLS)
        finally:
            stop.set()
            th.join()
        for name in victims:
            shop.revive(name)

        def all_done():
            r = self.sql("SELECT count(*) FROM orders o JOIN payments p ON p.order_id = o.id"
                         " WHERE o.status = 'paid' AND p.status = 'captured'"
                         " AND o.shipment_id IS NOT NULL")
            pts = self.sql("SELECT coalesce(sum(points), 0) FROM loyalty_accounts")
            mails = fake_rows(shop, "mail", "SELECT count(*) FROM mails")[0][0]
            return (int(r[0][0]) == ORDERS and int(pts[0][0]) == sum(expect.values())
                    and mails >= ORDERS)
        wait_for(all_done, 100, "every order paid, shipped, with points and a mail")
        self.assertGreaterEqual(len(kills), MIN_KILLS)
        crashed = sum(len(p.deaths) for n, p in shop.procs.items() if n.startswith("payments"))
        self.assertGreater(crashed, 0, "no payments worker crashed after a capture")

        # Paid once: one charge per authorization, none after it was charged.
        charges = fake_rows(shop, "gateway", "SELECT auth, count(*), min(at) FROM charges"
                                             " GROUP BY auth")
        auths = {r[0]: self.order_auth(r[0]) for r in self.sql("SELECT id FROM orders")}
        self.assertEqual(sorted(a for a, _, _ in charges), sorted(auths.values()))
        self.assertEqual([a for a, n, _ in charges if n != 1], [])
        first = {a: at for a, _, at in charges}
        late = fake_rows(shop, "gateway", "SELECT auth, at FROM capture_calls")
        self.assertEqual([a for a, at in late if at > first.get(a, 1e18)], [],
                         "a capture was sent after the gateway had charged")
        amounts = dict(fake_rows(shop, "gateway", "SELECT auth, amount FROM charges"))
        for oid, amount in orders.items():
            self.assertEqual(amounts[auths[oid]], amount)

        # One payment.captured per order.
        ev = self.sql("SELECT aggregate_id, count(*) FROM outbox_events"
                      " WHERE topic = 'payment.captured' GROUP BY 1")
        self.assertEqual(sorted(a for a, _ in ev), sorted(orders))
        self.assertEqual([a for a, n in ev if n != "1"], [])

        # Shipped once: one carrier shipment per order, and it is the order's.
        ships = fake_rows(shop, "carrier", "SELECT reference, count(*), min(id) FROM shipments"
                                           " GROUP BY reference")
        self.assertEqual(sorted(r for r, _, _ in ships), sorted("order-" + o for o in orders))
        self.assertEqual([r for r, n, _ in ships if n != 1], [])
        stored = dict(self.sql("SELECT 'order-' || id, shipment_id FROM orders"))
        self.assertEqual({r: s for r, _, s in ships}, stored)
        # The carrier never saw more creates in a second than the limit + 1.
        ats = [a for (a,) in fake_rows(shop, "carrier", "SELECT at FROM shipments ORDER BY at")]
        j, worst = 0, 0
        for i, a in enumerate(ats):
            while ats[j] <= a - 1.0:
                j += 1
            worst = max(worst, i - j + 1)
        self.assertLessEqual(worst, SHIP_RATE + 1)

        # Points once: each customer's points are the sum over its orders.
        self.assertEqual({c: int(p) for c, p in self.sql(
            "SELECT customer_id, points FROM loyalty_accounts")}, expect)
        self.assertEqual(int(self.sql("SELECT count(*) FROM processed_messages WHERE consumer"
                                      " = 'loyalty.award-points'")[0][0]), ORDERS)

        # One mail per order, keyed by its order.placed event.
        keys = {k for (k,) in fake_rows(shop, "mail", "SELECT key FROM mails")}
        self.assertEqual(keys, {"order.placed:" + o for o in orders})

        st, dead = self.errand("GET", "/v1/dead?limit=100")
        self.assertEqual((st, dead["jobs"]), (200, []))
        print("\n%d orders, %d kills, %d unplanned payments-worker deaths, %.1f s"
              % (ORDERS, len(kills), crashed, time.monotonic() - t0), file=sys.stderr)

    # ---- 2. capture twice ----

    def place_paused(self, key, auth=None):
        """Places an order while the payments queue is paused; returns its id
        once its capture job waits."""
        st, _ = self.errand("POST", "/v1/queues/payments/pause")
        self.assertEqual(st, 200)
        oid = self.shop.place("tenant-0", "cust-x-" + key, 5000, key, auth=auth)
        wait_for(lambda: [j for j in self.jobs_of("payments", "waiting")
                          if j["payload"]["payload"]["order_id"] == oid], 30,
                 "the capture job of " + oid)
        return oid

    def resume(self):
        st, _ = self.errand("POST", "/v1/queues/payments/resume")
        self.assertEqual(st, 200)

    def test_2_capture_run_twice_charges_once(self):
        oid = self.place_paused("twice")
        job = [j for j in self.jobs_of("payments", "waiting")
               if j["payload"]["payload"]["order_id"] == oid][0]
        for n in (1, 2):  # the same capture, twice more, as a redelivery would be
            st, body = self.errand("POST", "/v1/queues/payments/jobs",
                                   {"name": "capture-payment", "payload": job["payload"],
                                    "id": "again-%d-%s" % (n, oid),
                                    "idempotency_key": job["idempotency_key"]})
            self.assertEqual(st, 201, body)
        self.resume()
        wait_for(lambda: all(self.errand("GET", "/v1/jobs/" + i)[1]["job"]["state"]
                             == "completed" for i in (job["id"], "again-1-" + oid,
                                                      "again-2-" + oid)),
                 60, "the three capture jobs")
        auth = self.order_auth(oid)
        self.assertEqual(fake_rows(self.shop, "gateway",
                                   "SELECT count(*) FROM charges WHERE auth = '%s'" % auth),
                         [(1,)])
        self.assertEqual(self.sql("SELECT count(*) FROM outbox_events WHERE topic ="
                                  " 'payment.captured' AND aggregate_id = '%s'" % oid), [["1"]])
        results = {self.errand("GET", "/v1/jobs/" + i)[1]["job"]["result"]["capture_id"]
                   for i in (job["id"], "again-1-" + oid, "again-2-" + oid)}
        self.assertEqual(len(results), 1)

    # ---- 3. a crash between the gateway's capture and the database write ----

    def test_3_crash_after_capture_does_not_capture_again(self):
        shop = self.shop
        normal = [n for n in shop.procs if n.startswith("payments")]
        for n in normal:
            shop.stop(n)
        crasher = shoplib.Proc("crasher", [shop.bins["worker"], "payments"],
                               shop.env({"SHOP_CRASH_AFTER_CAPTURE": "1"}),
                               os.path.join(shop.workdir, "crasher.log"), None)
        faults = shoplib.http("POST", shop.url["gateway"] + "/faults",
                              {"fail_rate": 0, "lost_reply_rate": 0})
        self.assertEqual(faults[0], 200)
        try:
            oid = self.place_paused("crash")
            crasher.start()
            self.resume()
            crasher.p.wait(timeout=60)
            self.assertEqual(crasher.p.returncode, -signal.SIGKILL)
        finally:
            crasher.kill()
            shoplib.http("POST", shop.url["gateway"] + "/faults", {"fail_rate": 0.05,
                                                                   "lost_reply_rate": 0.1})
        auth = self.order_auth(oid)
        self.assertEqual(fake_rows(shop, "gateway",
                                   "SELECT count(*) FROM charges WHERE auth = '%s'" % auth),
                         [(1,)])
        self.assertEqual(self.sql("SELECT status FROM payments WHERE order_id = '%s'" % oid),
                         [["authorized"]], "the database must not know of the capture yet")
        for n in normal:
            shop.revive(n)
        self.wait_status(oid, "captured")
        self.assertEqual(fake_rows(shop, "gateway", "SELECT count(*) FROM capture_calls"
                                   " WHERE auth = '%s'" % auth), [(1,)])
        self.assertEqual(fake_rows(shop, "gateway",
                                   "SELECT count(*) FROM charges WHERE auth = '%s'" % auth),
                         [(1,)])
        wait_for(lambda: self.sql("SELECT shipment_id IS NOT NULL FROM orders WHERE id = '%s'"
                                  % oid) == [["t"]], 60, "the shipment")

    # ---- 4. cancel, expiry ----

    def test_4_cancelled_order_is_voided_not_charged(self):
        oid = self.place_paused("cancel")
        st, body = shoplib.http("POST", self.shop.url["api"] + "/orders/%s/cancel" % oid, {})
        self.assertEqual(st, 202, body)
        self.resume()
        self.wait_status(oid, "voided")
        auth = self.order_auth(oid)
        self.assertEqual(fake_rows(self.shop, "gateway", "SELECT status FROM auths WHERE id"
                                   " = '%s'" % auth), [("voided",)])
        self.assertEqual(fake_rows(self.shop, "gateway",
                                   "SELECT count(*) FROM charges WHERE auth = '%s'" % auth), [(0,)])
        st, body = shoplib.http("POST", self.shop.url["api"] + "/orders/%s/cancel" % oid, {})
        self.assertEqual(st, 200, body)

    def test_5_expired_authorization_is_a_dead_letter_then_redriven(self):
        # No injected gateway failures: the one attempt must meet the expiry.
        gw = self.shop.url["gateway"]
        self.assertEqual(shoplib.http("POST", gw + "/faults", {"fail_rate": 0,
                                                              "lost_reply_rate": 0})[0], 200)
        self.addCleanup(shoplib.http, "POST", gw + "/faults", {"fail_rate": 0.05,
                                                               "lost_reply_rate": 0.1})
        auth = self.shop.authorize(5000)
        st, _ = shoplib.http("POST", gw + "/authorizations/%s/expire" % auth, {})
        self.assertEqual(st, 200)
        oid = self.shop.place("tenant-0", "cust-exp", 5000, "expired", auth=auth)

        def dead():
            st, body = self.errand("GET", "/v1/dead?queue=payments&limit=100")
            return [j for j in body["jobs"] if j["payload"]["payload"]["order_id"] == oid]
        job = wait_for(dead, 60, "the dead capture")[0]
        self.assertEqual(job["last_error"]["class"], "permanent")
        self.assertIn("expired", job["last_error"]["message"])
        self.assertEqual(job["attempts"], 1)
        # The series examples/shop/alerts.yml pages on.
        with urllib.request.urlopen(self.shop.url["errand"] + "/metrics", timeout=10) as r:
            text = r.read().decode()
        self.assertRegex(text, r'errand_jobs_dead_total\{[^}]*queue="payments"[^}]*\} [1-9]')
        # A person fixes it (the customer authorized again) and redrives the
        # dead letter, as the dashboard's Dead letters page does.
        fresh = self.shop.authorize(5000)
        self.sql("UPDATE payments SET authorization_id = '%s' WHERE order_id = '%s'"
                 % (fresh, oid))
        st, body = self.errand("POST", "/v1/dead/%s/redrive" % job["id"])
        self.assertEqual(st, 201, body)
        self.wait_status(oid, "captured")
        wait_for(lambda: self.sql("SELECT shipment_id IS NOT NULL FROM orders WHERE id = '%s'"
                                  % oid) == [["t"]], 60, "the shipment after the redrive")
        self.assertEqual(fake_rows(self.shop, "gateway", "SELECT count(*) FROM charges WHERE"
                                   " auth IN ('%s', '%s')" % (auth, fresh)), [(1,)])

    def test_6_worker_checks_the_three_numbers(self):
        out = subprocess.run([self.shop.bins["worker"], "payments"],
                             env=self.shop.env({"SHOP_GRACE_MS": "6000", "SHOP_LEASE_MS": "5000"}),
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 2)
        self.assertIn("longest job < shutdown grace < lease", out.stderr)

    # ---- 5. every handler run again changes nothing ----

    def redeliver(self, queue, order, tag):
        """Enqueues a copy of the order's completed job of queue (same payload
        and idempotency key, as a redelivery) and waits until it completes."""
        job = [j for j in self.jobs_of(queue, "completed")
               if j["payload"]["payload"]["order_id"] == order][0]
        st, body = self.errand("POST", "/v1/queues/%s/jobs" % queue,
                               {"name": job["name"], "payload": job["payload"],
                                "id": "redo-%s-%s" % (tag, order),
                                "idempotency_key": job["idempotency_key"]})
        self.assertEqual(st, 201, body)
        return wait_for(lambda: (lambda j: j if j["state"] == "completed" else None)(
            self.errand("GET", "/v1/jobs/redo-%s-%s" % (tag, order))[1]["job"]), 60,
            "the copy of %s's job" % queue)

    def test_7_redelivered_jobs_change_nothing(self):
        shop = self.shop
        oid = self.sql("SELECT id FROM orders WHERE shipment_id IS NOT NULL LIMIT 1")[0][0]
        ref = "order-" + oid
        cust = self.sql("SELECT customer_id FROM orders WHERE id = '%s'" % oid)[0][0]
        points = self.sql("SELECT points FROM loyalty_accounts WHERE customer_id = '%s'" % cust)
        self.assertEqual(self.redeliver("loyalty", oid, "pts")["result"], {"awarded": False})
        self.assertEqual(self.sql("SELECT points FROM loyalty_accounts WHERE customer_id = '%s'"
                                  % cust), points)
        # The carrier created the shipment but the database never heard: the
        # lookup by reference finds it.
        self.sql("UPDATE orders SET shipment_id = NULL WHERE id = '%s'" % oid)
        self.redeliver("shipping", oid, "ship")
        self.assertEqual(fake_rows(shop, "carrier", "SELECT count(*) FROM shipments WHERE"
                                   " reference = '%s'" % ref), [(1,)])
        carrier_id = fake_rows(shop, "carrier", "SELECT id FROM shipments WHERE reference"
                               " = '%s'" % ref)[0][0]
        self.assertEqual(self.sql("SELECT shipment_id FROM orders WHERE id = '%s'" % oid),
                         [[carrier_id]])
        key = "order.placed:" + oid
        before = fake_rows(shop, "mail", "SELECT count(*) FROM deliveries WHERE key = '%s'" % key)
        self.redeliver("notifications", oid, "mail")
        after = fake_rows(shop, "mail", "SELECT count(*) FROM deliveries WHERE key = '%s'" % key)
        self.assertEqual(after[0][0], before[0][0] + 1)  # delivered again...
        self.assertEqual(fake_rows(shop, "mail", "SELECT count(*) FROM mails WHERE key = '%s'"
                                   % key), [(1,)])     # ...and still one mail

    def test_75_the_trace_id_follows_the_order(self):
        trace = "%032x" % random.getrandbits(128)
        auth = self.shop.authorize(3000)
        body = {"tenant": "t", "customer_id": "c-trace", "amount": 3000,
                "authorization_id": auth}
        oid = None
        for _ in range(100):  # the gateway's injected failures do not reach the API
            st, out = shoplib.http("POST", self.shop.url["api"] + "/orders", body,
                                   {"traceparent": "00-%s-00f067aa0ba902b7-01" % trace,
                                    "Idempotency-Key": "trace-1"})
            if st in (200, 202):
                oid = out["order_id"]
                break
            time.sleep(0.1)
        self.assertEqual(out["trace_id"], trace)
        wait_for(lambda: self.sql("SELECT shipment_id IS NOT NULL FROM orders WHERE id = '%s'"
                                  % oid) == [["t"]], 60, "the shipment")

        def logged(prefix, msg):
            for log in os.listdir(self.workdir):
                if log.startswith(prefix) and log.endswith(".log"):
                    with open(os.path.join(self.workdir, log), errors="replace") as f:
                        for line in f:
                            if trace in line and msg in line and oid in line:
                                return True
            return False
        wait_for(lambda: logged("loyalty", "points awarded"), 30, "the loyalty log line")
        for prefix, msg in (("api", "order placed"), ("payments", "payment captured"),
                            ("shipping", "shipment created")):
            self.assertTrue(logged(prefix, msg), (prefix, msg))

    # ---- 6. the carrier's 429 throttles the whole shipping queue ----

    def test_8_carrier_429_throttles_the_shipping_queue(self):
        shop, carrier = self.shop, self.shop.procs["carrier"]
        argv = list(carrier.argv)
        carrier.argv = argv + ["--limit", "2"]
        shop.kill("carrier")
        shop.revive("carrier")
        self.assertTrue(carrier.wait_ready())
        rejected0 = fake_rows(shop, "carrier", "SELECT count(*) FROM rejected")[0][0]
        seen = []
        try:
            oids = [shop.place("tenant-1", "cust-429", 2000, "429-%d" % i) for i in range(12)]

            def shipped():
                st, q = self.errand("GET", "/v1/queues/shipping")
                if st == 200 and q["queue"].get("throttled_until"):
                    seen.append(q["queue"]["throttled_until"])
                return self.sql("SELECT count(*) FROM orders WHERE shipment_id IS NOT NULL AND"
                                " request_key LIKE '429-%%'") == [[str(len(oids))]]
            wait_for(shipped, 90, "the throttled shipments")
        finally:
            carrier.argv = argv
            shop.kill("carrier")
            shop.revive("carrier")
        self.assertGreater(fake_rows(shop, "carrier", "SELECT count(*) FROM rejected")[0][0],
                           rejected0)
        self.assertTrue(seen, "the shipping queue was never throttled")
        for oid in oids:
            self.assertEqual(fake_rows(shop, "carrier", "SELECT count(*) FROM shipments WHERE"
                                       " reference = 'order-%s'" % oid), [(1,)])

    # ---- 7. operations: fairness on bulk, the roll-up, the clean-up ----

    def test_86_bulk_takes_tenants_in_turns(self):
        jobs = [{"name": "newsletter", "id": "nl-big-%d" % i, "group": "tenant:big",
                 "payload": {"v": 1, "newsletter": "n1", "recipient": "r-%d" % i}}
                for i in range(40)]
        jobs += [{"name": "newsletter", "id": "nl-small-%d" % i, "group": "tenant:small",
                  "payload": {"v": 1, "newsletter": "n2", "recipient": "s-%d" % i}}
                 for i in range(4)]
        # No injected mail failures here: a retry's backoff would blur the order.
        mail = self.shop.url["mail"] + "/faults"
        self.assertEqual(shoplib.http("POST", mail, {"fail_rate": 0})[0], 200)
        try:
            st, body = self.errand("POST", "/v1/queues/bulk/jobs", {"jobs": jobs})
            self.assertEqual(st, 201, body)

            def done():
                got = [self.errand("GET", "/v1/jobs/" + j["id"])[1]["job"] for j in jobs]
                return got if all(g["state"] == "completed" for g in got) else None
            got = wait_for(done, 90, "the newsletters")
        finally:
            shoplib.http("POST", mail, {"fail_rate": 0.05})
        self.assertEqual([g["id"] for g in got if g["attempts"] != 1], [])
        order = [g["id"] for g in sorted(got, key=lambda g: g["finished_at"])]
        last_small = max(order.index("nl-small-%d" % i) for i in range(4))
        self.assertLess(last_small, 14, order)  # in turns, not behind the 40
        self.assertEqual(fake_rows(self.shop, "mail", "SELECT count(*) FROM mails WHERE key"
                                   " LIKE 'nl-%'"), [(44,)])

    def trigger(self, key):
        st, body = self.errand("POST", "/v1/schedulers/%s/trigger" % key)
        self.assertIn(st, (200, 201), body)
        jid = body["job"]["id"]
        return wait_for(lambda: (lambda j: j if j["state"] == "completed" else None)(
            self.errand("GET", "/v1/jobs/" + jid)[1]["job"]), 60, "the %s job" % key)

    def test_88_rollup_catches_up_after_downtime(self):
        tz = "Asia/Ho_Chi_Minh"
        today = self.sql("SELECT (now() AT TIME ZONE '%s')::date" % tz)[0][0]
        for back, amount, status in ((3, 1000, "paid"), (2, 2000, "paid"), (2, 500, "cancelled"),
                                     (2, 700, "paid"), (1, 4000, "paid")):
            self.sql("INSERT INTO orders (tenant, customer_id, amount, status, created_at)"
                     " VALUES ('t', 'c-rollup', %d, '%s', ('%s'::date - %d + time '12:00')"
                     " AT TIME ZONE '%s')" % (amount, status, today, back, tz))
        start = self.sql("SELECT ('%s'::date - 4)::text" % today)[0][0]
        st, _ = self.errand("PUT", "/v1/cursors/shop.daily-sales", {"value": start})
        self.assertEqual(st, 200)
        job = self.trigger("daily-sales-rollup")  # three days missed: all done in one run
        self.assertEqual(job["result"]["days"], 3)
        rows = self.sql("SELECT ('%s'::date - day)::text, orders, amount FROM daily_sales"
                        " ORDER BY day" % today)
        self.assertEqual(rows, [["3", "1", "1000"], ["2", "2", "2700"], ["1", "1", "4000"]])
        st, cur = self.errand("GET", "/v1/cursors/shop.daily-sales")
        self.assertEqual(cur["value"], self.sql("SELECT ('%s'::date - 1)::text" % today)[0][0])
        time.sleep(1.1)  # a trigger in the same second is the same tick, the same job
        self.assertEqual(self.trigger("daily-sales-rollup")["result"]["days"], 0)
        st, sched = self.errand("GET", "/v1/schedulers/daily-sales-rollup")
        self.assertEqual(sched["scheduler"]["tz"] if "scheduler" in sched else sched["tz"], tz)

    def test_89_outbox_cleanup_deletes_old_published_rows(self):
        self.sql("UPDATE outbox_events SET published_at = now() - interval '8 days' WHERE id IN"
                 " (SELECT id FROM outbox_events WHERE published_at IS NOT NULL LIMIT 5)")
        old = int(self.sql("SELECT count(*) FROM outbox_events WHERE published_at < now()"
                           " - interval '7 days'")[0][0])
        self.assertEqual(old, 5)
        job = self.trigger("outbox-cleanup")
        self.assertEqual(job["result"], {"deleted": 5})
        self.assertEqual(self.sql("SELECT count(*) FROM outbox_events WHERE published_at < now()"
                                  " - interval '7 days'"), [["0"]])

    def test_9_graceful_stop_and_no_sanitizer_reports(self):
        self.shop.stop_all()  # SIGTERM: the C programs exit 0, and ASan/LSan would say so
        for name, p in self.shop.procs.items():
            if name in ("errand", "api") or "-" in name:
                self.assertEqual(p.p.returncode, 0, "%s:\n%s" % (name, self.shop.tail(name)))
        for log in os.listdir(self.workdir):
            if log.endswith(".log"):
                with open(os.path.join(self.workdir, log), errors="replace") as f:
                    text = f.read()
                self.assertNotIn("Sanitizer", text, log)
                self.assertNotIn("runtime error:", text, log)


class ShopAlertsTest(unittest.TestCase):
    def test_the_dead_letter_rule_passes_its_unit_tests(self):
        exe = os.environ.get("PROMTOOL") or shutil.which("promtool")
        self.assertTrue(exe, "promtool not found (Debian package prometheus)")
        for args in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]):
            out = subprocess.run([exe] + args, cwd=shoplib.HERE, capture_output=True, text=True,
                                 timeout=60)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main()
