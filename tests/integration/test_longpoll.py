# SPDX-License-Identifier: MIT
#
# Long-poll order: parked fetches are served oldest first, so a worker that
# keeps coming back cannot starve one that has waited longer.

import json
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, wait_until  # noqa: E402

# counts the long-poll fetches the writer has parked (waiting for jobs)
PARKED = "errand_fetches_parked_total"


class LongPollTest(unittest.TestCase):
    def test_the_fetcher_parked_first_gets_the_first_job(self):
        with Server() as s:
            got = {}

            def fetch(worker):
                st, body, _ = s.fetch(["lp"], worker_id=worker, max=1, wait_ms=8000)
                got[worker] = (st, [j["id"] for j in body.get("jobs", [])], time.monotonic())

            parked = s.metric(PARKED)
            first = threading.Thread(target=fetch, args=("first",))
            first.start()
            s.wait_metric(PARKED, parked + 1)  # "first" waits in the writer
            second = threading.Thread(target=fetch, args=("second",))
            second.start()
            s.wait_metric(PARKED, parked + 2)  # and "second" behind it
            self.assertEqual(s.enqueue("lp", {"name": "a", "id": "lp-1"})[0], 201)
            first.join(5)
            self.assertFalse(first.is_alive(), "the first fetcher was not served")
            self.assertEqual(got["first"][:2], (200, ["lp-1"]))
            self.assertTrue(second.is_alive(), "the second fetcher must still be waiting")
            self.assertEqual(s.enqueue("lp", {"name": "a", "id": "lp-2"})[0], 201)
            second.join(5)
            self.assertEqual(got["second"][:2], (200, ["lp-2"]))

    def test_a_fetch_whose_client_went_away_leases_nothing(self):
        """A long-poll whose connection closed must not take the next job: it
        would hold it for a whole lease while a live worker waits."""
        with Server() as s:
            parked = s.metric(PARKED)
            body = json.dumps({"queues": ["gone"], "worker_id": "ghost", "max": 1,
                               "wait_ms": 20000, "lease_ms": 600000}).encode()
            sock = socket.create_connection((s.host, s.port))
            sock.sendall(b"POST /v1/fetch HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: "
                         b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (s.port, len(body), body))
            s.wait_metric(PARKED, parked + 1)  # the ghost waits in the writer
            sock.close()
            # once the server saw the close, the ghost is gone from the writer
            wait_until(lambda: s.metric("errand_fetches_waiting") == 0,
                       what="the abandoned long-poll to leave the writer")
            self.assertEqual(s.enqueue("gone", {"name": "a", "id": "g-1"})[0], 201)
            st, b, _ = s.fetch(["gone"], worker_id="live", max=1, wait_ms=2000)
            self.assertEqual((st, [j["id"] for j in b["jobs"]]), (200, ["g-1"]))
            self.assertEqual(b["jobs"][0]["attempt"], 1, "the job was leased once")


if __name__ == "__main__":
    unittest.main()
