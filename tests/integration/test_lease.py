# SPDX-License-Identifier: MIT
#
# Leases against a real server: a lease that runs out without a heartbeat
# makes the job stalled (back to waiting, counted), the old token is refused
# with 409 lease_lost on complete, fail and heartbeat, and the next worker
# gets attempt 2 with a new token; past the queue's max_stalled the job goes
# to dead. Heartbeats keep a short lease alive.

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, error_of, now_ms, parse_time, wait_until  # noqa: E402

LEASE = 1000  # the smallest lease the API allows (ER_LEASE_MIN_MS)


class LeaseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=["--maintenance-interval", "50ms"]).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def setUp(self):
        self.assertTrue(self.s.alive(), "server died:\n" + self.s.log_text())

    def lease_one(self, queue, worker):
        jobs = self.s.fetch_jobs(queue, worker_id=worker, lease_ms=LEASE)
        self.assertEqual(len(jobs), 1, jobs)
        return jobs[0]

    def wait_state(self, job_id, state, timeout=6.0):
        got = wait_until(lambda: self.s.job(job_id)["state"] == state, timeout=timeout)
        self.assertTrue(got, "job %s never became %s: %r" % (job_id, state, self.s.job(job_id)))

    def assert_lease_lost(self, r, what):
        st, b, _ = r
        self.assertEqual(st, 409, "%s -> %s %r" % (what, st, b))
        self.assertEqual(error_of(b).get("code"), "lease_lost", "%s -> %r" % (what, b))

    def test_expired_lease_refuses_old_token_and_job_goes_to_next_worker(self):
        q = "lease-expire"
        st, b, _ = self.s.enqueue(q, {"name": "x", "id": "exp-1"})
        self.assertEqual(st, 201, b)
        j1 = self.lease_one(q, "worker-a")
        self.assertEqual(j1["attempt"], 1)
        self.assertLessEqual(parse_time(j1["lease_expires_at"]), now_ms() + LEASE + 500)
        self.wait_state("exp-1", "waiting")
        full = self.s.job("exp-1")
        self.assertEqual(full["stalled"], 1)
        self.assertIsNone(full["lease_owner"])
        old = j1["lease_token"]
        self.assert_lease_lost(self.s.complete("exp-1", old), "complete with old token")
        self.assert_lease_lost(self.s.fail("exp-1", old, {"class": "transient"}),
                               "fail with old token")
        self.assert_lease_lost(self.s.post("/v1/jobs/exp-1/heartbeat", {"lease_token": old}),
                               "heartbeat with old token")
        self.assert_lease_lost(self.s.post("/v1/jobs/exp-1/release", {"lease_token": old}),
                               "release with old token")
        self.assertEqual(self.s.job("exp-1")["state"], "waiting")

        jobs = self.s.fetch_jobs(q, worker_id="worker-b", lease_ms=30000)
        self.assertEqual(len(jobs), 1)
        j2 = jobs[0]
        self.assertEqual(j2["id"], "exp-1")
        self.assertEqual(j2["attempt"], 2)
        self.assertNotEqual(j2["lease_token"], old)
        self.assertEqual(self.s.job("exp-1")["lease_owner"], "worker-b")
        # the old owner still cannot touch the new attempt
        self.assert_lease_lost(self.s.complete("exp-1", old), "complete with old token (moved)")
        self.assertEqual(self.s.job("exp-1")["state"], "active")
        st, b, _ = self.s.complete("exp-1", j2["lease_token"], result={"by": "b"})
        self.assertEqual(st, 200, b)
        full = self.s.job("exp-1")
        self.assertEqual(full["state"], "completed")
        self.assertEqual(full["attempts"], 2)
        self.assertEqual(full["stalled"], 1)
        self.assertEqual(full["result"], {"by": "b"})

    def test_acks_with_an_expired_token_fail_that_item_with_lease_lost(self):
        q = "lease-acks"
        self.s.enqueue(q, {"name": "x", "id": "la-1"})
        j = self.lease_one(q, "worker-a")
        self.wait_state("la-1", "waiting")
        st, b, _ = self.s.post("/v1/acks", {"acks": [
            {"id": "la-1", "lease_token": j["lease_token"], "complete": {}}]})
        self.assertEqual(st, 200, b)
        self.assertEqual(error_of(b["results"][0]).get("code"), "lease_lost", b)
        self.assertEqual(self.s.job("la-1")["state"], "waiting")

    def test_max_stalled_1_sends_the_job_to_dead_on_its_second_expiry(self):
        q = "lease-stall"
        st, b, _ = self.s.request("PUT", "/v1/queues/" + q, {"max_stalled": 1})
        self.assertEqual(st, 200, b)
        self.s.enqueue(q, {"name": "x", "id": "stall-1"})
        self.lease_one(q, "worker-a")
        self.wait_state("stall-1", "waiting")
        self.assertEqual(self.s.job("stall-1")["stalled"], 1)
        j = self.lease_one(q, "worker-b")
        self.assertEqual(j["attempt"], 2)
        self.wait_state("stall-1", "dead")
        full = self.s.job("stall-1")
        self.assertGreaterEqual(full["stalled"], 1)
        self.assertIsNotNone(full["last_error"], full)
        st, b, _ = self.s.get("/v1/dead?queue=" + q)
        self.assertEqual(st, 200, b)
        self.assertEqual([x["id"] for x in b["jobs"]], ["stall-1"])
        self.assertEqual(self.s.fetch_jobs(q), [])

    def test_max_stalled_0_sends_the_job_to_dead_on_its_first_expiry(self):
        q = "lease-stall0"
        st, b, _ = self.s.request("PUT", "/v1/queues/" + q, {"max_stalled": 0})
        self.assertEqual(st, 200, b)
        self.s.enqueue(q, {"name": "x", "id": "stall0-1"})
        self.lease_one(q, "worker-a")
        self.wait_state("stall0-1", "dead")

    def test_a_stall_on_the_last_attempt_is_dead(self):
        # issue 16 item 13: max_attempts 1 ran a second time, as attempt 2 of 1
        q = "lease-last"
        self.s.enqueue(q, {"name": "x", "id": "last-1", "max_attempts": 1})
        self.lease_one(q, "worker-a")
        self.wait_state("last-1", "dead")
        full = self.s.job("last-1")
        self.assertEqual((full["attempts"], full["stalled"]), (1, 1), full)
        self.assertEqual(full["last_error"]["class"], "stalled", full)
        self.assertIn("last attempt", full["last_error"]["message"], full)
        self.assertEqual(self.s.fetch_jobs(q), [])

    def test_heartbeats_keep_a_short_lease_alive(self):
        q = "lease-hb"
        self.s.enqueue(q, {"name": "x", "id": "hb-1"})
        j = self.lease_one(q, "worker-a")
        end = time.monotonic() + 3.0  # three times the lease
        while time.monotonic() < end:
            st, b, _ = self.s.post("/v1/jobs/hb-1/heartbeat",
                                   {"lease_token": j["lease_token"], "extend_ms": 1500})
            self.assertEqual(st, 200, b)
            time.sleep(0.2)
        full = self.s.job("hb-1")
        self.assertEqual((full["state"], full["stalled"]), ("active", 0))
        st, b, _ = self.s.complete("hb-1", j["lease_token"])
        self.assertEqual(st, 200, b)
        self.assertEqual(self.s.job("hb-1")["attempts"], 1)

    def test_queue_lease_ms_setting_is_the_default_lease(self):
        q = "lease-qdefault"
        st, b, _ = self.s.request("PUT", "/v1/queues/" + q, {"lease_ms": 1000})
        self.assertEqual(st, 200, b)
        self.s.enqueue(q, {"name": "x", "id": "qd-1"})
        jobs = self.s.fetch_jobs(q)
        self.assertEqual(len(jobs), 1)
        self.wait_state("qd-1", "waiting")


if __name__ == "__main__":
    unittest.main()
