# SPDX-License-Identifier: MIT
#
# The PostgreSQL store's batch paths through HTTP: a bulk enqueue (COPY into
# the session's batch table) keeps payloads with COPY's special characters
# and reports in-batch duplicates; a batch of acks whose completes and
# failures go to one statement each still answers every item on its own (a
# stale token is that item's 409 while the rest apply) and counts only the
# applied ones in /metrics. Needs ERRAND_TEST_PG_URL (scripts/test starts one).

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402
from test_pg_multinode import PG_URL, psql, with_params  # noqa: E402


def metric(text, name, labels):
    for line in text.splitlines():
        if line.startswith("%s{%s} " % (name, labels)):
            return float(line.split()[-1])
    return None


@unittest.skipUnless(PG_URL, "ERRAND_TEST_PG_URL is not set")
class PgBatchAcksTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.schema = "acks_%d_%d" % (os.getpid(), int(time.time()) % 100000)
        cls.s = Server(store=with_params(PG_URL, schema=cls.schema)).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()
        psql('DROP SCHEMA IF EXISTS "%s" CASCADE' % cls.schema)

    def test_bulk_keeps_payloads_and_reports_duplicates(self):
        payloads = [{"s": "tab\there"}, {"s": "nl\nx\r\\N back\\slash \\\\ é"}, "plain",
                    [1, 2.5, None], {"big": "x" * 100000}]
        jobs = [{"id": "b%d" % i, "name": "n", "payload": p} for i, p in enumerate(payloads)]
        jobs.append({"id": "b0", "name": "again", "payload": 1})
        st, body, _ = self.s.post("/v1/queues/bulkq/jobs", {"jobs": jobs})
        self.assertIn(st, (200, 201), body)
        self.assertEqual(body["duplicates"], ["b0"])
        for i, p in enumerate(payloads):
            j = self.s.job("b%d" % i)
            self.assertEqual(j["payload"], p)
            self.assertEqual(j["name"], "n")
            self.assertEqual(j["state"], "waiting")

    def test_batch_acks_answer_each_item(self):
        for i in range(6):
            st, body, _ = self.s.enqueue("ackq", {"id": "a%d" % i, "name": "n", "payload": {}})
            self.assertEqual(st, 201, body)
        tok = {j["id"]: j["lease_token"] for j in self.s.fetch_jobs("ackq", max=6)}
        self.assertEqual(len(tok), 6)
        err = {"error": {"class": "transient", "message": "m"}}
        perm = {"error": {"class": "permanent", "message": "m"}}
        acks = [{"id": "a0", "lease_token": tok["a0"], "complete": {"result": 1}},
                {"id": "a1", "lease_token": "stale", "complete": {}},
                {"id": "a2", "lease_token": tok["a2"], "complete": {}},
                {"id": "a3", "lease_token": tok["a3"], "fail": err},
                {"id": "a4", "lease_token": "stale", "fail": perm},
                {"id": "a5", "lease_token": tok["a5"], "fail": perm}]
        st, body, _ = self.s.post("/v1/acks", {"acks": acks})
        self.assertEqual(st, 200, body)
        r = body["results"]
        self.assertEqual([x["id"] for x in r], ["a%d" % i for i in range(6)])
        self.assertTrue(r[0]["ok"] and r[2]["ok"] and r[3]["ok"] and r[5]["ok"], r)
        self.assertEqual(r[1]["error"]["code"], "lease_lost")
        self.assertEqual(r[4]["error"]["code"], "lease_lost")
        self.assertEqual(r[3]["state"], "scheduled")
        self.assertEqual(r[5]["state"], "dead")
        want = {"a0": "completed", "a1": "active", "a2": "completed", "a3": "scheduled",
                "a4": "active", "a5": "dead"}
        for i, state in want.items():
            self.assertEqual(self.s.job(i)["state"], state, i)
        self.assertEqual(self.s.job("a0")["result"], 1)
        st, text, _ = self.s.get("/metrics")
        self.assertEqual(st, 200)
        self.assertEqual(metric(text, "errand_jobs_failed_total", 'queue="ackq"'), 2)
        self.assertEqual(metric(text, "errand_jobs_completed_total", 'queue="ackq"'), 2)


if __name__ == "__main__":
    unittest.main()
