# SPDX-License-Identifier: MIT
#
# Token names and roles: `--token ROLE@NAME:TOKEN` works beside plain
# `ROLE:TOKEN` (also in --token-file and ERRAND_TOKENS), and the access log
# carries the caller's role and name, never the token (bad specs are
# test_auth.py's, with the other serve-argument rows). The viewer role: every read
# route (enumerated from the route table in http_dispatch.c) answers it, every
# other route refuses it with 403 and changes nothing, and every job (and
# scheduler) it is shown has its payload and result withheld and says so.

import json
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import REPO_ROOT, Server, error_of, wait_until  # noqa: E402

ADMIN = "a" * 27 + "admin"
PRODUCER = "p" * 24 + "producer"
WORKER = "w" * 26 + "worker"
NAMED_ADMIN = "A" * 20 + "named-admin"
NAMED_WORKER = "W" * 20 + "named-worker"
VIEWER = "v" * 26 + "viewer"
REDACTED = ["payload", "result"]


def route_table():
    """(method, pattern, access) of every API route in er_routes (the
    dashboard's /ui routes answer sessions, not tokens: test_sessions.py)."""
    with open(os.path.join(REPO_ROOT, "src", "server", "http", "http_dispatch.c")) as f:
        text = f.read()
    table = text[text.index("const er_route er_routes[]"):text.index("const size_t er_nroutes")]
    rows = re.findall(r'\{EVHTTP_REQ_(\w+),\s*"([^"]+)",\s*ER_ACCESS_(\w+)', table)
    rows = [r for r in rows if not r[1].startswith("/ui")]
    assert len(rows) > 20, rows
    return rows


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class TokenNamesTest(unittest.TestCase):
    def test_named_and_plain_tokens_work_side_by_side_and_are_logged_by_name(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "access.log")
            args = ["--token", "admin:" + ADMIN,
                    "--token", "admin@ops.alice_1-x:" + NAMED_ADMIN,
                    "--token", "worker@" + "n" * 64 + ":" + NAMED_WORKER,
                    "--access-log", path]
            with Server(args=args) as s:
                self.assertEqual(s.get("/v1/queues", token=ADMIN)[0], 200)
                self.assertEqual(s.get("/v1/queues", token=NAMED_ADMIN)[0], 200)
                self.assertEqual(s.get("/v1/queues", token=NAMED_WORKER)[0], 200)
                # the role of a named token is the one before the @
                st, b, _ = s.enqueue("names", {"name": "x"}, token=NAMED_WORKER)
                self.assertEqual(st, 403, b)
                self.assertEqual(s.get("/v1/queues", token="z" * 32)[0], 401)
                self.assertEqual(s.get("/healthz", token=NAMED_ADMIN)[0], 200)
                wait_until(lambda: len(read_lines(path)) >= 6, timeout=5, what="six lines")
                got = read_lines(path)[:6]
                who = [(l.get("role"), l.get("token"), l["status"]) for l in got]
                self.assertEqual(who, [("admin", None, 200), ("admin", "ops.alice_1-x", 200),
                                       ("worker", "n" * 64, 200), ("worker", "n" * 64, 403),
                                       (None, None, 401), (None, None, 200)])
                with open(path) as f:
                    text = f.read()
                for secret in (ADMIN, NAMED_ADMIN, NAMED_WORKER, "z" * 32):
                    self.assertNotIn(secret, text)
                # the refused-token log line still names no token
                self.assertNotIn("z" * 32, s.log_text())

    def test_no_tokens_configured_logs_no_role_or_name(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "access.log")
            with Server(args=["--access-log", path]) as s:
                self.assertEqual(s.get("/v1/queues", token=None)[0], 200)
                wait_until(lambda: len(read_lines(path)) >= 1, timeout=5)
                line = read_lines(path)[0]
                self.assertNotIn("role", line)
                self.assertNotIn("token", line)

    def test_named_tokens_from_a_token_file_and_the_env_list(self):
        with tempfile.TemporaryDirectory() as d:
            tf = os.path.join(d, "tokens")
            with open(tf, "w") as f:
                f.write("# ops\nadmin@ops:%s\nproducer:%s\n" % (NAMED_ADMIN, PRODUCER))
            os.chmod(tf, 0o600)
            with Server(args=["--token-file", tf]) as s:
                self.assertEqual(s.get("/v1/queues", token=NAMED_ADMIN)[0], 200)
                self.assertEqual(s.enqueue("names", {"name": "x"}, token=PRODUCER)[0], 201)
        with Server(env={"ERRAND_TOKENS": "worker@w1:%s,admin:%s" % (NAMED_WORKER, ADMIN)}) as s:
            self.assertEqual(s.get("/v1/queues", token=NAMED_WORKER)[0], 200)
            self.assertEqual(s.get("/v1/queues", token=ADMIN)[0], 200)


class ViewerTest(unittest.TestCase):
    """One server with a token of each role; fixtures made by the others."""

    @classmethod
    def setUpClass(cls):
        cls.s = s = Server(args=["--token", "admin:" + ADMIN, "--token", "producer:" + PRODUCER,
                                 "--token", "worker:" + WORKER,
                                 "--token", "viewer@dash:" + VIEWER]).start()
        try:
            cls.make_fixtures()
        except BaseException:
            s.cleanup()
            raise

    @classmethod
    def make_fixtures(cls):
        s = cls.s
        # rq: a completed job with a result, a dead job, a waiting one
        for jid in ("done-1", "dead-1", "wait-1"):
            st, b, _ = s.enqueue("rq", {"name": "x", "id": jid, "payload": {"secret": jid}},
                                 token=PRODUCER)
            assert st == 201, (st, b)
        for jid, outcome in (("done-1", "complete"), ("dead-1", "fail")):
            st, b, _ = s.fetch("rq", token=WORKER)
            assert st == 200 and b["jobs"] and b["jobs"][0]["id"] == jid, (st, b)
            tok = b["jobs"][0]["lease_token"]
            if outcome == "complete":
                st, b, _ = s.complete(jid, tok, {"answer": 42}, token=WORKER)
            else:
                st, b, _ = s.fail(jid, tok, {"class": "permanent", "message": "nope"},
                                  token=WORKER)
            assert st == 200, (st, b)
        st, b, _ = s.request("PUT", "/v1/schedulers/rs", token=ADMIN, body={
            "cron": "0 3 * * *", "queue": "rq", "name": "tick", "payload": {"secret": "sched"}})
        assert st == 201, (st, b)
        st, b, _ = s.post("/v1/leases", {"type": "t", "code": "c", "run_key": "k"}, token=WORKER)
        assert st == 200, (st, b)
        st, b, _ = s.request("PUT", "/v1/cursors/rc", body={"value": {"pos": 7}}, token=WORKER)
        assert st in (200, 201), (st, b)

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def snapshot(self):
        """Every row of every table but those the server changes on its own."""
        con = self.s.db()
        try:
            names = [r[0] for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
            return {t: sorted(con.execute('SELECT * FROM "%s"' % t).fetchall(), key=repr)
                    for t in names if t not in self.BUSY_TABLES}
        finally:
            con.close()

    BUSY_TABLES = ()

    PARAMS = {"queue": "rq", "id": "wait-1", "key": "rs", "name": "rc", "wid": "rw"}
    QUERY = {"/v1/cron/next": "?expr=0+3+*+*+*"}

    def concrete(self, pattern):
        return re.sub(r"\{(\w+)\}", lambda m: self.PARAMS[m.group(1)], pattern) + \
            self.QUERY.get(pattern, "")

    def test_a_viewer_may_call_every_read_route_and_nothing_else(self):
        reads = 0
        for method, pattern, access in route_table():
            path = self.concrete(pattern)
            with self.subTest(method=method, pattern=pattern):
                before = self.snapshot()
                body = None if method in ("GET", "DELETE") else {}
                st, b, _ = self.s.request(method, path, body=body, token=VIEWER)
                if access in ("OPEN", "READ"):
                    self.assertEqual(st, 200, (method, path, b))
                    reads += access == "READ"
                else:
                    self.assertEqual(st, 403, (method, path, b))
                    self.assertEqual(error_of(b).get("code"), "permission_denied")
                    self.assertEqual(self.snapshot(), before, "store changed: %s %s"
                                     % (method, path))
        self.assertGreaterEqual(reads, 11)

    def test_the_route_table_reads_are_the_ones_documented(self):
        reads = {p for m, p, a in route_table() if a == "READ"}
        self.assertLessEqual({"/v1/jobs/{id}", "/v1/queues", "/v1/queues/{queue}",
                              "/v1/queues/{queue}/jobs", "/v1/dead", "/v1/schedulers",
                              "/v1/schedulers/{key}", "/v1/cron/next", "/metrics",
                              "/v1/leases", "/v1/cursors"}, reads)
        # a viewer never gets a worker's cursor read or any write
        self.assertNotIn("/v1/cursors/{name}", reads)
        self.assertTrue(all(m == "GET" for m, p, a in route_table() if a == "READ"))

    def jobs_seen(self, token):
        """Every job and scheduler the read routes show this token."""
        s = self.s
        seen = []
        st, b, _ = s.get("/v1/jobs/done-1", token=token)
        self.assertEqual(st, 200, b)
        seen.append(("get done-1", b["job"]))
        st, b, _ = s.get("/v1/jobs/dead-1", token=token)
        seen.append(("get dead-1", b["job"]))
        for state in ("waiting", "completed", "dead"):
            st, b, _ = s.get("/v1/queues/rq/jobs?state=" + state, token=token)
            self.assertEqual(st, 200, b)
            self.assertEqual(len(b["jobs"]), 1, (state, b))
            seen += [("list " + state, j) for j in b["jobs"]]
        for q in ("/v1/dead", "/v1/dead?queue=rq"):
            st, b, _ = s.get(q, token=token)
            self.assertEqual(st, 200, b)
            self.assertEqual([j["id"] for j in b["jobs"]], ["dead-1"])
            seen += [(q, j) for j in b["jobs"]]
        return seen

    def schedulers_seen(self, token):
        st, b, _ = self.s.get("/v1/schedulers", token=token)
        self.assertEqual(st, 200, b)
        out = [("list", sc) for sc in b["schedulers"]]
        st, b, _ = self.s.get("/v1/schedulers/rs", token=token)
        self.assertEqual(st, 200, b)
        return out + [("get", b["scheduler"])]

    def test_a_viewer_sees_jobs_without_payload_or_result(self):
        seen = self.jobs_seen(VIEWER)
        self.assertEqual(len(seen), 7)
        for what, j in seen:
            with self.subTest(what):
                self.assertIsNone(j["payload"], what)
                self.assertIsNone(j["result"], what)
                self.assertEqual(j["redacted"], REDACTED, what)
                self.assertIn(j["state"], ("waiting", "completed", "dead"))
                self.assertNotIn("secret", json.dumps(j))
                self.assertNotIn("answer", json.dumps(j))
        dead = dict(seen)["get dead-1"]
        self.assertEqual(dead["last_error"]["message"], "nope", "errors are shown")
        self.assertEqual(dead["attempts"], 1)

    def test_a_viewer_sees_schedulers_without_payload(self):
        for what, sc in self.schedulers_seen(VIEWER):
            with self.subTest(what):
                self.assertIsNone(sc["payload"])
                self.assertEqual(sc["redacted"], ["payload"])
                self.assertEqual(sc["cron"], "0 3 * * *")
                self.assertEqual(len(sc["next_runs"]), 5)

    def test_other_roles_see_payloads_and_results_as_before(self):
        for token in (ADMIN, PRODUCER, WORKER):
            seen = dict(self.jobs_seen(token))
            for what, j in seen.items():
                self.assertNotIn("redacted", j, what)
                self.assertEqual(j["payload"], {"secret": j["id"]}, what)
            self.assertEqual(seen["get done-1"]["result"], {"answer": 42})
            for what, sc in self.schedulers_seen(token):
                self.assertNotIn("redacted", sc)
                self.assertEqual(sc["payload"], {"secret": "sched"})

    def test_a_viewer_lists_leases_without_tokens_and_cursors_with_values(self):
        st, b, _ = self.s.get("/v1/leases", token=VIEWER)
        self.assertEqual(st, 200, b)
        self.assertEqual([(l["type"], l["state"]) for l in b["leases"]], [("t", "held")])
        self.assertNotIn("owner_token", json.dumps(b))
        st, b, _ = self.s.get("/v1/cursors", token=VIEWER)
        self.assertEqual(st, 200, b)
        self.assertEqual([(c["name"], c["value"]) for c in b["cursors"]], [("rc", {"pos": 7})])
        # reading one cursor stays a worker's call
        self.assertEqual(self.s.get("/v1/cursors/rc", token=VIEWER)[0], 403)

    def test_without_tokens_everything_is_shown(self):
        with Server() as s:
            self.assertEqual(s.enqueue("q", {"name": "x", "id": "o1", "payload": 5})[0], 201)
            j = s.get("/v1/jobs/o1")[1]["job"]
            self.assertEqual(j["payload"], 5)
            self.assertNotIn("redacted", j)

    def test_a_viewer_cannot_see_payloads_through_head_or_a_bad_token(self):
        st, b, _ = self.s.request("HEAD", "/v1/jobs/done-1", token=VIEWER)
        self.assertEqual(st, 200)
        st, b, _ = self.s.get("/v1/jobs/done-1", token=VIEWER[:-1])
        self.assertEqual(st, 401)

    def test_viewer_spec_forms(self):
        with Server(args=["--token", "viewer:" + VIEWER]) as s:
            self.assertEqual(s.get("/v1/queues", token=VIEWER)[0], 200)
            self.assertEqual(s.enqueue("q", {"name": "x"}, token=VIEWER)[0], 403)


if __name__ == "__main__":
    unittest.main()
