# SPDX-License-Identifier: MIT
#
# Shared code of the integration tests: runs a real `errand serve` on a
# free loopback port with its own SQLite file, talks HTTP/JSON to it over
# one persistent connection per thread, and reads the SQLite file directly
# (read-only) so tests can assert what is on disk. Standard library only.

import collections
import datetime
import glob
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
import urllib.parse

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Job states as the SQLite store writes them (jobs.state column).
STATES = {0: "scheduled", 1: "waiting", 2: "active", 3: "completed", 4: "dead", 5: "cancelled"}
STATE_NUM = {v: k for k, v in STATES.items()}

# The PostgreSQL database of the PostgreSQL tests (scripts/test and `scripts/pg
# start` provide one); ERRAND_TEST_PG_SKIP=1 lets PgNodes tests skip without it.
PG_URL = os.environ.get("ERRAND_TEST_PG_URL", "")
PG_SKIP = not PG_URL and os.environ.get("ERRAND_TEST_PG_SKIP") == "1"
PG_SKIP_WHY = "ERRAND_TEST_PG_URL is not set and ERRAND_TEST_PG_SKIP=1"

# ERRAND_TEST_RECORD=FILE appends every response Server.request() gets to FILE,
# one JSON line each with its request (test_openapi.py validates them against
# docs/openapi.yaml). Bodies over RECORD_MAX bytes are recorded as null.
RECORD = os.environ.get("ERRAND_TEST_RECORD")
RECORD_MAX = 4 << 20
_record_lock = threading.Lock()


def record_response(method, path, data, status, headers, payload):
    def text(b):
        return None if b is None or len(b) > RECORD_MAX else b.decode("utf-8", "replace")
    line = json.dumps({"method": method, "path": path, "request": text(data),
                       "status": status, "headers": headers, "body": text(payload),
                       "body_len": len(payload)}) + "\n"
    with _record_lock, open(RECORD, "a", encoding="utf-8") as f:
        f.write(line)


def errand_bin():
    """The errand binary: $ERRAND_BIN, else the newest build*/errand of the repo."""
    b = os.environ.get("ERRAND_BIN")
    if b:
        return b
    found = [p for p in glob.glob(os.path.join(REPO_ROOT, "build*", "errand")) if os.access(p, os.X_OK)]
    if not found:
        raise RuntimeError("set ERRAND_BIN to the errand binary (none found under build*/)")
    return max(found, key=os.path.getmtime)


def clean_env(extra=None):
    """The environment for a child errand: ours without ERRAND_* settings, plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERRAND_")}
    env.update(extra or {})
    return env


def run_errand(args, env=None, timeout=10):
    """Runs `errand ARGS...` to completion. Returns (returncode, stdout, stderr);
    returncode is None when it was still running after `timeout` (then killed)."""
    p = subprocess.Popen([errand_bin()] + list(args), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=clean_env(env), text=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, out, err


def raw_bytes(port, data):
    """Sends raw bytes on a fresh connection to 127.0.0.1:port and returns
    everything the server sent until it closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(data)
        got = b""
        while True:
            part = c.recv(65536)
            if not part:
                return got
            got += part


def with_params(url, **params):
    sep = "&" if "?" in url else "?"
    return url + sep + "&".join("%s=%s" % kv for kv in params.items())


def psql_bin():
    p = shutil.which("psql")
    if p:
        return p
    for v in ("17", "16", "15", "14", "13"):
        c = "/usr/lib/postgresql/%s/bin/psql" % v
        if os.access(c, os.X_OK):
            return c
    return None


def psql(sql):
    """Runs sql against ERRAND_TEST_PG_URL; returns rows as lists of strings."""
    out = subprocess.run([psql_bin(), PG_URL, "-X", "-A", "-t", "-F", "|", "-c", sql],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise AssertionError("psql failed: %s" % out.stderr)
    return [line.split("|") for line in out.stdout.splitlines() if line]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_time(s):
    """RFC 3339 UTC ("2026-11-30T02:00:00.000Z") -> ms since the epoch."""
    if s is None:
        return None
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    return int(datetime.datetime.fromisoformat(s).timestamp() * 1000)


def now_ms():
    return int(time.time() * 1000)


def wait_until(fn, timeout=10.0, interval=0.05, what=None):
    """Calls fn until it returns a truthy value (returned) or timeout. On timeout
    it returns the last value, or, when `what` names the condition, raises
    AssertionError("... waiting for WHAT"). Tests wait with this for something
    they can observe instead of sleeping for an order of events."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() >= deadline:
            if what is None:
                return v
            raise AssertionError("timed out after %.1f s waiting for %s (last: %r)"
                                 % (timeout, what, v))
        time.sleep(interval)


class StartError(Exception):
    pass


class Server:
    """A running `errand serve`. Use as a context manager.

    listen/store of None leave the flag out (to test env and config files).
    binary replaces errand_bin() (a test build of the server, e.g. errand_faulty).
    """

    def __init__(self, args=(), env=None, listen="127.0.0.1:0", store="default", tmpdir=None,
                 start_timeout=10.0, token=None, binary=None):
        self.binary = binary
        self._own_tmp = tmpdir is None
        self.tmpdir = tmpdir or tempfile.mkdtemp(prefix="errand-integ-")
        self.db_path = os.path.join(self.tmpdir, "errand.db")
        self.args = list(args)
        self.env = dict(env or {})
        self.listen = listen
        self.store = "sqlite:" + self.db_path if store == "default" else store
        self.start_timeout = start_timeout
        self.token = token  # default bearer token of request()
        self.proc = None
        self.port = None
        self.host = "127.0.0.1"
        self.lines = collections.deque(maxlen=5000)
        self._nlines = 0  # lines ever appended to self.lines (see log_mark)
        self._lines_lock = threading.Lock()
        self._drainers = []
        self._local = threading.local()
        self._conns = []  # every connection opened, closed by _drop_connections
        self._conns_lock = threading.Lock()
        self._listening = None

    # ---- process control ----

    def command(self):
        cmd = [self.binary or errand_bin(), "serve"]
        if self.listen is not None:
            cmd += ["--listen", self.listen]
        if self.store is not None:
            cmd += ["--store", self.store]
        return cmd + self.args

    def start(self):
        self.port = None
        self._listening = threading.Event()
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=clean_env(self.env))
        self._drainers = [threading.Thread(target=self._drain, daemon=True,
                                           args=(stream, self.proc, self._listening))
                          for stream in (self.proc.stderr, self.proc.stdout)]
        for th in self._drainers:
            th.start()
        deadline = time.monotonic() + self.start_timeout
        while not self._listening.wait(0.05):
            if self.proc.poll() is not None:
                self.join_drainers()  # the last lines are in self.lines
                raise StartError("errand serve exited with %s before listening:\n%s"
                                 % (self.proc.returncode, self.log_text()))
            if time.monotonic() > deadline:
                self.kill()
                raise StartError("errand serve did not log 'listening' within %.0fs:\n%s"
                                 % (self.start_timeout, self.log_text()))
        return self

    def _drain(self, stream, proc, listening):
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._lines_lock:
                self.lines.append(line)
                self._nlines += 1
            if listening.is_set():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("msg") == "listening" and "listen" in obj:
                host, _, port = obj["listen"].rpartition(":")
                self.host = "127.0.0.1" if host in ("0.0.0.0", "", "::", "[::]") else host
                if self.proc is proc:
                    self.port = int(port)
                listening.set()
        stream.close()

    def join_drainers(self, timeout=5.0):
        """Waits until the output of an exited server is read to its end."""
        for th in self._drainers:
            th.join(timeout)

    def log_text(self, last=60):
        return "\n".join(list(self.lines)[-last:])

    def log_mark(self):
        """A position in the log: wait_log(after=mark) looks only at later lines."""
        with self._lines_lock:
            return self._nlines

    def log_records(self, after=0):
        """The JSON log lines (dicts) logged after the mark `after`."""
        with self._lines_lock:
            lines = list(self.lines)
            first = self._nlines - len(lines)  # mark of lines[0]
        out = []
        for line in lines[max(0, after - first):]:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out

    def wait_log(self, msg, after=0, timeout=10.0):
        """Waits for a JSON log line whose "msg" contains msg, logged after the
        mark `after`; returns it, or fails with the log."""
        def found():
            return next((o for o in self.log_records(after) if msg in str(o.get("msg", ""))),
                        None)
        got = wait_until(found, timeout=timeout)
        if not got:
            raise AssertionError("the server did not log %r within %.0f s:\n%s"
                                 % (msg, timeout, self.log_text()))
        return got

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """SIGKILL and reap."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
        self._drop_connections()

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout):
        """Waits for exit; returns the exit code or None when still running."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def term(self, timeout=15.0):
        """SIGTERM and wait; returns the exit code (SIGKILLs and returns None on timeout)."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        rc = self.wait(timeout)
        if rc is None:
            self.kill()
        self._drop_connections()
        return rc

    def restart(self):
        """Stops (SIGTERM) if running, then starts again on the same db file, new port."""
        if self.alive():
            self.term()
        return self.start()

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc):
        self.cleanup()
        return False

    def cleanup(self):
        if self.proc is not None and self.alive():
            self.kill()
        self._drop_connections()
        if self._own_tmp and not os.environ.get("ERRAND_KEEP_TMP"):
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    # ---- HTTP ----

    def _drop_connections(self):
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()
        self._local = threading.local()

    def _conn(self, fresh=False):
        key = (self.host, self.port)
        c = getattr(self._local, "conn", None)
        if fresh or c is None or getattr(self._local, "key", None) != key:
            if c is not None:
                c.close()
            c = http.client.HTTPConnection(self.host, self.port, timeout=90)
            with self._conns_lock:
                self._conns.append(c)
            self._local.conn = c
            self._local.key = key
        return c

    def request(self, method, path, body=None, token="default", headers=None, raw=None,
                retry=True, timeout=None):
        """Sends one request. body is JSON-encoded (Content-Type application/json);
        raw is sent as-is (bytes or str) with the same default Content-Type unless
        headers say otherwise. token "default" uses self.token; None sends none.
        Returns (status, parsed JSON or text, headers dict with lowercase keys).
        A request on a reused connection that fails at the connection level is
        retried once on a new connection when retry is true."""
        if token == "default":
            token = self.token
        h = {}
        data = None
        if raw is not None:
            data = raw.encode() if isinstance(raw, str) else raw
            h["Content-Type"] = "application/json"
        elif body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        if token:
            h["Authorization"] = "Bearer " + token
        for k, v in (headers or {}).items():
            for old in [x for x in h if x.lower() == k.lower()]:
                del h[old]
            if v is not None:
                h[k] = v
        fresh_used = getattr(self._local, "conn", None) is None
        for attempt in (0, 1):
            c = self._conn(fresh=attempt > 0)
            if timeout is not None:
                c.timeout = timeout
                if c.sock is not None:
                    c.sock.settimeout(timeout)
            try:
                c.request(method, path, body=data, headers=h)
                r = c.getresponse()
                payload = r.read()
                rh = {k.lower(): v for k, v in r.getheaders()}
                if r.getheader("Connection", "").lower() == "close":
                    c.close()
                    self._local.conn = None
                break
            except (ConnectionError, http.client.HTTPException, OSError) as e:
                c.close()
                self._local.conn = None
                if attempt == 0 and retry and not fresh_used and not isinstance(e, socket.timeout):
                    continue
                raise
        if RECORD:
            record_response(method, path, data, r.status, rh, payload)
        text = payload.decode("utf-8", "replace")
        parsed = text
        if text and (rh.get("content-type", "").startswith("application/json")
                     or text[:1] in "{["):
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = text
        return r.status, parsed, rh

    # Shorthands for the common calls; each returns (status, body, headers).

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body if body is not None else {}, **kw)

    def enqueue(self, queue, job, **kw):
        return self.post("/v1/queues/%s/jobs" % qpath(queue), job, **kw)

    def fetch(self, queues, worker_id="w1", max=1, wait_ms=0, lease_ms=None, acks=None,
              queue_weights=None, **kw):
        body = {"queues": list(queues) if not isinstance(queues, str) else [queues],
                "worker_id": worker_id, "max": max, "wait_ms": wait_ms}
        if lease_ms is not None:
            body["lease_ms"] = lease_ms
        if queue_weights is not None:
            body["queue_weights"] = queue_weights
        if acks is not None:
            body["acks"] = acks
        return self.post("/v1/fetch", body, **kw)

    def fetch_jobs(self, queues, **kw):
        """fetch() that must succeed; returns the list of leased jobs."""
        st, b, _ = self.fetch(queues, **kw)
        if st != 200:
            raise AssertionError("fetch %r -> %s %r" % (queues, st, b))
        return b["jobs"]

    def job(self, job_id, **kw):
        """GET /v1/jobs/{id}; returns the job object or None when 404."""
        st, b, _ = self.get("/v1/jobs/" + qpath(job_id), **kw)
        if st == 404:
            return None
        if st != 200:
            raise AssertionError("GET job %s -> %s %r" % (job_id, st, b))
        return b["job"]

    def complete(self, job_id, lease_token, result=None, **kw):
        body = {"lease_token": lease_token}
        if result is not None:
            body["result"] = result
        return self.post("/v1/jobs/%s/complete" % qpath(job_id), body, **kw)

    def fail(self, job_id, lease_token, error, **kw):
        return self.post("/v1/jobs/%s/fail" % qpath(job_id),
                         {"lease_token": lease_token, "error": error}, **kw)

    def put_queue(self, name, settings, **kw):
        """PUT /v1/queues/{name}: merges settings into the queue's."""
        return self.request("PUT", "/v1/queues/" + qpath(name), body=settings, **kw)

    def queue_info(self, name, **kw):
        st, b, _ = self.get("/v1/queues", **kw)
        if st != 200:
            raise AssertionError("GET /v1/queues -> %s %r" % (st, b))
        for q in b["queues"]:
            if q["name"] == name:
                return q
        return None

    def metric(self, name):
        """The value of the unlabelled metric `name` in /metrics (an int), None when absent."""
        st, body, _ = self.get("/metrics", timeout=10)
        if st != 200:
            raise AssertionError("/metrics -> %s %r" % (st, body))
        m = re.search(r"^%s (\d+)$" % re.escape(name), body, re.M)
        return int(m.group(1)) if m else None

    def wait_metric(self, name, at_least, timeout=10.0):
        """Waits until the metric `name` is at least at_least; returns its value.
        E.g. errand_fetches_parked_total counts fetches the writer has parked, so
        a test knows a long-poll waits before it enqueues what should wake it."""
        def reached():
            v = self.metric(name)
            return (v,) if v is not None and v >= at_least else None
        got = wait_until(reached, timeout=timeout, interval=0.01)
        if got is None:
            raise AssertionError("%s did not reach %d within %.0f s (it is %r):\n%s"
                                 % (name, at_least, timeout, self.metric(name), self.log_text()))
        return got[0]

    # ---- the SQLite file ----

    def db(self):
        """A read-only connection to the store file (close it when done)."""
        return sqlite3.connect("file:%s?mode=ro" % urllib.parse.quote(self.db_path), uri=True,
                               timeout=10)

    def query(self, sql, params=()):
        con = self.db()
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()

    def snapshot(self):
        """Every row of the jobs and queues tables, sorted: equal snapshots mean
        an unchanged store."""
        con = self.db()
        try:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            snap = {}
            for t in ("jobs", "queues"):
                if t in names:
                    snap[t] = sorted(con.execute("SELECT * FROM %s" % t).fetchall(), key=repr)
            return snap
        finally:
            con.close()


class PgNodes:
    """Mixin of a unittest.TestCase class: NODES servers (NODE_ARGS) on one
    fresh schema (SCHEMA_PREFIX + random hex) of ERRAND_TEST_PG_URL, started
    for the class as cls.servers and stopped after it, the schema dropped.
    Without ERRAND_TEST_PG_URL the class fails to set up; decorate it with
    @unittest.skipIf(PG_SKIP, PG_SKIP_WHY) to skip under ERRAND_TEST_PG_SKIP=1."""

    NODES = 2
    NODE_ARGS = ()
    SCHEMA_PREFIX = "errand_"  # "pg_" is reserved by PostgreSQL

    @classmethod
    def setUpClass(cls):
        if not PG_URL:
            raise RuntimeError("ERRAND_TEST_PG_URL is not set: start a cluster with "
                               "`scripts/pg start` and export its URL (or run scripts/test); "
                               "ERRAND_TEST_PG_SKIP=1 skips this test")
        cls.schema = cls.SCHEMA_PREFIX + secrets.token_hex(4)
        cls.store = with_params(PG_URL, schema=cls.schema, pool_size=4)
        cls.servers = []
        try:
            for _ in range(cls.NODES):
                cls.servers.append(Server(store=cls.store, args=list(cls.NODE_ARGS)).start())
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.cleanup()
        if psql_bin():
            try:
                psql('DROP SCHEMA IF EXISTS "%s" CASCADE' % cls.schema)
            except (AssertionError, subprocess.SubprocessError):
                pass


def qpath(s):
    """Percent-encodes one path segment."""
    return urllib.parse.quote(s, safe="")


def error_of(body):
    """The {"code","message","field"} object of an error reply, or {} when none."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"]
    return {}


def next_cursor(body):
    """The cursor of the next page in a list reply, None on the last page."""
    for k in ("next_cursor", "cursor"):
        if isinstance(body, dict) and body.get(k):
            return body[k]
    return None
