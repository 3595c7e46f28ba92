# SPDX-License-Identifier: MIT
#
# Long-poll order: parked fetches are served oldest first, so a worker that
# keeps coming back cannot starve one that has waited longer.

import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402

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


if __name__ == "__main__":
    unittest.main()
