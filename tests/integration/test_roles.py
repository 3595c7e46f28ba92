# SPDX-License-Identifier: MIT
#
# Token names and roles: `--token ROLE@NAME:TOKEN` works beside plain
# `ROLE:TOKEN` (also in --token-file), bad names are refused at start naming
# the token's position and never echoing it, and the access log carries the
# caller's role and name, never the token.

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, run_errand, wait_until  # noqa: E402

ADMIN = "a" * 27 + "admin"
PRODUCER = "p" * 24 + "producer"
WORKER = "w" * 26 + "worker"
NAMED_ADMIN = "A" * 20 + "named-admin"
NAMED_WORKER = "W" * 20 + "named-worker"


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class TokenNamesTest(unittest.TestCase):
    def serve_refused(self, args):
        with tempfile.TemporaryDirectory() as d:
            return run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                               "sqlite:" + os.path.join(d, "e.db")] + args)

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

    BAD = [
        ("empty name", "admin@:" + NAMED_ADMIN, "token name (after @) must be 1..64"),
        ("65-char name", "admin@" + "n" * 65 + ":" + NAMED_ADMIN,
         "token name (after @) must be 1..64"),
        ("bad char", "admin@ali ce:" + NAMED_ADMIN, "token name may only contain"),
        ("slash in name", "admin@a/b:" + NAMED_ADMIN, "token name may only contain"),
        ("@ without name or token", "admin@", "token must be ROLE:TOKEN or ROLE@NAME:TOKEN"),
        ("unknown role", "root@ops:" + NAMED_ADMIN, "role must be"),
        ("empty role", "@ops:" + NAMED_ADMIN, "role must be"),
        ("short token", "admin@ops:short", "token must be 16..127"),
    ]

    def test_bad_specs_are_refused_naming_the_position_not_the_token(self):
        for why, spec, msg in self.BAD:
            with self.subTest(why):
                rc, out, err = self.serve_refused(["--token", "admin:" + ADMIN, "--token", spec])
                self.assertEqual(rc, 2, "%s: %r" % (why, err))
                self.assertIn("--token #2: " + msg, err)
                self.assertNotIn(NAMED_ADMIN, err)
                self.assertNotIn(ADMIN, err)
                self.assertNotIn("ali ce", err)

    def test_bad_specs_in_a_token_file_are_refused_naming_the_line(self):
        for why, spec, msg in self.BAD:
            with self.subTest(why), tempfile.TemporaryDirectory() as d:
                tf = os.path.join(d, "tokens")
                with open(tf, "w") as f:
                    f.write("admin:%s\n\n%s\n" % (ADMIN, spec))
                os.chmod(tf, 0o600)
                rc, out, err = self.serve_refused(["--token-file", tf])
                self.assertEqual(rc, 2, "%s: %r" % (why, err))
                self.assertIn("line 3: " + msg, err)
                self.assertNotIn(NAMED_ADMIN, err)


if __name__ == "__main__":
    unittest.main()
