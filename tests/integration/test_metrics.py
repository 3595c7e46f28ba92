# SPDX-License-Identifier: MIT
#
# /metrics after a known sequence of operations (docs/metrics.md): every
# per-queue counter, histogram and gauge has its expected value, read from a
# parsed scrape (not a loose grep); `promtool check metrics` accepts it; the
# labelled queues are bounded by --metrics-max-queues, the rest summed under
# queue="_other"; the server logs each lease expiry and each job that goes
# dead, with the reason; --log-format text writes key=value lines.

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (PG_SKIP, PG_SKIP_WHY, PgNodes, Server, clean_env, errand_bin,  # noqa: E402
                     run_errand, wait_until)

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{((?:[^}"]|"(?:[^"\\]|\\.)*")*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """{(name, frozenset(labels)): value} and {family: type}; fails on a bad line."""
    samples, types = {}, {}
    for ln in text.splitlines():
        if not ln:
            continue
        if ln.startswith("# TYPE "):
            _, _, fam, typ = ln.split(" ", 3)
            types[fam] = typ
            continue
        if ln.startswith("#"):
            continue
        m = LINE.match(ln)
        if not m:
            raise AssertionError("not a sample line: %r" % ln)
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        key = (m.group(1), labels)
        if key in samples:
            raise AssertionError("duplicate series: %r" % ln)
        samples[key] = float(m.group(4))
    return samples, types


def value(samples, name, **labels):
    key = (name, frozenset(labels.items()))
    if key not in samples:
        raise AssertionError("no series %s%r" % (name, labels))
    return samples[key]


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=["--maintenance-interval", "20ms"]).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def scrape(self):
        st, body, _ = self.s.get("/metrics", timeout=10)
        self.assertEqual(st, 200)
        return body

    def fetch_one(self, q, **kw):
        jobs = self.s.fetch_jobs([q], **kw)
        self.assertEqual(len(jobs), 1, jobs)
        return jobs[0]

    def test_known_sequence(self):
        s, q = self.s, "metrics-seq"
        st, b, _ = s.put_queue(q, {"max_stalled": 0, "max_started": 1})
        self.assertEqual(st, 200, b)
        retry_late = {"max_attempts": 2, "backoff": {"type": "fixed", "delay_ms": 3600000}}
        for i, extra in enumerate([{}, retry_late, {}, {}, {}]):
            job = {"name": "n", "id": "m%d" % i, **extra}
            st, b, _ = s.enqueue(q, job)
            self.assertEqual(st, 201, b)
        mark = s.log_mark()
        # m0: complete
        j = self.fetch_one(q)
        self.assertEqual(j["id"], "m0")
        self.assertEqual(s.complete(j["id"], j["lease_token"], {"ok": 1})[0], 200)
        # m1: a transient failure, retried (max_attempts 2)
        j = self.fetch_one(q)
        self.assertEqual(s.fail(j["id"], j["lease_token"],
                                {"class": "transient", "message": "t"})[0], 200)
        # m2: a permanent failure, dead
        j = self.fetch_one(q)
        self.assertEqual(s.fail(j["id"], j["lease_token"],
                                {"class": "permanent", "message": "p"})[0], 200)
        # m3: retry_later with max_started 1, dead
        j = self.fetch_one(q)
        self.assertEqual(s.fail(j["id"], j["lease_token"],
                                {"class": "retry_later", "message": "r", "delay_ms": 0})[0], 200)
        # m4: its lease expires with max_stalled 0: dead by stalling
        j = self.fetch_one(q, lease_ms=1000)
        self.assertEqual(j["id"], "m4")
        wait_until(lambda: (s.job("m4") or {}).get("state") == "dead", timeout=10,
                   what="m4 dead by stalling")
        # redrive m2: a copy is enqueued
        st, b, _ = s.post("/v1/dead/m2/redrive", {})
        self.assertIn(st, (200, 201), b)

        last = []

        def sampled():
            text = self.scrape()
            last[:] = [ln for ln in text.splitlines() if q in ln and "errand_queue_" in ln]
            smp, _ = parse(text)
            key = ("errand_queue_jobs", frozenset({"queue": q, "state": "waiting"}.items()))
            return smp if smp.get(key) == 1.0 and value(
                smp, "errand_queue_dead_letters", queue=q) == 3.0 else None
        smp = wait_until(sampled, timeout=60, interval=0.2)
        self.assertIsNotNone(smp, "no sample after the sequence; the last gauges: %r" % last)
        want = {
            "errand_jobs_enqueued_total": 6,  # 5 and the redriven copy
            "errand_jobs_fetched_total": 5,
            "errand_jobs_completed_total": 1,
            "errand_jobs_failed_total": 3,
            "errand_jobs_retried_total": 1,
            "errand_jobs_lease_expired_total": 1,
            "errand_jobs_stalled_total": 0,
        }
        for name, v in want.items():
            self.assertEqual(value(smp, name, queue=q), v, name)
        for reason, v in [("permanent", 1), ("attempts_exhausted", 0), ("stalled", 1),
                          ("max_started", 1)]:
            self.assertEqual(value(smp, "errand_jobs_dead_total", queue=q, reason=reason), v,
                             reason)
        # m1 is scheduled for its retry; the redriven copy waits; m0 completed
        for state, v in [("scheduled", 1), ("waiting", 1), ("active", 0), ("completed", 1),
                         ("dead", 3), ("cancelled", 0)]:
            self.assertEqual(value(smp, "errand_queue_jobs", queue=q, state=state), v, state)
        self.assertGreater(value(smp, "errand_queue_oldest_waiting_age_seconds", queue=q), 0)
        self.assertEqual(value(smp, "errand_job_wait_seconds_count", queue=q), 5)
        self.assertEqual(value(smp, "errand_job_run_seconds_count", queue=q), 1)
        self.assertEqual(value(smp, "errand_job_run_seconds_bucket", queue=q, le="+Inf"), 1)
        self.assertGreater(value(smp, "errand_store_commit_seconds_count"), 0)
        self.assertEqual(value(smp, "errand_store_connections"), 3,
                         "the writer, the reader and the upkeep thread")
        # the logs tell the story of m4 and of each dead job, with the reason
        recs = s.log_records(mark)
        expired = [r for r in recs if r.get("job_id") == "m4"]
        self.assertTrue(any("lease expired" in r["msg"] and r.get("queue") == q and
                            r.get("attempt") == 1 for r in expired), expired)
        dead = {r["job_id"]: r["msg"] for r in recs if r.get("msg", "").startswith("job dead")}
        self.assertIn("permanent", dead.get("m2", ""))
        self.assertIn("max_started", dead.get("m3", ""))
        self.assertIn("max_stalled", dead.get("m4", ""))
        self.assertNotIn("m1", dead)

    def test_queue_history(self):
        s, q = self.s, "metrics-hist"
        self.assertEqual(s.enqueue(q, {"name": "x"})[0], 201)

        def got():
            st, b, _ = s.get("/v1/queues/%s?history=1" % q)
            self.assertEqual(st, 200, b)
            h = b["queue"]["history"]
            return h if h["waiting"][-1] == 1 else None
        h = wait_until(got, timeout=60, interval=0.2, what="a history sample with the job")
        self.assertEqual(h["interval_ms"], 30000)
        self.assertEqual(len(h["waiting"]), 120)
        self.assertIsNotNone(h["until"])
        st, b, _ = s.get("/v1/queues?history=true")
        self.assertEqual(st, 200)
        row = [x for x in b["queues"] if x["name"] == q][0]
        self.assertEqual(row["history"]["waiting"][-1], 1)
        st, b, _ = s.get("/v1/queues")
        self.assertNotIn("history", b["queues"][0])

    def test_cron_ticks_are_counted(self):
        s = self.s
        st, b, _ = s.request("PUT", "/v1/schedulers/metrics-every-second",
                             {"cron": "* * * * * *", "queue": "metrics-cron", "name": "tick"})
        self.assertIn(st, (200, 201), b)
        try:
            def two():
                smp, _ = parse(self.scrape())
                return smp if value(smp, "errand_jobs_enqueued_total",
                                    queue="metrics-cron") >= 2 else None
            smp = wait_until(lambda: self.enqueued_cron(two), timeout=20, interval=0.2,
                             what="two ticks counted")
            runs = value(smp, "errand_cron_runs_total")
            self.assertGreaterEqual(runs, 2)
            self.assertEqual(value(smp, "errand_cron_lateness_seconds_count"),
                             runs - value(smp, "errand_cron_catchup_runs_total"))
            # a tick is enqueued within a maintenance pass or two of its second
            self.assertGreater(value(smp, "errand_cron_lateness_seconds_bucket", le="1"), 0)
        finally:
            s.request("DELETE", "/v1/schedulers/metrics-every-second")

    def enqueued_cron(self, fn):
        try:
            return fn()
        except AssertionError:
            return None  # the queue has no series before its first tick

    def test_dead_job_log_line_tells_its_story_escaped(self):
        s, q, jid = self.s, "metrics-log", 'odd"id\\x'
        mark = s.log_mark()
        st, b, _ = s.enqueue(q, {"name": "charge", "id": jid, "trace_id": "order-7"})
        self.assertEqual(st, 201, b)
        j = self.fetch_one(q)
        self.assertEqual(j["id"], jid)
        self.assertEqual(s.fail(j["id"], j["lease_token"],
                                {"class": "permanent", "message": "card declined"})[0], 200)
        rec = wait_until(lambda: next((r for r in s.log_records(mark)
                                       if r.get("msg") == "job dead: permanent failure"), None),
                         timeout=10, what="the dead job's log line")
        self.assertEqual(rec["job_id"], jid)
        self.assertEqual((rec["queue"], rec["name"], rec["attempt"], rec["trace_id"]),
                         (q, "charge", 1, "order-7"))
        self.assertEqual(rec["error_class"], "permanent")
        self.assertGreaterEqual(rec["duration_ms"], 0)
        self.assertGreaterEqual(rec["age_ms"], rec["duration_ms"])

    def test_histogram_buckets_are_cumulative(self):
        smp, types = parse(self.scrape())
        self.assertEqual(types.get("errand_job_wait_seconds"), "histogram")
        for (name, labels), v in smp.items():
            if name != "errand_job_wait_seconds_bucket":
                continue
            d = dict(labels)
            if d["le"] == "+Inf":
                continue
            inf = value(smp, name, queue=d["queue"], le="+Inf")
            self.assertLessEqual(v, inf, d)

    def test_promtool_accepts_the_scrape(self):
        promtool = shutil.which("promtool")
        self.assertIsNotNone(promtool, "promtool (Debian package prometheus) is needed")
        out = subprocess.run([promtool, "check", "metrics"], input=self.scrape(),
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


class BoundTest(unittest.TestCase):
    def test_queues_past_the_bound_are_summed_under_other(self):
        with Server(args=["--metrics-max-queues", "2"]) as s:
            for q in ["b1", "b2", "b3", "b4"]:
                self.assertEqual(s.enqueue(q, {"name": "x"})[0], 201)
            smp, _ = parse(s.get("/metrics")[1])
            queues = {dict(l).get("queue") for (n, l) in smp
                      if n == "errand_jobs_enqueued_total"}
            self.assertEqual(queues, {"b1", "b2", "_other"})
            self.assertEqual(value(smp, "errand_jobs_enqueued_total", queue="_other"), 2)

            def gauges():
                smp, _ = parse(s.get("/metrics")[1])
                k = ("errand_queue_jobs", frozenset({"queue": "_other", "state": "waiting"}.items()))
                return smp if smp.get(k) == 2.0 else None
            smp = wait_until(gauges, timeout=60, interval=0.2, what="the _other gauge")
            self.assertEqual(value(smp, "errand_queue_jobs", queue="b1", state="waiting"), 1)

    def test_bad_settings_are_refused_naming_them(self):
        for flag, v in [("metrics-max-queues", "0"), ("metrics-max-queues", "100001"),
                        ("metrics-max-queues", "x"), ("log-format", "xml")]:
            with self.subTest(flag=flag, v=v), tempfile.TemporaryDirectory() as d:
                rc, _, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                         "sqlite:%s/e.db" % d, "--" + flag, v])
                self.assertIsNotNone(rc, "server started with --%s %s" % (flag, v))
                self.assertNotEqual(rc, 0)
                self.assertIn(flag, err)


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class PgLeaderGaugesTest(PgNodes, unittest.TestCase):
    """Two nodes on one PostgreSQL schema: only the maintenance leader serves
    the queue gauges, so the backlog is not reported twice; counters are per
    node and add up."""
    SCHEMA_PREFIX = "met_"

    def test_only_the_leader_reports_queue_gauges(self):
        a, b = self.servers
        self.assertEqual(a.enqueue("pgm", {"name": "x"})[0], 201)
        self.assertEqual(b.enqueue("pgm", {"name": "x"})[0], 201)

        def split():
            got = []
            for s in (a, b):
                smp, _ = parse(s.get("/metrics")[1])
                leader = value(smp, "errand_maintenance_leader")
                k = ("errand_queue_jobs", frozenset({"queue": "pgm", "state": "waiting"}.items()))
                got.append((leader, smp.get(k), smp))
            leaders = [g for g in got if g[0] == 1.0]
            others = [g for g in got if g[0] == 0.0]
            if len(leaders) == 1 and len(others) == 1 and leaders[0][1] == 2.0 and \
                    others[0][1] is None:
                return got
            return None
        got = wait_until(split, timeout=60, interval=0.25,
                         what="one leader reporting 2 waiting, the other no queue gauges")
        follower = [g[2] for g in got if g[0] == 0.0][0]
        self.assertFalse(any(n.startswith("errand_queue_") for (n, _) in follower))
        total = sum(value(g[2], "errand_jobs_enqueued_total", queue="pgm") for g in got)
        self.assertEqual(total, 2)
        for g in got:  # writer, reader and the wake-up listener, at least
            self.assertGreaterEqual(value(g[2], "errand_store_connections"), 3)


class TextLogTest(unittest.TestCase):
    def test_text_format(self):
        tmp = tempfile.mkdtemp(prefix="errand-textlog-")
        proc = subprocess.Popen([errand_bin(), "serve", "--listen", "127.0.0.1:0", "--store",
                                 "sqlite:" + os.path.join(tmp, "e.db"), "--log-format", "text"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=clean_env(), text=True)
        try:
            first = proc.stderr.readline()
            self.assertRegex(first, r'^\d{4}-\d\d-\d\dT\S+Z INFO +listening '
                                    r'listen="127\.0\.0\.1:\d+"$')
            started = proc.stderr.readline()  # signals are handled from here on
            self.assertIn("INFO  errand started store=", started)
        finally:
            proc.terminate()
            rest = proc.stderr.read()
            proc.wait(timeout=10)
            shutil.rmtree(tmp, ignore_errors=True)
        self.assertFalse(any(ln.startswith("{") for ln in rest.splitlines()), rest)
        self.assertIn("INFO  stopped", rest)


if __name__ == "__main__":
    unittest.main()
