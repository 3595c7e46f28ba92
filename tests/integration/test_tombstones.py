#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# Ids that outlive retention: with retention.completed.age_s 1 a finished
# job is deleted about a second later, and its id, given again, is still a
# duplicate (HTTP single and bulk, the CLI, a redrive whose id it would
# take, and on PostgreSQL the application's errand.enqueue), reported with
# the tombstone (queue, state, finished_at) instead of a job. An idempotency
# key is not remembered. With a short --dedup-window the id is new once the
# window has passed; 0 remembers none. A bad --dedup-window is refused at
# start. Runs on SQLite, and on PostgreSQL when ERRAND_TEST_PG_URL is set.

import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, StartError, error_of, parse_time, run_errand, wait_until  # noqa: E402
from test_pg_multinode import PG_URL, psql, with_params  # noqa: E402

KEEP_1S = {"retention": {"completed": {"age_s": 1}, "dead": {"age_s": 1}}}


class TombstoneCases:
    """The cases; a subclass says which store (self.store_url(), self.sql_enqueue)."""

    def server(self, *args):
        s = Server(args=["--retention-interval", "100ms"] + list(args), store=self.store_url())
        s.start()
        self.addCleanup(s.cleanup)
        return s

    def finish(self, s, queue, jid, outcome="complete", **extra):
        """Enqueues jid on queue and completes it (or fails it permanently);
        returns the job as it was finished."""
        st, body, _ = s.enqueue(queue, dict({"name": "n", "id": jid}, **extra))
        self.assertEqual(st, 201, body)
        [job] = s.fetch_jobs([queue])
        self.assertEqual(job["id"], jid)
        if outcome == "complete":
            st, body, _ = s.complete(jid, job["lease_token"])
        else:
            st, body, _ = s.fail(jid, job["lease_token"], {"class": "permanent", "message": "no"})
        self.assertEqual(st, 200, body)
        return s.job(jid)

    def wait_deleted(self, s, jid):
        wait_until(lambda: s.job(jid) is None, timeout=20, what="retention to delete " + jid)

    def test_an_id_deleted_by_retention_is_still_a_duplicate(self):
        s = self.server()
        st, body, _ = s.request("PUT", "/v1/queues/mail", KEEP_1S)
        self.assertEqual(st, 200, body)
        done = self.finish(s, "mail", "welcome-1")
        dead = self.finish(s, "mail", "charge-1", outcome="fail")
        self.wait_deleted(s, "welcome-1")
        self.wait_deleted(s, "charge-1")

        st, body, _ = s.enqueue("other", {"name": "again", "id": "welcome-1"})
        self.assertEqual(st, 200, body)
        self.assertEqual(body, {"job": None, "duplicate": True,
                                "tombstone": {"queue": "mail", "state": "completed",
                                              "finished_at": done["finished_at"]}})
        self.assertIsNone(s.job("welcome-1"), "nothing was stored")
        # the same through the jansson reader (a backoff object is not the fast path's)
        st, body2, _ = s.enqueue("other", {"name": "n", "id": "welcome-1",
                                           "backoff": {"type": "fixed"}})
        self.assertEqual((st, body2), (200, body))

        # bulk: listed among the duplicates, each with its tombstone
        st, body, _ = s.enqueue("other", {"jobs": [{"name": "n", "id": "charge-1"},
                                                   {"name": "n", "id": "fresh-1"},
                                                   {"name": "n", "id": "welcome-1"}]})
        self.assertEqual(st, 201, body)
        self.assertEqual(body["ids"], ["charge-1", "fresh-1", "welcome-1"])
        self.assertEqual(body["duplicates"], ["charge-1", "welcome-1"])
        self.assertEqual(body["tombstones"], [
            {"id": "charge-1", "queue": "mail", "state": "dead",
             "finished_at": dead["finished_at"]},
            {"id": "welcome-1", "queue": "mail", "state": "completed",
             "finished_at": done["finished_at"]}])
        self.assertEqual(s.job("fresh-1")["state"], "waiting")
        self.assertIsNone(s.job("charge-1"))

        # the CLI says so and prints the tombstone
        rc, out, err = run_errand(["enqueue", "mail", "n", "--id", "welcome-1",
                                   "--server", "http://127.0.0.1:%d" % s.port])
        self.assertEqual(rc, 0, err)
        self.assertIn("deleted by retention", err)
        self.assertEqual(json.loads(out)["state"], "completed")

        # an idempotency key is not remembered
        st, body, _ = s.enqueue("mail", {"name": "n", "id": "welcome-2",
                                         "idempotency_key": "welcome-1"})
        self.assertEqual(st, 201, body)

        # a redrive whose copy would take a remembered id is refused: c2's
        # first copy finishes and retention deletes it; c2 is deleted and
        # enqueued again, dies, and its redrive would make c2-redrive-1 again
        # (a client may not enqueue an id of that form itself)
        st, body, _ = s.request("PUT", "/v1/queues/keep",
                                {"retention": {"completed": {"age_s": 1}, "dead": "keep"}})
        self.assertEqual(st, 200, body)
        self.finish(s, "keep", "c2", outcome="fail")
        st, body, _ = s.post("/v1/dead/c2/redrive")
        self.assertEqual(st, 201, body)
        [copy] = s.fetch_jobs(["keep"])
        self.assertEqual(copy["id"], "c2-redrive-1")
        self.assertEqual(s.complete(copy["id"], copy["lease_token"])[0], 200)
        self.wait_deleted(s, "c2-redrive-1")
        st, body, _ = s.request("DELETE", "/v1/dead/c2")
        self.assertEqual(st, 200, body)
        self.finish(s, "keep", "c2", outcome="fail")
        st, body, _ = s.post("/v1/dead/c2/redrive")
        self.assertEqual(st, 409, body)
        self.assertEqual(error_of(body)["field"], "id")
        self.assertIn("c2-redrive-1", error_of(body)["message"])

        if self.sql_enqueue:
            self.assertEqual(self.sql_enqueue("welcome-1"), "welcome-1")
            self.assertIsNone(s.job("welcome-1"), "the SQL function stored nothing either")

    def test_the_longest_retention_keeps_jobs_and_a_longer_one_is_refused(self):
        # issue 16 item 7: 18446744073709551 s overflowed age_s * 1000 and
        # deleted every finished job; ages are now at most 100 years
        s = self.server()
        st, body, _ = s.request("PUT", "/v1/queues/keep", {"retention": {
            "completed": {"age_s": 18446744073709551}}})
        self.assertEqual(st, 400, body)
        self.assertEqual(body["error"]["field"], "retention.completed.age_s", body)
        st, body, _ = s.request("PUT", "/v1/queues/keep", {"retention": {
            "completed": {"age_s": 3155760000, "count": 1000000000000},
            "dead": {"age_s": 3155760000}}})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["settings"]["retention"]["completed"]["age_s"], 3155760000)
        self.finish(s, "keep", "kept-1")
        self.finish(s, "keep", "kept-2", outcome="fail")
        # a queue with a 1 s retention shows when a retention pass has run
        st, body, _ = s.request("PUT", "/v1/queues/canary", KEEP_1S)
        self.assertEqual(st, 200, body)
        self.finish(s, "canary", "canary-1")
        self.wait_deleted(s, "canary-1")
        self.assertEqual(s.job("kept-1")["state"], "completed")
        self.assertEqual(s.job("kept-2")["state"], "dead")

    def test_past_a_short_window_the_id_is_new(self):
        s = self.server("--dedup-window", "4s")
        s.request("PUT", "/v1/queues/mail", KEEP_1S)
        done = self.finish(s, "mail", "short-1")
        self.wait_deleted(s, "short-1")
        end = parse_time(done["finished_at"]) + 4000
        st, body, _ = s.enqueue("mail", {"name": "n", "id": "short-1"})
        if time.time() * 1000 < end - 200:  # still inside the window when asked
            self.assertEqual(st, 200, body)
            self.assertEqual(body["tombstone"]["state"], "completed")
        wait_until(lambda: time.time() * 1000 > end + 50, timeout=10, what="the window to pass")
        st, body, _ = s.enqueue("mail", {"name": "n", "id": "short-1"})
        self.assertEqual(st, 201, body)
        self.assertEqual(body["job"]["state"], "waiting")

    def test_a_zero_window_remembers_nothing(self):
        s = self.server("--dedup-window", "0")
        s.request("PUT", "/v1/queues/mail", KEEP_1S)
        self.finish(s, "mail", "zero-1")
        self.wait_deleted(s, "zero-1")
        st, body, _ = s.enqueue("mail", {"name": "n", "id": "zero-1"})
        self.assertEqual(st, 201, body)


class SqliteTombstones(TombstoneCases, unittest.TestCase):
    sql_enqueue = None

    def store_url(self):
        return "default"

    def test_a_bad_dedup_window_is_refused_at_start(self):
        for args, env, says in (
                (["--dedup-window", "3651d"], None, "--dedup-window must be in 0..315360000000"),
                (["--dedup-window", "soon"], None, "--dedup-window: cannot parse 'soon'"),
                (["--dedup-window", "-1s"], None, "--dedup-window: cannot parse '-1s'"),
                ([], {"ERRAND_DEDUP_WINDOW": "9223372036854775807d"}, "--dedup-window")):
            s = Server(args=args, env=env)
            self.addCleanup(s.cleanup)
            with self.assertRaises(StartError, msg=repr(args or env)) as cm:
                s.start()
            self.assertIn(says, str(cm.exception))
        # in range, from the environment: accepted
        s = Server(env={"ERRAND_DEDUP_WINDOW": "3650d"})
        self.addCleanup(s.cleanup)
        s.start()


@unittest.skipUnless(PG_URL, "ERRAND_TEST_PG_URL is not set")
class PostgresTombstones(TombstoneCases, unittest.TestCase):
    def setUp(self):
        self.schema = "tomb_%d_%d" % (os.getpid(), int(time.time() * 1000) % 10000000)
        self.addCleanup(lambda: psql('DROP SCHEMA IF EXISTS "%s" CASCADE' % self.schema))

    def store_url(self):
        return with_params(PG_URL, schema=self.schema)

    def sql_enqueue(self, jid):
        rows = psql("SELECT \"%s\".enqueue('other', 'n', '{}', '{\"id\":\"%s\"}')"
                    % (self.schema, jid))
        return rows[0][0]


if __name__ == "__main__":
    unittest.main(verbosity=2)
