#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# The Faktory frontend with the real Node client (faktory-worker from npm,
# pinned in tests/faktory): a real `errand serve --faktory-listen
# 127.0.0.1:0` with tokens as passwords, and one `node
# tests/faktory/client.test.js CASE` a test. The cases check what they did
# over the HTTP API (tests/faktory/client.test.js says what each covers).
# Two more: a job fetched before a restart is acknowledged after it, and one
# fetched on a PostgreSQL node is acknowledged on another (ERRAND_TEST_PG_URL,
# as the other PostgreSQL tests; ERRAND_TEST_PG_SKIP=1 skips that one).
# It fails (never skips) when node or the npm package is missing; the
# package is installed with `npm ci` when tests/faktory/node_modules is
# absent (scripts/deps installs node and npm).

import json
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PG_SKIP, PG_SKIP_WHY, REPO_ROOT, PgNodes, Server  # noqa: E402

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


def faktory_address(server, after=0):
    """(host, port) of the Faktory listener the server logged after the mark."""
    rec = server.wait_log("faktory listening", after=after)
    host, _, port = rec["listen"].rpartition(":")
    return host, int(port)


def run_node(server, fk, name, **extra):
    """Runs `node client.test.js NAME` against server (HTTP) and fk (host,
    port); returns the completed process."""
    env = dict(os.environ, FAKTORY_HOST=fk[0], FAKTORY_PORT=str(fk[1]),
               ERRAND_URL="http://127.0.0.1:%d" % server.port,
               ERRAND_ADMIN_TOKEN=PASSWORDS["admin"],
               FK_PRODUCER_PASSWORD=PASSWORDS["producer"],
               FK_WORKER_PASSWORD=PASSWORDS["worker"],
               FK_ADMIN_PASSWORD=PASSWORDS["admin"], **extra)
    env.pop("FAKTORY_URL", None)
    return subprocess.run([shutil.which("node"), os.path.join(FAKTORY_DIR, "client.test.js"), name],
                          cwd=FAKTORY_DIR, env=env, capture_output=True, text=True, timeout=120)


def token_args():
    args = []
    for role, pw in PASSWORDS.items():
        args += ["--token", "%s:%s" % (role, pw)]
    return args


def require_node():
    if not shutil.which("node"):
        raise AssertionError("node is missing: install Debian's nodejs (scripts/deps)")
    ensure_node_modules()


class FaktoryNode(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_node()
        # reserve_for's floor lowered to 1 s so a lease expires within the test.
        cls.server = Server(args=token_args() + ["--faktory-listen", "127.0.0.1:0",
                                                 "--faktory-min-reserve", "1s"],
                            token=PASSWORDS["admin"])
        cls.server.start()
        try:
            cls.fk = faktory_address(cls.server)
        except BaseException:
            cls.server.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def run_case(self, name):
        r = run_node(self.server, self.fk, name)
        self.assertEqual(r.returncode, 0, "case %s failed:\n%s%s\nserver log:\n%s"
                         % (name, r.stdout, r.stderr, self.server.log_text(20)))

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

    def test_mutate_sets(self):
        self.run_case("mutate_sets")

    def test_unique_and_expiry(self):
        self.run_case("unique_and_expiry")

    def test_password(self):
        self.run_case("password")

    def test_http_interop(self):
        self.run_case("http_interop")



def step(test, server, fk, name, **extra):
    r = run_node(server, fk, "step:" + name, **extra)
    test.assertEqual(r.returncode, 0, "step %s failed:\n%s%s\nserver log:\n%s"
                     % (name, r.stdout, r.stderr, server.log_text(20)))
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


class FaktoryNodeRestart(unittest.TestCase):
    """A job fetched before a restart is acknowledged after it: the jid's
    lease lives in the store, not in the connection or the node's memory."""

    def test_ack_after_restart(self):
        require_node()
        with Server(args=token_args() + ["--faktory-listen", "127.0.0.1:0"],
                    token=PASSWORDS["admin"]) as s:
            got = step(self, s, faktory_address(s), "push_fetch", STEP_QUEUE="restart",
                       STEP_WID="wr-1")
            mark = s.log_mark()
            s.restart()
            step(self, s, faktory_address(s, after=mark), "ack", STEP_WID="wr-1",
                 STEP_JID=got["jid"])


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class FaktoryNodePg(PgNodes, unittest.TestCase):
    """Two errand nodes on one PostgreSQL schema: a job fetched over Faktory
    on one node is acknowledged on the other by the same wid."""

    NODE_ARGS = tuple(token_args() + ["--faktory-listen", "127.0.0.1:0"])

    def test_fetch_on_one_node_ack_on_the_other(self):
        require_node()
        a, b = self.servers
        a.token = b.token = PASSWORDS["admin"]
        got = step(self, a, faktory_address(a), "push_fetch", STEP_QUEUE="pg-nodes",
                   STEP_WID="wp-1")
        step(self, b, faktory_address(b), "ack", STEP_WID="wp-1", STEP_JID=got["jid"])


if __name__ == "__main__":
    unittest.main()
