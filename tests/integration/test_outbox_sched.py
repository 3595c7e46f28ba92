# SPDX-License-Identifier: MIT
#
# Scheduled jobs with an outbox (the seed recipe,
# ../shared/seeds/001_aadf3b4482e68bbb.txt), end to end on a real server
# and a real application database: a tick runs under a run-once lease and
# writes its event with the lease's idempotency key, insert-once; the relay
# turns it into a job carrying that key. The recipe's assertions:
#   1. identical {type, code, run_key} gives an identical idempotency key;
#   2. a reclaimed lease rotates the owner token and keeps the key;
#   3. different run keys give different outbox rows;
#   4. a duplicate outbox write is ignored;
#   5. a repeated dispatch is deduplicated by the downstream service.
# Needs ERRAND_TEST_PG_URL.

import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import wait_until  # noqa: E402
from test_dispatch import Receiver  # noqa: E402
from test_outbox import AppDb, jobs_of, relay_server, unpublished  # noqa: E402
from test_pg_multinode import PG_URL  # noqa: E402

ROUTES = {"billing.daily": [{"queue": "billing", "name": "run-billing"}],
          "billing.hook": [{"queue": "billing-hooks", "name": "notify-billing"}]}


@unittest.skipUnless(PG_URL, "ERRAND_TEST_PG_URL is not set")
class ScheduledOutboxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.db = AppDb("sched")
        cls.s = relay_server(cls.db, routes=ROUTES).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()
        cls.db.drop()

    def acquire(self, run_key, ttl_ms=1000, code="daily-billing"):
        st, body, _ = self.s.post("/v1/leases", {"type": "schedule", "code": code,
                                                 "run_key": run_key, "ttl_ms": ttl_ms})
        return st, body

    def write_event(self, key, run_key):
        """The tick's transaction: insert-once by the lease's key. True when inserted."""
        rows = self.db.sql("""
            BEGIN;
            INSERT INTO outbox_events (idempotency_key, topic, payload)
              VALUES ('%s', 'billing.daily', '{"billingDate": "%s"}')
              ON CONFLICT (idempotency_key) DO NOTHING RETURNING id;
            COMMIT;""" % (key, run_key))
        return len(rows) == 1

    def test_a_tick_rerun_after_a_reclaim_adds_no_second_event(self):
        run_key = "2026-12-01"
        st, first = self.acquire(run_key)
        self.assertEqual(st, 200, first)
        self.assertTrue(self.write_event(first["idempotency_key"], run_key))
        # the first owner stalls; its lease expires and another node reclaims it
        time.sleep(1.2)
        st, second = self.acquire(run_key)
        self.assertEqual(st, 200, second)
        # 1 and 2: the same key for the same (type, code, run_key), a new owner token
        self.assertEqual(second["idempotency_key"], first["idempotency_key"])
        self.assertNotEqual(second["owner_token"], first["owner_token"])
        self.assertGreater(second["fence"], first["fence"])
        # 4: the reclaimed tick's write is ignored
        self.assertFalse(self.write_event(second["idempotency_key"], run_key))
        st, _, _ = self.s.post("/v1/leases/complete", {"owner_token": second["owner_token"]})
        self.assertEqual(st, 200)
        # 3: another day's tick is another row
        st, other = self.acquire("2026-12-02")
        self.assertEqual(st, 200, other)
        self.assertNotEqual(other["idempotency_key"], first["idempotency_key"])
        self.assertTrue(self.write_event(other["idempotency_key"], "2026-12-02"))
        self.assertEqual(self.db.sql("SELECT count(*) FROM outbox_events"
                                     " WHERE topic = 'billing.daily'")[0][0], "2")
        # the relay makes one job per row, each carrying its tick's key
        wait_until(lambda: unpublished(self.db, "AND topic = 'billing.daily'") == 0 and
                   len(jobs_of(self.s, "billing")) == 2,
                   timeout=15, what="both ticks relayed")
        keys = sorted(j["idempotency_key"] for j in jobs_of(self.s, "billing"))
        self.assertEqual(keys, sorted([first["idempotency_key"], other["idempotency_key"]]))

    def test_a_repeated_dispatch_is_deduplicated_downstream(self):
        # 5: the tick's job goes to an HTTP dispatch queue; the receiver
        # applies the effect and dies before answering, so errand sends the
        # request again, with the same Idempotency-Key, and nothing is
        # applied twice
        r = Receiver(tempfile.mkdtemp(prefix="errand-outbox-recv-")).start()
        try:
            st, b, _ = self.s.request("PUT", "/v1/queues/billing-hooks", {
                "dispatch": {"url": r.url("/crash-once")},
                "defaults": {"backoff": {"type": "fixed", "delay_ms": 200, "jitter": 0}}})
            self.assertEqual(st, 200, b)
            st, lease = self.acquire("2026-12-09", code="daily-hook")
            self.assertEqual(st, 200, lease)
            key = lease["idempotency_key"]
            self.db.sql("INSERT INTO outbox_events (idempotency_key, topic, payload)"
                        " VALUES ('%s', 'billing.hook', '{\"day\": \"2026-12-09\"}')" % key)
            wait_until(lambda: r.proc.poll() is not None, timeout=20,
                       what="the receiver applied the effect and died")
            r.start()
            wait_until(lambda: len(jobs_of(self.s, "billing-hooks", "completed")) == 1,
                       timeout=30, what="the retry answered")
            self.assertEqual(jobs_of(self.s, "billing-hooks", "completed")[0]["idempotency_key"],
                             key)
            self.assertEqual(r.effects(key), [(key,)], "applied once")
            self.assertGreaterEqual(len(r.requests(key)), 2, "the dispatch was repeated")
        finally:
            r.kill()


if __name__ == "__main__":
    unittest.main()
