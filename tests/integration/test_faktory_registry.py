# SPDX-License-Identifier: MIT
#
# The Faktory worker registry is the store's (docs/faktory.md, "Workers"):
# with two errand servers on one PostgreSQL database, a worker that beats
# on node B is listed by node A, a quiet or terminate an admin sends to A
# reaches the worker's BEAT on B by the next-but-one beat at the latest (and
# B's FETCH for it answers null at once, as for a local quiet), and reaping
# after 60 s without a beat is judged from the stored last beat, so a worker
# that moved from A to B stays listed and signallable while one that went
# silent is dropped; INFO's server.workers on either node counts the live
# workers of both. On SQLite (one server) the registry survives a restart:
# the quiet is still there for the worker's new connection.
#
# Needs ERRAND_TEST_PG_URL for the PostgreSQL cases (ERRAND_TEST_PG_SKIP=1
# skips them).

import json
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PG_SKIP, PG_SKIP_WHY, PgNodes, Server, error_of, wait_until  # noqa: E402
from test_faktory import Faktory, faktory_port  # noqa: E402

FLUSH_S = 1.0   # ER_FK_BEAT_FLUSH_MS: how often a node writes its beats
TTL_S = 60      # ER_FK_WORKER_TTL_MS


def node_name(srv):
    return "%s-%d" % (socket.gethostname(), srv.proc.pid)


def hello(port, wid, labels=None):
    c = Faktory(port)
    h = {"v": 2, "wid": wid, "hostname": "box-" + wid, "pid": 4242}
    if labels is not None:
        h["labels"] = labels
    reply = c.cmd("HELLO " + json.dumps(h, separators=(",", ":")))
    if reply != "+OK":
        raise AssertionError("HELLO -> %r" % reply)
    return c


def beat(c, wid, **extra):
    r = c.cmd("BEAT " + json.dumps(dict(wid=wid, **extra), separators=(",", ":")))
    return "run" if r == "+OK" else json.loads(r)["state"]


def listed(srv, wid):
    st, b, _ = srv.get("/v1/workers")
    if st != 200:
        raise AssertionError("GET /v1/workers -> %s %s" % (st, b))
    for w in b["workers"]:
        if w["wid"] == wid:
            return w
    return None


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class RegistryOnTwoNodes(PgNodes, unittest.TestCase):
    NODES = 2
    NODE_ARGS = ("--faktory-listen", "127.0.0.1:0")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.a, cls.b = cls.servers
        cls.pa, cls.pb = faktory_port(cls.a), faktory_port(cls.b)

    def test_a_quiet_sent_to_a_reaches_the_workers_beat_on_b(self):
        c = hello(self.pb, "mn-quiet", labels=["node", "blue"])
        self.assertEqual(beat(c, "mn-quiet", rss_kb=1024), "run")
        # A lists it, from the store, once B wrote the beat
        w = wait_until(lambda: listed(self.a, "mn-quiet"), timeout=5)
        self.assertEqual((w["node"], w["hostname"], w["pid"], w["labels"], w["rss_kb"],
                          w["state"], w["connections"]),
                         (node_name(self.b), "box-mn-quiet", 4242, ["node", "blue"], 1024,
                          "running", 0))
        self.assertEqual(listed(self.b, "mn-quiet")["connections"], 1)
        st, b, _ = self.a.post("/v1/workers/mn-quiet/quiet")
        self.assertEqual((st, b["worker"]["state"], b["worker"]["node"]),
                         (200, "quiet", node_name(self.b)), b)
        # the next BEAT may come before B's next write learns it; the one
        # after (Faktory clients beat every 15 s) says quiet
        beat(c, "mn-quiet")
        time.sleep(FLUSH_S * 1.5)
        self.assertEqual(beat(c, "mn-quiet"), "quiet")
        self.assertEqual(listed(self.b, "mn-quiet")["state"], "quiet")
        # B's FETCH for it gets no job, at once, though one is waiting
        p = hello(self.pb, "mn-pusher")
        self.assertEqual(p.cmd('PUSH {"jid":"mn-q-1","jobtype":"t","queue":"mnq"}'), "+OK")
        t0 = time.monotonic()
        self.assertIsNone(c.cmd("FETCH mnq"))
        self.assertLess(time.monotonic() - t0, 1.0, "a quiet worker's FETCH does not wait")
        # terminate on A, never taken back by a later quiet
        st, b, _ = self.a.post("/v1/workers/mn-quiet/terminate")
        self.assertEqual((st, b["worker"]["state"]), (200, "terminate"))
        st, b, _ = self.b.post("/v1/workers/mn-quiet/quiet")
        self.assertEqual((st, b["worker"]["state"]), (200, "terminate"))
        beat(c, "mn-quiet")
        time.sleep(FLUSH_S * 1.5)
        self.assertEqual(beat(c, "mn-quiet"), "terminate")
        c.close()
        p.close()

    def test_unknown_workers_are_not_found_on_either_node(self):
        for srv in (self.a, self.b):
            st, b, _ = srv.post("/v1/workers/mn-nobody/quiet")
            self.assertEqual((st, error_of(b)["code"], error_of(b)["field"]),
                             (404, "not_found", "wid"))

    def test_reaping_is_judged_from_the_stored_last_beat(self):
        # mover: HELLO on A, then beats only on B; silent: HELLO on A, then nothing
        mover_a = hello(self.pa, "mn-mover")
        silent = hello(self.pa, "mn-silent")
        mover_b = hello(self.pb, "mn-mover")
        wait_until(lambda: listed(self.a, "mn-silent"), timeout=5)
        stop = threading.Event()

        def keep_beating():
            while not stop.wait(10):
                beat(mover_b, "mn-mover")
        th = threading.Thread(target=keep_beating, daemon=True)
        th.start()
        try:
            time.sleep(TTL_S + 2 * 5 + FLUSH_S * 2)  # the ttl, A's reap period twice, a write
            self.assertIsNone(listed(self.a, "mn-silent"), "no beat for 60 s: reaped")
            self.assertIsNone(listed(self.b, "mn-silent"))
            st, _, _ = self.a.post("/v1/workers/mn-silent/quiet")
            self.assertEqual(st, 404)
            w = listed(self.a, "mn-mover")
            self.assertIsNotNone(w, "it beats on B: A lists it")
            self.assertEqual(w["node"], node_name(self.b))
            # A did not reap it either: a quiet sent to A reaches its
            # connection to A at once (A's FETCH answers null without waiting)
            st, _, _ = self.a.post("/v1/workers/mn-mover/quiet")
            self.assertEqual(st, 200)
            t0 = time.monotonic()
            self.assertIsNone(mover_a.cmd("FETCH mnreap"))
            self.assertLess(time.monotonic() - t0, 1.0)
        finally:
            stop.set()
            th.join()
        for c in (mover_a, mover_b, silent):
            c.close()


def info_workers(port):
    c = Faktory(port)
    try:
        if c.cmd('HELLO {"v":2}') != "+OK":  # no wid: not a worker itself
            raise AssertionError("HELLO refused")
        return json.loads(c.cmd("INFO"))["server"]["workers"]
    finally:
        c.close()


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class InfoOnTwoNodes(PgNodes, unittest.TestCase):
    NODES = 2
    NODE_ARGS = ("--faktory-listen", "127.0.0.1:0")

    def test_info_counts_the_live_workers_of_every_node(self):
        a, b = self.servers
        pa, pb = faktory_port(a), faktory_port(b)
        self.assertEqual((info_workers(pa), info_workers(pb)), (0, 0))
        wa, wb = hello(pa, "inf-a"), hello(pb, "inf-b")
        self.assertEqual((beat(wa, "inf-a"), beat(wb, "inf-b")), ("run", "run"))
        # each node writes its beats within FLUSH_S; then both count both
        wait_until(lambda: info_workers(pa) == 2 and info_workers(pb) == 2, timeout=5,
                   what="INFO showing 2 workers on both nodes")
        # a second connection of one wid is one worker
        wa2 = hello(pb, "inf-a")
        time.sleep(FLUSH_S * 2)
        self.assertEqual((info_workers(pa), info_workers(pb)), (2, 2))
        for c in (wa, wb, wa2):
            c.close()


class RegistryOnSqlite(unittest.TestCase):
    def test_the_registry_and_a_quiet_survive_a_restart(self):
        s = Server(args=["--faktory-listen", "127.0.0.1:0"]).start()
        try:
            port = faktory_port(s)
            c = hello(port, "sq-1", labels=["ruby"])
            self.assertEqual(beat(c, "sq-1", current_state=""), "run")
            self.assertEqual(listed(s, "sq-1")["node"], node_name(s))
            st, b, _ = s.post("/v1/workers/sq-1/quiet")
            self.assertEqual((st, b["worker"]["state"]), (200, "quiet"))
            self.assertEqual(beat(c, "sq-1"), "quiet", "a local quiet: the next BEAT")
            c.close()
            time.sleep(FLUSH_S * 1.5)  # written
            mark = s.log_mark()
            s.restart()
            port = int(s.wait_log("faktory listening", after=mark)["listen"].rpartition(":")[2])
            w = listed(s, "sq-1")
            self.assertIsNotNone(w, "the store's registry outlives the server")
            self.assertEqual((w["state"], w["labels"], w["connections"]), ("quiet", ["ruby"], 0))
            c = hello(port, "sq-1")
            beat(c, "sq-1")
            time.sleep(FLUSH_S * 1.5)
            self.assertEqual(beat(c, "sq-1"), "quiet")
            c.close()
        finally:
            s.term()
            s.cleanup()


if __name__ == "__main__":
    unittest.main()
