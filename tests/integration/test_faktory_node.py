#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# The Faktory frontend with the real Node client (faktory-worker from npm,
# pinned in tests/faktory): a real `errand serve --faktory-listen
# 127.0.0.1:0` with tokens as passwords, and one `node
# tests/faktory/client.test.js CASE` a test. The cases check what they did
# over the HTTP API (tests/faktory/client.test.js says what each covers).
# It fails (never skips) when node or the npm package is missing; the
# package is installed with `npm ci` when tests/faktory/node_modules is
# absent (scripts/deps installs node and npm).

import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import REPO_ROOT, Server  # noqa: E402

FAKTORY_DIR = os.path.join(REPO_ROOT, "tests", "faktory")
PASSWORDS = {
    "producer": "fk-producer-token-0123456789",
    "worker": "fk-worker-token-0123456789",
    "admin": "fk-admin-token-0123456789",
}


def ensure_node_modules():
    """npm ci when faktory-worker is not installed; raises when it cannot be."""
    if os.path.isdir(os.path.join(FAKTORY_DIR, "node_modules", "faktory-worker")):
        return
    npm = shutil.which("npm")
    if not npm:
        raise AssertionError("npm is missing: install Debian's nodejs and npm (scripts/deps)")
    r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=FAKTORY_DIR,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError("npm ci failed in tests/faktory:\n" + r.stdout + r.stderr)


class FaktoryNode(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.node = shutil.which("node")
        if not cls.node:
            raise AssertionError("node is missing: install Debian's nodejs (scripts/deps)")
        ensure_node_modules()
        tokens = []
        for role, pw in PASSWORDS.items():
            tokens += ["--token", "%s:%s" % (role, pw)]
        # reserve_for's floor lowered to 1 s so a lease expires within the test.
        cls.server = Server(args=tokens + ["--faktory-listen", "127.0.0.1:0",
                                           "--faktory-min-reserve", "1s"],
                            token=PASSWORDS["admin"])
        cls.server.start()
        try:
            rec = cls.server.wait_log("faktory listening")
            host, _, port = rec["listen"].rpartition(":")
            cls.fk_host, cls.fk_port = host, int(port)
        except BaseException:
            cls.server.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def run_case(self, name):
        s = self.server
        env = dict(os.environ, FAKTORY_HOST=self.fk_host, FAKTORY_PORT=str(self.fk_port),
                   ERRAND_URL="http://127.0.0.1:%d" % s.port,
                   ERRAND_ADMIN_TOKEN=PASSWORDS["admin"],
                   FK_PRODUCER_PASSWORD=PASSWORDS["producer"],
                   FK_WORKER_PASSWORD=PASSWORDS["worker"],
                   FK_ADMIN_PASSWORD=PASSWORDS["admin"])
        env.pop("FAKTORY_URL", None)
        r = subprocess.run([self.node, os.path.join(FAKTORY_DIR, "client.test.js"), name],
                           cwd=FAKTORY_DIR, env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, "case %s failed:\n%s%s\nserver log:\n%s"
                         % (name, r.stdout, r.stderr, s.log_text(20)))

    def test_push(self):
        self.run_case("push")

    def test_push_bulk(self):
        self.run_case("push_bulk")

    def test_fetch_ack(self):
        self.run_case("fetch_ack")

    def test_fetch_wait(self):
        self.run_case("fetch_wait")

    def test_fetch_needs_wid(self):
        self.run_case("fetch_needs_wid")

    def test_fail_backtrace(self):
        self.run_case("fail_backtrace")

    def test_retry(self):
        self.run_case("retry")

    def test_dead(self):
        self.run_case("dead")

    def test_scheduled(self):
        self.run_case("scheduled")

    def test_reserve_for(self):
        self.run_case("reserve_for")

    def test_beat_quiet_terminate(self):
        self.run_case("beat_quiet_terminate")

    def test_mutate(self):
        self.run_case("mutate")

    def test_unique_and_expiry(self):
        self.run_case("unique_and_expiry")

    def test_password(self):
        self.run_case("password")

    def test_http_interop(self):
        self.run_case("http_interop")


if __name__ == "__main__":
    unittest.main()
