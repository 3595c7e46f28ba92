#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# errand serve under systemd's notification protocol, with a datagram
# socket of the test's own as NOTIFY_SOCKET: READY=1 comes once the store
# is open and /readyz answers 200, STOPPING=1 on SIGTERM, WATCHDOG=1 pings
# with WATCHDOG_USEC set (and none for another WATCHDOG_PID); a socket that
# is not there or malformed WATCHDOG_* values are logged and harmless.
# `systemd-analyze verify` accepts deploy/systemd's units.

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import REPO_ROOT, Server, errand_bin  # noqa: E402

UNITS = os.path.join(REPO_ROOT, "deploy", "systemd")


class Notify(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="errand-notify-")
        self.path = os.path.join(self.tmp, "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.s = None

    def tearDown(self):
        if self.s:
            self.s.cleanup()
        self.sock.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def recv(self, timeout=15.0):
        self.sock.settimeout(timeout)
        return self.sock.recv(4096).decode()

    def messages_until(self, want, timeout=15.0):
        got = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.recv(max(0.1, deadline - time.monotonic()))
            got.append(m)
            if want in m.split("\n"):
                return got
        self.fail("no %s within %.0f s: %r" % (want, timeout, got))

    def test_ready_after_readyz_answers_then_stopping_on_sigterm(self):
        self.s = Server(tmpdir=self.tmp, env={"NOTIFY_SOCKET": self.path})
        self.s.start()
        first = self.recv()
        self.assertIn("READY=1", first.split("\n"), first)
        # the moment it says ready, it is
        st, body, _ = self.s.get("/readyz")
        self.assertEqual(st, 200, body)
        self.s.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.recv(), "STOPPING=1")
        self.assertEqual(self.s.proc.wait(timeout=30), 0)

    def test_ready_waits_for_the_store(self):
        db = os.path.join(self.tmp, "errand.db")
        p = subprocess.run([errand_bin(), "migrate", "--store", "sqlite:" + db],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")  # the server's open waits for this lock
        self.s = Server(tmpdir=self.tmp, env={"NOTIFY_SOCKET": self.path})
        started = threading.Thread(target=self.s.start)
        started.start()
        try:
            time.sleep(1.0)
            self.sock.setblocking(False)
            with self.assertRaises(BlockingIOError):
                self.sock.recv(4096)
        finally:
            con.execute("COMMIT")
            con.close()
            started.join(30)
        self.assertIn("READY=1", self.recv().split("\n"))
        st, body, _ = self.s.get("/readyz")
        self.assertEqual(st, 200, body)

    def test_ready_is_not_sent_before_the_store_opens(self):
        # a store that cannot open: the process exits 1 and sends nothing
        p = subprocess.run([errand_bin(), "serve", "--listen", "127.0.0.1:0", "--store",
                            "sqlite:" + os.path.join(self.tmp, "no", "such", "dir.db")],
                           env={"NOTIFY_SOCKET": self.path, "PATH": os.environ["PATH"]},
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.sock.setblocking(False)
        with self.assertRaises(BlockingIOError):
            self.sock.recv(4096)

    def test_watchdog_pings_when_asked_for_this_process_only(self):
        self.s = Server(tmpdir=self.tmp, env={"NOTIFY_SOCKET": self.path,
                                              "WATCHDOG_USEC": "200000"})
        self.s.start()
        got = self.messages_until("READY=1")
        pings = sum(m == "WATCHDOG=1" for m in got)
        while pings < 3:
            if self.recv() == "WATCHDOG=1":
                pings += 1
        self.s.cleanup()
        self.s = None
        # WATCHDOG_PID of another process: no pings, READY still sent
        self.s = Server(tmpdir=self.tmp, env={"NOTIFY_SOCKET": self.path,
                                              "WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1"})
        self.s.start()
        while True:  # what the first server sent before it stopped
            m = self.recv()
            if m.startswith("READY=1"):
                break
        time.sleep(0.5)
        self.sock.setblocking(False)
        rest = []
        try:
            while True:
                rest.append(self.sock.recv(4096).decode())
        except BlockingIOError:
            pass
        self.assertNotIn("WATCHDOG=1", rest)

    def test_bad_notify_values_are_logged_and_harmless(self):
        for env, want in (({"NOTIFY_SOCKET": os.path.join(self.tmp, "absent.sock")},
                           "sd_notify READY=1"),
                          ({"NOTIFY_SOCKET": "relative.sock"}, "not an absolute path"),
                          ({"NOTIFY_SOCKET": "/" + "x" * 200}, "not an absolute path"),
                          ({"WATCHDOG_USEC": "soon"}, "WATCHDOG_USEC or WATCHDOG_PID"),
                          ({"WATCHDOG_USEC": "-5"}, "WATCHDOG_USEC or WATCHDOG_PID"),
                          ({"WATCHDOG_USEC": "1000", "WATCHDOG_PID": "x"},
                           "WATCHDOG_USEC or WATCHDOG_PID")):
            s = Server(tmpdir=self.tmp, env=env).start()
            try:
                s.wait_log(want)
                st, _, _ = s.get("/healthz")
                self.assertEqual(st, 200, env)
            finally:
                s.cleanup()

    def test_abstract_socket_names_work(self):
        name = "errand-test-%d" % os.getpid()
        a = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.bind("\0" + name)
        try:
            self.s = Server(tmpdir=self.tmp, env={"NOTIFY_SOCKET": "@" + name}).start()
            a.settimeout(15)
            self.assertIn("READY=1", a.recv(4096).decode().split("\n"))
        finally:
            a.close()


@unittest.skipUnless(shutil.which("systemd-analyze"), "systemd-analyze is not installed")
class Units(unittest.TestCase):
    def test_systemd_analyze_verify_accepts_both_units(self):
        tmp = tempfile.mkdtemp(prefix="errand-units-")
        try:
            for unit in ("errand.service", "errand-worker@.service"):
                with open(os.path.join(UNITS, unit)) as f:
                    text = f.read()
                # verify checks that ExecStart's binary exists
                with open(os.path.join(tmp, unit), "w") as f:
                    f.write(text.replace("/usr/bin/errand", errand_bin()))
            # Documentation= names the man pages: verify runs man on each
            man1 = os.path.join(tmp, "man", "man1")
            os.makedirs(man1)
            os.makedirs(os.path.join(tmp, "man", "man7"))
            subprocess.run([errand_bin(), "help", "--write-docs", man1], check=True, timeout=30)
            p = subprocess.run(["systemd-analyze", "verify",
                                "errand.service", "errand-worker@emails.service"], cwd=tmp,
                               capture_output=True, text=True, timeout=60,
                               env=dict(os.environ, MANPATH=os.path.join(tmp, "man")))
            self.assertEqual((p.returncode, p.stderr), (0, ""))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_stop_timeout_stays_above_the_shutdown_grace(self):
        def seconds(unit, key):
            with open(os.path.join(UNITS, unit)) as f:
                for line in f:
                    if line.startswith(key + "="):
                        return int(line.split("=", 1)[1].strip().rstrip("s"))
            self.fail("%s has no %s" % (unit, key))
        rc = subprocess.run([errand_bin(), "serve", "--help"], capture_output=True, text=True)
        grace = next(line for line in rc.stdout.splitlines() if "--shutdown-grace" in line)
        self.assertIn("[default: 30s]", grace)
        self.assertGreater(seconds("errand.service", "TimeoutStopSec"), 30)
        rc = subprocess.run([errand_bin(), "work", "--help"], capture_output=True, text=True)
        lines = rc.stdout.splitlines()
        self.assertIn("[default: 45s]", next(x for x in lines if x.lstrip().startswith("--grace")))
        self.assertIn("[default: 5s]", next(x for x in lines if "--kill-after" in x))
        self.assertGreater(seconds("errand-worker@.service", "TimeoutStopSec"), 45 + 5)
        for unit in ("errand.service", "errand-worker@.service"):
            with open(os.path.join(UNITS, unit)) as f:
                self.assertIn("\nKillMode=mixed\n", f.read(), unit)


if __name__ == "__main__":
    unittest.main(verbosity=2)
