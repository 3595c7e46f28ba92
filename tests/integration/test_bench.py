# SPDX-License-Identifier: MIT
#
# `errand bench` against a real server: each scenario finishes and reports
# what it did (JSON on stdout, a table row on stderr), and the server holds
# exactly the jobs the report counts; bad flags are refused with exit 2 and
# nothing is sent.

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, run_errand  # noqa: E402


class BenchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server()
        cls.s.start()
        cls.url = "http://127.0.0.1:%d" % cls.s.port

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def bench(self, *args):
        rc, out, err = run_errand(["bench", "--server", self.url] + list(args), timeout=120)
        self.assertEqual(rc, 0, err)
        report = json.loads(out.strip().splitlines()[-1])
        self.assertTrue(report["complete"], report)
        self.assertEqual(report["errors"], 0, report)
        self.assertIn("jobs/s", err)
        return report

    def counts(self, queue):
        for q in self.s.get("/v1/queues")[1]["queues"]:
            if q["name"] == queue:
                return q["counts"]
        return {}

    def test_enqueue_and_bulk_store_what_they_report(self):
        r = self.bench("--scenario", "enqueue", "--jobs", "300", "--connections", "8",
                       "--queue", "b-enq")
        self.assertEqual(r["jobs"], 300)
        self.assertEqual(self.counts("b-enq")["waiting"], 300)
        r = self.bench("--scenario", "bulk", "--jobs", "2000", "--batch", "500",
                       "--connections", "1", "--queue", "b-bulk")
        self.assertEqual(self.counts("b-bulk")["waiting"], 2000)

    def test_process_completes_every_job_it_enqueued(self):
        r = self.bench("--scenario", "process", "--jobs", "500", "--connections", "2",
                       "--batch", "10", "--queue", "b-proc")
        self.assertEqual(r["jobs"], 500)
        c = self.counts("b-proc")
        self.assertEqual(c["completed"], 500, c)
        self.assertEqual(c["active"] + c["waiting"], 0, c)

    def test_latency_reports_percentiles_and_leaves_the_backlog(self):
        r = self.bench("--scenario", "latency", "--rate", "200", "--duration", "1s",
                       "--connections", "2", "--batch", "1", "--queue", "b-lat",
                       "--preload", "100", "--server-pid", str(self.s.proc.pid))
        self.assertEqual(r["jobs"], 200)
        for k in ("p50_ms", "p99_ms", "max_ms", "enqueue_p50_ms", "enqueue_p99_ms"):
            self.assertGreater(r[k], 0, k)
        self.assertLessEqual(r["p50_ms"], r["p99_ms"])
        self.assertGreater(r["server_rss_kib"], 0)
        self.assertEqual(self.counts("b-lat-backlog")["waiting"], 100)
        self.assertEqual(self.counts("b-lat")["completed"], 200)

    def test_bad_flags_are_refused_and_send_nothing(self):
        before = self.s.get("/v1/queues")[1]
        for args in (["--scenario", "nope"], ["--jobs", "0"], ["--server", "ftp://x"],
                     ["--connections", "abc"], ["--unknown", "1"]):
            base = ["bench", "--server", self.url] if "--server" not in args else ["bench"]
            rc, out, err = run_errand(base + args + ["--queue", "b-bad"])
            self.assertEqual(rc, 2, (args, out, err))
            self.assertTrue(err.strip(), args)
        self.assertEqual(self.s.get("/v1/queues")[1], before)


if __name__ == "__main__":
    unittest.main()
