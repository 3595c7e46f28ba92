# SPDX-License-Identifier: MIT
#
# Crash safety: several threads enqueue unique ids as fast as they can while
# a worker fetches and completes, then the server is SIGKILLed mid-load and
# restarted on the same SQLite file, three times. Every id whose 201 was
# received must still exist, once, in a valid state; afterwards every job
# can be fetched and completed.

import http.client
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import STATES, Server  # noqa: E402

NET_ERRORS = (OSError, http.client.HTTPException)

PRODUCERS = 8
LOAD_SECONDS = 2.5
CYCLES = 3
QUEUES = ["crash-a", "crash-b"]


class CrashTest(unittest.TestCase):
    def setUp(self):
        self.s = Server()
        self.s.start()
        self.acked = set()       # ids whose enqueue got 201/200
        self.completed = set()   # ids whose complete got 200
        self.lock = threading.Lock()

    def tearDown(self):
        self.s.cleanup()

    def producer(self, cycle, t, stop):
        n = 0
        while not stop.is_set():
            jid = "c%d-t%d-%d" % (cycle, t, n)
            n += 1
            try:
                st, b, _ = self.s.enqueue(QUEUES[n % 2], {"name": "crash", "id": jid,
                                                          "payload": {"n": n}}, retry=False)
            except NET_ERRORS:
                time.sleep(0.01)  # server gone: keep trying until told to stop
                continue
            if st in (200, 201):
                with self.lock:
                    self.acked.add(jid)

    def worker(self, stop):
        while not stop.is_set():
            try:
                st, b, _ = self.s.fetch(QUEUES, worker_id="crash-w", max=20, wait_ms=100,
                                       lease_ms=3000, retry=False)
                if st != 200 or not b["jobs"]:
                    continue
                acks = [{"id": j["id"], "lease_token": j["lease_token"], "complete": {}}
                        for j in b["jobs"]]
                st, b, _ = self.s.post("/v1/acks", {"acks": acks}, retry=False)
                if st == 200:
                    with self.lock:
                        self.completed.update(r["id"] for r in b["results"] if r.get("ok"))
            except NET_ERRORS:
                time.sleep(0.01)

    def load_and_kill(self, cycle):
        stop = threading.Event()
        threads = [threading.Thread(target=self.producer, args=(cycle, t, stop))
                   for t in range(PRODUCERS)]
        threads.append(threading.Thread(target=self.worker, args=(stop,)))
        for th in threads:
            th.start()
        time.sleep(LOAD_SECONDS)
        self.s.kill()  # SIGKILL while the threads are still sending
        time.sleep(0.2)
        stop.set()
        for th in threads:
            th.join(30)
            self.assertFalse(th.is_alive())

    def check_store(self):
        s = self.s
        self.assertEqual(s.query("PRAGMA integrity_check"), [("ok",)])
        rows = s.query("SELECT id, state FROM jobs")
        ids = [r[0] for r in rows]
        self.assertEqual(len(ids), len(set(ids)), "an id appears twice")
        bad = [r for r in rows if r[1] not in STATES]
        self.assertEqual(bad, [], "rows with an invalid state")
        self.assertEqual(s.query("SELECT id FROM jobs WHERE state = 2 AND"
                                 " (lease_token IS NULL OR lease_expires_at = 0)"), [],
                         "active rows without a lease")
        self.assertEqual(s.query("SELECT id FROM jobs WHERE state != 2 AND"
                                 " lease_token IS NOT NULL"), [],
                         "inactive rows holding a lease")
        on_disk = set(ids)
        with self.lock:
            lost = sorted(self.acked - on_disk)
            done = set(self.completed)
        self.assertEqual(lost, [], "acknowledged enqueues lost: %d of %d" %
                         (len(lost), len(self.acked)))
        states = dict(rows)
        regressed = sorted(i for i in done if STATES[states[i]] != "completed")
        self.assertEqual(regressed, [], "acknowledged completions lost")
        return states

    def check_http_sample(self, ids):
        # every acknowledged id answers GET 200 (read in 4 threads)
        ids = sorted(ids)
        missing = []

        def part(chunk):
            for i in chunk:
                st, b, _ = self.s.get("/v1/jobs/" + i)
                if st != 200 or b["job"]["id"] != i:
                    missing.append((i, st))
        threads = [threading.Thread(target=part, args=(ids[k::4],)) for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        self.assertEqual(missing, [])

    def test_sigkill_mid_load_loses_no_acknowledged_job_three_times(self):
        for cycle in range(CYCLES):
            self.load_and_kill(cycle)
            self.assertGreater(len(self.acked), 0, "no enqueue was acknowledged:\n" +
                               self.s.log_text())
            self.s.start()  # same db file, new port
            states = self.check_store()
            sys.stderr.write("cycle %d: %d enqueues acknowledged, %d completions acknowledged,"
                             " %d rows\n" % (cycle, len(self.acked), len(self.completed),
                                             len(states)))
            self.check_http_sample(self.acked)
        # drain: expired leases come back, everything gets completed
        left = self.drain(timeout=30)
        self.assertEqual(left, {}, "jobs not completed after the drain")
        states = self.check_store()
        self.assertTrue(all(STATES[v] == "completed" for v in states.values()))

    def drain(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = self.s.fetch_jobs(QUEUES, worker_id="drainer", max=500, wait_ms=200)
            if jobs:
                acks = [{"id": j["id"], "lease_token": j["lease_token"], "complete": {}}
                        for j in jobs]
                st, b, _ = self.s.post("/v1/acks", {"acks": acks})
                self.assertEqual(st, 200, b)
                continue
            pending = self.s.query("SELECT id, state FROM jobs WHERE state != 3")
            if not pending:
                return {}
            # active rows wait for their lease (3 s) to expire; scheduled for run_at
            time.sleep(0.2)
        return dict(self.s.query("SELECT id, state FROM jobs WHERE state != 3")[:20])


if __name__ == "__main__":
    unittest.main()
