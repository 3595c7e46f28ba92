# SPDX-License-Identifier: MIT
#
# Graceful shutdown: SIGTERM while clients enqueue and a long-poll fetch is
# parked makes the server answer what it received, exit 0 within seconds,
# and keep every request it answered with 2xx; /readyz stops saying 200; a
# repeated SIGTERM changes nothing, while SIGQUIT or a second SIGINT exits at
# once.

import http.client
import json
import os
import signal
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, wait_until  # noqa: E402

NET_ERRORS = (OSError, http.client.HTTPException)
PARKED = "errand_fetches_parked_total"  # long-poll fetches the writer has parked
SHUTTING_DOWN = "shutting down"         # logged when the first signal is handled


class ShutdownTest(unittest.TestCase):
    def setUp(self):
        self.s = Server().start()
        self.acked = set()
        self.refused = {}  # id -> status of a non-2xx answer
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = []
        self.socks = []

    def tearDown(self):
        self.stop.set()
        for th in self.threads:
            th.join(30)
        self.s.cleanup()
        for sock in self.socks:
            sock.close()

    def start_producers(self, n, tag):
        def run(t):
            i = 0
            while not self.stop.is_set():
                jid = "%s-%d-%d" % (tag, t, i)
                i += 1
                try:
                    st, _, _ = self.s.enqueue("sd-q", {"name": "x", "id": jid}, retry=False)
                except NET_ERRORS:
                    time.sleep(0.02)  # a pause before retrying, not an order
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

    def stalled_fetch(self, queue, n=20):
        """Leases n jobs of 400 KB on a socket that is never read: the 8 MB
        reply cannot be written, so the request stays in flight and a graceful
        shutdown waits for it (up to --shutdown-grace, 30 s by default).
        Returns once the server has the request (the jobs are active)."""
        big = "x" * 400000
        jobs = [{"name": "big", "id": "%s-%d" % (queue, i), "payload": {"s": big}}
                for i in range(n)]
        st, b, _ = self.s.enqueue(queue, {"jobs": jobs}, timeout=60)
        self.assertEqual(st, 201, b)
        sock = socket.socket()
        self.socks.append(sock)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((self.s.host, self.s.port))
        body = json.dumps({"queues": [queue], "worker_id": "stalled", "max": n}).encode()
        auth = "Authorization: Bearer %s\r\n" % self.s.token if self.s.token else ""
        sock.sendall(("POST /v1/fetch HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%sContent-Type: "
                      "application/json\r\nContent-Length: %d\r\n\r\n"
                      % (self.s.port, auth, len(body))).encode() + body)
        wait_until(lambda: self.s.queue_info(queue)["counts"]["active"] == n,
                   timeout=30, what="the stalled fetch to lease its %d jobs" % n)

    def wait_for_load(self, tag, n, parked):
        """Waits until each of the n producers has had an enqueue answered 2xx
        and the writer has parked `parked` long-poll fetches in all."""
        def producing():
            with self.lock:
                return {jid.split("-")[1] for jid in self.acked if jid.startswith(tag + "-")}
        wait_until(lambda: len(producing()) == n, timeout=15,
                   what="an answered enqueue from each of %d producers" % n)
        self.s.wait_metric(PARKED, parked, timeout=15)

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
        self.wait_for_load("term", 4, 1)
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
        mark = self.s.log_mark()
        self.s.signal(signal.SIGTERM)
        self.s.wait_log(SHUTTING_DOWN, after=mark)
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
            time.sleep(0.02)  # the pace of the probes
        self.assertNotIn(200, seen, seen)
        self.assertEqual(self.s.wait(10), 0, self.s.log_text())

    def test_a_second_sigterm_is_the_same_request_and_sigquit_exits_at_once(self):
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
        self.stalled_fetch("sd-big")  # without a second signal shutdown waits for it
        self.wait_for_load("twice", 4, 4)
        mark = self.s.log_mark()
        self.s.signal(signal.SIGTERM)
        self.s.wait_log(SHUTTING_DOWN, after=mark)
        self.assertTrue(self.s.alive(), "shutdown did not wait for the stalled reply:\n"
                        + self.s.log_text())
        self.s.signal(signal.SIGTERM)  # during the shutdown: the same request
        self.s.wait_log("already shutting down", after=mark)
        self.assertTrue(self.s.alive(), "a repeated SIGTERM ended the shutdown:\n"
                        + self.s.log_text())
        t0 = time.monotonic()
        self.s.signal(signal.SIGQUIT)
        rc = self.s.wait(2)
        self.assertIsNotNone(rc, "still running 2 s after SIGQUIT:\n" + self.s.log_text())
        self.assertLess(time.monotonic() - t0, 2.0)
        self.assertEqual(rc, 1, self.s.log_text())  # _exit(1), not the graceful 0
        self.s.join_drainers()
        self.assertTrue(any("exiting at once" in o.get("msg", "")
                            for o in self.s.log_records(after=mark)), self.s.log_text())

    def test_sigint_twice_exits_at_once(self):
        self.stalled_fetch("sd-big2")  # without it the shutdown would end by itself
        mark = self.s.log_mark()
        self.s.signal(signal.SIGINT)
        self.s.wait_log(SHUTTING_DOWN, after=mark)
        self.assertTrue(self.s.alive(), self.s.log_text())
        self.s.signal(signal.SIGINT)
        rc = self.s.wait(2)
        self.assertEqual(rc, 1, self.s.log_text())

    def test_sigint_shuts_down_like_sigterm(self):
        st, _, _ = self.s.enqueue("sd-int", {"name": "x", "id": "int-1"})
        self.assertEqual(st, 201)
        self.s.signal(signal.SIGINT)
        self.assertEqual(self.s.wait(10), 0, self.s.log_text())
        self.s.start()
        self.assertEqual(self.s.job("int-1")["state"], "waiting")


if __name__ == "__main__":
    unittest.main()
