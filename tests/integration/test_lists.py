# SPDX-License-Identifier: MIT
#
# The inspection lists GET /v1/leases and GET /v1/cursors, on SQLite and on
# PostgreSQL: pages of at most `limit` rows in byte order of the key, an
# opaque next_cursor until the last page, every row exactly once; a lease
# shows its key, parts, state (done, free after a release, held), fence and
# times but never its owner token; a cursor its name, value and time. Any
# role may list, a viewer included (cursor values are positions, not job
# payloads: a viewer sees them). Bad limit or cursor values are 400.

import json
import os
import sys
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PG_SKIP, PG_SKIP_WHY, PgNodes, Server, error_of  # noqa: E402

WORKER = "w" * 26 + "worker"
VIEWER = "v" * 26 + "viewer"
PRODUCER = "p" * 24 + "producer"
TOKEN_ARGS = ["--token", "worker:" + WORKER, "--token", "viewer@dash:" + VIEWER,
              "--token", "producer:" + PRODUCER]

NLEASES = 7
CURSORS = {"b": 1, "B": {"day": "2026-01-02"}, "_x": [1, 2], "a.1": "s", "a-1": 2.5,
           "Z": True, "rollup:2026": {"pos": 7}}


class ListsCases:
    """Mixed into a TestCase whose setUpClass sets cls.s (a server with TOKEN_ARGS)."""

    @classmethod
    def make_fixtures(cls):
        s = cls.s
        cls.leases = []
        for i in range(NLEASES):
            st, b, _ = s.post("/v1/leases", {"type": "report", "code": "daily",
                                             "run_key": "k%d" % i, "ttl_ms": 3600000},
                              token=WORKER)
            assert st == 200, (st, b)
            cls.leases.append(b)
        st, b, _ = s.post("/v1/leases/complete", {"owner_token": cls.leases[0]["owner_token"]},
                          token=WORKER)
        assert st == 200, (st, b)
        st, b, _ = s.post("/v1/leases/release", {"owner_token": cls.leases[1]["owner_token"]},
                          token=WORKER)
        assert st == 200, (st, b)
        for name, value in CURSORS.items():
            st, b, _ = s.request("PUT", "/v1/cursors/" + urllib.parse.quote(name, safe=""),
                                 body={"value": value}, token=WORKER)
            assert st == 200, (st, b)

    def pages(self, path, key, limit, token=WORKER):
        """Every page of a list: [(items, raw text)], following next_cursor."""
        out, cursor = [], None
        for _ in range(50):
            q = {"limit": limit}
            if cursor:
                q["cursor"] = cursor
            st, b, _ = self.s.get(path + "?" + urllib.parse.urlencode(q), token=token)
            self.assertEqual(st, 200, b)
            self.assertEqual(set(b), {key, "next_cursor"})
            self.assertLessEqual(len(b[key]), limit)
            out.append((b[key], json.dumps(b)))
            cursor = b["next_cursor"]
            if cursor is None:
                return out
            self.assertIsInstance(cursor, str)
        self.fail("no last page")

    def test_leases_list_in_pages_without_owner_tokens(self):
        pages = self.pages("/v1/leases", "leases", 3)
        self.assertEqual([len(p) for p, _ in pages], [3, 3, 1])
        got = [l for p, _ in pages for l in p]
        keys = [l["idempotency_key"] for l in got]
        self.assertEqual(keys, sorted(keys), "byte order")
        self.assertEqual(sorted(keys), sorted(l["idempotency_key"] for l in self.leases))
        for _, raw in pages:
            self.assertNotIn("owner_token", raw)
            for l in self.leases:
                self.assertNotIn(l["owner_token"], raw)
        by_key = {l["idempotency_key"]: l for l in got}
        for i, acquired in enumerate(self.leases):
            l = by_key[acquired["idempotency_key"]]
            self.assertEqual((l["type"], l["code"], l["run_key"]), ("report", "daily", "k%d" % i))
            self.assertEqual(l["fence"], 1)
            self.assertTrue(l["created_at"] and l["updated_at"])
            want = "done" if i == 0 else "free" if i == 1 else "held"
            self.assertEqual(l["state"], want, l)
            self.assertEqual("expires_at" in l, want == "held", l)
            self.assertEqual("completed_at" in l, want == "done", l)
            if want == "held":
                self.assertEqual(l["expires_at"], acquired["expires_at"])

    def test_cursors_list_in_pages_with_their_values(self):
        pages = self.pages("/v1/cursors", "cursors", 2)
        self.assertEqual([len(p) for p, _ in pages], [2, 2, 2, 1])
        got = [c for p, _ in pages for c in p]
        self.assertEqual([c["name"] for c in got], sorted(CURSORS, key=lambda n: n.encode()))
        for c in got:
            self.assertEqual(set(c), {"name", "value", "updated_at"})
            self.assertEqual(c["value"], CURSORS[c["name"]])

    def test_a_page_ending_on_the_last_row_is_followed_by_an_empty_one(self):
        pages = self.pages("/v1/cursors", "cursors", len(CURSORS))
        self.assertEqual([len(p) for p, _ in pages], [len(CURSORS), 0])
        st, b, _ = self.s.get("/v1/cursors", token=WORKER)  # default limit 100
        self.assertEqual((len(b["cursors"]), b["next_cursor"]), (len(CURSORS), None))
        st, b, _ = self.s.get("/v1/leases?limit=1000", token=WORKER)
        self.assertEqual((len(b["leases"]), b["next_cursor"]), (NLEASES, None))

    def test_any_role_may_list_and_a_viewer_sees_the_same(self):
        for path in ("/v1/leases", "/v1/cursors"):
            want = self.s.get(path, token=WORKER)[1]
            for token in (VIEWER, PRODUCER):
                st, b, _ = self.s.get(path, token=token)
                self.assertEqual((st, b), (200, want), "a viewer sees what a worker sees")
            self.assertEqual(self.s.get(path, token=None)[0], 401)

    BAD = [
        ("limit=0", "limit"), ("limit=1001", "limit"), ("limit=-1", "limit"),
        ("limit=abc", "limit"), ("limit=", "limit"), ("limit=1.5", "limit"),
        ("cursor=a%20b", "cursor"), ("cursor=" + "x" * 129, "cursor"),
        ("cursor=%2Fetc", "cursor"), ("cursor=%ZZ", None), ("colour=1", "colour"),
    ]

    def test_bad_limit_and_cursor_values_are_400(self):
        for path in ("/v1/leases", "/v1/cursors"):
            for q, field in self.BAD:
                with self.subTest(path=path, q=q):
                    st, b, _ = self.s.get(path + "?" + q, token=WORKER)
                    self.assertEqual(st, 400, b)
                    self.assertEqual(error_of(b).get("code"), "invalid_argument", b)
                    if field:
                        self.assertEqual(error_of(b).get("field"), field, b)

    def test_a_cursor_past_every_key_gives_an_empty_last_page(self):
        for path, key in (("/v1/leases", "leases"), ("/v1/cursors", "cursors")):
            st, b, _ = self.s.get(path + "?cursor=zzz", token=WORKER)
            self.assertEqual((st, b), (200, {key: [], "next_cursor": None}))


class SqliteListsTest(ListsCases, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=TOKEN_ARGS).start()
        try:
            cls.make_fixtures()
        except BaseException:
            cls.s.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class PgListsTest(PgNodes, ListsCases, unittest.TestCase):
    NODES = 1
    NODE_ARGS = TOKEN_ARGS

    @classmethod
    def setUpClass(cls):
        PgNodes.setUpClass.__func__(cls)
        cls.s = cls.servers[0]
        try:
            cls.make_fixtures()
        except BaseException:
            cls.tearDownClass()
            raise


if __name__ == "__main__":
    unittest.main()
