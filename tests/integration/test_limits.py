# SPDX-License-Identifier: MIT
#
# The HTTP frontend's resource limits, through a real server (issue 16,
# items 2-4): --max-connections refuses connection 101 while connection 1
# still works; at the file-descriptor limit the server backs off (no log
# flood, no spin) and answers /healthz once clients go away; a slow head
# (slowloris) is cut at --head-timeout and a slow body below
# --body-min-rate; a body is refused on its head (route, token,
# Content-Length, --max-body-in-flight) before it is read, so an
# unauthenticated 30 MiB body leaves the RSS flat, and Expect: 100-continue
# gets no 100 without a token. Raw sockets, so the test controls every byte.

import http.client
import json
import os
import select
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, wait_until  # noqa: E402
from test_sessions import session_of  # noqa: E402

PRODUCER = "limits-producer-token-0123456789"
ADMIN = "limits-admin-token-0123456789abcd"
VIEWER = "limits-viewer-token-0123456789abc"


def connect(s, timeout=10):
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


_left = {}  # bytes read past a reply, by socket (pipelined replies)


def read_reply(sock, timeout=10):
    """(status, headers dict with lower-case names, body bytes) of one reply."""
    sock.settimeout(timeout)
    data = _left.pop(id(sock), b"")
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError("connection closed before a reply: %r" % data)
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    if len(rest) > n:
        _left[id(sock)] = rest[n:]
    return status, headers, rest[:n]


def healthz(sock):
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    return read_reply(sock)


def closed_by_peer(sock):
    """True once the server closed sock (EOF or reset); never blocks."""
    try:
        r, _, _ = select.select([sock], [], [], 0)
        if not r:
            return False
        while True:
            chunk = sock.recv(65536, socket.MSG_DONTWAIT)
            if not chunk:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def proc_status(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith(key + ":"):
                return int(ln.split()[1])
    return 0


def nfds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class LimitedServer(Server):
    """A server whose file-descriptor limit is lowered (prlimit execs it,
    so the pid is the server's)."""

    def __init__(self, nofile, **kw):
        super().__init__(**kw)
        self.nofile = nofile

    def command(self):
        return ["prlimit", "--nofile=%d:%d" % (self.nofile, self.nofile), "--"] + \
            super().command()


class ConnectionLimitTest(unittest.TestCase):
    def test_connection_101_is_refused_while_connection_1_still_works(self):
        with Server(args=["--max-connections", "100"]) as s:
            socks = []
            try:
                for _ in range(100):
                    c = connect(s)
                    socks.append(c)
                    self.assertEqual(healthz(c)[0], 200)  # accepted and counted
                extra = connect(s)
                socks.append(extra)
                st, h, body = healthz(extra)
                self.assertEqual(st, 503)
                self.assertEqual(h.get("retry-after"), "1")
                self.assertIn("too many connections", json.loads(body)["error"]["message"])
                self.assertTrue(wait_until(lambda: closed_by_peer(extra), timeout=10))
                self.assertEqual(healthz(socks[0])[0], 200)  # connection 1 still works
                # a place freed is taken again
                socks[1].close()

                def fresh_ok():
                    c = connect(s)
                    try:
                        return healthz(c)[0] == 200
                    except (AssertionError, OSError):
                        return False
                    finally:
                        c.close()
                self.assertTrue(wait_until(fresh_ok, timeout=20, interval=0.2))
                self.assertTrue(s.wait_log("--max-connections reached"))
            finally:
                for c in socks:
                    c.close()

    def test_at_the_fd_limit_the_server_backs_off_and_answers_once_clients_go_away(self):
        with LimitedServer(nofile=96) as s:
            pid = s.proc.pid
            base = nfds(pid)
            self.assertLess(base, 80, "too many fds at start for this test's limit")
            mark = s.log_mark()
            socks = []
            try:
                for _ in range(160):  # more than the server can hold
                    socks.append(connect(s))
                s.wait_log("accept failed", after=mark, timeout=20)
                # under pressure for a while: no spin, no flood
                cpu0 = cpu_seconds(pid)
                t0 = time.monotonic()
                time.sleep(3)  # a window to measure, not an ordering
                cpu = cpu_seconds(pid) - cpu0
                wall = time.monotonic() - t0
                self.assertLess(cpu, wall / 3, "the server spins at the fd limit")
                lines = s.log_records(after=mark)
                print("at the fd limit: %.2f s CPU in %.2f s, %d log lines"
                      % (cpu, wall, len(lines)), file=sys.stderr)
                self.assertLess(len(lines), 20, "log flood: %d lines" % len(lines))
            finally:
                for c in socks:
                    c.close()

            def answers():
                try:
                    c = connect(s, timeout=5)
                except OSError:
                    return False
                try:
                    return healthz(c)[0] == 200
                except (AssertionError, OSError):
                    return False
                finally:
                    c.close()
            self.assertTrue(wait_until(answers, timeout=30, interval=0.2),
                            "no /healthz after the clients went away:\n" + s.log_text())
            self.assertLess(len(s.log_records(after=mark)), 20)


class SlowClientTest(unittest.TestCase):
    def test_one_byte_a_second_keeps_nothing_open_past_the_head_deadline(self):
        with Server(args=["--head-timeout", "2s"]) as s:
            pid = s.proc.pid
            base = nfds(pid)
            head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
            socks = [connect(s) for _ in range(20)]
            opened = time.monotonic()
            open_socks = list(socks)
            lasted = []
            i = 0
            try:
                while open_socks and time.monotonic() - opened < 30:
                    for c in list(open_socks):
                        if closed_by_peer(c):
                            open_socks.remove(c)
                            lasted.append(time.monotonic() - opened)
                            continue
                        try:
                            c.send(head[i:i + 1])
                        except OSError:
                            open_socks.remove(c)
                            lasted.append(time.monotonic() - opened)
                    i += 1
                    time.sleep(1)  # the attack's pace
                self.assertEqual(open_socks, [], "slow heads still open after 30 s")
                print("slow heads closed after %.1f..%.1f s" % (min(lasted), max(lasted)),
                      file=sys.stderr)
                # cut at the deadline (2 s), with generous slack for a loaded machine
                self.assertLess(max(lasted), 15, lasted)
                self.assertTrue(wait_until(lambda: nfds(pid) <= base + 2, timeout=10),
                                "server fds: %d, at start %d" % (nfds(pid), base))
                # the server still serves
                c = connect(s)
                self.assertEqual(healthz(c)[0], 200)
                c.close()
            finally:
                for c in socks:
                    c.close()

    def test_an_idle_kept_connection_is_not_a_slow_head(self):
        # the deadline of a later head starts at its first byte
        with Server(args=["--head-timeout", "500ms"]) as s:
            c = connect(s)
            try:
                self.assertEqual(healthz(c)[0], 200)
                time.sleep(1.5)  # idle past the head deadline, by design of the test
                self.assertEqual(healthz(c)[0], 200)
            finally:
                c.close()

    def test_pipelined_requests_are_all_answered(self):
        with Server(args=["--head-timeout", "2s"]) as s:
            body = b'{"name":"piped"}'
            # no tokens: a request that reaches a route names this server in Host
            post = (b"POST /v1/queues/piped/jobs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: "
                    b"application/json\r\nContent-Length: %d\r\n\r\n" % (s.port, len(body))) + body
            get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            c = connect(s)
            try:
                c.sendall(get + post + get + post)
                got = [read_reply(c)[0] for _ in range(4)]
                self.assertEqual(got[0], 200)
                self.assertIn(got[1], (200, 201))
                self.assertEqual(got[2], 200)
                self.assertIn(got[3], (200, 201))
            finally:
                c.close()

    def test_a_body_below_the_minimum_rate_is_cut(self):
        with Server(args=["--body-min-rate", "1k"]) as s:
            c = connect(s)
            try:
                c.sendall(b"POST /v1/queues/slow/jobs HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
                t0 = time.monotonic()
                closed = False
                while time.monotonic() - t0 < 30:
                    if closed_by_peer(c):
                        closed = True
                        break
                    try:
                        c.send(b" ")
                    except OSError:
                        closed = True
                        break
                    time.sleep(0.5)
                self.assertTrue(closed, "a 2 bytes/s body was never cut")
                self.assertLess(time.monotonic() - t0, 15)
            finally:
                c.close()

    def test_a_body_at_a_fair_rate_is_read(self):
        with Server(args=["--body-min-rate", "1k"]) as s:
            body = json.dumps({"name": "paced", "payload": {"pad": "x" * 6000}}).encode()
            c = connect(s)
            try:
                c.sendall(b"POST /v1/queues/paced/jobs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                          b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                          % (s.port, len(body)))
                for k in range(0, len(body), 2048):  # about 8 KiB/s
                    c.sendall(body[k:k + 2048])
                    time.sleep(0.25)
                self.assertIn(read_reply(c)[0], (200, 201))
            finally:
                c.close()


class EarlyRefusalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # AddressSanitizer holds freed memory back (its quarantine), so the
        # RSS of a sanitized build would count every buffer ever freed
        asan = os.environ.get("ASAN_OPTIONS", "")
        asan = (asan + ":" if asan else "") + "quarantine_size_mb=0"
        cls.s = Server(args=["--token", "producer:" + PRODUCER, "--token", "admin:" + ADMIN,
                             "--token", "viewer:" + VIEWER, "--max-body", "1m",
                             "--max-body-in-flight", "2m", "--body-min-rate", "0"],
                       env={"ASAN_OPTIONS": asan}).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.term()

    def head(self, length, token=None, extra=b"", path=b"/v1/queues/early/jobs"):
        h = (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: %d\r\n" % length)
        if token:
            h += b"Authorization: Bearer " + token.encode() + b"\r\n"
        return h + extra + b"\r\n"

    def test_an_unauthenticated_body_is_refused_on_its_head(self):
        c = connect(self.s)
        try:
            c.sendall(self.head(30 << 20))  # the head only: no byte of the body
            st, h, body = read_reply(c)
            self.assertEqual(st, 401)
            self.assertEqual(h.get("www-authenticate"), "Bearer")
            self.assertEqual(json.loads(body)["error"]["code"], "unauthenticated")
        finally:
            c.close()

    def test_a_pipelined_head_is_judged_too(self):
        c = connect(self.s)
        try:
            # a request, and behind it in the same write an unauthenticated 30 MiB head
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + self.head(30 << 20))
            self.assertEqual(read_reply(c)[0], 200)
            self.assertEqual(read_reply(c)[0], 401)
        finally:
            c.close()
        c = connect(self.s)
        try:
            body = b'{"name":"piped-ok"}'
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" +
                      self.head(len(body), token=PRODUCER) + body)
            self.assertEqual(read_reply(c)[0], 200)
            self.assertIn(read_reply(c)[0], (200, 201))
        finally:
            c.close()

    def test_expect_100_continue_gets_no_100_without_a_token(self):
        c = connect(self.s)
        try:
            c.sendall(self.head(20, extra=b"Expect: 100-continue\r\n"))
            st, _, _ = read_reply(c)
            self.assertEqual(st, 401)
        finally:
            c.close()
        c = connect(self.s)
        try:
            body = b'{"name":"continued"}'
            c.sendall(self.head(len(body), token=PRODUCER, extra=b"Expect: 100-continue\r\n"))
            c.settimeout(10)
            first = c.recv(4096)
            self.assertTrue(first.startswith(b"HTTP/1.1 100"), first)
            c.sendall(body)
            rest = first.partition(b"\r\n\r\n")[2]
            st = int((rest or c.recv(4096)).split(b" ")[1])
            self.assertIn(st, (200, 201))
        finally:
            c.close()

    def test_a_content_length_over_the_limit_is_refused_at_once(self):
        c = connect(self.s)
        try:
            c.sendall(self.head((1 << 20) + 1, token=PRODUCER))
            st, _, body = read_reply(c)
            self.assertEqual(st, 413)
            self.assertIn("exceeds 1048576 bytes", json.loads(body)["error"]["message"])
        finally:
            c.close()

    def test_an_unknown_route_with_a_body_is_refused_on_its_head(self):
        c = connect(self.s)
        try:
            c.sendall(self.head(5 << 20, path=b"/v1/nowhere"))
            self.assertEqual(read_reply(c)[0], 404)
        finally:
            c.close()

    def test_bodies_past_max_body_in_flight_get_503_with_retry_after(self):
        body = json.dumps({"name": "big", "payload": {"pad": "x" * 1000}}).encode()
        n = 1 << 20
        body = body + b" " * (n - len(body))
        held = [connect(self.s), connect(self.s)]
        try:
            for c in held:  # 2 x 1 MiB announced, not yet sent: the 2 MiB budget
                c.sendall(self.head(n, token=PRODUCER))
            time.sleep(0.2)  # not an ordering: the next head comes after these anyway

            def third():
                c = connect(self.s)
                try:
                    c.sendall(self.head(n, token=PRODUCER))
                    return read_reply(c)
                finally:
                    c.close()
            st, h, b = wait_until(lambda: (lambda r: r if r[0] == 503 else None)(third()),
                                  timeout=10) or (None, {}, b"")
            self.assertEqual(st, 503)
            self.assertEqual(h.get("retry-after"), "1")
            self.assertIn("in flight", json.loads(b)["error"]["message"])
            for c in held:
                c.sendall(body)
                self.assertIn(read_reply(c)[0], (200, 201))
        finally:
            for c in held:
                c.close()
        # the budget is given back
        c = connect(self.s)
        try:
            c.sendall(self.head(n, token=PRODUCER) + body)
            self.assertIn(read_reply(c)[0], (200, 201))
        finally:
            c.close()

    def test_unauthenticated_30_mib_bodies_leave_the_rss_flat(self):
        pid = self.s.proc.pid
        before = proc_status(pid, "VmRSS")
        peak = [before]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], proc_status(pid, "VmRSS"))
                time.sleep(0.02)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        statuses = []
        lock = threading.Lock()
        chunk = b"x" * (1 << 20)

        def attack():
            c = connect(self.s, timeout=20)
            try:
                c.sendall(self.head(30 << 20))
                try:
                    for _ in range(30):
                        c.sendall(chunk)
                except OSError:
                    pass  # refused and closed while sending: expected
                try:
                    st = read_reply(c)[0]
                except (AssertionError, OSError):
                    st = None
                with lock:
                    statuses.append(st)
            finally:
                c.close()
        threads = [threading.Thread(target=attack) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        stop.set()
        sampler.join()
        after = proc_status(pid, "VmRSS")
        self.assertIn(401, statuses, statuses)
        self.assertNotIn(201, statuses)
        # 8 x 30 MiB read before the 401 would be 240 MiB; allow 32 MiB of noise
        self.assertLess(peak[0] - before, 32 << 10, "RSS %d -> peak %d KiB" % (before, peak[0]))
        self.assertLess(after - before, 32 << 10)
        print("RSS before %d KiB, peak %d KiB, after %d KiB" % (before, peak[0], after),
              file=sys.stderr)

    def test_a_session_cookie_is_looked_up_before_the_body_is_read(self):
        def cookie_head(sid, length, csrf=None):
            h = (b"PUT /v1/queues/sess-early HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                 b"Cookie: errand_session=%s\r\n" % (self.s.port, length, sid.encode()))
            if csrf:
                h += b"X-CSRF-Token: " + csrf.encode() + b"\r\n"
            return h + b"\r\n"
        # an unknown session: 401 on the head, no byte of the body sent
        c = connect(self.s)
        try:
            c.sendall(cookie_head("0" * 64, 30 << 20))
            st, _, body = read_reply(c)
            self.assertEqual(st, 401)
            self.assertEqual(json.loads(body)["error"]["field"], "session")
        finally:
            c.close()
        # a viewer's session may not change a queue: 403 on the head
        sid, csrf = session_of(self.s, VIEWER)
        c = connect(self.s)
        try:
            c.sendall(cookie_head(sid, 1 << 20, csrf))
            st, _, body = read_reply(c)
            self.assertEqual(st, 403)
            self.assertEqual(json.loads(body)["error"]["field"], "session")
        finally:
            c.close()
        # an admin's session: the head is let through and the body read
        sid, csrf = session_of(self.s, ADMIN)
        body = b'{"paused": true}'
        c = connect(self.s)
        try:
            c.sendall(cookie_head(sid, len(body), csrf))
            c.sendall(body)
            st, _, reply = read_reply(c)
            self.assertEqual(st, 200, reply)
            self.assertTrue(json.loads(reply)["settings"]["paused"])
        finally:
            c.close()

    def test_a_chunked_body_is_judged_on_its_head_too(self):
        def chunked(token):
            h = (b"POST /v1/queues/early/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nTransfer-Encoding: chunked\r\n")
            if token:
                h += b"Authorization: Bearer " + token.encode() + b"\r\n"
            return h + b"\r\n"
        body = b'{"name":"chunk"}'
        c = connect(self.s)
        try:
            c.sendall(chunked(None))
            self.assertEqual(read_reply(c)[0], 401)
        finally:
            c.close()
        c = connect(self.s)
        try:
            c.sendall(chunked(PRODUCER) + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
            self.assertIn(read_reply(c)[0], (200, 201))
        finally:
            c.close()
        # past its route's limit (1 MiB here) libevent cuts it off
        c = connect(self.s)
        try:
            c.sendall(chunked(PRODUCER))
            try:
                for _ in range(3):
                    c.sendall(b"80000\r\n" + b" " * 0x80000 + b"\r\n")
            except OSError:
                pass  # cut off while sending
            self.assertEqual(read_reply(c)[0], 413)
        finally:
            c.close()

    def test_an_open_route_takes_no_body_above_4_kib(self):
        c = connect(self.s)
        try:
            c.sendall(b"POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: "
                      b"application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n"
                      % (self.s.port, 16 << 20))
            st, _, body = read_reply(c)
            self.assertEqual(st, 413)
            self.assertIn("4096", json.loads(body)["error"]["message"])
        finally:
            c.close()

    def test_a_good_request_still_works_on_a_kept_connection(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=10)
        try:
            for i in range(3):
                conn.request("POST", "/v1/queues/early/jobs", body=json.dumps({"name": "k%d" % i}),
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + PRODUCER})
                r = conn.getresponse()
                r.read()
                self.assertIn(r.status, (200, 201))
        finally:
            conn.close()


if __name__ == "__main__":
    unittest.main()
