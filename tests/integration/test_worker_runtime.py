# SPDX-License-Identifier: MIT
#
# liberrand's worker runtime against a real server, through the C example
# worker (examples/c_worker.c) and `errand work`: the concurrency limit is
# honoured, heartbeats keep a prefetched job alive past its first lease, a
# job whose worker is SIGKILLed is redelivered after the lease expires and
# completed by another worker, a lost lease stops the handler and its
# outcome is not sent, SIGTERM completes or releases every job (none stays
# active, none is lost, exit 0), a repeated SIGTERM still drains, SIGINT
# twice or SIGQUIT stops at once with the command killed and its job
# released, a command killed by the shutdown is released, and the
# handler's four outcome classes reach the server.

import os
import signal
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, parse_time, now_ms, wait_until  # noqa: E402
from worker_util import Worker, write_script  # noqa: E402


class RuntimeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=["--maintenance-interval", "50ms"]).start()
        cls.tmp = tempfile.mkdtemp(prefix="errand-rt-")

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def enqueue(self, queue, job_id, payload=None, **extra):
        body = {"name": "t", "id": job_id, "payload": payload or {}}
        body.update(extra)
        st, b, _ = self.s.enqueue(queue, body)
        self.assertEqual(st, 201, b)

    def counts(self, queue):
        q = self.s.queue_info(queue)
        return q["counts"] if q else {}

    def wait_counts(self, queue, want, timeout=15, w=None):
        ok = wait_until(lambda: all(self.counts(queue).get(k) == v for k, v in want.items()),
                        timeout=timeout)
        self.assertTrue(ok, "%s counts %r, want %r\n%s"
                        % (queue, self.counts(queue), want, w.text() if w else ""))

    def test_concurrency_is_honoured(self):
        log = os.path.join(self.tmp, "spans")
        script = write_script(self.tmp, "span.sh",
                              'echo "start $(date +%%s.%%N)" >> %s\nsleep 0.4\n'
                              'echo "end $(date +%%s.%%N)" >> %s\n' % (log, log))
        for i in range(12):
            self.enqueue("conc", "conc-%d" % i)
        w = Worker.work(self.s, "conc", [script], "--concurrency", "3", "--poll-wait", "200ms")
        try:
            self.wait_counts("conc", {"completed": 12}, w=w)
        finally:
            self.assertEqual(w.stop(), 0, w.text())
        events = []
        with open(log) as f:
            for line in f:
                kind, t = line.split()
                events.append((float(t), 1 if kind == "start" else -1))
        running, peak = 0, 0
        for _, d in sorted(events, key=lambda e: (e[0], e[1])):
            running += d
            peak = max(peak, running)
        self.assertEqual(peak, 3, "at most 3 at once, and the limit reached")

    def test_heartbeats_keep_a_prefetched_job_alive_past_its_lease(self):
        # One handler thread and one prefetched job, lease 2 s: the second job
        # waits ~1.5 s locally, then runs 1.5 s, ending ~1 s after the lease
        # it was fetched with.
        self.enqueue("hb", "hb-1", {"sleep_ms": 1500})
        self.enqueue("hb", "hb-2", {"sleep_ms": 1500})
        w = Worker.example(self.s, "hb", "--concurrency", "1", "--prefetch", "1",
                           "--lease-ms", "2000", "--timeout-ms", "1900", "--grace-ms", "1950")
        try:
            ok = wait_until(lambda: self.s.job("hb-2")["state"] == "active", timeout=5)
            self.assertTrue(ok, w.text())
            first_expiry = parse_time(self.s.job("hb-2")["lease_expires_at"])
            wait_until(lambda: now_ms() > first_expiry + 300, timeout=5)
            j = self.s.job("hb-2")
            self.assertEqual((j["state"], j["stalled"]), ("active", 0), j)
            self.assertGreater(parse_time(j["lease_expires_at"]), first_expiry)
            self.wait_counts("hb", {"completed": 2}, w=w)
        finally:
            self.assertEqual(w.stop(), 0, w.text())
        for jid in ("hb-1", "hb-2"):
            j = self.s.job(jid)
            self.assertEqual((j["attempts"], j["stalled"]), (1, 0), j)

    def test_sigkilled_worker_job_is_redelivered_and_completed_by_another(self):
        self.enqueue("kill", "kill-1", {"sleep_ms": 1500})
        a = Worker.example(self.s, "kill", "--lease-ms", "2000", "--timeout-ms", "1600",
                           "--grace-ms", "1800")
        ok = wait_until(lambda: self.s.job("kill-1")["state"] == "active", timeout=5)
        self.assertTrue(ok, a.text())
        a.kill()
        # b's lease and timeout are long, so a slow machine cannot expire them
        b = Worker.example(self.s, "kill", "--lease-ms", "8000", "--timeout-ms", "4000",
                           "--grace-ms", "5000")
        try:
            ok = wait_until(lambda: self.s.job("kill-1")["state"] == "completed", timeout=10)
            j = self.s.job("kill-1")
            self.assertTrue(ok, "%r\n%s" % (j, b.text()))
        finally:
            self.assertEqual(b.stop(), 0, b.text())
        self.assertEqual((j["attempts"], j["stalled"]), (2, 1), j)
        self.assertEqual(j["result"]["attempt"], 2)
        done = [l for l in b.logs() if l.get("job_id") == "kill-1" and l.get("msg") == "job done"]
        self.assertEqual([l["outcome"] for l in done], ["completed"])

    def test_lost_lease_stops_the_handler_and_drops_its_outcome(self):
        self.enqueue("lost", "lost-1", {"sleep_ms": 4000})
        w = Worker.example(self.s, "lost", "--lease-ms", "1500", "--timeout-ms", "1000",
                           "--grace-ms", "1200")
        try:
            self.assertTrue(wait_until(lambda: self.s.job("lost-1")["state"] == "active", 5))
            w.signal(signal.SIGSTOP)  # no heartbeats: the lease runs out
            ok = wait_until(lambda: self.s.job("lost-1")["state"] == "waiting", timeout=5)
            self.assertTrue(ok, self.s.job("lost-1"))
            jobs = self.s.fetch_jobs("lost", worker_id="thief", lease_ms=30000)
            self.assertEqual([j["id"] for j in jobs], ["lost-1"])
            w.signal(signal.SIGCONT)
            ok = wait_until(lambda: any(l.get("job_id") == "lost-1" and
                                        l.get("outcome") in ("lease_lost", "timeout")
                                        for l in w.logs()), timeout=5)
            self.assertTrue(ok, w.text())
            st, b, _ = self.s.complete("lost-1", jobs[0]["lease_token"], {"by": "thief"})
            self.assertEqual(st, 200, b)
        finally:
            self.assertEqual(w.stop(), 0, w.text())
        j = self.s.job("lost-1")
        self.assertEqual((j["state"], j["result"]), ("completed", {"by": "thief"}))

    def test_sigterm_completes_or_releases_every_job(self):
        script = write_script(self.tmp, "slow.sh", "cat >/dev/null\nsleep 0.5\n")
        n = 16
        for i in range(n):
            self.enqueue("term", "term-%d" % i)
        w = Worker.work(self.s, "term", [script], "--concurrency", "3", "--prefetch", "4",
                        "--timeout", "2s", "--grace", "3s", "--lease", "10s",
                        "--poll-wait", "200ms")
        self.assertTrue(wait_until(lambda: self.counts("term").get("completed", 0) >= 3, 10),
                        w.text())
        t0 = time.monotonic()
        rc = w.stop()
        self.assertEqual(rc, 0, w.text())
        self.assertLess(time.monotonic() - t0, 3.5)
        c = self.counts("term")
        self.assertEqual(c.get("active"), 0, c)
        self.assertEqual(c.get("completed", 0) + c.get("waiting", 0), n, c)
        self.assertGreater(c.get("waiting", 0), 0, "prefetched jobs should have been released")
        released = [j for j in (self.s.job("term-%d" % i) for i in range(n)) if j["state"] == "waiting"]
        self.assertTrue(all(j["attempts"] == 0 for j in released), released)
        # Another worker finishes them all: none lost.
        w2 = Worker.work(self.s, "term", [script], "--concurrency", "4", "--poll-wait", "200ms")
        try:
            self.wait_counts("term", {"completed": n, "active": 0, "dead": 0}, w=w2)
        finally:
            self.assertEqual(w2.stop(), 0, w2.text())

    def long_job(self, queue, seconds):
        """A worker running one job of `seconds`; returns (worker, pid file)
        once the command runs (its pid written)."""
        pidf = os.path.join(self.tmp, queue + ".pid")
        # stderr away from the worker's: a job that outlived it would keep
        # the pipe the test reads the worker's lines from open
        script = write_script(self.tmp, queue + ".sh", "exec 2>/dev/null\necho $$ > '%s.tmp'\n"
                              "mv '%s.tmp' '%s'\ncat >/dev/null\nsleep %d\n"
                              % (pidf, pidf, pidf, seconds))
        self.enqueue(queue, queue + "-1")
        w = Worker.work(self.s, queue, [script], "--timeout", "8s", "--grace", "9s",
                        "--lease", "10s")
        # running, not only leased (a leased job may still wait in the prefetch)
        self.assertTrue(wait_until(lambda: os.path.exists(pidf), 10), w.text())
        with open(pidf) as f:
            return w, int(f.read())

    def wait_stopping(self, w):
        wait_until(lambda: any(l.get("msg", "").startswith("stopping") for l in w.logs()),
                   timeout=10, what="the worker to log that the signal stops it")

    def test_a_repeated_sigterm_still_drains(self):
        # systemd and GNU timeout signal the whole group: a repeat is the same request
        w, _ = self.long_job("again", 2)
        try:
            w.signal(signal.SIGTERM)
            self.wait_stopping(w)
            w.signal(signal.SIGTERM)
            w.signal(signal.SIGTERM)
            self.assertEqual(w.wait(15), 0, w.text())
        finally:
            w.stop()
        j = self.s.job("again-1")
        self.assertEqual((j["state"], j["attempts"]), ("completed", 1), j)

    def stop_now(self, queue, signals):
        w, pid = self.long_job(queue, 30)
        try:
            t0 = time.monotonic()
            for i, sig in enumerate(signals):
                w.signal(sig)
                if i < len(signals) - 1:  # two at once would merge into one
                    self.wait_stopping(w)
            rc = w.wait(10)
            # at once: well before the job's 30 s or the 9 s grace (room for TSan)
            self.assertLess(time.monotonic() - t0, 5.0, w.text())
            self.assertEqual(rc, 0, w.text())
        finally:
            w.stop()
        self.assertTrue(wait_until(lambda: not os.path.exists("/proc/%d" % pid), 5),
                        "the command outlived an immediate stop")
        j = self.s.job(queue + "-1")
        self.assertEqual((j["state"], j["attempts"]), ("waiting", 0), j)

    def test_sigint_twice_stops_now_killing_the_command_and_releasing_its_job(self):
        self.stop_now("twice", [signal.SIGINT, signal.SIGINT])

    def test_sigquit_stops_now(self):
        self.stop_now("quit", [signal.SIGQUIT])

    def test_a_command_killed_by_the_shutdown_is_released_not_failed(self):
        w, pid = self.long_job("group", 30)
        try:
            # what a control-group kill does: the worker and its command at
            # once; the command first here, so its death is seen first
            os.kill(pid, signal.SIGTERM)
            w.signal(signal.SIGTERM)
            self.assertEqual(w.wait(15), 0, w.text())
        finally:
            w.stop()
        j = self.s.job("group-1")
        self.assertEqual((j["state"], j["attempts"]), ("waiting", 0), j)
        self.assertIsNone(j.get("last_error"), j)

    def test_the_signal_helper_stops_now_on_sigquit(self):
        # liberrand's errand_worker_install_signal_handlers, in the C example
        self.enqueue("helper", "helper-1", {"sleep_ms": 30000})
        w = Worker.example(self.s, "helper", "--lease-ms", "20000", "--timeout-ms", "15000",
                           "--grace-ms", "18000")
        try:
            self.assertTrue(wait_until(lambda: self.s.job("helper-1")["state"] == "active", 10))
            w.signal(signal.SIGTERM)
            self.wait_stopping(w)
            w.signal(signal.SIGTERM)  # the same request
            time.sleep(0.3)  # a duration, not an order: it keeps draining meanwhile
            self.assertIsNone(w.proc.poll(), "a repeated SIGTERM ended the drain")
            t0 = time.monotonic()
            w.signal(signal.SIGQUIT)
            self.assertEqual(w.wait(10), 0, w.text())
            self.assertLess(time.monotonic() - t0, 5.0)
        finally:
            w.stop()
        j = self.s.job("helper-1")
        self.assertEqual((j["state"], j["attempts"]), ("waiting", 0), j)

    def test_c_handler_outcome_classes(self):
        for oc in ("permanent", "transient", "retry_later", "throttled"):
            self.enqueue("oc-" + oc, "oc-" + oc, {"outcome": oc}, max_attempts=1)
        self.enqueue("oc-ok", "oc-ok", {}, trace_id="tr-1", idempotency_key="idem-1")
        w = Worker.example(self.s, "oc-ok", "--queue", "oc-permanent", "--queue", "oc-transient",
                           "--queue", "oc-retry_later", "--queue", "oc-throttled")
        try:
            want = {"oc-permanent": "dead", "oc-transient": "dead", "oc-retry_later": "scheduled",
                    "oc-throttled": "scheduled", "oc-ok": "completed"}
            ok = wait_until(lambda: all(self.s.job(k)["state"] == v for k, v in want.items()), 10)
            self.assertTrue(ok, w.text())
        finally:
            self.assertEqual(w.stop(), 0, w.text())
        for oc in ("permanent", "transient", "retry_later", "throttled"):
            self.assertEqual(self.s.job("oc-" + oc)["last_error"]["class"], oc)
        r = self.s.job("oc-ok")["result"]
        self.assertEqual((r["idempotency_key"], r["trace_id"], r["attempt"]), ("idem-1", "tr-1", 1))
        line = [l for l in w.logs() if l.get("job_id") == "oc-ok" and l.get("msg") == "job done"][0]
        for k in ("queue", "name", "attempt", "duration_ms", "age_ms", "outcome", "trace_id"):
            self.assertIn(k, line)

    def test_example_refuses_bad_three_numbers(self):
        w = Worker.example(self.s, "x", "--timeout-ms", "5000", "--grace-ms", "4000",
                           "--lease-ms", "10000")
        self.assertEqual(w.wait(5), 2)
        w.join_drainer()
        self.assertIn("timeout (5000 ms) must be shorter than grace (4000 ms)", w.text())

    def test_queue_weights_mix_the_queues_errand_work_fetches(self):
        script = write_script(self.tmp, "mix.sh", "#!/bin/sh\nexit 0\n")
        for q in ("wq-hi", "wq-lo"):
            st, b, _ = self.s.post("/v1/queues/%s/jobs" % q, {"jobs": [{"name": "t"}] * 200})
            self.assertEqual(st, 201, b)
        w = Worker.work(self.s, ["wq-hi", "wq-lo"], [script], "--queue-weight", "wq-hi=3",
                        "--concurrency", "1", "--prefetch", "0")
        try:
            # in order, wq-lo would wait for all of wq-hi; mixed 3:1 it
            # gets about a quarter from the start
            ok = wait_until(lambda: self.counts("wq-hi").get("completed", 0) +
                            self.counts("wq-lo").get("completed", 0) >= 100, timeout=30)
            self.assertTrue(ok, w.text())
            hi, lo = (self.counts(q).get("completed", 0) for q in ("wq-hi", "wq-lo"))
            self.assertGreater(lo, 0.1 * (hi + lo), (hi, lo))
            self.assertGreater(hi, 0.5 * (hi + lo), (hi, lo))
        finally:
            w.stop()

    def test_errand_work_refuses_a_bad_queue_weight(self):
        for bad in ("wq-hi", "wq-hi=0", "wq-hi=1001", "other=2", "wq-hi=x"):
            w = Worker.work(self.s, ["wq-hi", "wq-lo"], ["true"], "--queue-weight", bad)
            self.assertEqual(w.wait(5), 2, bad)
            w.join_drainer()
            self.assertIn("--queue-weight " + bad, w.text())


if __name__ == "__main__":
    unittest.main()
