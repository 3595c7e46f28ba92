# SPDX-License-Identifier: MIT
#
# A Faktory unique job's lock (custom.unique_for; docs/faktory.md, "Unique
# jobs") is given back by the job's ACK, or by its hand-out with
# unique_until "start", whichever server does it and across restarts, and
# by a complete over HTTP: the lock's owner token is stored with the job.
# On SQLite: jobs completed over HTTP (one, and two at once), a job fetched
# before a restart and acknowledged after it, and one pushed before a
# restart and fetched (until start) after it. On two PostgreSQL nodes: a
# job pushed and fetched on A and acknowledged on B (whose memory has
# neither the lock nor the lease), one pushed on A and fetched and
# acknowledged on B, one failed on B (the lock stays), and one fetched on
# B until start. Each time a twin is refused while the lock is held and
# taken at once after.
#
# Needs ERRAND_TEST_PG_URL for the PostgreSQL cases (ERRAND_TEST_PG_SKIP=1
# skips them).

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PG_SKIP, PG_SKIP_WHY, PgNodes, Server  # noqa: E402
from test_faktory import Faktory, faktory_port  # noqa: E402

NOTUNIQUE = "-NOTUNIQUE Job not unique"


def hello(port, wid=None):
    c = Faktory(port)
    h = {"v": 2}
    if wid:
        h["wid"] = wid
    if c.cmd("HELLO " + json.dumps(h)) != "+OK":
        raise AssertionError("HELLO refused")
    return c


def push(c, jid, queue, until=None):
    custom = {"unique_for": 600}
    if until:
        custom["unique_until"] = until
    job = {"jid": jid, "jobtype": "uniq", "queue": queue, "args": [queue, 1], "custom": custom}
    return c.cmd("PUSH " + json.dumps(job, separators=(",", ":")))


def fetch(c, queue):
    r = c.cmd("FETCH " + queue)
    if r is None:
        raise AssertionError("FETCH %s: no job" % queue)
    return json.loads(r)["jid"]


def restarted_port(s):
    mark = s.log_mark()
    s.restart()
    return int(s.wait_log("faktory listening", after=mark)["listen"].rpartition(":")[2])


def http_completes_give_locks_back(t, c, s, prefix):
    """Unique jobs pushed on Faktory connection c, fetched and completed
    over HTTP on server s: one complete (ops->complete), then two in one
    POST /v1/acks (ops->complete_many); each gives its lock back."""
    qs = [prefix + str(i) for i in (1, 2, 3)]
    for q in qs:
        t.assertEqual(push(c, q + "-job", q), "+OK")
        t.assertEqual(push(c, q + "-twin", q), NOTUNIQUE)
    (j,) = s.fetch_jobs(qs[0], worker_id="http-w")
    st, b, _ = s.complete(j["id"], j["lease_token"])
    t.assertEqual(st, 200, b)
    t.assertEqual(push(c, qs[0] + "-twin", qs[0]), "+OK", "an HTTP complete gave the lock back")
    jobs = s.fetch_jobs(qs[1:], worker_id="http-w", max=2)
    t.assertEqual(sorted(x["id"] for x in jobs), [q + "-job" for q in qs[1:]])
    st, b, _ = s.post("/v1/acks", {"acks": [
        {"id": x["id"], "lease_token": x["lease_token"], "complete": {}} for x in jobs]})
    t.assertEqual(st, 200, b)
    t.assertEqual([r.get("ok") for r in b["results"]], [True, True], b)
    for q in qs[1:]:
        t.assertEqual(push(c, q + "-twin", q), "+OK", "completes sent together gave the lock back")


class UniqueOnSqlite(unittest.TestCase):
    def test_a_job_completed_over_http_gives_the_lock_back(self):
        s = Server(args=["--faktory-listen", "127.0.0.1:0"]).start()
        try:
            c = hello(faktory_port(s), "uq-h")
            http_completes_give_locks_back(self, c, s, "uqh")
            c.close()
        finally:
            s.term()
            s.cleanup()

    def test_the_lock_is_given_back_after_a_restart(self):
        s = Server(args=["--faktory-listen", "127.0.0.1:0"]).start()
        try:
            c = hello(faktory_port(s), "uq-w")
            self.assertEqual(push(c, "su-1", "uqa"), "+OK")
            self.assertEqual(push(c, "su-1-twin", "uqa"), NOTUNIQUE)
            self.assertEqual(fetch(c, "uqa"), "su-1")
            self.assertEqual(push(c, "su-2", "uqb", until="start"), "+OK")
            c.close()
            port = restarted_port(s)
            c = hello(port, "uq-w")
            # the lock outlived the server; the new one has no memory of it
            self.assertEqual(push(c, "su-1-twin", "uqa"), NOTUNIQUE)
            self.assertEqual(c.cmd('ACK {"jid":"su-1"}'), "+OK")
            self.assertEqual(push(c, "su-1-twin", "uqa"), "+OK", "the ACK gave the lock back")
            self.assertEqual(push(c, "su-2-twin", "uqb", until="start"), NOTUNIQUE)
            self.assertEqual(fetch(c, "uqb"), "su-2")
            self.assertEqual(push(c, "su-2-twin", "uqb", until="start"), "+OK",
                             "the hand-out gave the lock back")
            c.close()
        finally:
            s.term()
            s.cleanup()


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class UniqueOnTwoNodes(PgNodes, unittest.TestCase):
    NODES = 2
    NODE_ARGS = ("--faktory-listen", "127.0.0.1:0")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pa, cls.pb = (faktory_port(s) for s in cls.servers)

    def test_an_ack_on_another_node_gives_the_lock_back(self):
        a, b = hello(self.pa, "pu-w"), hello(self.pb, "pu-w")
        # pushed and fetched on A, acknowledged on B, whose memory has
        # neither the lock nor the lease
        self.assertEqual(push(a, "pu-1", "puqa"), "+OK")
        self.assertEqual(fetch(a, "puqa"), "pu-1")
        self.assertEqual(push(b, "pu-1-twin", "puqa"), NOTUNIQUE)
        self.assertEqual(b.cmd('ACK {"jid":"pu-1"}'), "+OK")
        self.assertEqual(push(a, "pu-1-twin", "puqa"), "+OK")
        self.assertEqual(push(b, "pu-1-again", "puqa"), NOTUNIQUE, "the twin holds it now")
        # pushed on A, fetched and acknowledged on B (its lease cache)
        self.assertEqual(push(a, "pu-2", "puqb"), "+OK")
        self.assertEqual(fetch(b, "puqb"), "pu-2")
        self.assertEqual(b.cmd('ACK {"jid":"pu-2"}'), "+OK")
        self.assertEqual(push(a, "pu-2-twin", "puqb"), "+OK")
        a.close()
        b.close()

    def test_a_complete_over_http_on_another_node_gives_the_lock_back(self):
        a = hello(self.pa, "ph-w")
        http_completes_give_locks_back(self, a, self.servers[1], "phq")
        a.close()

    def test_a_failure_on_another_node_keeps_the_lock(self):
        a, b = hello(self.pa, "pf-w"), hello(self.pb, "pf-w")
        self.assertEqual(push(a, "pf-1", "pfq"), "+OK")
        self.assertEqual(fetch(b, "pfq"), "pf-1")
        self.assertEqual(b.cmd('FAIL {"jid":"pf-1","message":"later"}'), "+OK")
        self.assertEqual(push(a, "pf-1-twin", "pfq"), NOTUNIQUE)
        self.assertEqual(push(b, "pf-1-twin", "pfq"), NOTUNIQUE)
        a.close()
        b.close()

    def test_a_hand_out_on_another_node_gives_a_start_lock_back(self):
        a, b = hello(self.pa, "ps-w"), hello(self.pb, "ps-w")
        self.assertEqual(push(a, "ps-1", "psq", until="start"), "+OK")
        self.assertEqual(push(b, "ps-1-twin", "psq", until="start"), NOTUNIQUE)
        self.assertEqual(fetch(b, "psq"), "ps-1")
        self.assertEqual(push(a, "ps-1-twin", "psq", until="start"), "+OK")
        a.close()
        b.close()


if __name__ == "__main__":
    unittest.main()
