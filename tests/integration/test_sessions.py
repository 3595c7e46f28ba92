#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# Dashboard sessions and the audit log over HTTP (docs/dashboard.md): the
# login form (Origin and Host checked), the session cookie's flags, the
# session standing in for a bearer token on the /v1 API with its role, the
# CSRF token every state-changing session request needs, the Host check,
# logout and idle expiry, the store keeping only a hash of the id, the
# pages' security headers, open mode (no tokens), and the audit rows of
# administrative actions (GET /v1/audit). A session made on one PostgreSQL
# node works on another.

import hashlib
import os
import sys
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (PG_SKIP, PG_SKIP_WHY, PgNodes, Server, error_of, now_ms,  # noqa: E402
                     run_errand, wait_until)

ADMIN = "admin-token-0123456789abcdef"
WORKER = "worker-token-0123456789abcdef"
ALICE = "alice-admin-token-0123456789"
VIEWER = "viewer-token-0123456789abcdef"
FORM = "application/x-www-form-urlencoded"


def cookie_of(headers):
    sc = headers.get("set-cookie", "")
    assert sc.startswith("errand_session="), sc
    return sc.split(";")[0].split("=", 1)[1]


def login(s, token, origin="default", host=None):
    h = {"Content-Type": FORM}
    hostport = "127.0.0.1:%d" % s.port
    if origin == "default":
        origin = "http://" + (host or hostport)
    if origin is not None:
        h["Origin"] = origin
    if host:
        h["Host"] = host
    return s.request("POST", "/ui/login", raw="token=" + urllib.parse.quote(token), token=None,
                     headers=h)


def session_of(s, token):
    st, body, h = login(s, token)
    assert st == 303, (st, body)
    sid = cookie_of(h)
    st, info, _ = s.get("/ui/session", token=None, headers={"Cookie": "errand_session=" + sid})
    assert st == 200, (st, info)
    return sid, info["csrf_token"]


class Sessions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=["--token", "admin:" + ADMIN, "--token", "worker:" + WORKER,
                             "--token", "admin@alice:" + ALICE, "--token", "viewer@vic:" + VIEWER],
                       token=ADMIN).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def call(self, method, path, sid, csrf=None, body=None, host=None):
        h = {"Cookie": "errand_session=" + sid}
        if csrf:
            h["X-CSRF-Token"] = csrf
        if host:
            h["Host"] = host
        return self.s.request(method, path, body=body, token=None, headers=h)

    def test_login_sets_a_strict_httponly_cookie_and_redirects(self):
        st, _, h = login(self.s, ADMIN)
        self.assertEqual(st, 303)
        self.assertEqual(h["location"], "/ui/")
        flags = [f.strip() for f in h["set-cookie"].split(";")]
        self.assertIn("HttpOnly", flags)
        self.assertIn("SameSite=Strict", flags)
        self.assertIn("Path=/", flags)
        self.assertNotIn("Secure", flags)  # no TLS listener: the cookie goes over http
        self.assertRegex(cookie_of(h), "^[0-9a-f]{64}$")

    def test_a_wrong_token_is_refused_and_audited(self):
        st, _, h = login(self.s, "not-a-token-of-this-server")
        self.assertEqual(st, 303)
        self.assertEqual(h["location"], "/ui/login?failed=1")
        self.assertNotIn("set-cookie", h)
        st, body, _ = self.s.get("/v1/audit?limit=1000")
        self.assertEqual(st, 200)
        self.assertIn("ui.login_failed", [e["action"] for e in body["entries"]])

    def test_login_needs_this_servers_origin_and_host(self):
        st, body, _ = login(self.s, ADMIN, origin=None)
        self.assertEqual((st, error_of(body)["field"]), (403, "origin"))
        st, body, _ = login(self.s, ADMIN, origin="http://evil.example")
        self.assertEqual((st, error_of(body)["field"]), (403, "origin"))
        st, body, _ = login(self.s, ADMIN, host="evil.example:%d" % self.s.port)
        self.assertEqual((st, error_of(body)["field"]), (403, "host"))
        st, body, _ = login(self.s, ADMIN, origin="https://evil.example")
        self.assertEqual((st, error_of(body)["field"]), (403, "origin"))
        st, body, _ = login(self.s, ADMIN, origin="http://127.0.0.1:%d.evil" % self.s.port)
        self.assertEqual((st, error_of(body)["field"]), (403, "origin"))
        # the page served through a TLS proxy that forwards Host
        st, _, _ = login(self.s, ADMIN, origin="https://127.0.0.1:%d" % self.s.port)
        self.assertEqual(st, 303)

    def test_the_store_keeps_only_a_hash_of_the_session_id(self):
        sid, _ = session_of(self.s, ADMIN)
        hashes = [r[0] for r in self.s.query("SELECT hash FROM sessions")]
        self.assertIn(hashlib.sha256(sid.encode()).hexdigest(), hashes)
        self.assertNotIn(sid, hashes)

    def test_a_session_calls_the_api_and_changes_need_its_csrf_token(self):
        sid, csrf = session_of(self.s, ADMIN)
        st, body, _ = self.call("GET", "/v1/queues", sid)
        self.assertEqual(st, 200, body)
        st, body, _ = self.call("POST", "/v1/queues/sess-q/pause", sid)
        self.assertEqual((st, error_of(body)["field"]), (403, "X-CSRF-Token"))
        st, body, _ = self.call("POST", "/v1/queues/sess-q/pause", sid, csrf="0" * 64)
        self.assertEqual(st, 403)
        st, body, _ = self.s.get("/v1/queues/sess-q")
        self.assertFalse(body["queue"]["paused"])  # the refused requests changed nothing
        st, body, _ = self.call("POST", "/v1/queues/sess-q/pause", sid, csrf=csrf)
        self.assertEqual(st, 200, body)
        self.assertTrue(body["settings"]["paused"])
        st, body, _ = self.call("PUT", "/v1/queues/sess-q", sid, body={"paused": False})
        self.assertEqual(st, 403)
        st, body, _ = self.call("PUT", "/v1/queues/sess-q", sid, csrf=csrf, body={"paused": False})
        self.assertEqual(st, 200, body)

    def test_a_cookie_with_another_host_is_refused(self):
        sid, csrf = session_of(self.s, ADMIN)
        st, body, _ = self.call("GET", "/v1/queues", sid, host="rebound.example:%d" % self.s.port)
        self.assertEqual((st, error_of(body)["field"]), (403, "host"))
        st, body, _ = self.call("GET", "/v1/queues", sid, host="localhost:%d" % self.s.port)
        self.assertEqual(st, 200, body)  # loopback names with the port are this server

    def test_a_session_has_its_tokens_role(self):
        sid, csrf = session_of(self.s, WORKER)
        st, info, _ = self.call("GET", "/ui/session", sid)
        self.assertEqual(info["role"], "worker")
        st, body, _ = self.call("POST", "/v1/queues/sess-w/pause", sid, csrf=csrf)
        self.assertEqual(st, 403, body)
        st, body, _ = self.call("GET", "/v1/audit", sid)
        self.assertEqual(st, 403, body)

    def test_a_session_carries_its_tokens_name_into_the_audit_log(self):
        sid, csrf = session_of(self.s, ALICE)
        st, info, _ = self.call("GET", "/ui/session", sid)
        self.assertEqual((info["role"], info["name"]), ("admin", "alice"))
        st, body, _ = self.call("POST", "/v1/queues/alice-q/pause", sid, csrf=csrf)
        self.assertEqual(st, 200, body)
        st, body, _ = self.s.get("/v1/audit?limit=1000")
        mine = [(e["who"], e["action"]) for e in body["entries"] if e["target"] == "alice-q"]
        self.assertEqual(mine, [("admin@alice", "queue.pause")])
        logins = [e["who"] for e in body["entries"] if e["action"] == "ui.login"]
        self.assertIn("admin@alice", logins)

    def test_a_viewer_session_sees_no_payload_and_changes_nothing(self):
        self.s.enqueue("view-q", {"name": "n", "payload": {"secret": 1}, "id": "view-1"})
        sid, csrf = session_of(self.s, VIEWER)
        st, body, _ = self.call("GET", "/v1/jobs/view-1", sid)
        self.assertEqual(st, 200, body)
        self.assertIsNone(body["job"]["payload"])
        self.assertIn("payload", body["job"]["redacted"])
        st, body, _ = self.call("POST", "/v1/queues/view-q/pause", sid, csrf=csrf)
        self.assertEqual(st, 403, body)

    def test_without_a_session_pages_redirect_and_the_api_refuses(self):
        st, _, h = self.s.get("/ui/", token=None)
        self.assertEqual((st, h.get("location")), (303, "/ui/login"))
        st, _, h = self.s.get("/ui/", token=None, headers={"Cookie": "errand_session=" + "ab" * 32})
        self.assertEqual((st, h.get("location")), (303, "/ui/login"))
        st, body, _ = self.s.get("/ui/session", token=None)
        self.assertEqual(st, 401)
        st, body, _ = self.s.get("/v1/queues", token=None, headers={"Cookie": "errand_session=" + "ab" * 32})
        self.assertEqual(st, 401)
        for path in ("/ui/login", "/ui/assets/app.js", "/ui/assets/style.css", "/ui/assets/login.js"):
            st, _, _ = self.s.get(path, token=None)
            self.assertEqual(st, 200, path)

    def test_logout_ends_the_session(self):
        sid, csrf = session_of(self.s, ADMIN)
        st, body, _ = self.call("POST", "/ui/logout", sid)
        self.assertEqual(st, 403)  # a logout needs the CSRF token too
        st, _, h = self.call("POST", "/ui/logout", sid, csrf=csrf)
        self.assertEqual(st, 204)
        self.assertIn("Max-Age=0", h["set-cookie"])
        st, _, _ = self.call("GET", "/v1/queues", sid)
        self.assertEqual(st, 401)
        st, body, _ = self.s.get("/v1/audit?limit=1000")
        self.assertIn("ui.logout", [e["action"] for e in body["entries"]])

    def test_an_idle_session_ends(self):
        sid, _ = session_of(self.s, ADMIN)
        h = hashlib.sha256(sid.encode()).hexdigest()
        st, _, _ = self.call("GET", "/v1/queues", sid)
        self.assertEqual(st, 200)
        import sqlite3
        db = sqlite3.connect(self.s.db_path, timeout=10)
        with db:
            db.execute("UPDATE sessions SET expires_at = 1 WHERE hash = ?", (h,))
        db.close()
        st, _, _ = self.call("GET", "/v1/queues", sid)
        self.assertEqual(st, 401)

    def test_pages_and_assets_carry_security_headers(self):
        sid, _ = session_of(self.s, ADMIN)
        for path, ctype in (("/ui/", "text/html"), ("/ui/login", "text/html"),
                            ("/ui/assets/app.js", "text/javascript"),
                            ("/ui/assets/style.css", "text/css")):
            st, body, h = self.call("GET", path, sid)
            self.assertEqual(st, 200, path)
            self.assertTrue(h["content-type"].startswith(ctype), (path, h["content-type"]))
            self.assertEqual(h["x-content-type-options"], "nosniff")
            self.assertEqual(h["x-frame-options"], "DENY")
            csp = h["content-security-policy"]
            self.assertIn("default-src 'self'", csp)
            self.assertIn("frame-ancestors 'none'", csp)
            self.assertNotIn("unsafe-inline", csp)
            self.assertIn(h["cache-control"], ("no-store", "no-cache"))
        st, _, _ = self.call("GET", "/ui/assets/nope.js", sid)
        self.assertEqual(st, 404)
        st, _, h = self.s.get("/ui", token=None)
        self.assertEqual((st, h.get("location")), (303, "/ui/"))

    def test_admin_actions_are_audited_and_reads_are_not(self):
        self.s.enqueue("aud-q", {"name": "n", "payload": {}, "id": "aud-1"})
        st, _, _ = self.s.post("/v1/queues/aud-q/pause")
        self.assertEqual(st, 200)
        st, _, _ = self.s.request("DELETE", "/v1/jobs/aud-1")
        self.assertEqual(st, 200)
        st, _, _ = self.s.request("DELETE", "/v1/jobs/aud-missing")
        self.assertEqual(st, 404)
        st, body, _ = self.s.get("/v1/audit?limit=1000")
        mine = [(e["who"], e["action"], e["target"]) for e in body["entries"]
                if e["target"] in ("aud-q", "aud-1", "aud-missing")]
        self.assertEqual(mine, [("admin", "job.cancel", "aud-1"), ("admin", "queue.pause", "aud-q")])
        actions = {e["action"] for e in body["entries"]}
        self.assertFalse(actions & {"enqueue", "fetch", "ack"})

    def test_the_audit_log_pages_newest_first(self):
        for i in range(3):
            self.s.post("/v1/queues/page-q%d/pause" % i)
        st, p1, _ = self.s.get("/v1/audit?limit=2")
        self.assertEqual(st, 200)
        self.assertEqual(len(p1["entries"]), 2)
        self.assertIsNotNone(p1["next_cursor"])
        st, p2, _ = self.s.get("/v1/audit?limit=2&cursor=" + p1["next_cursor"])
        self.assertEqual(st, 200)
        seqs = [e["seq"] for e in p1["entries"] + p2["entries"]]
        self.assertEqual(seqs, sorted(seqs, reverse=True))
        self.assertEqual(len(set(seqs)), len(seqs))

    def test_bad_audit_queries_and_login_forms_are_refused(self):
        for q, field in (("limit=0", "limit"), ("limit=1001", "limit"), ("cursor=abc", "cursor"),
                         ("cursor=", "cursor"), ("what=1", "what")):
            st, body, _ = self.s.get("/v1/audit?" + q)
            self.assertEqual((st, error_of(body)["field"]), (400, field), q)
        st, _, _ = self.s.get("/v1/audit", token=WORKER)
        self.assertEqual(st, 403)
        origin = "http://127.0.0.1:%d" % self.s.port
        cases = [({"Content-Type": "application/json"}, "token=x", 400),
                 ({"Content-Type": FORM}, "token=x&extra=1", 400),
                 ({"Content-Type": FORM}, "nothing=1", 400),
                 ({"Content-Type": FORM}, "token=%zz", 400),
                 ({"Content-Type": FORM}, "token=" + "a" * 5000, 413)]
        for h, raw, want in cases:
            h = dict(h, Origin=origin)
            st, body, _ = self.s.request("POST", "/ui/login", raw=raw, token=None, headers=h)
            self.assertEqual(st, want, (raw[:30], body))


class OpenMode(unittest.TestCase):
    """No tokens (loopback): the dashboard is open, yet a session cookie still
    needs its CSRF token and this server's Host."""

    @classmethod
    def setUpClass(cls):
        cls.s = Server().start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def test_the_session_endpoint_makes_a_session_whose_changes_need_csrf(self):
        st, _, h = self.s.get("/ui/")
        self.assertEqual(st, 200)
        st, info, h = self.s.get("/ui/session")
        self.assertEqual(st, 201, info)
        self.assertTrue(info["open"])
        sid = cookie_of(h)
        hdr = {"Cookie": "errand_session=" + sid}
        st, body, _ = self.s.post("/v1/queues/open-q/pause", headers=hdr)
        self.assertEqual((st, error_of(body)["field"]), (403, "X-CSRF-Token"))
        st, body, _ = self.s.post("/v1/queues/open-q/pause",
                                  headers=dict(hdr, **{"X-CSRF-Token": info["csrf_token"]}))
        self.assertEqual(st, 200, body)
        st, body, _ = self.s.get("/v1/queues", headers=dict(hdr, Host="evil.example"))
        self.assertEqual(st, 403)
        st, body, _ = self.s.get("/v1/audit")
        self.assertEqual(body["entries"][0]["who"], "open")
        self.assertEqual(body["entries"][0]["action"], "queue.pause")

    def test_a_change_from_another_sites_page_is_refused_without_a_cookie(self):
        port = self.s.port
        for origin, host, want in (("http://evil.example", None, 403),
                                   ("http://evil.example:%d" % port, "evil.example:%d" % port, 403),
                                   ("http://127.0.0.1:%d" % port, None, 200),
                                   (None, None, 200)):
            h = {"Origin": origin} if origin else {}
            if host:
                h["Host"] = host
            st, body, _ = self.s.post("/v1/queues/xsite-q/pause", headers=h)
            self.assertEqual(st, want, (origin, host, body))
            if want == 403:
                self.assertEqual(error_of(body)["field"], "host" if host else "origin")
        st, body, _ = self.s.get("/v1/queues", headers={"Origin": "http://evil.example"})
        self.assertEqual(st, 200)  # reads are not changes (and CORS keeps their answers)
        # a browser that says another site's page sent it, whatever the Origin
        for site, want in (("cross-site", 403), ("same-site", 403), ("same-origin", 200),
                           ("none", 200)):
            st, body, _ = self.s.post("/v1/queues/xsite-q/resume",
                                      headers={"Sec-Fetch-Site": site})
            self.assertEqual(st, want, (site, body))

    def test_dns_rebinding_reads_nothing(self):
        # issue 16 item 10: a hostile name pointed at 127.0.0.1 reaches the
        # server from the victim's browser with that name in Host
        port = self.s.port
        for path in ("/v1/queues", "/v1/jobs/none", "/metrics", "/v1/dead", "/v1/schedulers"):
            st, body, _ = self.s.get(path, headers={"Host": "rebind.example:%d" % port})
            self.assertEqual(st, 403, (path, body))
        # probes answer to any name (a load balancer's), and tell nothing
        st, body, _ = self.s.get("/healthz", headers={"Host": "rebind.example:%d" % port})
        self.assertEqual(st, 200, body)
        st, body, _ = self.s.get("/v1/queues", headers={"Host": "rebind.example:%d" % port})
        self.assertEqual(error_of(body)["field"], "host", body)
        for host in ("localhost:%d" % port, "127.0.0.1:%d" % port, "LOCALHOST:%d" % port):
            st, body, _ = self.s.get("/v1/queues", headers={"Host": host})
            self.assertEqual(st, 200, (host, body))

    def test_allowed_hosts_adds_names(self):
        with Server(args=["--allowed-hosts", "errand.internal"]) as s:
            st, body, _ = s.get("/v1/queues", headers={"Host": "errand.internal:%d" % s.port})
            self.assertEqual(st, 200, body)
            st, body, _ = s.get("/v1/queues", headers={"Host": "other.internal"})
            self.assertEqual(st, 403, body)
        # with tokens a bearer request is judged by its token, not by Host
        with Server(args=["--token", "admin:" + ADMIN]) as s:
            st, body, _ = s.get("/v1/queues", headers={
                "Host": "rebind.example", "Authorization": "Bearer " + ADMIN})
            self.assertEqual(st, 200, body)


class Settings(unittest.TestCase):
    def write(self, s, sql, params=()):
        import sqlite3
        db = sqlite3.connect(s.db_path, timeout=10)
        with db:
            db.execute(sql, params)
        db.close()

    def test_retention_deletes_old_audit_rows_and_expired_sessions(self):
        with Server(args=["--retention-interval", "100ms", "--audit-retention-s", "3600"]) as s:
            now = now_ms()
            for at in (1, now - 2 * 3600000, now - 600000):
                self.write(s, "INSERT INTO audit (at, who, action, target, count)"
                              " VALUES (?, 'admin', 'queue.pause', 'ret-q', 1)", (at,))
            self.write(s, "INSERT INTO sessions VALUES ('%s', 3, '', 'c', 1, 1)" % ("e" * 64))
            self.write(s, "INSERT INTO sessions VALUES ('%s', 3, '', 'c', 1, ?)" % ("f" * 64),
                       (now + 3600000,))
            wait_until(lambda: len(s.query("SELECT 1 FROM audit WHERE target = 'ret-q'")) == 1,
                       what="old audit rows deleted")
            self.assertEqual(s.query("SELECT at FROM audit WHERE target = 'ret-q'"),
                             [(now - 600000,)])
            wait_until(lambda: s.query("SELECT hash FROM sessions") == [("f" * 64,)],
                       what="the expired session deleted")

    def test_out_of_range_settings_are_refused_at_start(self):
        for args in (["--ui-session-idle-s", "59"], ["--ui-session-idle-s", "2592001"],
                     ["--audit-retention-s", "3599"], ["--allowed-hosts", "bad host"],
                     ["--allowed-hosts", "a,,b"]):
            with self.subTest(args=args):
                rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                           "sqlite:/nonexistent/x.db"] + args)
                self.assertEqual(rc, 2, err)
                self.assertRegex(err, "ui-session-idle-s|audit-retention-s|allowed-hosts")

    def test_a_ui_host_name_is_accepted_with_any_port(self):
        with Server(args=["--token", "admin:" + ADMIN, "--allowed-hosts", "errand.example,ops.example"],
                    token=ADMIN) as s:
            st, _, h = login(s, ADMIN, host="errand.example")
            self.assertEqual(st, 303)
            sid = cookie_of(h)
            for host, want in (("ops.example:8443", 200), ("errand.example", 200),
                               ("errand.example.evil", 403), ("other.example", 403),
                               ("errand.example:x", 403)):
                st, _, _ = s.get("/v1/queues", token=None,
                                 headers={"Cookie": "errand_session=" + sid, "Host": host})
                self.assertEqual(st, want, host)

    def test_the_idle_limit_is_what_the_session_gets(self):
        with Server(args=["--token", "admin:" + ADMIN, "--ui-session-idle-s", "600"],
                    token=ADMIN) as s:
            before = now_ms()
            sid, _ = session_of(s, ADMIN)
            st, info, _ = s.get("/ui/session", token=None,
                                headers={"Cookie": "errand_session=" + sid})
            self.assertEqual(info["idle_s"], 600)
            (exp,), = s.query("SELECT expires_at FROM sessions")
            self.assertGreaterEqual(exp, before + 600000)
            self.assertLessEqual(exp, now_ms() + 600000)


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class PostgresSessions(PgNodes, unittest.TestCase):
    NODE_ARGS = ("--token", "admin:" + ADMIN)

    def test_a_session_made_on_one_node_works_on_another_and_is_audited(self):
        a, b = self.servers
        sid, csrf = session_of(a, ADMIN)
        h = {"Cookie": "errand_session=" + sid, "X-CSRF-Token": csrf}
        st, body, _ = b.request("POST", "/v1/queues/pg-sess/pause", token=None, headers=h)
        self.assertEqual(st, 200, body)
        st, body, _ = a.get("/v1/audit", token=ADMIN)
        self.assertEqual(st, 200, body)
        self.assertEqual([(e["who"], e["action"], e["target"]) for e in body["entries"][:2]],
                         [("admin", "queue.pause", "pg-sess"), ("admin", "ui.login", None)])
        st, _, _ = b.request("POST", "/ui/logout", token=None, headers=h)
        self.assertEqual(st, 204)
        st, _, _ = a.get("/v1/queues", token=None, headers={"Cookie": h["Cookie"]})
        self.assertEqual(st, 401)


if __name__ == "__main__":
    unittest.main()
