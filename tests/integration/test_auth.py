# SPDX-License-Identifier: MIT
#
# Bearer-token authentication and roles: a server started with producer,
# worker and admin tokens refuses missing and unknown tokens (401) and
# calls outside a role (403) without touching the store; /healthz stays
# open. Also the start-up rules: a non-loopback address without tokens and
# a malformed --token spec (also a bad ROLE@NAME name) make `errand serve`
# exit non-zero with a message naming the token's position, never the token.

import json
import os
import re
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, StartError, error_of, run_errand, wait_until  # noqa: E402

PRODUCER = "p" * 24 + "producer"
WORKER = "w" * 26 + "worker"
ADMIN = "a" * 27 + "admin"
TOKEN_ARGS = ["--token", "producer:" + PRODUCER, "--token", "worker:" + WORKER,
              "--token", "admin:" + ADMIN]


class AuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=TOKEN_ARGS).start()
        s = cls.s
        st, b, _ = s.enqueue("auth-fix", {"name": "x", "id": "auth-dead"}, token=ADMIN)
        assert st == 201, (st, b)
        st, b, _ = s.fetch("auth-fix", token=WORKER)
        assert st == 200 and b["jobs"], (st, b)
        st, b, _ = s.fail("auth-dead", b["jobs"][0]["lease_token"], {"class": "permanent"},
                          token=WORKER)
        assert st == 200, (st, b)

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def refused(self, method, path, body, token, status, code, headers=None):
        before = self.s.snapshot()
        st, b, _ = self.s.request(method, path, body=body, token=token, headers=headers)
        what = "%s %s token=%r -> %s %r" % (method, path, token and token[:4], st, b)
        self.assertEqual(st, status, what)
        self.assertEqual(error_of(b).get("code"), code, what)
        self.assertEqual(self.s.snapshot(), before, "store changed after " + what)

    def test_healthz_without_token_is_200(self):
        st, b, _ = self.s.get("/healthz", token=None)
        self.assertEqual((st, b), (200, {"status": "ok"}))

    def test_enqueue_without_token_is_401_unauthenticated(self):
        self.refused("POST", "/v1/queues/auth-q/jobs", {"name": "x", "id": "a1"}, None, 401,
                     "unauthenticated")

    def test_enqueue_with_unknown_token_is_401(self):
        self.refused("POST", "/v1/queues/auth-q/jobs", {"name": "x", "id": "a1"},
                     "z" * 32, 401, "unauthenticated")

    def test_token_prefix_of_a_real_token_is_401(self):
        self.refused("POST", "/v1/queues/auth-q/jobs", {"name": "x", "id": "a1"},
                     ADMIN[:-1], 401, "unauthenticated")

    def test_basic_auth_scheme_is_401(self):
        self.refused("POST", "/v1/queues/auth-q/jobs", {"name": "x", "id": "a1"}, None, 401,
                     "unauthenticated", headers={"Authorization": "Basic " + ADMIN})

    def test_get_job_without_token_is_401(self):
        self.refused("GET", "/v1/jobs/auth-dead", None, None, 401, "unauthenticated")

    def test_fetch_without_token_is_401(self):
        self.refused("POST", "/v1/fetch", {"queues": ["auth-q"], "worker_id": "w"}, None, 401,
                     "unauthenticated")

    def test_producer_can_enqueue_and_read(self):
        st, b, _ = self.s.enqueue("auth-prod", {"name": "x", "id": "prod-1"}, token=PRODUCER)
        self.assertEqual(st, 201, b)
        st, b, _ = self.s.get("/v1/jobs/prod-1", token=PRODUCER)
        self.assertEqual(st, 200, b)
        st, b, _ = self.s.get("/v1/queues", token=PRODUCER)
        self.assertEqual(st, 200, b)

    def test_producer_cannot_fetch_403_permission_denied(self):
        self.s.enqueue("auth-pf", {"name": "x", "id": "pf-1"}, token=PRODUCER)
        self.refused("POST", "/v1/fetch", {"queues": ["auth-pf"], "worker_id": "w", "wait_ms": 0},
                     PRODUCER, 403, "permission_denied")

    def test_producer_cannot_put_queue_settings_403(self):
        self.refused("PUT", "/v1/queues/auth-fix", {"paused": True}, PRODUCER, 403,
                     "permission_denied")

    def test_worker_cannot_enqueue_403(self):
        self.refused("POST", "/v1/queues/auth-q/jobs", {"name": "x", "id": "wk-1"}, WORKER, 403,
                     "permission_denied")

    def test_worker_cannot_put_queue_settings_403(self):
        self.refused("PUT", "/v1/queues/auth-fix", {"lease_ms": 5000}, WORKER, 403,
                     "permission_denied")

    def test_worker_cannot_pause_queue_403(self):
        self.refused("POST", "/v1/queues/auth-fix/pause", {}, WORKER, 403, "permission_denied")

    def test_worker_cannot_redrive_403(self):
        self.refused("POST", "/v1/dead/auth-dead/redrive", {}, WORKER, 403, "permission_denied")

    def test_worker_cannot_delete_dead_403(self):
        self.refused("DELETE", "/v1/dead/auth-dead", None, WORKER, 403, "permission_denied")

    def test_worker_can_fetch_and_complete(self):
        self.s.enqueue("auth-wk", {"name": "x", "id": "wk-ok"}, token=PRODUCER)
        jobs = self.s.fetch_jobs("auth-wk", token=WORKER)
        self.assertEqual([j["id"] for j in jobs], ["wk-ok"])
        st, b, _ = self.s.complete("wk-ok", jobs[0]["lease_token"], token=WORKER)
        self.assertEqual(st, 200, b)

    def test_admin_can_put_settings_pause_and_redrive(self):
        st, b, _ = self.s.request("PUT", "/v1/queues/auth-adm", {"lease_ms": 5000}, token=ADMIN)
        self.assertEqual(st, 200, b)
        st, b, _ = self.s.post("/v1/queues/auth-adm/pause", token=ADMIN)
        self.assertEqual(st, 200, b)
        st, b, _ = self.s.post("/v1/queues/auth-adm/resume", token=ADMIN)
        self.assertEqual(st, 200, b)
        st, b, _ = self.s.post("/v1/dead/auth-dead/redrive", token=ADMIN)
        self.assertIn(st, (200, 201), b)
        self.assertEqual(b["job"]["id"], "auth-dead-redrive-1")
        st, b, _ = self.s.enqueue("auth-adm", {"name": "x"}, token=ADMIN)
        self.assertEqual(st, 201, b)
        st, b, _ = self.s.fetch("auth-adm", token=ADMIN)
        self.assertEqual(st, 200, b)


class AuthStartupTest(unittest.TestCase):
    def test_non_loopback_listen_without_token_exits_nonzero_with_message(self):
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = run_errand(["serve", "--listen", "0.0.0.0:0", "--store",
                                       "sqlite:" + os.path.join(d, "e.db")])
        self.assertIsNotNone(rc, "server started on 0.0.0.0 without tokens:\n" + err)
        self.assertNotEqual(rc, 0)
        self.assertIn("token", err.lower(), err)

    def test_non_loopback_listen_with_token_starts_and_requires_it(self):
        with Server(listen="0.0.0.0:0", args=["--token", "admin:" + ADMIN]) as s:
            st, b, _ = s.get("/v1/queues", token=None)
            self.assertEqual(st, 401, b)
            st, b, _ = s.get("/v1/queues", token=ADMIN)
            self.assertEqual(st, 200, b)

    def test_a_host_name_is_resolved_before_binding(self):
        with Server(listen="localhost:0") as s:
            self.assertEqual(s.get("/v1/queues", token=None)[0], 200)
            self.assertIn('"listen":"127.0.0.1:', s.log_text())
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = run_errand(["serve", "--listen", "no-such-host.invalid:0", "--store",
                                       "sqlite:" + os.path.join(d, "e.db")])
        self.assertNotEqual(rc, 0)
        self.assertIn("cannot resolve no-such-host.invalid", err)

    def test_loopback_without_token_is_open(self):
        with Server() as s:
            st, b, _ = s.get("/v1/queues", token=None)
            self.assertEqual(st, 200, b)

    def test_tokens_from_errand_tokens_env_comma_list(self):
        env = {"ERRAND_TOKENS": "admin:%s,worker:%s" % (ADMIN, WORKER)}
        with Server(env=env) as s:
            self.assertEqual(s.get("/v1/queues", token=None)[0], 401)
            self.assertEqual(s.get("/v1/queues", token=ADMIN)[0], 200)
            st, b, _ = s.enqueue("env-q", {"name": "x"}, token=WORKER)
            self.assertEqual(st, 403, b)

    def token_file(self, d, text, mode=0o600):
        path = os.path.join(d, "tokens")
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def test_tokens_from_a_file_stay_off_the_command_line(self):
        with tempfile.TemporaryDirectory() as d:
            path = self.token_file(d, "# errand tokens\n\nadmin:%s\n  worker:%s  \r\n"
                                   % (ADMIN, WORKER))
            with Server(args=["--token-file", path, "--token", "producer:" + PRODUCER]) as s:
                self.assertEqual(s.get("/v1/queues", token=None)[0], 401)
                self.assertEqual(s.get("/v1/queues", token=ADMIN)[0], 200)
                st, b, _ = s.enqueue("file-q", {"name": "x"}, token=WORKER)
                self.assertEqual(st, 403, b)
                st, b, _ = s.enqueue("file-q", {"name": "x"}, token=PRODUCER)
                self.assertEqual(st, 201, b)
                with open("/proc/%d/cmdline" % s.proc.pid, "rb") as f:
                    cmdline = f.read()
                self.assertNotIn(ADMIN.encode(), cmdline)
                self.assertNotIn(WORKER.encode(), cmdline)
                self.assertNotIn("can be read by other users", s.log_text())

    def test_a_bad_token_file_is_refused_naming_the_line_not_the_token(self):
        with tempfile.TemporaryDirectory() as d:
            secret = "s" * 20 + "secret"
            for text, why in (("admin:%s\nroot:%s\n" % (ADMIN, secret), "line 2: role"),
                              ("admin:short\n", "line 1: token must be"),
                              ("x" * 600 + "\n", "line 1: longer than")):
                path = self.token_file(d, text)
                rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                           "sqlite:" + os.path.join(d, "e.db"),
                                           "--token-file", path])
                self.assertEqual(rc, 2, err)
                self.assertIn(why, err)
                self.assertNotIn(secret, err)
            rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                       "sqlite:" + os.path.join(d, "e.db"),
                                       "--token-file", os.path.join(d, "missing")])
            self.assertEqual(rc, 2, err)
            self.assertIn("No such file", err)

    def test_a_token_file_others_can_read_is_warned_about(self):
        with tempfile.TemporaryDirectory() as d:
            path = self.token_file(d, "admin:%s\n" % ADMIN, mode=0o644)
            with Server(args=["--token-file", path]) as s:
                self.assertEqual(s.get("/v1/queues", token=ADMIN)[0], 200)
                self.assertIn("can be read by other users", s.log_text())

    def test_refused_tokens_are_logged_at_most_once_a_second_without_the_token(self):
        with Server(args=["--token", "admin:" + ADMIN]) as s:
            bad = "b" * 30 + "guess"
            t0 = time.monotonic()
            for _ in range(50):
                self.assertEqual(s.get("/v1/queues", token=bad)[0], 401)
            secs = time.monotonic() - t0
            lines = [l for l in s.log_text().splitlines() if "authentication failed" in l]
            self.assertGreaterEqual(len(lines), 1)
            # one line a second at most (a loaded machine may take more than one)
            self.assertLessEqual(len(lines), int(secs) + 1, (secs, lines))
            self.assertIn('"route":"GET /v1/queues"', lines[0])
            self.assertIn('"peer":"127.0.0.1:', lines[0])
            self.assertNotIn(bad, s.log_text())
            time.sleep(1.1)
            s.get("/v1/queues", token=bad)

            def refused():
                got = [l for l in s.log_text().splitlines() if "authentication failed" in l]
                return sum(int(re.search(r'"refused":(\d+)', l).group(1)) for l in got)
            # the line reaches the log reader a moment after the reply
            wait_until(lambda: refused() >= 51, timeout=5)
            self.assertEqual(refused(), 51, s.log_text())

    def test_the_access_log_has_a_line_a_request_and_no_token(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "access.log")
            with Server(args=["--token", "admin:" + ADMIN, "--access-log", path]) as s:
                self.assertEqual(s.get("/v1/queues?limit=5", token=ADMIN)[0], 200)
                self.assertEqual(s.get("/v1/queues", token=None)[0], 401)
                self.assertEqual(s.request("HEAD", "/healthz", token=None)[0], 200)

                def lines():
                    with open(path) as f:
                        return [json.loads(l) for l in f if l.strip()]
                wait_until(lambda: len(lines()) >= 3, timeout=5, what="three lines flushed")
                got = lines()
                self.assertEqual([(l["method"], l["path"], l["status"]) for l in got[:3]],
                                 [("GET", "/v1/queues?limit=5", 200), ("GET", "/v1/queues", 401),
                                  ("HEAD", "/healthz", 200)])
                self.assertTrue(got[0]["peer"].startswith("127.0.0.1:"))
                self.assertGreater(got[0]["bytes"], 0)
                self.assertEqual(got[2]["bytes"], 15, "HEAD logs the length GET would send")
                with open(path) as f:
                    self.assertNotIn(ADMIN, f.read())
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                       "sqlite:" + os.path.join(d, "e.db"), "--access-log",
                                       os.path.join(d, "no", "such", "dir", "a.log")])
            self.assertNotEqual(rc, 0)
            self.assertIn("cannot open", err)

    def bad_token(self, spec):
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                       "sqlite:" + os.path.join(d, "e.db"), "--token", spec])
        self.assertIsNotNone(rc, "server started with --token %r" % spec)
        self.assertNotEqual(rc, 0)
        self.assertIn("token", err.lower(), err)

    def test_token_spec_without_role_exits_nonzero(self):
        self.bad_token("x" * 32)

    def test_token_spec_unknown_role_exits_nonzero(self):
        self.bad_token("root:" + "x" * 32)

    def test_token_spec_too_short_exits_nonzero(self):
        self.bad_token("admin:short")

    def test_token_spec_bad_chars_exits_nonzero(self):
        self.bad_token("admin:" + "x" * 20 + " !@#$%")

    # Named tokens, ROLE@NAME:TOKEN (test_roles.py has the good ones).
    NAMED = "A" * 20 + "named-admin"
    BAD_SPECS = [
        ("empty name", "admin@:" + NAMED, "token name (after @) must be 1..64"),
        ("65-char name", "admin@" + "n" * 65 + ":" + NAMED, "token name (after @) must be 1..64"),
        ("bad char", "admin@ali ce:" + NAMED, "token name may only contain"),
        ("slash in name", "admin@a/b:" + NAMED, "token name may only contain"),
        ("@ without name or token", "admin@", "token must be ROLE:TOKEN or ROLE@NAME:TOKEN"),
        ("unknown role", "root@ops:" + NAMED, "role must be"),
        ("unknown role, plain", "reader:" + NAMED, "role must be"),
        ("empty role", "@ops:" + NAMED, "role must be"),
        ("short token", "admin@ops:short", "token must be 16..127"),
    ]

    def test_bad_named_specs_are_refused_naming_the_position_not_the_token(self):
        for why, spec, msg in self.BAD_SPECS:
            with self.subTest(why), tempfile.TemporaryDirectory() as d:
                rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                           "sqlite:" + os.path.join(d, "e.db"),
                                           "--token", "admin:" + ADMIN, "--token", spec])
                self.assertEqual(rc, 2, "%s: %r" % (why, err))
                self.assertIn("--token #2: " + msg, err)
                for secret in (self.NAMED, ADMIN, "ali ce", "n" * 65):
                    self.assertNotIn(secret, err)

    def test_bad_named_specs_in_a_token_file_are_refused_naming_the_line(self):
        for why, spec, msg in self.BAD_SPECS:
            with self.subTest(why), tempfile.TemporaryDirectory() as d:
                path = self.token_file(d, "admin:%s\n\n%s\n" % (ADMIN, spec))
                rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                           "sqlite:" + os.path.join(d, "e.db"),
                                           "--token-file", path])
                self.assertEqual(rc, 2, "%s: %r" % (why, err))
                self.assertIn("line 3: " + msg, err)
                self.assertNotIn(self.NAMED, err)

    def test_server_does_not_start_with_bad_token_even_via_server_class(self):
        with self.assertRaises(StartError):
            Server(args=["--token", "admin:"]).__enter__()


if __name__ == "__main__":
    unittest.main()
