# SPDX-License-Identifier: MIT
#
# The Faktory port beside the HTTP API (docs/faktory.md): the worker routes
# (GET /v1/workers, POST /v1/workers/{wid}/quiet and /terminate) over a
# worker that speaks the raw protocol, a job pushed over Faktory seen over
# HTTP and acknowledged there, and the start-up rules of --faktory-listen
# (off by default; a bad address or a non-loopback one without tokens is
# refused). The protocol's own cases are tests/faktory/test_transcript.c's.

import json
import os
import socket
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, error_of, run_errand  # noqa: E402

ADMIN = "a" * 27 + "admin"


class Faktory:
    """A raw protocol connection."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.f = self.sock.makefile("rwb")
        self.greeting = self.reply()

    def reply(self):
        line = self.f.readline()
        if line.startswith(b"$") and line != b"$-1\r\n":
            data = self.f.read(int(line[1:]) + 2)
            return data[:-2].decode()
        if line == b"$-1\r\n":
            return None
        return line.rstrip(b"\r\n").decode()

    def cmd(self, text):
        self.f.write(text.encode() + b"\r\n")
        self.f.flush()
        return self.reply()

    def close(self):
        self.f.close()
        self.sock.close()


def faktory_port(s):
    rec = s.wait_log("faktory listening")
    return int(rec["listen"].rpartition(":")[2])


class FaktoryHttpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=["--faktory-listen", "127.0.0.1:0"]).start()
        cls.port = faktory_port(cls.s)

    @classmethod
    def tearDownClass(cls):
        cls.s.term()
        cls.s.cleanup()

    def test_workers_are_listed_and_signalled(self):
        c = Faktory(self.port)
        self.assertEqual(c.cmd('HELLO {"v":2,"wid":"py-1","hostname":"box","pid":42}'), "+OK")
        self.assertEqual(c.cmd('BEAT {"wid":"py-1","rss_kb":2048}'), "+OK")
        st, b, _ = self.s.get("/v1/workers")
        self.assertEqual(st, 200, b)
        w = [x for x in b["workers"] if x["wid"] == "py-1"][0]
        self.assertEqual((w["hostname"], w["pid"], w["rss_kb"], w["state"], w["connections"]),
                         ("box", 42, 2048, "running", 1))
        st, b, _ = self.s.post("/v1/workers/py-1/quiet")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["worker"]["state"], "quiet")
        self.assertEqual(json.loads(c.cmd('BEAT {"wid":"py-1"}')), {"state": "quiet"})
        st, b, _ = self.s.post("/v1/workers/py-1/terminate")
        self.assertEqual((st, b["worker"]["state"]), (200, "terminate"))
        st, b, _ = self.s.post("/v1/workers/py-1/quiet")  # never taken back
        self.assertEqual((st, b["worker"]["state"]), (200, "terminate"))
        self.assertEqual(json.loads(c.cmd('BEAT {"wid":"py-1"}')), {"state": "terminate"})
        c.close()

    def test_unknown_or_bad_worker_ids_are_refused(self):
        st, b, _ = self.s.post("/v1/workers/nobody-here/terminate")
        self.assertEqual((st, error_of(b)["code"], error_of(b)["field"]),
                         (404, "not_found", "wid"))
        st, b, _ = self.s.post("/v1/workers/bad%20wid/quiet")
        self.assertEqual((st, error_of(b)["field"]), (400, "wid"))

    def test_faktory_job_is_an_http_job(self):
        c = Faktory(self.port)
        self.assertEqual(c.cmd('HELLO {"v":2,"wid":"py-2"}'), "+OK")
        self.assertEqual(c.cmd('PUSH {"jid":"fk-http-1","jobtype":"resize","queue":"images",'
                               '"args":[333,"thumb"],"retry":4,"reserve_for":600,'
                               '"custom":{"tenant":"t9"}}'), "+OK")
        st, b, _ = self.s.get("/v1/jobs/fk-http-1")
        self.assertEqual(st, 200, b)
        j = b["job"]
        self.assertEqual((j["queue"], j["name"], j["payload"], j["max_attempts"], j["timeout_ms"],
                          j["backoff"]["type"]),
                         ("images", "resize", [333, "thumb"], 5, 600000, "faktory"))
        self.assertEqual(j["custom"], {"tenant": "t9"})
        # fetched and completed over HTTP: the same job, the same lease rules
        st, b, _ = self.s.post("/v1/fetch", {"queues": ["images"], "worker_id": "http-w"})
        self.assertEqual(st, 200, b)
        lease = b["jobs"][0]
        self.assertEqual(lease["id"], "fk-http-1")
        self.assertIsNotNone(c.cmd('ACK {"jid":"fk-http-1"}'))  # py-2 does not hold it
        st, b, _ = self.s.post("/v1/jobs/fk-http-1/complete",
                               {"lease_token": lease["lease_token"], "result": None})
        self.assertEqual(st, 200, b)
        c.close()

    def test_a_faktory_failure_shows_its_errtype_over_http(self):
        c = Faktory(self.port)
        self.assertEqual(c.cmd('HELLO {"v":2,"wid":"py-3"}'), "+OK")
        self.assertEqual(c.cmd('PUSH {"jid":"fk-fail-1","jobtype":"t","queue":"fails"}'), "+OK")
        self.assertEqual(json.loads(c.cmd("FETCH fails"))["jid"], "fk-fail-1")
        self.assertEqual(c.cmd('FAIL {"jid":"fk-fail-1","errtype":"TypeError","message":"no",'
                               '"backtrace":["a.js:1"]}'), "+OK")
        st, b, _ = self.s.get("/v1/jobs/fk-fail-1")
        self.assertEqual(st, 200, b)
        e = b["job"]["last_error"]
        self.assertEqual((e["errtype"], e["message"], e["backtrace"]), ("TypeError", "no", ["a.js:1"]))
        c.close()


class FaktoryStartupTest(unittest.TestCase):
    def serve(self, *args):
        with tempfile.TemporaryDirectory() as d:
            return run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                               "sqlite:" + os.path.join(d, "e.db")] + list(args))

    def test_off_by_default(self):
        with Server() as s:
            self.assertFalse(any("faktory" in str(r.get("msg")) for r in s.log_records()))
            st, b, _ = s.get("/v1/workers")
            self.assertEqual((st, b), (200, {"workers": []}))

    def test_bad_addresses_are_refused(self):
        for bad in ("nonsense", "127.0.0.1:99999", "127.0.0.1:", ":7419"):
            rc, out, err = self.serve("--faktory-listen", bad)
            self.assertIsNotNone(rc, bad)
            self.assertNotEqual(rc, 0, bad)
            self.assertIn("--faktory-listen", err, bad)

    def test_bad_prefetch_is_refused(self):
        for bad in ("0", "257", "-1", "abc", "1.5", ""):
            rc, out, err = self.serve("--faktory-listen", "127.0.0.1:0", "--faktory-prefetch", bad)
            self.assertIsNotNone(rc, bad)
            self.assertNotEqual(rc, 0, bad)
            self.assertIn("faktory-prefetch", err, bad)

    def test_prefetch_off_and_at_its_bound_start(self):
        for ok in ("1", "256"):
            with Server(args=["--faktory-listen", "127.0.0.1:0", "--faktory-prefetch", ok]) as s:
                faktory_port(s)

    def test_non_loopback_without_tokens_is_refused(self):
        rc, out, err = self.serve("--faktory-listen", "0.0.0.0:0")
        self.assertIsNotNone(rc)
        self.assertNotEqual(rc, 0)
        self.assertIn("without tokens", err)

    def test_non_loopback_with_tokens_asks_for_a_password(self):
        with Server(args=["--faktory-listen", "0.0.0.0:0", "--token", "admin:" + ADMIN]) as s:
            c = Faktory(faktory_port(s))
            hi = json.loads(c.greeting[len("+HI "):])
            self.assertEqual(hi["v"], 2)
            self.assertEqual(len(hi["s"]), 16)
            self.assertGreaterEqual(hi["i"], 1)
            self.assertNotIn(" ", c.greeting[len("+HI "):])
            c.close()


if __name__ == "__main__":
    unittest.main()
