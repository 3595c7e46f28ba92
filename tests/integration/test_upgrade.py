#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# A database written by the previous release (fixtures/release-0.1.0.db,
# made by fixtures/make_release_db.py) opens with this server and works:
# what it stored reads back as that release answered it (queue settings,
# including a rate limit it stored and this version enforces, jobs with
# results and errors, a scheduler, a cursor), and its jobs can still be leased, completed,
# redriven and cancelled; once retention deletes its finished jobs their
# ids stay duplicates (the tombstones the migration added).

import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, error_of, wait_until  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release-0.1.0")
# what changes with the clock, not with the data
VOLATILE = {"oldest_waiting_age_ms", "next_run_at", "next_runs"}
# settings members later versions added, as they read on a queue that never set them
ADDED_SETTINGS = {"dispatch": None, "throttle_max_ms": 3600000, "fairness": None,
                  "group_limits": None, "aging": None}
# queue members later versions added, as they read on a queue not throttled
ADDED_QUEUE = {"throttled_until": None}


def without(d, keys):
    if isinstance(d, dict):
        return {k: without(v, keys) for k, v in d.items() if k not in keys}
    return d


class UpgradeFromPreviousRelease(unittest.TestCase):
    def setUp(self):
        with open(FIXTURE + ".json") as f:
            self.old = json.load(f)
        self.old["queue"]["queue"]["settings"].update(ADDED_SETTINGS)
        # a rate limit that release stored (and did not enforce) reads with
        # the burst it now has
        self.old["queue"]["queue"]["settings"]["rate_limit"]["burst"] = 1
        self.old["queue"]["queue"].update(ADDED_QUEUE)
        self.tmp = tempfile.mkdtemp(prefix="errand-upgrade-")
        shutil.copyfile(FIXTURE + ".db", os.path.join(self.tmp, "errand.db"))
        self.s = Server(tmpdir=self.tmp).start()

    def tearDown(self):
        self.s.cleanup()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def get(self, path):
        st, body, _ = self.s.get(path)
        self.assertEqual(st, 200, body)
        return body

    def test_what_it_stored_reads_as_that_release_answered(self):
        self.assertEqual(without(self.get("/v1/queues/mail"), VOLATILE),
                         without(self.old["queue"], VOLATILE))
        for jid in ("j-wait", "j-done", "j-dead", "j-later"):
            self.assertEqual(self.get("/v1/jobs/" + jid), self.old[jid], jid)
        # the fixture's scheduler is due once the wall clock passes its first
        # run (03:00 Berlin after it was made): the server then ticks it at
        # start, so its last tick is either still none or a later time
        sched = self.get("/v1/schedulers/nightly")
        tick = sched["scheduler"]["last_tick"]
        self.assertTrue(tick is None or tick > self.old["scheduler"]["scheduler"]["created_at"],
                        tick)
        self.assertEqual(without(sched, VOLATILE | {"last_tick"}),
                         without(self.old["scheduler"], VOLATILE | {"last_tick"}))
        self.assertEqual(self.get("/v1/cursors/etl"), self.old["cursor"])

    def test_its_jobs_and_settings_keep_working(self):
        jobs = self.s.fetch_jobs(["mail"], max=5)
        self.assertEqual([j["id"] for j in jobs], ["j-wait"])
        st, body, _ = self.s.complete("j-wait", jobs[0]["lease_token"], result={"ok": 1})
        self.assertEqual(st, 200, body)
        self.assertEqual(self.get("/v1/jobs/j-wait")["job"]["state"], "completed")
        st, body, _ = self.s.post("/v1/dead/j-dead/redrive")
        self.assertEqual(st, 201, body)
        self.assertEqual((body["job"]["state"], body["job"]["idempotency_key"]),
                         ("waiting", "j-dead"))
        st, body, _ = self.s.request("DELETE", "/v1/jobs/j-later")
        self.assertEqual(st, 200, body)
        self.assertEqual(body["job"]["state"], "cancelled")
        # a setting changed: the rest, and the stored rate limit, are kept
        st, body, _ = self.s.request("PUT", "/v1/queues/mail", {"concurrency": 6})
        self.assertEqual(st, 200, body)
        want = dict(self.old["queue"]["queue"]["settings"], concurrency=6)
        self.assertEqual(body["settings"], want)
        # the stored rate limit (10 per s) is enforced now: one lease per 100 ms
        st, body, _ = self.s.post("/v1/queues/mail/jobs", {"jobs": [{"name": "r"}] * 3})
        self.assertEqual(st, 201, body)
        self.assertEqual(len(self.s.fetch_jobs(["mail"], max=3, wait_ms=1000)), 1)
        # and a new one replaces it
        st, body, _ = self.s.request("PUT", "/v1/queues/mail",
                                     {"rate_limit": {"max": 1, "per_ms": 10}})
        self.assertEqual(st, 200, body)
        self.assertEqual(self.get("/v1/queues/mail")["queue"]["settings"]["rate_limit"],
                         {"max": 1, "per_ms": 10, "burst": 1})
        # the scheduler's tick job is built from its stored spec
        st, body, _ = self.s.post("/v1/schedulers/nightly/trigger")
        self.assertIn(st, (200, 201), body)
        self.assertEqual(body["job"]["queue"], "reports")
        self.assertEqual(body["job"]["priority"], 2)
        self.assertEqual(body["job"]["max_attempts"], 3)
        self.assertEqual(body["job"]["payload"]["note"], "h\u00e9 \u2603")
        # and it survives a restart
        self.s.restart()
        self.assertEqual(self.get("/v1/jobs/j-wait")["job"]["result"], {"ok": 1})

    def test_its_finished_jobs_leave_tombstones_when_retention_deletes_them(self):
        self.s.cleanup()
        # the fixture's jobs finished when it was made: a window that still
        # covers them however old the fixture gets
        self.s = Server(tmpdir=self.tmp, args=["--retention-interval", "100ms",
                                               "--dedup-window", "3650d"]).start()
        st, body, _ = self.s.request("PUT", "/v1/queues/mail",
                                     {"retention": {"completed": {"age_s": 1},
                                                    "dead": {"age_s": 1}}})
        self.assertEqual(st, 200, body)
        for jid in ("j-done", "j-dead"):
            wait_until(lambda: self.s.get("/v1/jobs/" + jid)[0] == 404, timeout=20,
                       what="retention to delete " + jid)
            old = self.old[jid]["job"]
            st, body, _ = self.s.enqueue("mail", {"name": "again", "id": jid})
            self.assertEqual(st, 200, body)
            self.assertEqual(body, {"job": None, "duplicate": True,
                                    "tombstone": {"queue": old["queue"], "state": old["state"],
                                                  "finished_at": old["finished_at"]}})
        self.assertEqual(self.s.get("/v1/jobs/j-wait")[0], 200, "a waiting job is not deleted")


if __name__ == "__main__":
    unittest.main(verbosity=2)
