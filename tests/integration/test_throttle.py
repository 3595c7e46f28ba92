#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# A throttled failure pauses its queue for at most the queue's
# throttle_max_ms (default 1 h), however long the worker asked for; GET
# /v1/queues shows throttled_until; POST /resume and PUT {"paused": false}
# end it. On SQLite, and on PostgreSQL when ERRAND_TEST_PG_URL is set.

import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, error_of, now_ms, parse_time  # noqa: E402

YEAR_MS = 366 * 24 * 3600 * 1000
HOUR_MS = 3600 * 1000
PG_URL = os.environ.get("ERRAND_TEST_PG_URL", "")


class ThrottleCases:
    store = "default"

    @classmethod
    def setUpClass(cls):
        cls.s = Server(store=cls.store).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def setUp(self):
        self.assertTrue(self.s.alive(), "server died:\n" + self.s.log_text())
        # queue names of this test, fresh on a PostgreSQL schema reused by reruns
        self.q = "thr-%s-%d" % (self._testMethodName[-12:], now_ms() % 10**9)

    def throttle(self, queue, n_jobs=2, retry_after_ms=YEAR_MS):
        for i in range(n_jobs):
            st, b, _ = self.s.enqueue(queue, {"name": "t", "id": "%s-%d" % (queue, i)})
            self.assertEqual(st, 201, b)
        jobs = self.s.fetch_jobs([queue])
        self.assertEqual(len(jobs), 1)
        t0 = now_ms()
        st, b, _ = self.s.fail(jobs[0]["id"], jobs[0]["lease_token"],
                               {"class": "throttled", "retry_after_ms": retry_after_ms})
        self.assertEqual(st, 200, b)
        self.assertEqual(self.s.fetch_jobs([queue]), [], "the queue is throttled")
        return t0, jobs[0]["id"]

    def throttled_until(self, queue):
        q = self.s.queue_info(queue)
        self.assertIsNotNone(q, queue)
        st, one, _ = self.s.get("/v1/queues/" + queue)
        self.assertEqual(st, 200, one)
        self.assertEqual(one["queue"]["throttled_until"], q["throttled_until"])
        return q["throttled_until"]

    def test_a_year_long_throttle_is_capped_at_one_hour(self):
        t0, jid = self.throttle(self.q)
        until = parse_time(self.throttled_until(self.q))
        self.assertGreaterEqual(until, t0 + HOUR_MS - 1000)
        self.assertLessEqual(until, now_ms() + HOUR_MS + 1000)
        run_at = parse_time(self.s.job(jid)["run_at"])
        self.assertLessEqual(run_at, now_ms() + HOUR_MS + 1000, "the job waits 1 h too")

    def test_the_queues_smaller_cap_applies(self):
        st, b, _ = self.s.request("PUT", "/v1/queues/" + self.q, {"throttle_max_ms": 2000})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["settings"]["throttle_max_ms"], 2000)
        t0, _ = self.throttle(self.q)
        until = parse_time(self.throttled_until(self.q))
        self.assertGreaterEqual(until, t0 + 2000 - 50)
        self.assertLessEqual(until, now_ms() + 2000)
        got = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got = self.s.fetch_jobs([self.q], wait_ms=500)
        self.assertTrue(got, "fetching resumes after 2 s")
        self.assertIsNone(self.throttled_until(self.q), "null once it is over")

    def test_resume_clears_a_throttle(self):
        self.throttle(self.q)
        self.assertIsNotNone(self.throttled_until(self.q))
        st, b, _ = self.s.post("/v1/queues/%s/resume" % self.q)
        self.assertEqual(st, 200, b)
        self.assertIsNone(self.throttled_until(self.q))
        self.assertEqual(len(self.s.fetch_jobs([self.q])), 1, "fetch hands out jobs again")

    def test_put_paused_false_clears_a_throttle(self):
        self.throttle(self.q)
        st, b, _ = self.s.request("PUT", "/v1/queues/" + self.q, {"concurrency": 3})
        self.assertEqual(st, 200, b)
        self.assertIsNotNone(self.throttled_until(self.q), "other settings keep it")
        st, b, _ = self.s.request("PUT", "/v1/queues/" + self.q, {"paused": False})
        self.assertEqual(st, 200, b)
        self.assertIsNone(self.throttled_until(self.q))
        self.assertEqual(len(self.s.fetch_jobs([self.q])), 1)

    def test_bad_throttle_max_ms_is_refused_and_nothing_stored(self):
        for bad in (999, 604800001, -1, "1h", 1.5, True):
            st, b, _ = self.s.request("PUT", "/v1/queues/" + self.q,
                                      {"concurrency": 9, "throttle_max_ms": bad})
            self.assertEqual(st, 400, (bad, b))
            self.assertEqual(error_of(b)["field"], "throttle_max_ms", bad)
        st, b, _ = self.s.get("/v1/queues/" + self.q)
        self.assertEqual(st, 200, b)
        self.assertEqual(b["queue"]["settings"]["throttle_max_ms"], HOUR_MS)
        self.assertEqual(b["queue"]["settings"]["concurrency"], 0)
        self.assertIsNone(b["queue"]["throttled_until"])


class SqliteThrottle(ThrottleCases, unittest.TestCase):
    pass


@unittest.skipUnless(PG_URL, "ERRAND_TEST_PG_URL is not set")
class PostgresThrottle(ThrottleCases, unittest.TestCase):
    schema = "throttle_%d" % os.getpid()
    store = PG_URL + ("&" if "?" in PG_URL else "?") + "schema=" + schema

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        subprocess.run(["psql", PG_URL, "-Xqc", "DROP SCHEMA IF EXISTS %s CASCADE" % cls.schema],
                       capture_output=True, timeout=30)


if __name__ == "__main__":
    unittest.main(verbosity=2)
