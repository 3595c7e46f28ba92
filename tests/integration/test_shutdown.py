# SPDX-License-Identifier: MIT
#
# Graceful shutdown: SIGTERM while clients enqueue and a long-poll fetch is
# parked makes the server answer what it received, exit 0 within seconds,
# and keep every request it answered with 2xx; /readyz stops saying 200; a
# second signal during shutdown exits at once.

import http.client
import os
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402

NET_ERRORS = (OSError, http.client.HTTPException)


class ShutdownTest(unittest.TestCase):
    def setUp(self):
        self.s = Server().start()
        self.acked = set()
        self.refused = {}  # id -> status of a non-2xx answer
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = []

    def tearDown(self):
        self.stop.set()
        for th in self.threads:
            th.join(30)
        self.s.cleanup()

    def start_producers(self, n, tag):
        def run(t):
            i = 0
            while not self.stop.is_set():
                jid = "%s-%d-%d" % (tag, t, i)
                i += 1
                try:
                    st, _, _ = self.s.enqueue("sd-q", {"name": "x", "id": jid}, retry=False)
                except NET_ERRORS:
                    time.sleep(0.02)
                    continue
                with self.lock:
                    if 200 <= st < 300:
                        self.acked.add(jid)
                    else:
                        self.refused[jid] = st
        for t in range(n):
            th = threading.Thread(target=run, args=(t,))
            th.start()
            self.threads.append(th)

    def test_sigterm_under_load_exits_0_answers_long_poll_and_keeps_every_2xx(self):
        self.start_producers(4, "term")
        poll = {}

        def long_poll():
            t = time.monotonic()
            try:
                poll["r"] = self.s.fetch("sd-empty", wait_ms=20000, retry=False)
            except NET_ERRORS as e:
                poll["r"] = e
            poll["t"] = time.monotonic()
        th = threading.Thread(target=long_poll)
        th.start()
        self.threads.append(th)
        time.sleep(1.0)
        with self.lock:
            self.assertGreater(len(self.acked), 0, self.s.log_text())
        t0 = time.monotonic()
        self.s.signal(signal.SIGTERM)
        rc = self.s.wait(10)
        elapsed = time.monotonic() - t0
        self.assertIsNotNone(rc, "server still running 10 s after SIGTERM:\n" + self.s.log_text())
        self.assertEqual(rc, 0, "exit status after SIGTERM:\n" + self.s.log_text())
        self.assertLess(elapsed, 5.0)
        th.join(5)
        self.assertIn("t", poll, "the parked fetch was not answered")
        self.assertLess(poll["t"] - t0, 5.0, "the parked fetch was held after SIGTERM")
        r = poll["r"]
        if not isinstance(r, Exception):
            st, b, _ = r
            self.assertEqual(st, 200, b)
            self.assertEqual(b["jobs"], [])
        self.stop.set()
        for t in self.threads:
            t.join(30)
        with self.lock:
            acked = set(self.acked)
            refused = dict(self.refused)
        self.s.start()
        on_disk = {r[0] for r in self.s.query("SELECT id FROM jobs")}
        self.assertEqual(sorted(acked - on_disk), [], "answered 2xx but not on disk")
        # a refusal during shutdown is 503 unavailable, and nothing was written
        self.assertEqual({st for st in refused.values()} - {503}, set(), refused)
        self.assertEqual(sorted(set(refused) & on_disk), [], "answered 503 but written")
        for jid in sorted(acked)[:50] + sorted(acked)[-50:]:
            self.assertIsNotNone(self.s.job(jid), jid)
        self.assertEqual(self.s.get("/readyz")[0], 200)

    def test_readyz_after_sigterm_is_503_or_refused(self):
        st, b, _ = self.s.get("/readyz")
        self.assertEqual(st, 200, b)
        self.s.signal(signal.SIGTERM)
        time.sleep(0.1)
        seen = []
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            for fresh in (False, True):
                if fresh:
                    self.s._drop_connections()
                try:
                    st, b, _ = self.s.get("/readyz", retry=False, timeout=2)
                    seen.append(st)
                except NET_ERRORS as e:
                    seen.append(type(e).__name__)
            if not self.s.alive():
                break
            time.sleep(0.02)
        self.assertNotIn(200, seen, seen)
        self.assertEqual(self.s.wait(10), 0, self.s.log_text())

    def test_second_sigterm_during_shutdown_exits_at_once(self):
        self.start_producers(4, "twice")
        parked = []

        def long_poll():
            try:
                self.s.fetch("sd-empty2", wait_ms=20000, retry=False)
            except NET_ERRORS:
                pass
        for _ in range(4):
            th = threading.Thread(target=long_poll)
            th.start()
            parked.append(th)
            self.threads.append(th)
        time.sleep(0.8)
        t0 = time.monotonic()
        self.s.signal(signal.SIGTERM)
        time.sleep(0.01)
        if self.s.alive():
            self.s.signal(signal.SIGTERM)
        rc = self.s.wait(2)
        self.assertIsNotNone(rc, "still running 2 s after a second SIGTERM:\n" + self.s.log_text())
        self.assertLess(time.monotonic() - t0, 2.0)

    def test_sigint_shuts_down_like_sigterm(self):
        st, _, _ = self.s.enqueue("sd-int", {"name": "x", "id": "int-1"})
        self.assertEqual(st, 201)
        self.s.signal(signal.SIGINT)
        self.assertEqual(self.s.wait(10), 0, self.s.log_text())
        self.s.start()
        self.assertEqual(self.s.job("int-1")["state"], "waiting")


if __name__ == "__main__":
    unittest.main()
