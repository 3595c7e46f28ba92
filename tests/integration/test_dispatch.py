# SPDX-License-Identifier: MIT
#
# HTTP dispatch against a real server and a real receiver
# (dispatch_receiver.py, its own process, effects kept per Idempotency-Key
# in a SQLite file): the headers sent, outcomes by status (2xx result, 429
# pausing the queue for Retry-After in seconds or as an HTTP-date, 503
# retried with backoff, 400 dead at once with the response in the error), a
# receiver that crashes after applying its effect seeing the retry carry
# the same key, 1,000 jobs through a receiver killed and restarted mid-run,
# shutdown, bad settings refused with nothing stored, header values hidden,
# and /v1/fetch refusing a dispatch queue. With ERRAND_TEST_PG_URL, two
# servers sharing PostgreSQL deliver each job once between them.

import email.utils
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, free_port, wait_until  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PG_URL = os.environ.get("ERRAND_TEST_PG_URL", "")


class Receiver:
    def __init__(self, tmpdir):
        self.port = free_port()
        self.db_path = os.path.join(tmpdir, "receiver-%d.db" % self.port)
        self.proc = None

    def start(self):
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "dispatch_receiver.py"),
                                      str(self.port), self.db_path],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = self.proc.stdout.readline()
        assert line.strip() == b"ready", line
        return self

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc:
            self.proc.wait()
            self.proc.stdout.close()

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def rows(self, sql, params=()):
        db = sqlite3.connect(self.db_path, timeout=10)
        try:
            return db.execute(sql, params).fetchall()
        finally:
            db.close()

    def requests(self, key):
        return [dict(zip(("attempt", "headers", "body", "at", "path"), r))
                for r in self.rows("SELECT attempt, headers, body, at, path FROM requests "
                                   "WHERE key = ? ORDER BY n", (key,))]

    def effects(self, key=None):
        if key is None:
            return self.rows("SELECT key FROM effects")
        return self.rows("SELECT key FROM effects WHERE key = ?", (key,))


class DispatchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="errand-dispatch-")
        cls.r = Receiver(cls.tmp).start()
        cls.s = Server(args=["--maintenance-interval", "20ms", "--log-level", "debug"]).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()
        cls.r.kill()

    def put(self, queue, settings):
        return self.s.request("PUT", "/v1/queues/" + queue, settings)

    def target(self, queue, path, **extra):
        d = {"url": self.r.url(path)}
        d.update(extra)
        st, b, _ = self.put(queue, {"dispatch": d,
                                    "defaults": {"backoff": {"type": "fixed", "delay_ms": 200,
                                                             "jitter": 0}}})
        self.assertEqual(st, 200, b)
        return b

    def enqueue(self, queue, job_id, payload=None, **extra):
        body = {"name": "hook", "id": job_id, "payload": payload or {"n": job_id}}
        body.update(extra)
        st, b, _ = self.s.enqueue(queue, body)
        self.assertEqual(st, 201, b)

    def wait_state(self, job_id, state, timeout=15):
        ok = wait_until(lambda: (self.s.job(job_id) or {}).get("state") == state,
                        timeout=timeout)
        j = self.s.job(job_id)
        self.assertTrue(ok, "job %s is %s, not %s\n%s" % (job_id, j and j["state"], state,
                                                         self.s.log_text()))
        return j

    # ---- the request ----

    def test_request_carries_payload_key_id_attempt_and_trusted_headers(self):
        self.target("hd-trusted", "/ok", trusted=True,
                    headers={"Authorization": "Bearer hd-secret-1", "X-Tenant": "t1"})
        trace = "4bf92f3577b34da6a3ce929d0e0e4736"
        self.enqueue("hd-trusted", "hd-1", {"to": "a@example.com"}, idempotency_key="key-hd-1",
                     trace_id=trace)
        j = self.wait_state("hd-1", "completed")
        self.assertEqual(j["result"], {"applied": "key-hd-1"}, "the 2xx body is the result")
        (req,) = self.r.requests("key-hd-1")
        h = json.loads(req["headers"])
        self.assertEqual(json.loads(req["body"]), {"to": "a@example.com"})
        self.assertEqual(h["content-type"], "application/json")
        self.assertEqual((h["x-errand-job-id"], h["x-errand-attempt"]), ("hd-1", "1"))
        self.assertEqual(h["authorization"], "Bearer hd-secret-1")
        self.assertEqual(h["x-tenant"], "t1")
        tp = h["traceparent"].split("-")
        self.assertEqual((tp[0], tp[1], tp[3]), ("00", trace, "01"))
        self.assertEqual(len(tp[2]), 16)
        self.assertNotIn("hd-secret-1", self.s.log_text(last=5000), "header values are not logged")

    def test_untrusted_target_gets_no_traceparent_and_the_id_as_key(self):
        self.target("hd-plain", "/ok", method="PUT")
        self.enqueue("hd-plain", "hd-2", trace_id="4bf92f3577b34da6a3ce929d0e0e4736")
        self.wait_state("hd-2", "completed")
        (req,) = self.r.requests("hd-2")
        h = json.loads(req["headers"])
        self.assertNotIn("traceparent", h)
        self.assertEqual(h["idempotency-key"], "hd-2", "no key given: the job id")
        self.assertEqual(self.r.rows("SELECT method FROM requests WHERE key = 'hd-2'"), [("PUT",)])

    def test_text_body_is_stored_as_a_json_string(self):
        self.target("txt", "/text")
        self.enqueue("txt", "txt-1")
        j = self.wait_state("txt-1", "completed")
        self.assertEqual(j["result"], "plain words, not JSON")

    # ---- outcomes ----

    def test_receiver_crash_after_applying_sees_the_same_key_and_applies_once(self):
        self.target("crash", "/crash-once")
        self.enqueue("crash", "cr-1", idempotency_key="key-cr-1")
        wait_until(lambda: self.r.proc.poll() is not None, timeout=10)
        self.assertIsNotNone(self.r.proc.poll(), "the receiver crashed")
        self.r.start()  # same port, same database
        j = self.wait_state("cr-1", "completed")
        reqs = self.r.requests("key-cr-1")  # attempts while it was down were refused
        self.assertGreaterEqual(len(reqs), 2, "a retry with the same key")
        self.assertEqual(reqs[0]["attempt"], "1")
        self.assertEqual(reqs[-1]["attempt"], str(j["attempts"]))
        self.assertGreater(j["attempts"], 1)
        self.assertEqual(len(self.r.effects("key-cr-1")), 1, "applied once")

    def test_429_pauses_the_queue_for_retry_after_seconds(self):
        self.target("thr", "/status/429?" + urllib.parse.urlencode({"retry_after": "2",
                                                                     "times": "1"}))
        self.enqueue("thr", "thr-1")
        wait_until(lambda: self.r.requests("thr-1"), timeout=10)
        first = self.r.requests("thr-1")[0]["at"]
        self.enqueue("thr", "thr-2")
        j2 = self.wait_state("thr-2", "completed")
        j1 = self.wait_state("thr-1", "completed")
        b_at = self.r.requests("thr-2")[0]["at"]
        self.assertGreaterEqual(b_at - first, 1.8, "the queue paused for about 2 s")
        self.assertLess(b_at - first, 6.0)
        self.assertEqual(j1["attempts"], 1, "a throttle gives the attempt back")
        self.assertEqual(j2["attempts"], 1)

    def test_429_with_an_http_date_retry_after(self):
        when = email.utils.formatdate(time.time() + 3, usegmt=True)  # IMF-fixdate
        self.target("thr-date", "/status/429?" + urllib.parse.urlencode({"retry_after": when,
                                                                          "times": "1"}))
        self.enqueue("thr-date", "thd-1")
        wait_until(lambda: self.r.requests("thd-1"), timeout=10)
        first = self.r.requests("thd-1")[0]["at"]
        self.enqueue("thr-date", "thd-2")
        self.wait_state("thd-2", "completed")
        self.wait_state("thd-1", "completed")
        b_at = self.r.requests("thd-2")[0]["at"]
        self.assertGreaterEqual(b_at - first, 1.5, "paused until the date (second precision)")
        self.assertLess(b_at - first, 7.0)

    def test_503_retries_with_backoff(self):
        self.target("busy", "/status/503?times=2&body=busy")
        self.enqueue("busy", "bz-1")
        j = self.wait_state("bz-1", "completed")
        reqs = self.r.requests("bz-1")
        self.assertEqual([r["attempt"] for r in reqs], ["1", "2", "3"])
        gaps = [b["at"] - a["at"] for a, b in zip(reqs, reqs[1:])]
        self.assertTrue(all(g >= 0.18 for g in gaps), "backoff of 200 ms: %r" % gaps)
        self.assertEqual(j["attempts"], 3)

    def test_503_with_retry_after_is_retry_later(self):
        self.target("busy-ra", "/status/503?times=1&retry_after=1")
        self.enqueue("busy-ra", "bra-1")
        j = self.wait_state("bra-1", "completed")
        reqs = self.r.requests("bra-1")
        self.assertEqual(len(reqs), 2)
        self.assertGreaterEqual(reqs[1]["at"] - reqs[0]["at"], 0.9)
        self.assertEqual(j["attempts"], 1, "retry_later does not count an attempt")
        self.assertEqual(j["started"], 2)

    def test_400_is_dead_at_once_with_the_response_in_the_error(self):
        self.target("bad", "/status/400?body=" + urllib.parse.quote("missing field: to"))
        self.enqueue("bad", "bad-1", max_attempts=5)
        j = self.wait_state("bad-1", "dead")
        e = j["last_error"]
        self.assertEqual(e["class"], "permanent")
        self.assertIn("HTTP 400", e["message"])
        self.assertIn("missing field: to", e["message"])
        self.assertEqual(j["attempts"], 1)
        self.assertEqual(len(self.r.requests("bad-1")), 1)
        st, b, _ = self.s.get("/v1/dead?queue=bad")
        self.assertEqual([x["id"] for x in b["jobs"]], ["bad-1"])

    def test_connection_refused_is_transient(self):
        port = free_port()
        st, b, _ = self.put("nowhere", {"dispatch": {"url": "http://127.0.0.1:%d/" % port,
                                                     "timeout_ms": 500}})
        self.assertEqual(st, 200, b)
        self.enqueue("nowhere", "nw-1", max_attempts=1)
        j = self.wait_state("nw-1", "dead")
        self.assertEqual(j["last_error"]["class"], "transient")
        self.assertIn("dispatch:", j["last_error"]["message"])

    def test_timeout_is_transient(self):
        self.target("slowq", "/slow?ms=3000", timeout_ms=300)
        self.enqueue("slowq", "sl-1", max_attempts=1)
        j = self.wait_state("sl-1", "dead")
        self.assertEqual(j["last_error"]["class"], "transient")
        self.assertIn("dispatch:", j["last_error"]["message"])

    def test_a_shorter_job_timeout_wins(self):
        self.target("slowjob", "/slow?ms=3000", timeout_ms=20000)
        t0 = time.monotonic()
        self.enqueue("slowjob", "sj-1", max_attempts=1, timeout_ms=300)
        j = self.wait_state("sj-1", "dead")
        self.assertEqual(j["last_error"]["class"], "transient")
        self.assertLess(time.monotonic() - t0, 2.5, "cut at the job's 300 ms, not at 20 s")

    # ---- settings ----

    def test_a_rate_limit_spaces_the_deliveries(self):
        st, b, _ = self.put("hd-rate", {"dispatch": {"url": self.r.url("/ok")},
                                        "rate_limit": {"max": 5, "per_ms": 1000}})
        self.assertEqual(st, 200, b)
        st, b, _ = self.s.post("/v1/queues/hd-rate/jobs",
                               {"jobs": [{"name": "hook", "id": "hr-%d" % i} for i in range(8)]})
        self.assertEqual(st, 201, b)
        for i in range(8):
            self.wait_state("hr-%d" % i, "completed")
        at = sorted(t for (t,) in self.r.rows(
            "SELECT at FROM effects WHERE job_id LIKE 'hr-%'"))
        self.assertEqual(len(at), 8)
        worst = max(sum(1 for u in at if t <= u < t + 1.0) for t in at)
        self.assertLessEqual(worst, 6, "at most max + 1 deliveries in any second")
        self.assertGreaterEqual(at[-1] - at[0], 7 * 0.2 - 0.05, "spaced 200 ms apart")

    def test_bad_settings_are_refused_naming_the_field_and_store_nothing(self):
        st, before, _ = self.s.get("/v1/queues/badset")
        cases = [
            ({"url": "ftp://127.0.0.1/"}, "dispatch.url"),
            ({"url": "file:///etc/passwd"}, "dispatch.url"),
            ({"url": "http://user:pw@127.0.0.1/"}, "dispatch.url"),
            ({"url": "not a url"}, "dispatch.url"),
            ({}, "dispatch.url"),
            ({"url": "http://a/", "method": "GET"}, "dispatch.method"),
            ({"url": "http://a/", "timeout_ms": 0}, "dispatch.timeout_ms"),
            ({"url": "http://a/", "timeout_ms": 600001}, "dispatch.timeout_ms"),
            ({"url": "http://a/", "timeout_ms": "1s"}, "dispatch.timeout_ms"),
            ({"url": "http://a/", "headers": {"X-A": "1"}}, "dispatch.headers"),
            ({"url": "http://a/", "trusted": True, "headers": ["X-A"]}, "dispatch.headers"),
            ({"url": "http://a/", "trusted": True, "headers": {"X A": "1"}},
             "dispatch.headers.X A"),
            ({"url": "http://a/", "trusted": True, "headers": {"Content-Type": "text/plain"}},
             "dispatch.headers.Content-Type"),
            ({"url": "http://a/", "trusted": True, "headers": {"Idempotency-Key": "x"}},
             "dispatch.headers.Idempotency-Key"),
            ({"url": "http://a/", "trusted": True, "headers": {"X-A": "a\r\nX-B: b"}},
             "dispatch.headers.X-A"),
            ({"url": "http://a/", "trusted": True, "headers": {"X-A": 5}}, "dispatch.headers.X-A"),
            ({"url": "http://a/", "trusted": True, "headers": {"X-A": "***"}},
             "dispatch.headers.X-A"),
            ({"url": "http://a/", "trusted": True,
              "headers": {"H%d" % i: "v" for i in range(9)}}, "dispatch.headers"),
            ({"url": "http://a/", "trusted": "yes"}, "dispatch.trusted"),
            ({"url": "http://a/", "follow_redirects": 1}, "dispatch.follow_redirects"),
            ({"url": "http://a/", "retries": 3}, "dispatch.retries"),
        ]
        for d, field in cases:
            st, b, _ = self.put("badset", {"dispatch": d, "concurrency": 3})
            self.assertEqual(st, 400, (d, b))
            self.assertEqual(b["error"]["field"], field, d)
        st, b, _ = self.put("badset", {"dispatch": "http://a/"})
        self.assertEqual((st, b["error"]["field"]), (400, "dispatch"))
        st, after, _ = self.s.get("/v1/queues/badset")
        self.assertEqual(after["queue"]["settings"], before["queue"]["settings"])
        self.assertIsNone(after["queue"]["settings"]["dispatch"])

    def test_header_values_are_shown_hidden_and_kept_by_a_put_of_what_get_shows(self):
        st, b, _ = self.put("hidden", {"dispatch": {"url": self.r.url("/ok"), "trusted": True,
                                                    "headers": {"Authorization": "Bearer hid-9"}}})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["settings"]["dispatch"]["headers"], {"Authorization": "***"})
        st, g, _ = self.s.get("/v1/queues/hidden")
        self.assertEqual(g["queue"]["settings"]["dispatch"]["headers"], {"Authorization": "***"})
        st, q, _ = self.s.get("/v1/queues")
        self.assertNotIn("hid-9", json.dumps(q))
        # GET's settings sent back keep the stored value
        st, b, _ = self.put("hidden", g["queue"]["settings"])
        self.assertEqual(st, 200, b)
        self.enqueue("hidden", "hid-1")
        self.wait_state("hid-1", "completed")
        (req,) = self.r.requests("hid-1")
        self.assertEqual(json.loads(req["headers"])["authorization"], "Bearer hid-9")
        self.assertNotIn("hid-9", self.s.log_text(last=5000))

    def test_fetch_refuses_a_dispatch_queue_naming_it(self):
        self.target("nofetch", "/ok")
        st, b, _ = self.s.fetch(["plain-q", "nofetch"])
        self.assertEqual(st, 400, b)
        self.assertEqual(b["error"]["field"], "queues[1]")
        self.assertIn("nofetch", b["error"]["message"])
        st, b, _ = self.s.fetch(["plain-q"])
        self.assertEqual(st, 200, b)
        st, b, _ = self.put("nofetch", {"dispatch": None})
        self.assertEqual(st, 200, b)
        self.assertIsNone(b["settings"]["dispatch"])
        self.enqueue("nofetch", "nf-1")
        st, b, _ = self.s.fetch(["nofetch"])
        self.assertEqual(st, 200, b)
        self.assertEqual([j["id"] for j in b["jobs"]], ["nf-1"], "a worker queue again")

    def test_metrics_count_dispatch_outcomes(self):
        self.target("met", "/ok")
        self.enqueue("met", "met-1")
        self.wait_state("met-1", "completed")
        st, text, _ = self.s.get("/metrics")
        self.assertRegex(text, r'errand_dispatch_requests_total\{class="success"\} [1-9]')
        self.assertRegex(text, r"errand_dispatch_queues [1-9]")


class ThousandJobsTest(unittest.TestCase):
    def test_1000_jobs_with_the_receiver_killed_midway_give_1000_effects_once(self):
        tmp = tempfile.mkdtemp(prefix="errand-dispatch-1k-")
        r = Receiver(tmp).start()
        s = Server(args=["--maintenance-interval", "20ms"]).start()
        try:
            st, b, _ = s.request("PUT", "/v1/queues/bulk", {
                "dispatch": {"url": r.url("/ok"), "timeout_ms": 2000},
                "defaults": {"max_attempts": 50,
                             "backoff": {"type": "fixed", "delay_ms": 300, "jitter": 0.5}}})
            self.assertEqual(st, 200, b)
            jobs = [{"name": "e", "id": "bulk-%04d" % i, "payload": {"i": i}}
                    for i in range(1000)]
            st, b, _ = s.post("/v1/queues/bulk/jobs", {"jobs": jobs})
            self.assertEqual(st, 201, b)
            wait_until(lambda: len(r.effects()) >= 200, timeout=60)
            r.kill()
            time.sleep(1.0)
            r.start()
            ok = wait_until(lambda: s.queue_info("bulk")["counts"]["completed"] == 1000,
                            timeout=120, interval=0.2)
            self.assertTrue(ok, "%r\n%s" % (s.queue_info("bulk"), s.log_text()))
            keys = sorted(k for (k,) in r.effects())
            self.assertEqual(keys, sorted(j["id"] for j in jobs), "1000 effects, one per job")
            (n,) = r.rows("SELECT count(*) FROM requests")[0]
            self.assertGreaterEqual(n, 1000)
            dup = r.rows("SELECT key FROM requests GROUP BY key HAVING count(DISTINCT attempt)"
                         " < count(*)")
            self.assertEqual(dup, [], "a key is sent again only as a new attempt")
        finally:
            s.cleanup()
            r.kill()


class ShutdownTest(unittest.TestCase):
    def test_shutdown_waits_for_a_request_within_the_grace(self):
        tmp = tempfile.mkdtemp(prefix="errand-dispatch-stop-")
        r = Receiver(tmp).start()
        s = Server(args=["--shutdown-grace", "5s"]).start()
        try:
            s.request("PUT", "/v1/queues/sd", {"dispatch": {"url": r.url("/slow?ms=1000")}})
            s.enqueue("sd", {"name": "n", "id": "sd-1", "payload": {}})
            wait_until(lambda: r.requests("sd-1"), timeout=10)
            s.signal(signal.SIGTERM)
            self.assertEqual(s.wait(15), 0)
            (state,) = s.query("SELECT state FROM jobs WHERE id = 'sd-1'")[0]
            self.assertEqual(state, 3, "completed before the server stopped")
            self.assertEqual(len(r.effects("sd-1")), 1)
        finally:
            s.cleanup()
            r.kill()

    def test_shutdown_cuts_a_request_past_the_grace_and_releases_its_job(self):
        tmp = tempfile.mkdtemp(prefix="errand-dispatch-cut-")
        r = Receiver(tmp).start()
        s = Server(args=["--shutdown-grace", "500ms"]).start()
        try:
            s.request("PUT", "/v1/queues/cut", {"dispatch": {"url": r.url("/slow?ms=20000")}})
            s.enqueue("cut", {"name": "n", "id": "cut-1", "payload": {}})
            wait_until(lambda: r.requests("cut-1"), timeout=10)
            t0 = time.monotonic()
            s.signal(signal.SIGTERM)
            self.assertEqual(s.wait(15), 0)
            self.assertLess(time.monotonic() - t0, 10)
            row = tuple(s.query("SELECT state, attempts FROM jobs WHERE id = 'cut-1'")[0])
            self.assertEqual(row, (1, 0), "released: waiting, the attempt given back")
        finally:
            s.cleanup()
            r.kill()


@unittest.skipIf(not PG_URL, "ERRAND_TEST_PG_URL is not set")
class PostgresTwoNodesTest(unittest.TestCase):
    def test_two_nodes_deliver_each_job_once(self):
        schema = "dispatch_" + uuid.uuid4().hex[:8]
        sep = "&" if "?" in PG_URL else "?"
        store = PG_URL + sep + "schema=" + schema
        tmp = tempfile.mkdtemp(prefix="errand-dispatch-pg-")
        r = Receiver(tmp).start()
        a = Server(store=store, args=["--maintenance-interval", "20ms"]).start()
        b = Server(store=store, args=["--maintenance-interval", "20ms"]).start()
        try:
            st, body, _ = a.request("PUT", "/v1/queues/pgq", {
                "dispatch": {"url": r.url("/ok")}})
            self.assertEqual(st, 200, body)
            # b learns of the target from the shared settings
            ok = wait_until(lambda: b.fetch(["pgq"])[0] == 400, timeout=10)
            self.assertTrue(ok, "node b refuses fetches of the dispatch queue")
            jobs = [{"name": "e", "id": "pg-%03d" % i, "payload": {"i": i}} for i in range(200)]
            st, body, _ = b.post("/v1/queues/pgq/jobs", {"jobs": jobs})
            self.assertEqual(st, 201, body)
            ok = wait_until(lambda: a.queue_info("pgq")["counts"]["completed"] == 200,
                            timeout=60, interval=0.2)
            self.assertTrue(ok, a.queue_info("pgq"))
            (n,) = r.rows("SELECT count(*) FROM requests")[0]
            self.assertEqual(n, 200, "each job delivered once between the two nodes")
            self.assertEqual(len(r.effects()), 200)
        finally:
            a.cleanup()
            b.cleanup()
            r.kill()


if __name__ == "__main__":
    unittest.main()
