# SPDX-License-Identifier: MIT
#
# Storage faults through the real server: errand_faulty (errand serve with
# the "errfault" SQLite VFS, tests/support/faulty_serve.c) fails the Nth
# write or sync (I/O error, or disk full / I/O error from the Nth write on)
# while threads send single and bulk enqueues, fetch+complete and fetch+fail.
# Each loop first measures how many such calls the workload makes, then
# runs every N (syncs, checkpoints) or ~ITERATIONS values of N spread over
# them (writes), one server per N on one store file (--durability full).
# For each N: every response is 2xx or 503 "unavailable"; the server keeps
# answering; after disarming, every 503'd completion, failure and half of
# the 503'd enqueues are re-sent and must succeed as if the first attempt
# never happened (201, not duplicate; 200, not lease_lost); the server stops
# cleanly. (The *_sigkill loops kill it while armed instead.) Then the plain
# errand is started on the same file: each job is in exactly the state its
# acknowledged requests left (503'd enqueues absent, one attempt per
# acknowledged fetch, the acknowledged lease), no other job exists, and
# PRAGMA integrity_check is ok. WAL autocheckpoints are made small so
# checkpoint writes and database syncs are among the faulted calls.

import glob
import http.client
import json
import os
import signal
import sqlite3
import shutil
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import REPO_ROOT, STATES, Server, error_of  # noqa: E402

NET_ERRORS = (OSError, http.client.HTTPException)
ITERATIONS = int(os.environ.get("ERRAND_DISK_FAULT_ITERATIONS", "30"))  # per fault kind
AUTOCHECKPOINT_PAGES = 16


def faulty_bin():
    """errand_faulty: $ERRAND_FAULTY_BIN, else the newest build*/tests/errand_faulty."""
    b = os.environ.get("ERRAND_FAULTY_BIN")
    if b:
        return b
    found = [p for p in glob.glob(os.path.join(REPO_ROOT, "build*", "tests", "errand_faulty"))
             if os.access(p, os.X_OK)]
    if not found:
        raise unittest.SkipTest("set ERRAND_FAULTY_BIN (no build*/tests/errand_faulty)")
    return max(found, key=os.path.getmtime)


class Control:
    """The fault control channel of one errand_faulty process."""

    def __init__(self, path):
        self.path = path
        self.seq = 0

    def send(self, server, line, timeout=5.0):
        self.seq += 1
        with open(self.path + ".new", "w") as f:
            f.write("%d %s\n" % (self.seq, line))
        os.replace(self.path + ".new", self.path)
        server.signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(self.path + ".ack") as f:
                    ack = json.loads(f.read())
                if ack["seq"] == self.seq:
                    if not ack["ok"]:
                        raise AssertionError("control %r: %s" % (line, ack["error"]))
                    return ack
            except (OSError, ValueError):
                pass
            time.sleep(0.002)
        raise AssertionError("errand_faulty did not answer control %r" % line)


class Run:
    """One iteration's requests and what they tell about each job."""

    def __init__(self, server, tag):
        self.s = server
        self.queue = "df-" + tag
        self.tag = tag
        self.lock = threading.Lock()
        self.violations = []
        self.ok = 0
        self.unavailable = 0
        self.expected = {}        # job id -> state name; None: must not exist; "sent": no reply yet
        self.lease = {}           # job id -> lease token of the acknowledged fetch
        self.enqueue_503 = []     # job bodies whose enqueue got 503
        self.outcome_503 = []     # (job id, "complete" | "fail") that got 503

    def violation(self, what):
        with self.lock:
            self.violations.append(what)

    def call(self, what, fn):
        """Sends one request; returns (status, body), status None on a violation."""
        try:
            st, body, _ = fn()
        except NET_ERRORS as e:
            self.violation("%s: connection error %r (server alive: %s)" % (what, e, self.s.alive()))
            return None, None
        with self.lock:
            if 200 <= st < 300:
                self.ok += 1
                return st, body
            if st == 503 and error_of(body).get("code") == "unavailable":
                self.unavailable += 1
                return st, body
        self.violation("%s: %s %r" % (what, st, body))
        return None, None

    # ---- the workload ----

    def job(self, jid):
        return {"name": "disk", "id": jid, "payload": {"id": jid}, "max_attempts": 3}

    def sent(self, jid):
        """Before an enqueue: a worker may lease the job before its reply is read."""
        with self.lock:
            if self.expected.get(jid) is None:
                self.expected[jid] = "sent"

    def acked(self, jid, st):
        """An enqueue's reply (201 or 503); called with the lock held."""
        was = self.expected.get(jid)
        if st == 201:
            if was in ("sent", None):
                self.expected[jid] = "waiting"
            # else a worker already leased it: its state is newer
        elif was == "sent":
            self.expected[jid] = None
        else:
            self.violations.append("enqueue %s got 503, yet the job was leased (%s)" % (jid, was))

    def enqueue_one(self, body, retry=False):
        self.sent(body["id"])
        st, b = self.call("enqueue %s" % body["id"],
                          lambda: self.s.enqueue(self.queue, body, retry=False))
        with self.lock:
            if st in (201, 503):
                self.acked(body["id"], st)
            if st == 503:
                self.enqueue_503.append(body)
            elif st == 200:
                self.violations.append("enqueue %s%s: duplicate %r"
                                       % (body["id"], " (re-sent after a 503)" if retry else "", b))

    def singles(self, n):
        for i in range(n):
            self.enqueue_one(self.job("%s-s%d" % (self.tag, i)))

    def bulks(self, n, size):
        for k in range(n):
            jobs = [self.job("%s-b%d-%d" % (self.tag, k, i)) for i in range(size)]
            for j in jobs:
                self.sent(j["id"])
            st, b = self.call("bulk %d" % k,
                              lambda: self.s.enqueue(self.queue, {"jobs": jobs}, retry=False))
            with self.lock:
                if st == 201:
                    if b.get("ids") != [j["id"] for j in jobs] or any(b.get("duplicates") or []):
                        self.violations.append("bulk %d: %r" % (k, b))
                if st in (201, 503):
                    for j in jobs:
                        self.acked(j["id"], st)
                if st == 503:
                    self.enqueue_503.extend(jobs)
                elif st not in (None, 201):
                    self.violations.append("bulk %d: %s %r" % (k, st, b))

    def worker(self, name, outcome, rounds):
        for _ in range(rounds):
            st, b = self.call("fetch %s" % name,
                              lambda: self.s.fetch([self.queue], worker_id=name, max=2,
                                                   wait_ms=20, lease_ms=600000, retry=False))
            if st != 200:
                continue
            for j in b["jobs"]:
                with self.lock:
                    was = self.expected.get(j["id"], "unknown")
                    if was not in ("waiting", "sent"):
                        self.violations.append("fetch %s leased %s, which should be %s"
                                               % (name, j["id"], was))
                    self.expected[j["id"]] = "active"
                    self.lease[j["id"]] = j["lease_token"]
                self.outcome(j["id"], outcome)

    def outcome(self, jid, outcome, retry=False):
        token = self.lease[jid]
        if outcome == "complete":
            st, b = self.call("complete %s" % jid,
                              lambda: self.s.complete(jid, token, retry=False))
            new = "completed"
        else:
            st, b = self.call("fail %s" % jid,
                              lambda: self.s.fail(jid, token, {"class": "permanent",
                                                               "message": "disk test"},
                                                  retry=False))
            new = "dead"
            if st == 200 and b.get("state") != "dead":
                self.violation("fail %s: %r" % (jid, b))
        with self.lock:
            if st == 200:
                self.expected[jid] = new
            elif st == 503:
                self.outcome_503.append((jid, outcome))
        if retry and st != 200:
            self.violation("%s %s re-sent after a 503: %s %r" % (outcome, jid, st, b))

    def workload(self):
        threads = [threading.Thread(target=self.singles, args=(8,)),
                   threading.Thread(target=self.bulks, args=(3, 3)),
                   threading.Thread(target=self.worker, args=("wc-" + self.tag, "complete", 6)),
                   threading.Thread(target=self.worker, args=("wf-" + self.tag, "fail", 4))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def recover(self):
        """After disarming: re-sends what got 503 (half of the enqueues)."""
        for jid, outcome in list(self.outcome_503):
            self.outcome(jid, outcome, retry=True)
        for body in self.enqueue_503[::2]:
            self.enqueue_one(body, retry=True)
            with self.lock:
                if self.expected.get(body["id"]) != "waiting":
                    self.violations.append("enqueue %s re-sent after a 503 did not succeed"
                                           % body["id"])
        self.enqueue_one(self.job(self.tag + "-after"))
        if self.expected.get(self.tag + "-after") != "waiting":
            self.violation("an enqueue after disarming failed")


class DiskFaultTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.binary = faulty_bin()
        cls.totals = {}

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="errand-diskfault-")
        self.db = os.path.join(self.tmp, "errand.db")
        self.ctl = Control(os.path.join(self.tmp, "ctl"))
        self.expected = {}  # every job of every iteration: id -> state or None
        self.leases = {}    # id -> lease token of its acknowledged fetch

    def tearDown(self):
        if not os.environ.get("ERRAND_KEEP_TMP"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def faulty(self, autocheckpoint=AUTOCHECKPOINT_PAGES):
        return Server(binary=self.binary, tmpdir=self.tmp,
                      store="sqlite:file:%s?vfs=errfault" % urllib.parse.quote(self.db),
                      args=["--durability", "full"],
                      env={"ERRAND_FAULT_CTL": self.ctl.path,
                           "ERRAND_FAULT_AUTOCHECKPOINT": str(autocheckpoint)})

    def iteration(self, tag, arm, kill=False):
        """Runs the workload with `arm` (a control command) and checks it;
        with `kill`, SIGKILLs the server while still armed instead of
        disarming, re-sending and stopping it. Returns (the fault counters,
        the Run)."""
        s = self.faulty()
        s.start()
        try:
            self.ctl.send(s, arm)
            run = Run(s, tag)
            run.workload()
            counts = self.ctl.send(s, "stat")
            st, _, _ = s.get("/healthz", retry=False)
            self.assertTrue(s.alive() and st == 200, "%s: server gone or unhealthy" % tag)
            if kill:
                s.kill()
                return self.checked(tag, arm, counts, run)
            self.ctl.send(s, "disarm")
            run.recover()
            self.assertEqual(s.term(), 0, "%s: errand_faulty did not stop cleanly:\n%s"
                             % (tag, s.log_text()))
        finally:
            s.cleanup()
        return self.checked(tag, arm, counts, run)

    def checked(self, tag, arm, counts, run):
        self.assertEqual(run.violations, [], "%s (%s): %s" % (tag, arm, run.violations[:10]))
        self.expected.update(run.expected)
        self.leases.update(run.lease)
        self.verify(tag, run)
        return counts, run

    def verify(self, tag, run):
        """Restarts the plain errand on the file and checks every job so far."""
        s = Server(tmpdir=self.tmp)
        s.start()
        try:
            for jid, want in run.expected.items():
                got = s.job(jid)
                self.assertEqual(got and got["state"], want,
                                 "%s: job %s is %s after restart, expected %s"
                                 % (tag, jid, got and got["state"], want))
            st, _, _ = s.enqueue(run.queue, run.job(tag + "-restarted"))
            self.assertEqual(st, 201)
            self.expected[tag + "-restarted"] = "waiting"
            self.assertEqual(s.term(), 0)
        finally:
            s.cleanup()
        con = sqlite3.connect("file:%s?mode=ro" % urllib.parse.quote(self.db), uri=True)
        try:
            self.assertEqual(con.execute("PRAGMA integrity_check").fetchall(), [("ok",)])
            rows = con.execute("SELECT id, state, attempts, lease_token FROM jobs").fetchall()
        finally:
            con.close()
        on_disk = {}
        for jid, state, attempts, token in rows:
            self.assertIn(state, STATES, "job %s has state %r" % (jid, state))
            on_disk[jid] = STATES[state]
            # a rolled-back fetch leaves no attempt and no lease behind
            leased = jid in self.leases and STATES[state] != "waiting"
            self.assertEqual(attempts, 1 if leased else 0, "%s: job %s (%s) has %d attempts"
                             % (tag, jid, STATES[state], attempts))
            if STATES[state] == "active":
                self.assertEqual(token, self.leases.get(jid), "%s: job %s lease" % (tag, jid))
        for jid, want in self.expected.items():
            self.assertEqual(on_disk.get(jid), want, "%s: job %s on disk: %s, expected %s"
                             % (tag, jid, on_disk.get(jid), want))
        extra = set(on_disk) - {j for j, w in self.expected.items() if w}
        self.assertEqual(extra, set(), "%s: jobs nobody acknowledged" % tag)

    def loop(self, name, kind, file, sticky, expect_503=True, kill=False):
        """Measures the workload (the calls a fault could hit), then faults the
        Nth call for N spread over it."""
        counts, _ = self.iteration(name + "-m", "arm %s %s 1000000000 0" % (kind, file))
        total = counts["armed_calls"]
        if file == "db":
            # the database file is written by checkpoints, which run on the
            # upkeep thread beside the writer (kicks that come while one runs
            # fold into one), so their count varies from run to run: spread N
            # over half the smaller of two measurements
            counts, _ = self.iteration(name + "-m2", "arm %s %s 1000000000 0" % (kind, file))
            total = max(1, min(total, counts["armed_calls"]) // 2)
        self.assertGreater(total, 0, "the workload does no %s on %s" % (kind, file))
        # every N when that is cheap (syncs, checkpoints), else ~ITERATIONS of them
        step = 1 if total <= 2 * ITERATIONS else -(-total // ITERATIONS)
        fired = ok = unavailable = 0
        ns = list(range(1, total + 1, step))
        for n in ns:
            counts, run = self.iteration("%s-%d" % (name, n),
                                         "arm %s %s %d %d" % (kind, file, n, sticky), kill)
            fired += counts["faults"] > 0
            ok += run.ok
            unavailable += run.unavailable
        self.totals[name] = (ns[0], ns[-1], step, total, fired, len(ns), ok, unavailable)
        sys.stderr.write("%s: N=%d..%d step %d (workload: %d %s calls on %s), %d/%d fired; "
                         "%d 2xx, %d 503\n" % (name, ns[0], ns[-1], step, total, kind, file,
                                               fired, len(ns), ok, unavailable))
        # the fault must land inside the workload most of the time
        self.assertGreaterEqual(fired, (len(ns) * 3) // 4, "%s: faults did not fire" % name)
        if expect_503:
            self.assertGreater(unavailable, 0, "%s: no request saw the fault" % name)

    def test_nth_write_io_error(self):
        self.loop("write", "write", "any", 0)

    def test_nth_sync_io_error(self):
        self.loop("sync", "sync", "any", 0)

    def test_disk_full_from_nth_write(self):
        self.loop("full", "full", "any", 1)

    def test_every_write_from_nth_failing(self):
        self.loop("write-sticky", "write", "any", 1)

    def test_nth_write_io_error_then_sigkill(self):
        self.loop("write-kill", "write", "any", 0, kill=True)

    def test_disk_full_then_sigkill(self):
        self.loop("full-kill", "full", "any", 1, kill=True)

    # When the WAL fsync of a commit fails, SQLite has already written the
    # frames, commit frame included; a crash before they are overwritten
    # would replay them. The store truncates the WAL after a failed commit
    # (and refuses writes until it can), so a 503'd job never comes back.
    # No checkpoint may be due here: the upkeep thread's checkpoint syncs
    # the WAL too, and could take the one armed fault.
    def test_wal_sync_error_then_sigkill_leaves_no_rejected_job(self):
        s = self.faulty(autocheckpoint=100000)
        s.start()
        try:
            self.assertEqual(s.enqueue("dk", {"name": "n", "id": "before"})[0], 201)
            self.ctl.send(s, "arm sync wal 1 0")
            st, b, _ = s.enqueue("dk", {"name": "n", "id": "rejected"}, retry=False)
            self.assertEqual((st, error_of(b).get("code")), (503, "unavailable"))
            self.assertEqual(s.job("rejected"), None)  # in-process: rolled back
            s.kill()
        finally:
            s.cleanup()
        p = Server(tmpdir=self.tmp)
        p.start()
        try:
            self.assertEqual(p.job("before")["state"], "waiting")
            got = p.job("rejected")
            self.assertIsNone(got, "the enqueue got 503, yet after SIGKILL and restart the "
                                   "job exists: %r" % got)
        finally:
            p.cleanup()

    # The database file is written and synced only by checkpoints, which
    # run after a commit and whose failure SQLite ignores: no 503 expected.
    def test_nth_checkpoint_write_io_error(self):
        self.loop("ckpt-write", "write", "db", 0, expect_503=False)

    def test_nth_database_sync_io_error(self):
        self.loop("db-sync", "sync", "db", 0, expect_503=False)


if __name__ == "__main__":
    unittest.main(verbosity=2)
