# SPDX-License-Identifier: MIT
#
# The worker's adaptive prefetch (docs/workers.md, "Prefetch") against a real
# server: slow jobs on a short lease are not leased ahead of a free handler
# (every job starts well within lease/3 of its lease, none is redelivered or
# stalled), while a fixed --prefetch still leases ahead (the same check sees
# its jobs wait); a fast workload ramps the prefetch far above the old
# default of = concurrency; a bad --prefetch is refused. No timing of speed.

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, parse_time, run_errand, wait_until  # noqa: E402
from worker_util import Worker, write_script  # noqa: E402

LEASE_MS = 3000
SLEEP_S = 1.2  # a "10 s job" scaled down: longer than lease/4


class PrefetchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=["--maintenance-interval", "50ms"]).start()
        cls.tmp = tempfile.mkdtemp(prefix="errand-pf-")

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def counts(self, queue):
        q = self.s.queue_info(queue)
        return q["counts"] if q else {}

    def wait_completed(self, queue, n, w, timeout=30):
        ok = wait_until(lambda: self.counts(queue).get("completed") == n, timeout=timeout)
        self.assertTrue(ok, "%s counts %r\n%s" % (queue, self.counts(queue), w.text()))

    def slow_run(self, queue, njobs, *opts):
        """Runs njobs slow jobs; returns {job_id: ms from its lease to its command's start}."""
        starts = os.path.join(self.tmp, queue + ".starts")
        script = write_script(self.tmp, queue + ".sh",
                              'echo "$ERRAND_JOB_ID $(date +%%s%%3N)" >> %s\nsleep %s\n'
                              % (starts, SLEEP_S))
        ids = ["%s-%d" % (queue, i) for i in range(njobs)]
        st, b, _ = self.s.enqueue(queue, {"jobs": [{"name": "slow", "id": i, "payload": {}}
                                                   for i in ids]})
        self.assertIn(st, (200, 201), b)
        w = Worker.work(self.s, queue, [script], "--lease", "%dms" % LEASE_MS, "--timeout", "2s",
                        "--grace", "2500ms", "--poll-wait", "200ms", *opts)
        try:
            self.wait_completed(queue, njobs, w)
        finally:
            self.assertEqual(w.stop(), 0, w.text())
        waits = {}
        with open(starts) as f:
            for line in f:
                jid, t = line.split()
                j = self.s.job(jid)
                self.assertEqual((j["attempts"], j["stalled"]), (1, 0), j)
                waits[jid] = int(t) - parse_time(j["started_at"])
        self.assertEqual(sorted(waits), sorted(ids))
        stopped = [r for r in w.logs() if r.get("msg") == "worker stopped"]
        self.assertEqual(len(stopped), 1, w.text())
        self.assertEqual(stopped[0]["lease_lost"], 0, stopped[0])
        return waits, stopped[0]

    def test_slow_jobs_are_not_leased_ahead_of_a_free_handler(self):
        waits, stopped = self.slow_run("slow", 6, "--concurrency", "2")
        # Leased ahead, a job would wait a whole run (1.2 s) for a handler.
        for jid, ms in waits.items():
            self.assertLess(ms, LEASE_MS / 3, "%s waited %d ms after its lease: %r"
                            % (jid, ms, waits))
        self.assertEqual(stopped["prefetch"], 0, stopped)

    def test_a_fixed_prefetch_still_leases_ahead(self):
        waits, stopped = self.slow_run("fixed", 3, "--concurrency", "1", "--prefetch", "2")
        self.assertGreaterEqual(max(waits.values()), SLEEP_S * 1000, waits)
        self.assertEqual(stopped["prefetch"], 2, stopped)

    def test_a_fast_workload_ramps_the_prefetch_up(self):
        n = 3000
        for k in range(0, n, 1000):
            st, b, _ = self.s.enqueue("fast", {"jobs": [{"name": "noop", "payload": {}}
                                                        for _ in range(k, k + 1000)]})
            self.assertIn(st, (200, 201), b)
        w = Worker.example(self.s, "fast", "--concurrency", "2")
        try:
            self.wait_completed("fast", n, w, timeout=60)
        finally:
            self.assertEqual(w.stop(), 0, w.text())
        started = [r for r in w.logs() if r.get("msg") == "worker started"]
        stopped = [r for r in w.logs() if r.get("msg") == "worker stopped"]
        self.assertEqual(started[0]["prefetch"], "auto", started)
        # The old default was = concurrency (2); near-zero runs ask for many.
        self.assertGreater(stopped[0]["prefetch"], 20, stopped)
        self.assertEqual(stopped[0]["lease_lost"], 0, stopped)

    def test_a_bad_prefetch_is_refused(self):
        for bad in ("-1", "-2", "10001", "fast", ""):
            rc, out, err = run_errand(["work", "--queue", "q", "--prefetch", bad, "--", "true"])
            self.assertEqual(rc, 2, (bad, out, err))
            self.assertIn("--prefetch", err, bad)
            self.assertIn("auto", err, bad)
        rc, out, err = run_errand(["work", "--queue", "q", "--", "true"],
                                  env={"ERRAND_PREFETCH": "lots"})
        self.assertEqual(rc, 2, (out, err))
        self.assertIn("prefetch", err)
        rc, out, err = run_errand(["work", "--help"])
        self.assertEqual(rc, 0, err)
        self.assertIn("[default: auto]", [l for l in out.splitlines() if "--prefetch" in l][0])


if __name__ == "__main__":
    unittest.main()
