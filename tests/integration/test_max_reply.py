# SPDX-License-Identifier: MIT
#
# --max-reply caps list and fetch replies in bytes, on SQLite and on
# PostgreSQL: 20 jobs of 300 KB with --max-reply 1m list in pages (queue
# jobs and dead letters), none over the cap, every job exactly once; a
# fetch of max 20 leases only what fits and leaves the rest waiting, not
# leased; a job larger than the cap still comes alone, in a list and a
# fetch. Bad --max-reply values are refused.

import http.client
import json
import os
import socket
import struct
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (PG_SKIP, PG_SKIP_WHY, PgNodes, Server, psql, run_errand,  # noqa: E402
                     wait_until, with_params)

CAP = 1 << 20
PAYLOAD = 300 * 1000
NJOBS = 20
ARGS = ["--max-reply", "1m", "--payload-max", "320k"]
# a server whose cap (the least allowed) is smaller than one job
SMALL_ARGS = ["--max-reply", "64k", "--payload-max", "320k"]


def job(q, i, n=PAYLOAD, **kw):
    """Job i of queue q with a payload of about n bytes."""
    return dict({"id": "%s-%d" % (q, i), "name": "n", "payload": big(i, n)}, **kw)


def body_bytes(b, h):
    """A reply's body bytes: its Content-Length, or for a streamed (chunked)
    one the length of its JSON, which errand writes compact and ASCII here."""
    if "content-length" in h:
        return int(h["content-length"])
    assert h.get("transfer-encoding") == "chunked", h
    return len(json.dumps(b, separators=(",", ":")))


def big(i, n=PAYLOAD):
    """A JSON payload of about n bytes."""
    return {"i": i, "pad": "x" * (n - 20)}


class MaxReplyCases:
    """Mixed into a TestCase whose setUpClass sets cls.s (a server with ARGS)."""

    def pages(self, path):
        """Every page of a list: [(jobs, bytes of the reply)]."""
        out, cursor = [], None
        for _ in range(NJOBS + 5):
            q = path + ("&" if "?" in path else "?") + "limit=1000"
            if cursor:
                q += "&cursor=" + cursor
            st, b, h = self.s.get(q)
            self.assertEqual(st, 200, b)
            out.append((b["jobs"], body_bytes(b, h)))
            cursor = b["next_cursor"]
            if not cursor:
                return out
        self.fail("no last page")

    def check_pages(self, pages, want):
        for jobs, n in pages:
            self.assertGreaterEqual(len(jobs), 1)
            self.assertLessEqual(n, CAP, "a page of %d jobs is %d bytes" % (len(jobs), n))
        ids = [j["id"] for jobs, _ in pages for j in jobs]
        self.assertEqual(sorted(ids), sorted(want), "each job once across the pages")
        self.assertEqual(len(ids), len(set(ids)))
        self.assertGreater(len(pages), 5, [len(j) for j, _ in pages])

    def test_a_list_of_large_jobs_comes_in_pages_under_the_cap(self):
        q = self.qname("list")
        want = []
        for i in range(NJOBS):
            st, b, _ = self.s.enqueue(q, job(q, i))
            self.assertEqual(st, 201, b)
            want.append(b["job"]["id"])
        self.check_pages(self.pages("/v1/queues/%s/jobs?state=waiting" % q), want)

    def test_dead_letters_come_in_pages_under_the_cap(self):
        q = self.qname("dead")
        want = []
        for i in range(NJOBS):
            st, b, _ = self.s.enqueue(q, job(q, i, max_attempts=1))
            self.assertEqual(st, 201, b)
            want.append(b["job"]["id"])
        done = 0
        while done < NJOBS:
            jobs = self.s.fetch_jobs(q, max=20)
            self.assertTrue(jobs)
            for j in jobs:
                st, b, _ = self.s.fail(j["id"], j["lease_token"],
                                       {"class": "permanent", "message": "no"})
                self.assertEqual(st, 200, b)
            done += len(jobs)
        self.check_pages(self.pages("/v1/dead?queue=" + q), want)

    def test_a_fetch_leases_only_what_fits_and_the_rest_stay_waiting(self):
        q = self.qname("fetch")
        for i in range(NJOBS):
            st, b, _ = self.s.enqueue(q, job(q, i))
            self.assertEqual(st, 201, b)
        st, b, h = self.s.fetch(q, max=20)
        self.assertEqual(st, 200, b)
        n = len(b["jobs"])
        self.assertGreaterEqual(n, 1)
        self.assertLess(n, NJOBS)
        self.assertLessEqual(body_bytes(b, h), CAP)
        info = self.s.queue_info(q)
        self.assertEqual((info["counts"]["active"], info["counts"]["waiting"]),
                         (n, NJOBS - n), "only the jobs returned are leased")
        got = {j["id"] for j in b["jobs"]}
        self.assertEqual(got, {"%s-%d" % (q, i) for i in range(n)}, "in fetch order")

    def test_a_job_larger_than_the_cap_still_comes_alone(self):
        q = self.qname("huge")
        s = self.small
        for i in range(2):
            st, b, _ = s.enqueue(q, job(q, i, 100 * 1000))
            self.assertEqual(st, 201, b)
        st, b, _ = s.get("/v1/queues/%s/jobs?limit=10" % q)
        self.assertEqual(st, 200, b)
        self.assertEqual([j["id"] for j in b["jobs"]], [q + "-0"])
        self.assertTrue(b["next_cursor"])
        st, b, _ = s.get("/v1/queues/%s/jobs?limit=10&cursor=%s" % (q, b["next_cursor"]))
        self.assertEqual(([j["id"] for j in b["jobs"]], b["next_cursor"]), ([q + "-1"], None))
        st, b, _ = s.fetch(q, max=10)
        self.assertEqual(st, 200, b)
        self.assertEqual([j["id"] for j in b["jobs"]], [q + "-0"])
        info = s.queue_info(q)
        self.assertEqual((info["counts"]["active"], info["counts"]["waiting"]), (1, 1))

    def test_the_budget_counts_exactly_at_its_edges(self):
        # core's rule (core/job.h er_job_reply_bytes) for a fresh job with a
        # string payload, leased to worker w1: the fixed part, the payload's
        # text, twice id, queue, name, idempotency key (the id), owner, token
        for over, want in ((0, 4), (1, 3)):
            q = self.qname("edge%d" % over)
            ids = ["%s-%d" % (q, i) for i in range(6)]
            short = 2 * (len(ids[0]) + len(q) + len("n") + len(ids[0]) + len("w1") + 32)
            room = CAP // 4 - 1024 - short - 2  # a payload's characters, its quotes
            for i, jid in enumerate(ids):
                n = room + (over if i == 3 else 0)
                st, b, _ = self.s.enqueue(q, {"id": jid, "name": "n", "payload": "x" * n})
                self.assertEqual(st, 201, b)
            st, b, h = self.s.fetch(q, worker_id="w1", max=10)
            self.assertEqual(st, 200, b)
            self.assertEqual([j["id"] for j in b["jobs"]], ids[:want],
                             "four jobs of exactly a quarter of the cap fit; one byte more does not")
            self.assertLessEqual(body_bytes(b, h), CAP)
            info = self.s.queue_info(q)
            self.assertEqual((info["counts"]["active"], info["counts"]["waiting"]),
                             (want, 6 - want), "no job leased that the reply does not hold")

    def test_the_budget_carries_across_the_queues_of_one_fetch(self):
        a, b_ = self.qname("carry-a"), self.qname("carry-b")
        for q in (a, b_):
            for i in range(3):
                st, b, _ = self.s.enqueue(q, job(q, i))
                self.assertEqual(st, 201, b)
        st, b, h = self.s.fetch([a, b_], max=20)
        self.assertEqual(st, 200, b)
        self.assertEqual([j["id"] for j in b["jobs"]], ["%s-%d" % (a, i) for i in range(3)])
        self.assertLessEqual(body_bytes(b, h), CAP)
        self.assertEqual(self.s.queue_info(a)["counts"]["active"], 3)
        self.assertEqual((self.s.queue_info(b_)["counts"]["active"],
                          self.s.queue_info(b_)["counts"]["waiting"]), (0, 3),
                         "the second queue's jobs stay waiting, none leased")

    def test_small_jobs_are_not_held_back(self):
        q = self.qname("small")
        for i in range(50):
            st, b, _ = self.s.enqueue(q, {"name": "n", "payload": {"i": i}})
            self.assertEqual(st, 201, b)
        st, b, _ = self.s.get("/v1/queues/%s/jobs?limit=50" % q)
        self.assertEqual((len(b["jobs"]), b["next_cursor"]), (50, None))
        self.assertEqual(len(self.s.fetch_jobs(q, max=50)), 50)


class SqliteMaxReplyTest(MaxReplyCases, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=ARGS).start()
        cls.small = Server(args=SMALL_ARGS).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()
        cls.small.cleanup()

    def qname(self, what):
        return "mr-" + what


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class PgMaxReplyTest(PgNodes, MaxReplyCases, unittest.TestCase):
    NODES = 1
    NODE_ARGS = ARGS

    @classmethod
    def setUpClass(cls):
        PgNodes.setUpClass.__func__(cls)
        cls.s = cls.servers[0]
        try:
            cls.small = Server(store=cls.store, args=SMALL_ARGS).start()
        except BaseException:
            cls.tearDownClass()
            raise
        cls.servers.append(cls.small)

    def qname(self, what):
        return "mr-" + what


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class PgOneRoundTest(PgNodes, unittest.TestCase):
    """A fetch of 1,000 small jobs under the default --max-reply and
    --payload-max is one call of the lease function: the store enforces the
    budget in its lease (lease_jobs2), where before it took one round per
    15 jobs (as many as fit at the largest payload allowed). The calls are
    counted by PostgreSQL (track_functions, set for the server's sessions
    through the store URL), not timed."""
    NODES = 0

    @classmethod
    def setUpClass(cls):
        PgNodes.setUpClass.__func__(cls)
        try:
            cls.s = Server(store=with_params(cls.store, options="-ctrack_functions%3Dpl")).start()
        except BaseException:
            cls.tearDownClass()
            raise
        cls.servers.append(cls.s)

    def calls(self):
        rows = psql("SELECT funcname, calls FROM pg_stat_user_functions WHERE schemaname = '%s'"
                    " AND funcname IN ('lease_jobs', 'lease_jobs2')" % self.schema)
        return {name: int(n) for name, n in rows}

    def test_a_fetch_of_1000_small_jobs_is_one_lease_call(self):
        q = "one-round"
        jobs = [{"name": "n", "payload": {"i": i}} for i in range(1000)]
        st, b, _ = self.s.post("/v1/queues/%s/jobs" % q, {"jobs": jobs})
        self.assertEqual(st, 201, b)
        got = self.s.fetch_jobs(q, max=1000)
        self.assertEqual(len(got), 1000)
        # a backend reports its function counts when idle, within seconds
        self.assertTrue(wait_until(lambda: self.calls().get("lease_jobs2", 0) >= 1, 30),
                        self.calls())
        time.sleep(1.5)
        self.assertEqual(self.calls(), {"lease_jobs2": 1}, "one call, the old function unused")


class StreamedReplyTest(unittest.TestCase):
    """Big list and fetch replies are streamed (chunked, written a slice a
    loop turn as the connection drains), small ones keep their
    Content-Length; /healthz answers while four clients read 8 MiB pages
    slowly; a client that goes away mid-stream leaves nothing behind (the
    server exits 0 on SIGTERM with no sanitizer report)."""

    @classmethod
    def setUpClass(cls):
        cls.s = Server().start()
        pad = "x" * (500 * 1000)
        for i in range(40):
            st, b, _ = cls.s.enqueue("big", {"id": "big-%d" % i, "name": "n",
                                             "payload": {"i": i, "pad": pad}})
            assert st == 201, (st, b)

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def page(self, conn, cursor=None, slow=False):
        path = "/v1/queues/big/jobs?limit=1000" + ("&cursor=" + cursor if cursor else "")
        conn.request("GET", path)
        r = conn.getresponse()
        parts = []
        while True:
            d = r.read(65536)
            if not d:
                break
            parts.append(d)
            if slow:
                time.sleep(0.005)
        return r, json.loads(b"".join(parts))

    def test_a_big_page_is_chunked_and_a_small_one_is_not(self):
        c = http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=60)
        r, b = self.page(c)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.getheader("transfer-encoding"), "chunked")
        self.assertIsNone(r.getheader("content-length"))
        self.assertGreater(len(b["jobs"]), 1)
        self.assertEqual([j["payload"]["i"] for j in b["jobs"]], list(range(len(b["jobs"]))))
        self.assertTrue(b["next_cursor"])
        # the same keep-alive connection goes on
        c.request("GET", "/v1/queues/big/jobs?limit=2")
        r = c.getresponse()
        small = json.loads(r.read())
        self.assertEqual((r.status, r.getheader("transfer-encoding")), (200, None))
        self.assertEqual(len(small["jobs"]), 2)
        self.assertTrue(r.getheader("content-length"))
        c.close()

    def test_the_cli_reads_a_streamed_reply(self):
        # liberrand (libcurl) reads chunked replies; its max_reply bound
        # counts the body's bytes as they come, whatever the framing
        pad = "x" * (500 * 1000)
        ids = []
        for i in range(8):
            st, b, _ = self.s.enqueue("bigdead", {"id": "bd-%d" % i, "name": "n",
                                                  "max_attempts": 1,
                                                  "payload": {"i": i, "pad": pad}})
            self.assertEqual(st, 201, b)
            ids.append(b["job"]["id"])
        left = set(ids)
        while left:
            for j in self.s.fetch_jobs("bigdead", max=8):
                st, b, _ = self.s.fail(j["id"], j["lease_token"],
                                       {"class": "permanent", "message": "no"})
                self.assertEqual(st, 200, b)
                left.discard(j["id"])
        c = http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=60)
        c.request("GET", "/v1/dead?queue=bigdead&limit=100")
        r = c.getresponse()
        r.read()
        c.close()
        self.assertEqual(r.getheader("transfer-encoding"), "chunked")
        rc, out, err = run_errand(["dlq", "list", "--queue", "bigdead", "--json", "--limit",
                                   "100"], env={"ERRAND_SERVER": "http://127.0.0.1:%d"
                                                % self.s.port})
        self.assertEqual(rc, 0, err)
        got = json.loads(out)["jobs"]
        self.assertEqual(sorted(j["id"] for j in got), sorted(ids))
        self.assertEqual(sorted(len(j["payload"]["pad"]) for j in got), [len(pad)] * 8)

    def test_healthz_answers_beside_four_slow_8mib_readers(self):
        lat, done, errors = [], [], []

        def reader():
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=120)
                cursor, n = None, 0
                while True:
                    r, b = self.page(c, cursor, slow=True)
                    self.assertEqual(r.getheader("transfer-encoding"), "chunked")
                    n += len(b["jobs"])
                    cursor = b["next_cursor"]
                    if not cursor:
                        break
                c.close()
                done.append(n)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        ts = [threading.Thread(target=reader) for _ in range(4)]
        for t in ts:
            t.start()
        h = http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=60)
        while any(t.is_alive() for t in ts):
            t0 = time.perf_counter()
            h.request("GET", "/healthz")
            self.assertEqual(h.getresponse().read() is not None, True)
            lat.append(time.perf_counter() - t0)
            time.sleep(0.01)
        for t in ts:
            t.join()
        h.close()
        self.assertEqual((errors, done), ([], [40] * 4))
        lat.sort()
        sys.stderr.write("\n/healthz beside 4 slow 8 MiB readers: %d answers, max %.1f ms, "
                         "median %.2f ms\n" % (len(lat), lat[-1] * 1000,
                                               lat[len(lat) // 2] * 1000))
        # generous on a noisy 2-core machine (bench/README.md has the real
        # numbers: ~1 s before streaming, tens of ms after)
        self.assertLess(lat[-1], 5.0)

    def test_a_client_that_goes_away_mid_stream_frees_everything(self):
        s = Server().start()
        try:
            pad = "x" * (500 * 1000)
            for i in range(20):
                st, b, _ = s.enqueue("big", {"name": "n", "payload": {"i": i, "pad": pad}})
                self.assertEqual(st, 201, b)
            # five lists (which lease nothing), then a fetch of ~15 jobs
            for k in (1, 1, 1, 1, 1, 0):
                # a small receive window keeps the reply mid-stream on the server
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(("127.0.0.1", s.port))
                path = ("/v1/queues/big/jobs?limit=1000" if k % 2 else "/v1/fetch")
                if k % 2:
                    req = "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path
                else:
                    body = json.dumps({"queues": ["big"], "worker_id": "gone", "max": 20})
                    req = ("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                           "application/json\r\nContent-Length: %d\r\n\r\n%s"
                           % (path, len(body), body))
                sock.sendall(req.encode())
                head = sock.recv(4096)
                self.assertIn(b"200", head.split(b"\r\n")[0])
                time.sleep(0.1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()  # a reset, mid-stream
            st, b, _ = s.get("/healthz")
            self.assertEqual(st, 200)
            st, b, _ = s.get("/v1/queues/big/jobs?state=active&limit=1000")
            self.assertEqual(st, 200, b)
            self.assertGreater(len(b["jobs"]), 1, "the fetch leased jobs: it was streamed")
            rc = s.term()
            log = s.log_text(400)
            self.assertNotIn("Sanitizer", log)
            self.assertEqual(rc, 0, log)
        finally:
            s.cleanup()


class BadValueTest(unittest.TestCase):
    def test_bad_max_reply_values_are_refused(self):
        for value in ("0", "1k", "64000", "2g", "-1", "lots", ""):
            with tempfile.TemporaryDirectory() as d:
                rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                           "sqlite:%s/e.db" % d, "--max-reply", value])
            self.assertIsNotNone(rc, "server started with --max-reply %r" % value)
            self.assertNotEqual(rc, 0, value)
            self.assertIn("max-reply", err, "%r: %s" % (value, err))


if __name__ == "__main__":
    unittest.main()
