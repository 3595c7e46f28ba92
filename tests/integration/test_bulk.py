#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# POST /v1/bulk (docs/api.md): redrive or delete dead letters and cancel
# waiting or scheduled jobs, by ids or by a filter; a dry run counts
# without changing anything; a filter's action runs in chunks of at most
# 1,000 jobs, one transaction and one audit row (with its count) each;
# bad requests change nothing. Also against PostgreSQL.

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PG_SKIP, PG_SKIP_WHY, PgNodes, Server, error_of  # noqa: E402

ADMIN = "bulk-admin-token-0123456789"
WORKER = "bulk-worker-token-0123456789"


class BulkCases:
    """The cases, run on self.s (a server with ADMIN and WORKER tokens)."""

    def enqueue_many(self, queue, ids, **extra):
        jobs = [dict({"name": "n", "payload": {}, "id": i}, **extra) for i in ids]
        st, body, _ = self.s.enqueue(queue, {"jobs": jobs})
        self.assertIn(st, (200, 201), body)

    def make_dead(self, queue, ids):
        self.enqueue_many(queue, ids)
        st, body, _ = self.s.post("/v1/fetch", {"queues": [queue], "worker_id": "bulk",
                                                "max": len(ids)})
        self.assertEqual(st, 200, body)
        acks = [{"id": j["id"], "lease_token": j["lease_token"],
                 "fail": {"error": {"class": "permanent", "message": "no"}}} for j in body["jobs"]]
        self.assertEqual(len(acks), len(ids))
        st, body, _ = self.s.post("/v1/acks", {"acks": acks})
        self.assertEqual(st, 200, body)

    def bulk(self, body, status=200, **kw):
        st, b, _ = self.s.post("/v1/bulk", body, **kw)
        self.assertEqual(st, status, b)
        return b

    def state(self, job_id):
        st, b, _ = self.s.get("/v1/jobs/" + job_id)
        return b["job"]["state"] if st == 200 else None

    def audit(self, action):
        st, b, _ = self.s.get("/v1/audit?limit=1000")
        self.assertEqual(st, 200, b)
        return [(e["who"], e["target"], e["count"]) for e in b["entries"] if e["action"] == action]

    def test_redrive_and_delete_by_ids(self):
        q = self.prefix + "dq"
        ids = [q + "-%d" % i for i in range(4)]
        self.make_dead(q, ids)
        b = self.bulk({"action": "redrive", "ids": ids[:2] + [q + "-missing"]})
        self.assertEqual((b["count"], b["chunks"]), (2, 1))
        self.assertEqual(self.state(ids[0] + "-redrive-1"), "waiting")
        self.assertEqual(self.state(ids[2]), "dead")
        b = self.bulk({"action": "delete", "ids": ids[2:]})
        self.assertEqual(b["count"], 2)
        self.assertIsNone(self.state(ids[2]))
        self.assertIn(("admin", ",".join(ids[:2] + [q + "-missing"]), 2), self.audit("bulk.redrive"))
        self.assertIn(("admin", ",".join(ids[2:]), 2), self.audit("bulk.delete"))

    def test_a_filter_redrive_counts_first_and_skips_redriven_letters(self):
        q = self.prefix + "fq"
        ids = [q + "-%d" % i for i in range(5)]
        self.make_dead(q, ids)
        f = {"queue": q}
        b = self.bulk({"action": "redrive", "filter": f, "dry_run": True})
        self.assertEqual((b["count"], b["dry_run"]), (5, True))
        self.assertEqual(self.state(ids[0] + "-redrive-1"), None)  # a dry run changes nothing
        b = self.bulk({"action": "redrive", "filter": f})
        self.assertEqual(b["count"], 5)
        b = self.bulk({"action": "redrive", "filter": f, "dry_run": True})
        self.assertEqual(b["count"], 0)  # each was redriven once
        b = self.bulk({"action": "delete", "filter": dict(f, name="n"), "dry_run": True})
        self.assertEqual(b["count"], 5)
        b = self.bulk({"action": "delete", "filter": dict(f, name="other")})
        self.assertEqual(b["count"], 0)
        self.assertEqual(self.state(ids[0]), "dead")

    def test_a_filter_cancel_runs_in_chunks_of_a_thousand(self):
        q = self.prefix + "cq"
        n = 2300
        for start in range(0, n, 1000):
            self.enqueue_many(q, [q + "-%d" % i for i in range(start, min(n, start + 1000))])
        self.enqueue_many(q, [q + "-later"], delay_ms=3600000)
        b = self.bulk({"action": "cancel", "filter": {"queue": q, "state": "waiting"},
                       "dry_run": True})
        self.assertEqual(b["count"], n)
        b = self.bulk({"action": "cancel", "filter": {"queue": q, "state": "waiting"}})
        self.assertEqual((b["count"], b["chunks"]), (n, 3))
        st, body, _ = self.s.get("/v1/queues/" + q)
        self.assertEqual(body["queue"]["counts"]["waiting"], 0)
        self.assertEqual(body["queue"]["counts"]["cancelled"], n)
        self.assertEqual(self.state(q + "-later"), "scheduled")
        rows = [r for r in self.audit("bulk.cancel") if r[1] == "queue=%s state=waiting name=*" % q]
        self.assertEqual(sorted(r[2] for r in rows), [300, 1000, 1000])
        b = self.bulk({"action": "cancel", "filter": {"queue": q, "state": "scheduled"}})
        self.assertEqual(b["count"], 1)

    def test_bad_bulk_requests_are_refused_and_change_nothing(self):
        q = self.prefix + "bq"
        self.make_dead(q, [q + "-1"])
        cases = [
            ({}, "action"),
            ({"action": "explode", "ids": ["a"]}, "action"),
            ({"action": "redrive"}, "ids"),
            ({"action": "redrive", "ids": ["a"], "filter": {}}, "filter"),
            ({"action": "redrive", "ids": []}, "ids"),
            ({"action": "redrive", "ids": ["x"] * 1001}, "ids"),
            ({"action": "redrive", "ids": "a"}, "ids"),
            ({"action": "redrive", "ids": [1]}, "ids[0]"),
            ({"action": "redrive", "ids": ["ok", "bad id"]}, "ids[1]"),
            ({"action": "redrive", "ids": ["a"], "dry_run": True}, "dry_run"),
            ({"action": "redrive", "filter": {}, "dry_run": "yes"}, "dry_run"),
            ({"action": "redrive", "filter": []}, "filter"),
            ({"action": "redrive", "filter": {"what": 1}}, "filter.what"),
            ({"action": "redrive", "filter": {"queue": "bad queue"}}, "filter.queue"),
            ({"action": "redrive", "filter": {"name": 5}}, "filter.name"),
            ({"action": "redrive", "filter": {"state": "waiting"}}, "filter.state"),
            ({"action": "delete", "filter": {"state": "nope"}}, "filter.state"),
            ({"action": "cancel", "filter": {"state": "dead"}}, "filter.state"),
            ({"action": "cancel", "filter": {"state": "active"}}, "filter.state"),
            ({"action": "redrive", "ids": ["a"], "extra": 1}, "extra"),
        ]
        for body, field in cases:
            with self.subTest(body=str(body)[:60]):
                b = self.bulk(body, status=400)
                self.assertEqual(error_of(b)["field"], field)
        self.bulk({"action": "redrive", "ids": [q + "-1"]}, status=403, token=WORKER)
        st, b, _ = self.s.request("POST", "/v1/bulk", raw="{", token=ADMIN)
        self.assertEqual(st, 400)
        self.assertEqual(self.state(q + "-1"), "dead")
        self.assertIsNone(self.state(q + "-1-redrive-1"))


class SqliteBulk(BulkCases, unittest.TestCase):
    prefix = "s"

    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=["--token", "admin:" + ADMIN, "--token", "worker:" + WORKER],
                       token=ADMIN).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class PostgresBulk(BulkCases, PgNodes, unittest.TestCase):
    NODES = 1
    NODE_ARGS = ("--token", "admin:" + ADMIN, "--token", "worker:" + WORKER)
    prefix = "p"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.s = cls.servers[0]
        cls.s.token = ADMIN


if __name__ == "__main__":
    unittest.main()
