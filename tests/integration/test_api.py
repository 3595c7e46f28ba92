# SPDX-License-Identifier: MIT
#
# Happy paths of every endpoint of API.md (health, metrics, jobs, queues,
# dead letters) against one real `errand serve`. Each test uses its own
# queue names so the tests are independent of each other's jobs.

import json
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Server, error_of, next_cursor, now_ms, parse_time, raw_bytes,  # noqa: E402
                     wait_until)

PARKED = "errand_fetches_parked_total"  # long-poll fetches the writer has parked
WAKE_BOUND_S = 0.5  # a parked fetch woken by a commit beats the writer's 1 s re-poll
SERVER_BACKOFF = {"type": "exponential", "delay_ms": 2000, "max_delay_ms": 900000, "jitter": 0.5}


class ApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server().start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def setUp(self):
        self.assertTrue(self.s.alive(), "server died:\n" + self.s.log_text())

    def enq(self, queue, job, status=201):
        st, b, _ = self.s.enqueue(queue, job)
        self.assertEqual(st, status, b)
        return b

    def one(self, queue, **kw):
        jobs = self.s.fetch_jobs(queue, **kw)
        self.assertEqual(len(jobs), 1, jobs)
        return jobs[0]

    def state(self, job_id):
        return self.s.job(job_id)["state"]

    # ---- health and metrics ----

    def test_healthz_and_readyz_return_200(self):
        st, b, _ = self.s.get("/healthz")
        self.assertEqual((st, b), (200, {"status": "ok"}))
        st, b, _ = self.s.get("/readyz")
        self.assertEqual(st, 200, b)

    def test_metrics_is_prometheus_text_with_errand_lines(self):
        self.enq("metrics-q", {"name": "m"})
        st, b, h = self.s.get("/metrics")
        self.assertEqual(st, 200)
        self.assertIn("text/plain", h.get("content-type", ""))
        lines = [ln for ln in b.splitlines() if ln.startswith("errand_")]
        self.assertTrue(lines, b[:500])

    # ---- enqueue ----

    def test_enqueue_single_returns_201_with_job_fields_waiting(self):
        b = self.enq("api-enq", {"name": "send-email", "payload": {"to": "a@b.c", "n": [1, 2]},
                                 "id": "enq-1", "priority": 7, "group": "tenant:42",
                                 "trace_id": "trace-1", "idempotency_key": "idem-1"})
        j = b["job"]
        self.assertIsNot(b.get("duplicate"), True, b)
        self.assertEqual(j["id"], "enq-1")
        self.assertEqual(j["queue"], "api-enq")
        self.assertEqual(j["name"], "send-email")
        self.assertEqual(j["payload"], {"to": "a@b.c", "n": [1, 2]})
        self.assertEqual(j["state"], "waiting")
        self.assertEqual(j["priority"], 7)
        self.assertEqual(j["group"], "tenant:42")
        self.assertEqual(j["trace_id"], "trace-1")
        self.assertEqual(j["idempotency_key"], "idem-1")
        self.assertEqual(j["attempts"], 0)
        self.assertEqual(j["max_attempts"], 8)
        self.assertEqual(j["backoff"], SERVER_BACKOFF)
        self.assertLess(abs(parse_time(j["created_at"]) - now_ms()), 5000)
        self.assertEqual(self.s.job("enq-1")["payload"], {"to": "a@b.c", "n": [1, 2]})

    def test_enqueue_stores_the_payload_as_compact_json_whatever_the_spacing(self):
        # compact and spaced bodies (the server's plain-text path) and bodies
        # with escapes, non-ASCII text and reals (the jansson path) store the
        # same compact text
        cases = [
            ('{"name":"c1","id":"cpt-1","payload":{"a":[1,-2,true,null],"b":{}}}',
             '{"a":[1,-2,true,null],"b":{}}'),
            (' {\r\n "name" : "c2" ,\t"id" : "cpt-2" , "payload" : { "a" : [ 1 , -2 , true ,'
             ' null ] , "b" : { } } } ', '{"a":[1,-2,true,null],"b":{}}'),
            ('{"name":"c3","id":"cpt-3","payload":{"s":"\\u00e9\\n\\/","r":1.5,"z":-0}}',
             '{"s":"\u00e9\\n/","r":1.5,"z":0}'),
            ('{"name":"c4","id":"cpt-4","payload":null,"priority":null,"delay_ms":0}', 'null'),
            ('{"name":"c5","id":"cpt-5"}', '{}'),
        ]
        for raw, stored in cases:
            st, b, _ = self.s.post("/v1/queues/api-compact/jobs", None, raw=raw)
            self.assertEqual(st, 201, (raw, b))
            self.assertEqual(b["job"]["payload"], json.loads(stored), raw)
            self.assertEqual(b["job"]["state"], "waiting", raw)
        con = self.s.db()
        try:
            got = dict(con.execute("SELECT id, payload FROM jobs WHERE queue = 'api-compact'"))
        finally:
            con.close()
        for raw, stored in cases:
            jid = json.loads(raw)["id"]
            text = got[jid].decode() if isinstance(got[jid], bytes) else got[jid]
            self.assertEqual(text, stored, raw)

    def test_enqueue_without_id_generates_one(self):
        b = self.enq("api-enq", {"name": "noid"})
        self.assertTrue(b["job"]["id"])
        self.assertEqual(self.s.job(b["job"]["id"])["name"], "noid")

    def test_enqueue_same_id_again_returns_200_duplicate_and_changes_nothing(self):
        self.enq("api-dup", {"name": "a", "payload": {"v": 1}, "id": "dup-1"})
        before = self.s.snapshot()
        st, b, _ = self.s.enqueue("api-dup", {"name": "b", "payload": {"v": 2}, "id": "dup-1",
                                              "priority": 9})
        self.assertEqual(st, 200, b)
        self.assertIs(b.get("duplicate"), True, b)
        self.assertEqual(b["job"]["payload"], {"v": 1})
        self.assertEqual(b["job"]["name"], "a")
        self.assertEqual(self.s.snapshot(), before)

    def test_bulk_enqueue_returns_201_ids_and_duplicates(self):
        self.enq("api-bulk", {"name": "x", "id": "bulk-old"})
        st, b, _ = self.s.enqueue("api-bulk", {"jobs": [
            {"name": "x", "id": "bulk-1"}, {"name": "x", "id": "bulk-old"},
            {"name": "x", "id": "bulk-2", "payload": [1]}]})
        self.assertEqual(st, 201, b)
        self.assertIn("bulk-1", b["ids"])
        self.assertIn("bulk-2", b["ids"])
        self.assertEqual(b["duplicates"], ["bulk-old"])
        self.assertEqual(self.state("bulk-1"), "waiting")
        self.assertEqual(self.s.job("bulk-2")["payload"], [1])

    # ---- fetch ----

    def test_delayed_job_is_not_fetched_before_due_and_is_after(self):
        b = self.enq("api-delay", {"name": "later", "id": "delay-1", "delay_ms": 1200})
        self.assertEqual(b["job"]["state"], "scheduled")
        self.assertGreater(parse_time(b["job"]["run_at"]), now_ms() + 500)
        self.assertEqual(self.s.fetch_jobs("api-delay"), [])
        time.sleep(0.5)  # a duration, not an order: half a second on it is still not due
        self.assertEqual(self.s.fetch_jobs("api-delay"), [])
        jobs = self.s.fetch_jobs("api-delay", wait_ms=3000)
        self.assertEqual([j["id"] for j in jobs], ["delay-1"])
        self.assertGreaterEqual(now_ms() + 50, parse_time(b["job"]["run_at"]))

    def test_fetch_returns_higher_priority_first(self):
        for i, p in (("pr-low", 0), ("pr-high", 10), ("pr-mid", 5)):
            self.enq("api-prio", {"name": "p", "id": i, "priority": p})
        got = [self.one("api-prio")["id"] for _ in range(3)]
        self.assertEqual(got, ["pr-high", "pr-mid", "pr-low"])

    def test_fetch_with_max_and_lease_leases_that_many_with_lease_fields(self):
        for i in range(5):
            self.enq("api-max", {"name": "m", "id": "max-%d" % i, "trace_id": "t-%d" % i,
                                 "group": "g"})
        t0 = now_ms()
        jobs = self.s.fetch_jobs("api-max", max=3, lease_ms=5000, worker_id="host-1")
        self.assertEqual(len(jobs), 3)
        for j in jobs:
            for k in ("id", "queue", "name", "payload", "attempt", "lease_token",
                      "lease_expires_at", "idempotency_key", "trace_id", "group"):
                self.assertIn(k, j)
            self.assertEqual(j["queue"], "api-max")
            self.assertEqual(j["attempt"], 1)
            self.assertEqual(j["group"], "g")
            self.assertEqual(j["idempotency_key"], j["id"])
            exp = parse_time(j["lease_expires_at"])
            self.assertTrue(t0 + 5000 - 2000 <= exp <= now_ms() + 5000 + 2000, j)
            full = self.s.job(j["id"])
            self.assertEqual(full["state"], "active")
            self.assertEqual(full["lease_owner"], "host-1")
        self.assertEqual(len({j["lease_token"] for j in jobs}), 3)
        self.assertEqual(len(self.s.fetch_jobs("api-max", max=3)), 2)
        self.assertEqual(self.s.fetch_jobs("api-max", max=3), [])

    def test_fetch_tries_queues_in_the_given_order(self):
        self.enq("api-order-b", {"name": "b", "id": "order-b"})
        self.enq("api-order-a", {"name": "a", "id": "order-a"})
        got = self.one(["api-order-a", "api-order-b"])
        self.assertEqual(got["id"], "order-a")

    def test_long_poll_returns_soon_after_an_enqueue(self):
        out = {}

        def poll():
            out["r"] = self.s.fetch("api-lp", wait_ms=5000)
            out["t"] = time.monotonic()

        parked = self.s.metric(PARKED)
        th = threading.Thread(target=poll)
        th.start()
        self.s.wait_metric(PARKED, parked + 1)  # the fetch waits in the writer
        t_enq = time.monotonic()
        self.enq("api-lp", {"name": "wake", "id": "lp-1"})
        th.join(10)
        st, b, _ = out["r"]
        self.assertEqual(st, 200, b)
        self.assertEqual([j["id"] for j in b["jobs"]], ["lp-1"])
        # woken by the enqueue, not by the writer's re-poll or the wait running out
        dt = out["t"] - t_enq
        self.assertLess(dt, WAKE_BOUND_S, "long-poll answered %.2fs after the enqueue" % dt)

    def test_long_poll_on_empty_queue_returns_empty_after_wait(self):
        t = time.monotonic()
        jobs = self.s.fetch_jobs("api-lp-empty", wait_ms=1000)
        dt = time.monotonic() - t
        self.assertEqual(jobs, [])
        self.assertGreaterEqual(dt, 0.9)
        self.assertLess(dt, 3.0)

    def test_long_poll_wakes_when_a_delayed_job_becomes_due(self):
        b = self.enq("api-lp-due", {"name": "d", "id": "lpd-1", "delay_ms": 700})
        due = parse_time(b["job"]["run_at"])
        jobs = self.s.fetch_jobs("api-lp-due", wait_ms=5000)
        self.assertEqual([j["id"] for j in jobs], ["lpd-1"])
        self.assertGreaterEqual(now_ms() + 50, due)
        self.assertLess(now_ms() - due, 1000, "woken long after the job was due")

    def test_long_poll_wakes_when_a_job_is_released(self):
        self.enq("api-lp-rel", {"name": "r", "id": "lpr-1"})
        j = self.one("api-lp-rel")
        out = {}

        def poll():
            out["jobs"] = self.s.fetch_jobs("api-lp-rel", worker_id="w2", wait_ms=5000)
            out["t"] = time.monotonic()

        parked = self.s.metric(PARKED)
        th = threading.Thread(target=poll)
        th.start()
        self.s.wait_metric(PARKED, parked + 1)  # the fetch waits in the writer
        t_rel = time.monotonic()
        st, b, _ = self.s.post("/v1/jobs/lpr-1/release", {"lease_token": j["lease_token"]})
        self.assertEqual(st, 200, b)
        th.join(10)
        self.assertEqual([x["id"] for x in out["jobs"]], ["lpr-1"])
        dt = out["t"] - t_rel
        self.assertLess(dt, WAKE_BOUND_S, "long-poll answered %.2fs after the release" % dt)

    def test_concurrent_fetchers_never_lease_the_same_job(self):
        q = "api-race"
        st, b, _ = self.s.enqueue(q, {"jobs": [{"name": "r", "id": "race-%d" % i}
                                               for i in range(200)]})
        self.assertEqual(st, 201, b)
        got, errors = [], []
        lock = threading.Lock()

        def worker(w):
            while True:
                st, b, _ = self.s.fetch(q, worker_id="w%d" % w, max=7, wait_ms=0)
                if st != 200:
                    errors.append((st, b))
                    return
                if not b["jobs"]:
                    return
                with lock:
                    got.extend(j["id"] for j in b["jobs"])

        ths = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(30)
        self.assertEqual(errors, [])
        self.assertEqual(len(got), len(set(got)), "a job was leased twice")
        self.assertEqual(sorted(got), sorted("race-%d" % i for i in range(200)))

    def test_run_at_in_the_future_is_scheduled_and_in_the_past_is_waiting(self):
        at = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + 3600))
        b = self.enq("api-runat", {"name": "r", "id": "ra-fut", "run_at": at})
        self.assertEqual(b["job"]["state"], "scheduled")
        self.assertEqual(b["job"]["run_at"], at)
        b = self.enq("api-runat", {"name": "r", "id": "ra-past", "run_at": "2001-01-01T00:00:00Z"})
        self.assertEqual(b["job"]["state"], "waiting")
        self.assertEqual([j["id"] for j in self.s.fetch_jobs("api-runat", max=5)], ["ra-past"])

    # ---- acknowledgements ----

    def test_heartbeat_extends_the_lease(self):
        self.enq("api-hb", {"name": "h", "id": "hb-1"})
        j = self.one("api-hb", lease_ms=2000)
        # a canary leased after hb-1 for as long: once the reaper has taken it
        # back, it has also passed the end of hb-1's first lease
        self.enq("api-hb-canary", {"name": "h", "id": "hb-canary"})
        self.one("api-hb-canary", lease_ms=2000)
        st, b, _ = self.s.post("/v1/jobs/hb-1/heartbeat",
                               {"lease_token": j["lease_token"], "extend_ms": 10000,
                                "progress": {"pct": 50}})
        self.assertEqual(st, 200, b)
        exp = parse_time(b["lease_expires_at"])
        self.assertGreater(exp, now_ms() + 7000)
        self.assertGreater(exp, parse_time(j["lease_expires_at"]))
        full = self.s.job("hb-1")
        self.assertEqual(parse_time(full["lease_expires_at"]), exp)
        self.assertEqual(full["progress"], {"pct": 50})
        wait_until(lambda: self.state("hb-canary") == "waiting", timeout=15,
                   what="the reaper to take back the canary's lease")
        self.assertEqual(self.state("hb-1"), "active")  # past the first lease: still ours
        st, b, _ = self.s.complete("hb-1", j["lease_token"])
        self.assertEqual(st, 200, b)

    def test_complete_marks_the_job_completed_with_result(self):
        self.enq("api-done", {"name": "d", "id": "done-1"})
        j = self.one("api-done")
        st, b, _ = self.s.complete("done-1", j["lease_token"], result={"ok": 1})
        self.assertEqual(st, 200, b)
        full = self.s.job("done-1")
        self.assertEqual(full["state"], "completed")
        self.assertEqual(full["result"], {"ok": 1})
        self.assertEqual(full["attempts"], 1)
        self.assertIsNotNone(full["finished_at"])
        self.assertIsNone(full["lease_owner"])

    def test_fail_transient_schedules_a_retry_then_dead_after_max_attempts(self):
        self.enq("api-tr", {"name": "t", "id": "tr-1", "max_attempts": 2,
                            "backoff": {"type": "fixed", "delay_ms": 600, "jitter": 0}})
        j = self.one("api-tr")
        t0 = now_ms()
        st, b, _ = self.s.fail("tr-1", j["lease_token"],
                               {"class": "transient", "message": "boom"})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["state"], "scheduled")
        self.assertGreater(parse_time(b["run_at"]), t0 + 300)
        full = self.s.job("tr-1")
        self.assertEqual(full["state"], "scheduled")
        self.assertEqual(full["attempts"], 1)
        self.assertEqual(full["last_error"]["class"], "transient")
        self.assertEqual(full["last_error"]["message"], "boom")
        self.assertEqual(self.s.fetch_jobs("api-tr"), [])
        j2 = self.s.fetch_jobs("api-tr", wait_ms=3000)
        self.assertEqual(len(j2), 1)
        self.assertEqual(j2[0]["attempt"], 2)
        st, b, _ = self.s.fail("tr-1", j2[0]["lease_token"], {"class": "transient",
                                                                "message": "again"})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["state"], "dead")
        full = self.s.job("tr-1")
        self.assertEqual(full["state"], "dead")
        self.assertEqual(full["attempts"], 2)
        self.assertEqual(full["last_error"]["message"], "again")

    def test_fail_permanent_goes_straight_to_dead(self):
        self.enq("api-perm", {"name": "p", "id": "perm-1"})
        j = self.one("api-perm")
        st, b, _ = self.s.fail("perm-1", j["lease_token"], {"class": "permanent",
                                                              "message": "bad input"})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["state"], "dead")
        full = self.s.job("perm-1")
        self.assertEqual((full["state"], full["attempts"]), ("dead", 1))

    def test_fail_retry_later_schedules_without_counting_the_attempt(self):
        self.enq("api-rl", {"name": "r", "id": "rl-1", "max_attempts": 1})
        j = self.one("api-rl")
        t0 = now_ms()
        st, b, _ = self.s.fail("rl-1", j["lease_token"], {"class": "retry_later",
                                                            "delay_ms": 700})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["state"], "scheduled")
        self.assertGreater(parse_time(b["run_at"]), t0 + 400)
        full = self.s.job("rl-1")
        self.assertEqual(full["state"], "scheduled")
        self.assertEqual(full["attempts"], 0)
        j2 = self.s.fetch_jobs("api-rl", wait_ms=3000)
        self.assertEqual(len(j2), 1)
        self.assertEqual(j2[0]["attempt"], 1)  # max_attempts 1 and still alive
        self.assertEqual(self.s.job("rl-1")["started"], 2)

    def test_fail_throttled_pauses_the_whole_queue_for_retry_after(self):
        self.enq("api-thr", {"name": "t", "id": "thr-1", "priority": 5})
        self.enq("api-thr", {"name": "t", "id": "thr-2"})
        j = self.one("api-thr")
        self.assertEqual(j["id"], "thr-1")
        t0 = time.monotonic()
        st, b, _ = self.s.fail("thr-1", j["lease_token"], {"class": "throttled",
                                                             "retry_after_ms": 1500})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["state"], "scheduled")
        self.assertEqual(self.s.fetch_jobs("api-thr"), [], "queue should be paused")
        time.sleep(0.5)  # a duration, not an order: half a second into the 1.5 s pause
        self.assertEqual(self.s.fetch_jobs("api-thr"), [], "queue should still be paused")
        got = wait_until(lambda: self.s.fetch_jobs("api-thr", max=2), timeout=5)
        self.assertTrue(got)
        self.assertGreaterEqual(time.monotonic() - t0, 1.3)

    def test_release_puts_the_job_back_waiting_without_counting(self):
        self.enq("api-rel", {"name": "r", "id": "rel-1"})
        j = self.one("api-rel")
        st, b, _ = self.s.post("/v1/jobs/rel-1/release", {"lease_token": j["lease_token"]})
        self.assertEqual(st, 200, b)
        full = self.s.job("rel-1")
        self.assertEqual((full["state"], full["attempts"]), ("waiting", 0))
        j2 = self.one("api-rel")
        self.assertEqual(j2["attempt"], 1)

    def test_acks_judges_each_item_and_a_stale_token_fails_only_that_item(self):
        for i in range(4):
            self.enq("api-acks", {"name": "a", "id": "ack-%d" % i})
        jobs = {j["id"]: j for j in self.s.fetch_jobs("api-acks", max=4)}
        self.assertEqual(len(jobs), 4)
        tok = {k: v["lease_token"] for k, v in jobs.items()}
        st, b, _ = self.s.post("/v1/acks", {"acks": [
            {"id": "ack-0", "lease_token": tok["ack-0"], "complete": {"result": 5}},
            {"id": "ack-1", "lease_token": "stale-token-0000", "complete": {}},
            {"id": "ack-2", "lease_token": tok["ack-2"],
             "fail": {"error": {"class": "permanent", "message": "no"}}},
            {"id": "ack-3", "lease_token": tok["ack-3"], "release": {}}]})
        self.assertEqual(st, 200, b)
        res = b["results"]
        self.assertEqual([r["id"] for r in res], ["ack-0", "ack-1", "ack-2", "ack-3"])
        self.assertIs(res[0].get("ok"), True, res)
        self.assertEqual(error_of(res[1]).get("code"), "lease_lost", res)
        self.assertIs(res[2].get("ok"), True, res)
        self.assertIs(res[3].get("ok"), True, res)
        self.assertEqual(self.state("ack-0"), "completed")
        self.assertEqual(self.s.job("ack-0")["result"], 5)
        self.assertEqual(self.state("ack-1"), "active")
        self.assertEqual(self.state("ack-2"), "dead")
        self.assertEqual(self.state("ack-3"), "waiting")

    def test_ack_results_have_exact_members_in_acks_and_in_fetch(self):
        for i in range(3):
            self.enq("api-ackshape", {"name": "a", "id": "shape-%d" % i})
        jobs = {j["id"]: j for j in self.s.fetch_jobs("api-ackshape", max=3)}
        tok = {k: v["lease_token"] for k, v in jobs.items()}
        st, b, _ = self.s.post("/v1/acks", {"acks": [
            {"id": "shape-0", "lease_token": tok["shape-0"],
             "fail": {"error": {"class": "transient", "message": "again"}}},
            {"id": "shape-1", "lease_token": "stale-token-0000", "complete": {}}]})
        self.assertEqual(st, 200, b)
        r0, r1 = b["results"]
        self.assertEqual(sorted(r0), ["id", "ok", "run_at", "state"], r0)
        self.assertEqual((r0["ok"], r0["state"]), (True, "scheduled"))
        self.assertGreater(parse_time(r0["run_at"]), now_ms() - 1000)
        self.assertEqual(sorted(r1), ["error", "id"], r1)
        self.assertEqual(sorted(r1["error"]), ["code", "field", "message"], r1)
        self.assertEqual(r1["error"]["code"], "lease_lost")
        # the same shapes when the acks ride on a fetch
        st, b, _ = self.s.fetch("api-ackshape", acks=[
            {"id": "shape-2", "lease_token": tok["shape-2"],
             "fail": {"error": {"class": "permanent", "message": "no"}}},
            {"id": "shape-1", "lease_token": tok["shape-1"], "complete": {}}])
        self.assertEqual(st, 200, b)
        self.assertEqual(b["acks"], [{"id": "shape-2", "ok": True, "state": "dead"},
                                     {"id": "shape-1", "ok": True}])

    def test_replies_carry_date_and_exact_content_length(self):
        import email.utils
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=10)
        try:
            for method, path, body in (("POST", "/v1/queues/api-hdr/jobs", b'{"name":"h"}'),
                                       ("GET", "/v1/nope", None), ("GET", "/healthz", None)):
                h = {"Content-Type": "application/json"}
                if self.s.token:
                    h["Authorization"] = "Bearer " + self.s.token
                c.request(method, path, body=body, headers=h)
                r = c.getresponse()
                data = r.read()
                self.assertEqual(int(r.getheader("Content-Length")), len(data), path)
                date = r.getheader("Date")
                self.assertRegex(date, r"^[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} "
                                       r"\d\d:\d\d:\d\d GMT$")
                when = email.utils.parsedate_to_datetime(date).timestamp()
                self.assertLess(abs(when - time.time()), 5, date)
        finally:
            c.close()

    def test_fetch_applies_carried_acks_before_leasing(self):
        self.enq("api-carry", {"name": "c", "id": "carry-1"})
        j = self.one("api-carry")
        self.enq("api-carry", {"name": "c", "id": "carry-2"})
        jobs = self.s.fetch_jobs("api-carry", acks=[
            {"id": "carry-1", "lease_token": j["lease_token"], "complete": {"result": "r"}}])
        self.assertEqual([x["id"] for x in jobs], ["carry-2"])
        self.assertEqual(self.state("carry-1"), "completed")

    # ---- get / cancel ----

    def test_get_and_delete_job(self):
        self.enq("api-del", {"name": "d", "id": "del-1"})
        self.assertEqual(self.s.job("del-1")["state"], "waiting")
        st, b, _ = self.s.request("DELETE", "/v1/jobs/del-1")
        self.assertEqual(st, 200, b)
        self.assertEqual(self.state("del-1"), "cancelled")
        self.assertEqual(self.s.fetch_jobs("api-del"), [])
        # an active job is not cancelled
        self.enq("api-del", {"name": "d", "id": "del-2"})
        self.one("api-del")
        st, b, _ = self.s.request("DELETE", "/v1/jobs/del-2")
        self.assertEqual(st, 409, b)
        self.assertEqual(error_of(b).get("code"), "conflict")
        self.assertEqual(self.state("del-2"), "active")
        # a scheduled job is cancelled and never promoted; a canary due after
        # it shows when promotion has passed its run_at
        self.enq("api-del", {"name": "d", "id": "del-3", "delay_ms": 300})
        self.enq("api-del-canary", {"name": "d", "id": "del-canary", "delay_ms": 300})
        st, b, _ = self.s.request("DELETE", "/v1/jobs/del-3")
        self.assertEqual(st, 200, b)
        wait_until(lambda: self.state("del-canary") == "waiting", timeout=15,
                   what="the canary scheduled with del-3 to be promoted")
        self.assertEqual(self.state("del-3"), "cancelled")
        self.assertEqual(self.s.fetch_jobs("api-del"), [])
        st, b, _ = self.s.get("/v1/jobs/no-such-job")
        self.assertEqual(st, 404, b)
        self.assertEqual(error_of(b).get("code"), "not_found")

    # ---- queues ----

    def test_queues_list_counts_each_state(self):
        q = "api-counts"
        for i in range(4):
            self.enq(q, {"name": "c", "id": "cnt-%d" % i})
        self.enq(q, {"name": "c", "id": "cnt-sched", "delay_ms": 600000})
        a = self.one(q)
        self.s.complete(a["id"], a["lease_token"])
        b_ = self.one(q)
        self.s.fail(b_["id"], b_["lease_token"], {"class": "permanent"})
        self.one(q)
        info = self.s.queue_info(q)
        self.assertIsNotNone(info)
        c = info["counts"]
        self.assertEqual((c["scheduled"], c["waiting"], c["active"], c["completed"], c["dead"]),
                         (1, 1, 1, 1, 1), info)
        self.assertIs(info["paused"], False)
        self.assertIn("settings", info)
        self.assertIn("oldest_waiting_age_ms", info)
        self.assertGreaterEqual(info["oldest_waiting_age_ms"], 0)

    def test_put_queue_settings_merges_field_by_field(self):
        q = "api-settings"
        st, b, _ = self.s.request("PUT", "/v1/queues/" + q, {"defaults": {"max_attempts": 3}})
        self.assertEqual(st, 200, b)
        j = self.enq(q, {"name": "s", "id": "set-1"})["job"]
        self.assertEqual(j["max_attempts"], 3)
        self.assertEqual(j["backoff"], SERVER_BACKOFF)  # the server's backoff stays
        st, b, _ = self.s.request("PUT", "/v1/queues/" + q, {"lease_ms": 5000})
        self.assertEqual(st, 200, b)
        st, b, _ = self.s.request("PUT", "/v1/queues/" + q,
                                  {"defaults": {"backoff": {"delay_ms": 100}}})
        self.assertEqual(st, 200, b)
        settings = self.s.queue_info(q)["settings"]
        self.assertEqual(settings["lease_ms"], 5000)
        self.assertEqual(settings["defaults"]["max_attempts"], 3)
        self.assertEqual(settings["defaults"]["backoff"]["delay_ms"], 100)
        self.assertEqual(settings["defaults"]["backoff"]["type"], "exponential")
        self.assertEqual(settings["defaults"]["backoff"]["max_delay_ms"], 900000)
        j = self.enq(q, {"name": "s", "id": "set-2", "max_attempts": 5})["job"]
        self.assertEqual(j["max_attempts"], 5)  # the job's own option wins
        self.assertEqual(j["backoff"]["delay_ms"], 100)
        t0 = now_ms()
        jobs = self.s.fetch_jobs(q)  # no lease_ms: the queue's 5000
        self.assertEqual(len(jobs), 1)
        self.assertLess(parse_time(jobs[0]["lease_expires_at"]), t0 + 5000 + 2000)

    def test_pause_stops_fetching_and_resume_restarts_it(self):
        q = "api-pause"
        self.enq(q, {"name": "p", "id": "pause-1"})
        st, b, _ = self.s.post("/v1/queues/%s/pause" % q)
        self.assertEqual(st, 200, b)
        self.assertIs(self.s.queue_info(q)["paused"], True)
        self.assertEqual(self.s.fetch_jobs(q), [])
        st, b, _ = self.s.post("/v1/queues/%s/resume" % q)
        self.assertEqual(st, 200, b)
        self.assertIs(self.s.queue_info(q)["paused"], False)
        self.assertEqual([j["id"] for j in self.s.fetch_jobs(q)], ["pause-1"])

    def test_list_jobs_by_state_pages_with_a_cursor(self):
        q = "api-list"
        ids = ["list-%d" % i for i in range(5)]
        for i in ids:
            self.enq(q, {"name": "l", "id": i})
        self.enq(q, {"name": "l", "id": "list-sched", "delay_ms": 600000})
        seen, cursor, pages = [], None, 0
        while True:
            path = "/v1/queues/%s/jobs?state=waiting&limit=2" % q
            if cursor:
                path += "&cursor=" + cursor
            st, b, _ = self.s.get(path)
            self.assertEqual(st, 200, b)
            self.assertLessEqual(len(b["jobs"]), 2)
            seen += [j["id"] for j in b["jobs"]]
            for j in b["jobs"]:
                self.assertEqual(j["state"], "waiting")
            pages += 1
            cursor = next_cursor(b)
            if not cursor:
                break
            self.assertLess(pages, 10, "cursor does not end")
        self.assertEqual(seen, ids)
        self.assertGreaterEqual(pages, 3)
        st, b, _ = self.s.get("/v1/queues/%s/jobs?state=scheduled" % q)
        self.assertEqual(st, 200, b)
        self.assertEqual([j["id"] for j in b["jobs"]], ["list-sched"])

    # ---- dead letters ----

    def test_dead_list_redrive_and_delete(self):
        q = "api-dead"
        self.enq(q, {"name": "d", "id": "dl-1", "payload": {"k": "v"}})
        self.enq(q, {"name": "d", "id": "dl-2"})
        for j in self.s.fetch_jobs(q, max=2):
            self.s.fail(j["id"], j["lease_token"], {"class": "permanent", "message": "x"})
        st, b, _ = self.s.get("/v1/dead?queue=%s&limit=10" % q)
        self.assertEqual(st, 200, b)
        dead = {j["id"]: j for j in b["jobs"]}
        self.assertEqual(set(dead), {"dl-1", "dl-2"})
        self.assertEqual(dead["dl-1"]["last_error"]["message"], "x")
        self.assertEqual(dead["dl-1"]["attempts"], 1)
        self.assertIsNone(dead["dl-1"]["redriven_at"])
        # redrive
        st, b, _ = self.s.post("/v1/dead/dl-1/redrive")
        self.assertIn(st, (200, 201), b)
        nj = b["job"]
        self.assertEqual(nj["id"], "dl-1-redrive-1")
        self.assertEqual(nj["state"], "waiting")
        self.assertEqual(nj["payload"], {"k": "v"})
        self.assertEqual(nj["attempts"], 0)
        self.assertIsNotNone(self.s.job("dl-1")["redriven_at"])
        st, b, _ = self.s.post("/v1/dead/dl-1/redrive")
        self.assertIn(st, (200, 201), b)
        self.assertEqual(b["job"]["id"], "dl-1-redrive-2")
        got = sorted(j["id"] for j in self.s.fetch_jobs(q, max=5))
        self.assertEqual(got, ["dl-1-redrive-1", "dl-1-redrive-2"])
        # delete
        st, b, _ = self.s.request("DELETE", "/v1/dead/dl-2")
        self.assertEqual(st, 200, b)
        self.assertIsNone(self.s.job("dl-2"))
        st, b, _ = self.s.request("DELETE", "/v1/dead/dl-2")
        self.assertEqual(st, 404, b)
        st, b, _ = self.s.get("/v1/dead?queue=%s" % q)
        self.assertEqual([j["id"] for j in b["jobs"]], ["dl-1"])

    def test_dead_list_pages_with_a_cursor(self):
        q = "api-dead-page"
        for i in range(3):
            self.enq(q, {"name": "d", "id": "dp-%d" % i})
        for j in self.s.fetch_jobs(q, max=3):
            self.s.fail(j["id"], j["lease_token"], {"class": "permanent"})
        st, b, _ = self.s.get("/v1/dead?queue=%s&limit=2" % q)
        self.assertEqual(st, 200, b)
        self.assertEqual(len(b["jobs"]), 2)
        cur = next_cursor(b)
        self.assertTrue(cur, b)
        st, b2, _ = self.s.get("/v1/dead?queue=%s&limit=2&cursor=%s" % (q, cur))
        self.assertEqual(st, 200, b2)
        ids = [j["id"] for j in b["jobs"] + b2["jobs"]]
        self.assertEqual(sorted(ids), ["dp-0", "dp-1", "dp-2"])


class HeadTest(unittest.TestCase):
    def test_head_answers_like_get_without_a_body(self):
        with Server() as s:
            st, body, _ = s.enqueue("head-q", {"name": "n"})
            self.assertEqual(st, 201, body)
            for path in ("/healthz", "/v1/queues", "/v1/queues/head-q"):
                st, _, h = s.request("HEAD", path)
                self.assertEqual(st, 200, path)
            # on one kept-alive connection: HEAD's reply has GET's length and
            # no body, so the GET after it is framed right
            data = raw_bytes(s.port, b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                             b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            head, rest = data.split(b"\r\n\r\n", 1)
            self.assertIn(b"Content-Length: 15", head)
            self.assertTrue(rest.startswith(b"HTTP/1.1 200"), rest[:40])
            self.assertTrue(rest.endswith(b'{"status":"ok"}'), rest[-40:])
            # a path with no GET route keeps its 405 for HEAD
            st, _, h = s.request("HEAD", "/v1/fetch")
            self.assertEqual(st, 405)

if __name__ == "__main__":
    unittest.main()
