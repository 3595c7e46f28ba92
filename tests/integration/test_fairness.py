# SPDX-License-Identifier: MIT
#
# Fairness, limits and aging through the HTTP API, on the default store
# (docs/api.md "Fetch order"): a group's backlog of 50,000 jobs does not hold
# another group's job back; 100 groups of uneven sizes and weights each get
# their weight's share of every window of 1,000 fetched jobs while they have
# jobs waiting; a priority-0 job under a steady stream of priority-10 jobs
# starts within the bound aging states; a rate limit of 4/s holds whatever
# the fetch's max, and a parked fetch is answered when the budget allows.
# FairnessPgTest runs the same on the PostgreSQL store (a fresh schema of
# ERRAND_TEST_PG_URL; without it the test fails, unless ERRAND_TEST_PG_SKIP=1).

import os
import secrets
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PG_SKIP, PG_SKIP_WHY, PG_URL, Server, psql, with_params  # noqa: E402

BULK = 10000


def bulk(srv, queue, jobs):
    for i in range(0, len(jobs), BULK):
        st, b, _ = srv.post("/v1/queues/%s/jobs" % queue, {"jobs": jobs[i:i + BULK]}, timeout=60)
        if st != 201:
            raise AssertionError("bulk enqueue -> %s %s" % (st, str(b)[:300]))


def put(srv, queue, settings):
    st, b, _ = srv.put_queue(queue, settings)
    if st != 200:
        raise AssertionError("PUT %s %r -> %s %r" % (queue, settings, st, b))


def fetch_ids(srv, queue, n, max_=1, complete=True):
    """Leases (and completes) n jobs, fewer when the queue runs dry, in order.
    Jobs left leased hold an hour's lease: a slow run (ThreadSanitizer) must
    not see early leases expire and their jobs come round again."""
    out = []
    while len(out) < n:
        jobs = srv.fetch_jobs([queue], max=min(max_, n - len(out)),
                              lease_ms=None if complete else 3600000)
        if not jobs:
            break
        for j in jobs:
            st, b, _ = srv.complete(j["id"], j["lease_token"]) if complete else (200, None, None)
            if st != 200:
                raise AssertionError("complete %s -> %s %r" % (j["id"], st, b))
            out.append(j)
    return out


class FairnessTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server().start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def test_one_group_backlog_does_not_hold_another_back(self):
        q = "fair-backlog"
        bulk(self.s, q, [{"name": "upload", "group": "tenant:A"} for _ in range(50000)])
        first = fetch_ids(self.s, q, 3)
        self.assertEqual([j["group"] for j in first], ["tenant:A"] * 3)
        st, b, _ = self.s.enqueue(q, {"name": "upload", "group": "tenant:B", "id": "b-one"})
        self.assertEqual(st, 201, b)
        after = [j["id"] for j in fetch_ids(self.s, q, 2)]
        self.assertIn("b-one", after, "tenant:B's job is among the first 2 fetched after it")

    def test_shares_follow_weights_in_every_window(self):
        q = "fair-shares"
        ngroups = 100
        sizes = [max(1, int(round(10000 ** (i / (ngroups - 1))))) for i in range(ngroups)]
        weights = {"g%02d" % i: 1 + i % 4 for i in range(ngroups)}
        put(self.s, q, {"fairness": {"weights": {g: w for g, w in weights.items() if w != 1}}})
        jobs = []
        # interleaved enqueue order must not matter; groups enter largest first
        for i in reversed(range(ngroups)):
            jobs += [{"name": "x", "group": "g%02d" % i}] * sizes[i]
        bulk(self.s, q, jobs)
        left = {"g%02d" % i: sizes[i] for i in range(ngroups)}
        leased = fetch_ids(self.s, q, 30000, max_=10, complete=False)
        self.assertEqual(len(leased), 30000)
        self.assertEqual(len({j["id"] for j in leased}), 30000, "no job leased twice")
        order = [j["group"] for j in leased]
        # emptied_at[g]: the position of g's last job, if it ran out
        emptied_at = {}
        for pos, g in enumerate(order):
            left[g] -= 1
            if left[g] == 0:
                emptied_at[g] = pos
        window, checked, worst = 1000, 0, 0.0
        for start in range(0, len(order) - window + 1, 50):
            end = start + window
            # the groups waiting through the whole window: none ran out before its end
            live = [g for g in weights if emptied_at.get(g, len(order)) >= end and
                    not (g in emptied_at and emptied_at[g] < start)]
            if any(start <= emptied_at.get(g, -1) < end for g in weights):
                continue  # a group ran out inside: the shares changed mid-window
            total_w = sum(weights[g] for g in live)
            counts = {}
            for g in order[start:end]:
                counts[g] = counts.get(g, 0) + 1
            for g in live:
                fair = window * weights[g] / total_w
                dev = abs(counts.get(g, 0) - fair)
                # deficit round-robin: at most two turns (2 x weight) off
                self.assertLessEqual(dev, 2 * weights[g],
                                     "window %d: %s got %d, fair %.1f" % (start, g,
                                                                          counts.get(g, 0), fair))
                worst = max(worst, dev / weights[g])
            checked += 1
        self.assertGreater(checked, 40, "enough windows with a steady set of groups")
        print("\nshares: %d windows checked, worst deviation %.2f turns" % (checked, worst),
              file=sys.stderr)

    def test_aging_bounds_the_wait_of_a_low_priority_job(self):
        per_s, boost = 10, 20
        # A run counts only when the stream kept priority-10 jobs waiting the
        # whole time: on a starved machine the queue can run dry, and then the
        # priority-0 job rightly goes first. At most three runs.
        for run in range(3):
            started, early, starved = self.aging_run("fair-aging-%d" % run, per_s, boost)
            if not starved:
                break
        self.assertFalse(starved, "the stream never kept jobs waiting in three runs")
        # (10 - 0) / per_s = 1 s to reach the fresh jobs' priority: before
        # 1 s it cannot win, and once it has, no job enqueued after that
        # second goes before it (the rule, whatever the machine's speed)
        self.assertIsNotNone(started, "the priority-0 job never started")
        self.assertGreaterEqual(started, 0.9, "it won before aging could lift it")
        self.assertEqual(early, [], "jobs enqueued past its 1 s went first (s after it)")

    def aging_run(self, q, per_s, boost):
        """(when lo started, how long after t0 + 1 s the jobs enqueued then
        and fetched before it were enqueued, whether the queue ran dry)."""
        put(self.s, q, {"aging": {"per_s": per_s, "max_boost": boost}})
        stop = threading.Event()
        dry = []

        def stream():
            # keeps 10 to 20 priority-10 jobs waiting, whatever the worker takes
            while not stop.is_set():
                info = self.s.queue_info(q)
                waiting = info["counts"]["waiting"] if info else 0
                if waiting <= 1 and not stop.is_set():
                    dry.append(time.time())  # only lo, or nothing, waits
                if waiting < 10:
                    bulk(self.s, q, [{"name": "hi", "priority": 10,
                                      "payload": {"t": time.time()}}] * 10)
                time.sleep(0.005)
        bulk(self.s, q, [{"name": "hi", "priority": 10, "payload": {"t": time.time()}}] * 10)
        t = threading.Thread(target=stream, daemon=True)
        t.start()
        lo = "lo-%s" % q
        early = []
        try:
            t0 = time.time()
            st, b, _ = self.s.enqueue(q, {"name": "lo", "priority": 0, "id": lo})
            self.assertEqual(st, 201, b)
            started = None
            while time.time() - t0 < 20 and started is None:
                for j in self.s.fetch_jobs([q], max=1):
                    st, _, _ = self.s.complete(j["id"], j["lease_token"])
                    if j["id"] == lo:
                        started = time.time() - t0
                    elif j["payload"]["t"] > t0 + 1.25:  # a clock's margin
                        early.append(round(j["payload"]["t"] - t0 - 1, 2))
                time.sleep(0.02)  # one job every 20 ms or more: the stream stays ahead
        finally:
            stop.set()
            t.join(5)
        end = t0 + (started if started is not None else 20)
        return started, early, any(d < end for d in dry)

    def test_rate_limit_holds_whatever_the_prefetch(self):
        q = "fair-rate"
        put(self.s, q, {"rate_limit": {"max": 4, "per_ms": 1000}})
        bulk(self.s, q, [{"name": "call"}] * 14)
        got = []
        lock = threading.Lock()

        def worker(i):
            deadline = time.monotonic() + 3.6
            while time.monotonic() < deadline:
                st, b, _ = self.s.fetch([q], worker_id="w%d" % i, max=20, wait_ms=400)
                if st != 200:
                    raise AssertionError("fetch -> %s %r" % (st, b))
                now = time.monotonic()
                for j in b["jobs"]:
                    with lock:
                        got.append(now)
                    self.s.complete(j["id"], j["lease_token"])
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
        got.sort()
        worst = max(sum(1 for u in got if t <= u < t + 1.0) for t in got)
        self.assertLessEqual(worst, 5, "at most max + 1 leases in any 1 s window")
        # 3.6 s at 4/s, the first at once: 14 or 15 fit; parked fetches are
        # answered when the budget allows, so no second of budget goes unused
        self.assertGreaterEqual(len(got), 13, "the budget is used: %d leases" % len(got))
        self.assertLessEqual(len(got), 15)

    def test_queue_weights_mix_the_queues_of_a_fetch(self):
        names = ["mix-critical", "mix-default", "mix-bulk"]
        weights = {names[0]: 6, names[1]: 3}  # mix-bulk: 1, not named
        for q in names:
            bulk(self.s, q, [{"name": "x"}] * 3000)
        counts = dict.fromkeys(names, 0)
        for _ in range(1000):
            st, b, _ = self.s.fetch(names, max=1, queue_weights=weights)
            self.assertEqual(st, 200, b)
            for j in b["jobs"]:
                counts[j["queue"]] += 1
        for _ in range(200):
            st, b, _ = self.s.fetch(names, max=10, queue_weights=weights)
            self.assertEqual(st, 200, b)
            self.assertEqual(len(b["jobs"]), 10)
            for j in b["jobs"]:
                counts[j["queue"]] += 1
        total = sum(counts.values())
        self.assertEqual(total, 3000)
        # shares 0.6 / 0.3 / 0.1 of 3000 draws: 5 standard deviations is
        # under 0.05 for each
        for q, w in ((names[0], 0.6), (names[1], 0.3), (names[2], 0.1)):
            self.assertAlmostEqual(counts[q] / total, w, delta=0.05, msg=str(counts))
        # without queue_weights: strict order, the first queue alone
        jobs = self.s.fetch_jobs(names, max=10)
        self.assertEqual({j["queue"] for j in jobs}, {names[0]})
        # a queue that runs dry leaves its share to the others
        st, b, _ = self.s.fetch(["mix-empty", names[2]], max=10,
                                queue_weights={"mix-empty": 1000})
        self.assertEqual(st, 200, b)
        self.assertEqual(len(b["jobs"]), 10)


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class FairnessPgTest(FairnessTest):
    @classmethod
    def setUpClass(cls):
        if not PG_URL:
            raise RuntimeError("ERRAND_TEST_PG_URL is not set (ERRAND_TEST_PG_SKIP=1 skips)")
        cls.schema = "fair_" + secrets.token_hex(4)
        cls.s = Server(store=with_params(PG_URL, schema=cls.schema)).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()
        psql('DROP SCHEMA IF EXISTS "%s" CASCADE' % cls.schema)


if __name__ == "__main__":
    unittest.main()
