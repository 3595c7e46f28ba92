# SPDX-License-Identifier: MIT
#
# Waiting for a job's outcome: GET /v1/jobs/{id}?wait_ms=N long-polls until
# the job is completed, dead or cancelled. On SQLite: a waiter is answered
# within a few ms of the completion (the completion -> answer latency is
# measured and printed), a wait with nothing happening ends at its deadline
# (not before, not much after), a finished job and a missing one answer at
# once, and a permanent failure, exhausted attempts, a cancel, a lease that
# expires past max_stalled (the reaper) and an HTTP dispatch outcome all
# wake it; --max-waiters bounds the waits (503 + Retry-After: 1 past it, 0
# turns them off), a client that hangs up frees its place, and shutdown
# answers waits at once with the job as it is. On PostgreSQL (two nodes on
# one schema): a waiter on one node wakes within well under its wait when
# the other completes, cancels, fails or reaps the job (LISTEN/NOTIFY), also
# after the LISTEN sessions were killed and came back. Bad wait_ms values
# are 400 (also rows of test_bad_input.py).
#
# The PostgreSQL class needs ERRAND_TEST_PG_URL (scripts/test and `scripts/pg
# start` provide one); without it it fails, unless ERRAND_TEST_PG_SKIP=1.

import os
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (PG_SKIP, PG_SKIP_WHY, PgNodes, Server, error_of,  # noqa: E402
                     parse_time, psql, psql_bin, qpath, wait_until)
import test_dispatch  # noqa: E402  (its Receiver; its tests are not collected here)

PARKED = "errand_job_waits_parked_total"  # waits that found their job unfinished and wait
WAITING = "errand_job_waits_waiting"      # waits registered now
WAKE_BOUND_MS = 500   # a woken waiter answers well within this (its wait is 10 s)
LONG_WAIT_MS = 10000
ROUNDS = 20


def report(what, ms):
    """Prints measured latencies (ms) to stderr, so the run shows them."""
    ms = sorted(ms)
    sys.stderr.write("\n[test_wait] %s: n=%d median %.1f ms, max %.1f ms\n"
                     % (what, len(ms), statistics.median(ms), ms[-1]))


class Waiter(threading.Thread):
    """GET /v1/jobs/{id}?wait_ms=N on its own connection; records when it was
    answered (time.monotonic()) and the reply."""

    def __init__(self, srv, job_id, wait_ms=LONG_WAIT_MS):
        super().__init__(daemon=True)
        self.srv, self.job_id, self.wait_ms = srv, job_id, wait_ms
        self.sent = self.answered = None
        self.status = self.body = self.headers = None

    def run(self):
        self.sent = time.monotonic()
        self.status, self.body, self.headers = self.srv.get(
            "/v1/jobs/%s?wait_ms=%d" % (qpath(self.job_id), self.wait_ms), timeout=90)
        self.answered = time.monotonic()

    def state(self):
        return self.body["job"]["state"] if isinstance(self.body, dict) and "job" in self.body \
            else None


def start_parked(srv, job_id, wait_ms=LONG_WAIT_MS):
    """A Waiter on job_id that the server holds (its job is unfinished)."""
    parked = srv.metric(PARKED)
    w = Waiter(srv, job_id, wait_ms)
    w.start()
    srv.wait_metric(PARKED, parked + 1)
    return w


def raw_waiter(srv, job_id, wait_ms):
    """A wait on a raw socket (closing it is a client hanging up)."""
    sock = socket.create_connection((srv.host, srv.port))
    sock.sendall(b"GET /v1/jobs/%s?wait_ms=%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n"
                 % (qpath(job_id).encode(), wait_ms, srv.port))
    return sock


def lease(srv, queue, job_id, **kw):
    jobs = srv.fetch_jobs(queue, **kw)
    assert [j["id"] for j in jobs] == [job_id], jobs
    return jobs[0]


class WaitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=["--maintenance-interval", "50ms"]).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def setUp(self):
        self.assertTrue(self.s.alive(), "server died:\n" + self.s.log_text())

    def enqueue(self, queue, job_id, **extra):
        body = {"name": "n", "id": job_id}
        body.update(extra)
        st, b, _ = self.s.enqueue(queue, body)
        self.assertEqual(st, 201, b)

    def joined(self, w, timeout=5.0):
        w.join(timeout)
        self.assertFalse(w.is_alive(), "the waiter on %s was not answered" % w.job_id)
        self.assertEqual(w.status, 200, w.body)
        return w

    def test_a_waiter_is_answered_within_ms_of_the_completion(self):
        lat = []
        for i in range(ROUNDS):
            jid = "wc-%d" % i
            self.enqueue("wc", jid)
            j = lease(self.s, "wc", jid)
            w = start_parked(self.s, jid)
            t0 = time.monotonic()
            st, b, _ = self.s.complete(jid, j["lease_token"], result={"n": i})
            self.assertEqual(st, 200, b)
            self.joined(w)
            self.assertEqual(w.state(), "completed")
            self.assertEqual(w.body["job"]["result"], {"n": i})
            lat.append((w.answered - t0) * 1000)
        report("SQLite completion -> waiter answer", lat)
        self.assertLess(max(lat), WAKE_BOUND_MS, lat)

    def test_batched_acks_wake_the_waiter_of_each_job_they_finish(self):
        ids = ["wa-%d" % i for i in range(6)]
        for i in ids:
            self.enqueue("wa", i)
        jobs = self.s.fetch_jobs("wa", max=len(ids))
        self.assertEqual(sorted(j["id"] for j in jobs), ids)
        ws = {i: start_parked(self.s, i) for i in ids}
        # five completes in a row (one store call) and a fail that retries
        acks = [{"id": j["id"], "lease_token": j["lease_token"], "complete": {}}
                for j in jobs if j["id"] != "wa-5"]
        last = next(j for j in jobs if j["id"] == "wa-5")
        acks.append({"id": "wa-5", "lease_token": last["lease_token"],
                     "fail": {"error": {"class": "transient"}}})
        st, b, _ = self.s.post("/v1/acks", {"acks": acks})
        self.assertEqual(st, 200, b)
        self.assertTrue(all(r.get("ok") for r in b["results"]), b)
        for i in ids[:5]:
            self.joined(ws[i])
            self.assertEqual(ws[i].state(), "completed")
        time.sleep(0.2)
        self.assertTrue(ws["wa-5"].is_alive(), "a retry ended the wait: %r" % (ws["wa-5"].body,))
        self.assertEqual(self.s.request("DELETE", "/v1/jobs/wa-5")[0], 200)
        self.joined(ws["wa-5"])
        self.assertEqual(ws["wa-5"].state(), "cancelled")

    def test_a_wait_with_nothing_happening_ends_at_its_deadline(self):
        self.enqueue("wq", "wq-1")
        for wait_ms in (300, 1000):
            w = start_parked(self.s, "wq-1", wait_ms)
            self.joined(w, timeout=wait_ms / 1000 + 5)
            took = (w.answered - w.sent) * 1000
            self.assertGreaterEqual(took, wait_ms, "answered before its wait ran out")
            self.assertLess(took, wait_ms + 300, "answered long after its wait ran out")
            self.assertEqual(w.state(), "waiting")  # the job as it is
            sys.stderr.write("\n[test_wait] wait_ms=%d with nothing happening: answered "
                             "after %.1f ms\n" % (wait_ms, took))

    def test_wait_0_a_finished_job_and_a_missing_one_answer_at_once(self):
        self.enqueue("wf", "wf-1")
        j = lease(self.s, "wf", "wf-1")
        t = time.monotonic()
        st, b, _ = self.s.get("/v1/jobs/wf-1?wait_ms=0")
        self.assertEqual((st, b["job"]["state"]), (200, "active"))
        self.assertEqual(self.s.complete("wf-1", j["lease_token"])[0], 200)
        st, b, _ = self.s.get("/v1/jobs/wf-1?wait_ms=%d" % LONG_WAIT_MS)
        self.assertEqual((st, b["job"]["state"]), (200, "completed"))
        st, b, _ = self.s.get("/v1/jobs/no-such-job?wait_ms=%d" % LONG_WAIT_MS)
        self.assertEqual((st, error_of(b).get("code")), (404, "not_found"))
        self.assertLess(time.monotonic() - t, 1.0, "one of them waited")
        self.assertEqual(self.s.metric(WAITING), 0)

    def test_bad_wait_ms_values_are_400_naming_wait_ms(self):
        self.enqueue("wb", "wb-1")
        for v in ("-1", "60001", "abc", "", "1.5", "%2B5", "1e3"):
            t = time.monotonic()
            st, b, _ = self.s.get("/v1/jobs/wb-1?wait_ms=" + v)
            e = error_of(b)
            self.assertEqual((st, e.get("code"), e.get("field")),
                             (400, "invalid_argument", "wait_ms"), (v, b))
            self.assertLess(time.monotonic() - t, 1.0, v)
        st, b, _ = self.s.get("/v1/jobs/wb-1?wait_ms=60000&colour=1")
        self.assertEqual((st, error_of(b).get("field")), (400, "colour"), b)

    def test_a_permanent_failure_and_exhausted_attempts_wake_the_waiter(self):
        self.enqueue("wd", "wd-perm")
        j = lease(self.s, "wd", "wd-perm")
        w = start_parked(self.s, "wd-perm")
        st, b, _ = self.s.fail("wd-perm", j["lease_token"], {"class": "permanent",
                                                             "message": "no"})
        self.assertEqual((st, b.get("state")), (200, "dead"))
        self.joined(w)
        self.assertEqual(w.state(), "dead")
        self.assertEqual(w.body["job"]["last_error"]["message"], "no")

        self.enqueue("wd", "wd-last", max_attempts=1)
        j = lease(self.s, "wd", "wd-last")
        w = start_parked(self.s, "wd-last")
        st, b, _ = self.s.fail("wd-last", j["lease_token"], {"class": "transient"})
        self.assertEqual((st, b.get("state")), (200, "dead"))
        self.joined(w)
        self.assertEqual(w.state(), "dead")

    def test_a_retry_does_not_end_the_wait_and_a_cancel_does(self):
        self.enqueue("wr", "wr-1", max_attempts=3,
                     backoff={"type": "fixed", "delay_ms": 60000, "jitter": 0})
        j = lease(self.s, "wr", "wr-1")
        w = start_parked(self.s, "wr-1")
        st, b, _ = self.s.fail("wr-1", j["lease_token"], {"class": "transient"})
        self.assertEqual((st, b.get("state")), (200, "scheduled"))
        time.sleep(0.3)
        self.assertTrue(w.is_alive(), "a scheduled retry is not an outcome: %r" % (w.body,))
        t0 = time.monotonic()
        st, b, _ = self.s.request("DELETE", "/v1/jobs/wr-1")
        self.assertEqual((st, b["job"]["state"]), (200, "cancelled"))
        self.joined(w)
        self.assertEqual(w.state(), "cancelled")
        self.assertLess((w.answered - t0) * 1000, WAKE_BOUND_MS)

    def test_a_waiting_job_cancelled_wakes_every_waiter_on_it(self):
        self.enqueue("wx", "wx-1")
        ws = [start_parked(self.s, "wx-1") for _ in range(3)]
        st, b, _ = self.s.request("DELETE", "/v1/jobs/wx-1")
        self.assertEqual(st, 200, b)
        for w in ws:
            self.joined(w)
            self.assertEqual(w.state(), "cancelled")

    def test_a_lease_expiring_past_max_stalled_wakes_the_waiter(self):
        st, b, _ = self.s.put_queue("ws", {"max_stalled": 0})
        self.assertEqual(st, 200, b)
        self.enqueue("ws", "ws-1")
        j = lease(self.s, "ws", "ws-1", lease_ms=1000)
        w = start_parked(self.s, "ws-1")
        self.joined(w, timeout=10)
        self.assertEqual(w.state(), "dead")
        self.assertEqual(w.body["job"]["last_error"]["class"], "stalled")
        # the reaper runs every 50 ms; the answer follows its commit
        late = time.time() * 1000 - (time.monotonic() - w.answered) * 1000 \
            - parse_time(j["lease_expires_at"])
        sys.stderr.write("\n[test_wait] lease expiry -> waiter answer (reaper): %.1f ms\n" % late)
        self.assertLess(late, WAKE_BOUND_MS)

    def test_an_http_dispatch_outcome_wakes_the_waiter(self):
        tmp = tempfile.mkdtemp(prefix="errand-wait-dispatch-")
        r = test_dispatch.Receiver(tmp).start()
        try:
            st, b, _ = self.s.put_queue("wh", {"dispatch": {"url": r.url("/slow?ms=800")}})
            self.assertEqual(st, 200, b)
            self.enqueue("wh", "wh-1")
            w = start_parked(self.s, "wh-1")
            self.joined(w, timeout=10)
            self.assertEqual(w.state(), "completed")
            self.assertEqual(len(r.effects()), 1)
        finally:
            r.kill()


class MaxWaitersTest(unittest.TestCase):
    def test_past_max_waiters_is_503_and_a_client_that_hangs_up_frees_its_place(self):
        with Server(args=["--max-waiters", "2"]) as s:
            for i in range(1, 5):
                self.assertEqual(s.enqueue("mw", {"name": "n", "id": "mw-%d" % i})[0], 201)
            parked = s.metric(PARKED)
            a = raw_waiter(s, "mw-1", 30000)
            b = raw_waiter(s, "mw-2", 30000)
            s.wait_metric(PARKED, parked + 2)
            self.assertEqual(s.metric(WAITING), 2)
            t = time.monotonic()
            st, body, h = s.get("/v1/jobs/mw-3?wait_ms=5000")
            self.assertLess(time.monotonic() - t, 1.0)
            self.assertEqual(st, 503, body)
            self.assertEqual(h.get("retry-after"), "1")
            e = error_of(body)
            self.assertEqual((e.get("code"), e.get("field")), ("unavailable", "wait_ms"), e)
            self.assertIn("max-waiters", e.get("message", ""))
            self.assertEqual(s.metric("errand_job_waits_refused_total"), 1)
            # without a wait, or on a finished job, there is nothing to refuse
            self.assertEqual(s.get("/v1/jobs/mw-3")[0], 200)
            self.assertEqual(s.request("DELETE", "/v1/jobs/mw-4")[0], 200)
            st, body, _ = s.get("/v1/jobs/mw-4?wait_ms=5000")
            self.assertEqual((st, body["job"]["state"]), (200, "cancelled"))
            # a client that hangs up frees its place
            a.close()
            wait_until(lambda: s.metric(WAITING) == 1, timeout=5,
                       what="the hung-up waiter to free its place")
            w = start_parked(s, "mw-3")
            self.assertEqual(s.metric(WAITING), 2)
            self.assertEqual(s.get("/v1/jobs/mw-1?wait_ms=1000")[0], 503)
            self.assertEqual(s.request("DELETE", "/v1/jobs/mw-3")[0], 200)
            w.join(5)
            self.assertEqual((w.status, w.state()), (200, "cancelled"))
            b.close()
            wait_until(lambda: s.metric(WAITING) == 0, timeout=5,
                       what="the last waiter to leave")

    def test_max_waiters_0_refuses_every_wait_that_would_wait(self):
        with Server(args=["--max-waiters", "0"]) as s:
            self.assertEqual(s.enqueue("m0", {"name": "n", "id": "m0-1"})[0], 201)
            st, body, h = s.get("/v1/jobs/m0-1?wait_ms=1000")
            self.assertEqual((st, h.get("retry-after")), (503, "1"), body)
            self.assertIn("--max-waiters 0", error_of(body).get("message", ""))
            self.assertEqual(s.get("/v1/jobs/m0-1?wait_ms=0")[0], 200)
            self.assertEqual(s.request("DELETE", "/v1/jobs/m0-1")[0], 200)
            st, body, _ = s.get("/v1/jobs/m0-1?wait_ms=1000")
            self.assertEqual((st, body["job"]["state"]), (200, "cancelled"))


class ShutdownTest(unittest.TestCase):
    def test_shutdown_answers_waiters_at_once_with_the_job_as_it_is(self):
        with Server() as s:
            self.assertEqual(s.enqueue("sd", {"name": "n", "id": "sd-1"})[0], 201)
            ws = [start_parked(s, "sd-1", 30000) for _ in range(3)]
            t0 = time.monotonic()
            s.signal(signal.SIGTERM)
            for w in ws:
                w.join(5)
                self.assertFalse(w.is_alive(), "shutdown left a waiter waiting")
                self.assertEqual((w.status, w.state()), (200, "waiting"), w.body)
                self.assertLess(w.answered - t0, 2.0)
            self.assertEqual(s.wait(10), 0, s.log_text())


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class PgWaitTest(PgNodes, unittest.TestCase):
    """A waiter on node A; node B finishes the job."""

    NODES = 2
    NODE_ARGS = ("--maintenance-interval", "50ms")

    def setUp(self):
        self.a, self.b = self.servers
        for s in self.servers:
            self.assertTrue(s.alive(), "a node died:\n" + s.log_text())

    def test_a_completion_on_another_node_wakes_the_waiter(self):
        lat = []
        for i in range(ROUNDS):
            jid = "pc-%d" % i
            self.assertEqual(self.b.enqueue("pc", {"name": "n", "id": jid})[0], 201)
            j = lease(self.b, "pc", jid)
            w = start_parked(self.a, jid)
            t0 = time.monotonic()
            st, b, _ = self.b.complete(jid, j["lease_token"])
            self.assertEqual(st, 200, b)
            w.join(5)
            self.assertEqual((w.status, w.state()), (200, "completed"), w.body)
            lat.append((w.answered - t0) * 1000)
        report("PostgreSQL completion on node B -> waiter answer on node A", lat)
        self.assertLess(max(lat), WAKE_BOUND_MS, lat)

    def test_a_cancel_and_a_permanent_failure_on_another_node_wake_the_waiter(self):
        self.assertEqual(self.b.enqueue("px", {"name": "n", "id": "px-1"})[0], 201)
        w = start_parked(self.a, "px-1")
        t0 = time.monotonic()
        self.assertEqual(self.b.request("DELETE", "/v1/jobs/px-1")[0], 200)
        w.join(5)
        self.assertEqual((w.status, w.state()), (200, "cancelled"), w.body)
        self.assertLess((w.answered - t0) * 1000, WAKE_BOUND_MS)

        self.assertEqual(self.b.enqueue("px", {"name": "n", "id": "px-2"})[0], 201)
        j = lease(self.b, "px", "px-2")
        w = start_parked(self.a, "px-2")
        t0 = time.monotonic()
        st, b, _ = self.b.fail("px-2", j["lease_token"], {"class": "permanent"})
        self.assertEqual((st, b.get("state")), (200, "dead"))
        w.join(5)
        self.assertEqual((w.status, w.state()), (200, "dead"), w.body)
        self.assertLess((w.answered - t0) * 1000, WAKE_BOUND_MS)

    @unittest.skipIf(not psql_bin(), "psql not found")
    def test_waits_still_wake_after_the_listen_sessions_were_killed(self):
        listening = ("SELECT pid FROM pg_stat_activity WHERE query = 'LISTEN \"%s_ready\"'"
                     % self.schema)
        self.assertEqual(self.b.enqueue("pk", {"name": "n", "id": "pk-1"})[0], 201)
        j = lease(self.b, "pk", "pk-1")
        w = start_parked(self.a, "pk-1")
        old = {r[0] for r in psql(listening)}
        self.assertEqual(len(old), 2, "one LISTEN session per server")
        psql("SELECT pg_terminate_backend(pid) FROM (%s) l" % listening)
        ok = wait_until(lambda: len({r[0] for r in psql(listening)} - old) == 2, timeout=5)
        self.assertTrue(ok, "listeners did not reconnect: %r" % psql(listening))
        time.sleep(0.2)  # a reconnect makes every wait read once: let that pass
        self.assertTrue(w.is_alive(), "the reconnect ended the wait: %r" % (w.body,))
        t0 = time.monotonic()
        self.assertEqual(self.b.complete("pk-1", j["lease_token"])[0], 200)
        w.join(5)
        self.assertEqual((w.status, w.state()), (200, "completed"), w.body)
        self.assertLess((w.answered - t0) * 1000, WAKE_BOUND_MS)

    def test_the_reaper_on_either_node_wakes_waiters_on_both(self):
        st, b, _ = self.b.put_queue("pr", {"max_stalled": 0})
        self.assertEqual(st, 200, b)
        self.assertEqual(self.b.enqueue("pr", {"name": "n", "id": "pr-1"})[0], 201)
        lease(self.b, "pr", "pr-1", lease_ms=1000)
        ws = [start_parked(s, "pr-1") for s in self.servers]
        for w in ws:
            w.join(10)
            self.assertEqual((w.status, w.state()), (200, "dead"), w.body)
        self.assertLess(abs(ws[0].answered - ws[1].answered) * 1000, WAKE_BOUND_MS)


if __name__ == "__main__":
    unittest.main()
