# SPDX-License-Identifier: MIT
#
# A bounded mutation fuzz of whole HTTP requests (issue 16, "What must be
# shown"): valid requests to the API's routes, as a worker, a producer and
# an admin would send them, mutated in their method, target, headers and
# body by a seeded generator, each sent on its own connection to a real
# server with tokens. The server must stay up, answer each request it
# answers with a well-formed status line and never a 500, and afterwards
# every job it lists must read back whole.

import json
import os
import random
import socket
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402

ADMIN = "admin-token-mutation-0123"
WORKER = "worker-token-mutation-0123"
ROUNDS = int(os.environ.get("ERRAND_MUTATION_ROUNDS", "6000"))


def seeds():
    job = {"name": "mail", "payload": {"to": "a@example.com"}, "priority": 3,
           "max_attempts": 4, "backoff": {"type": "fixed", "delay_ms": 100}}
    return [
        ("POST", "/v1/queues/mq/jobs", ADMIN, job),
        ("POST", "/v1/queues/mq/jobs", WORKER, {"jobs": [job, dict(job, id="m-2")]}),
        ("POST", "/v1/fetch", WORKER, {"queues": ["mq"], "worker_id": "w", "max": 2}),
        ("POST", "/v1/acks", WORKER, {"acks": [{"id": "m-2", "lease_token": "0" * 32,
                                                "complete": {"result": {"ok": 1}}}]}),
        ("POST", "/v1/jobs/m-2/fail", WORKER, {"lease_token": "0" * 32,
                                               "error": {"class": "transient"}}),
        ("POST", "/v1/jobs/m-2/heartbeat", WORKER, {"lease_token": "0" * 32,
                                                    "extend_ms": 5000}),
        ("PUT", "/v1/queues/mq", ADMIN, {"concurrency": 4, "rate_limit": {"max": 5,
                                                                        "per_ms": 1000}}),
        ("GET", "/v1/queues/mq/jobs?state=waiting&limit=5", ADMIN, None),
        ("GET", "/v1/jobs/m-2?wait_ms=10", ADMIN, None),
        ("GET", "/v1/dead?limit=3", ADMIN, None),
        ("PUT", "/v1/schedulers/s1", ADMIN, {"cron": "*/5 * * * *", "queue": "mq",
                                             "name": "tick", "tz": "Europe/Paris"}),
        ("POST", "/v1/leases", WORKER, {"type": "t", "code": "c", "run_key": "r",
                                        "ttl_ms": 5000}),
        ("PUT", "/v1/cursors/c1", WORKER, {"value": {"at": 1}, "expected": None}),
        ("POST", "/v1/bulk", ADMIN, {"action": "cancel", "ids": ["m-2"]}),
        ("DELETE", "/v1/queues/mq/jobs/none", ADMIN, None),
    ]


def render(method, target, token, body, port):
    data = b"" if body is None else json.dumps(body).encode()
    head = ["%s %s HTTP/1.1" % (method, target), "Host: 127.0.0.1:%d" % port,
            "Authorization: Bearer %s" % token, "Connection: close"]
    if body is not None:
        head += ["Content-Type: application/json", "Content-Length: %d" % len(data)]
    return head, data


JUNK = [b"\x00", b"\xff", b"\r\n", b"\n", b" ", b":", b"%", b"%00", b"../", b"{", b"}",
        b'"', b"\\u0000", b"-1", b"99999999999999999999", b"1e309", b"null", b"[]",
        "é".encode(), b"\t", b"?", b"#", b"&&", b"//"]


def mutate(rng, head, data):
    head = list(head)
    data = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(9)
        if k == 0 and data:  # a body byte changed, inserted or removed
            i = rng.randrange(len(data))
            op = rng.randrange(3)
            if op == 0:
                data[i] = rng.randrange(256)
            elif op == 1:
                data[i:i] = rng.choice(JUNK)
            else:
                del data[i:i + rng.randint(1, 8)]
        elif k == 1:  # the request line
            parts = head[0].split(" ")
            j = rng.randrange(len(parts))
            parts[j] = rng.choice([parts[j] + rng.choice(JUNK).decode("latin-1"),
                                   "", "X" * rng.randint(1, 5000), "PATCH", "OPTIONS",
                                   "HTTP/1.0", "HTTP/9.9", parts[j][::-1]])
            head[0] = " ".join(parts)
        elif k == 2 and len(head) > 1:  # a header dropped
            del head[rng.randrange(1, len(head))]
        elif k == 3:  # a header repeated or added
            head.insert(rng.randrange(1, len(head) + 1),
                        rng.choice(head[1:] + ["Transfer-Encoding: chunked",
                                               "Expect: 100-continue", "X-A: " + "b" * 9000,
                                               "Content-Length: 5", "Content-Length: -1",
                                               "Cookie: errand_session=" + "z" * 64]))
        elif k == 4 and len(head) > 1:  # a header's value mangled
            i = rng.randrange(1, len(head))
            name, _, value = head[i].partition(":")
            head[i] = name + ":" + rng.choice([value + rng.choice(JUNK).decode("latin-1"),
                                               "", " " * 3, value[: len(value) // 2]])
        elif k == 5:  # the body truncated
            data = data[: rng.randint(0, len(data))]
        elif k == 6:  # a JSON value swapped
            try:
                body = json.loads(bytes(data))
            except ValueError:
                continue
            if isinstance(body, dict) and body:
                key = rng.choice(sorted(body))
                body[key] = rng.choice([None, -1, 2 ** 63, 1.5, "", "x" * 70000, [], {},
                                        True, [body[key]] * 3])
                data = bytearray(json.dumps(body).encode())
        elif k == 7:  # the target's path or query
            parts = head[0].split(" ")
            if len(parts) == 3:
                parts[1] = parts[1] + rng.choice(["?limit=0", "?limit=abc", "?x=1",
                                                  "/extra", "%2f", "?wait_ms=99999999",
                                                  "?cursor=" + "9" * 40, "#f"])
                head[0] = " ".join(parts)
        else:  # the token
            for i, h in enumerate(head):
                if h.startswith("Authorization"):
                    head[i] = rng.choice(["Authorization: Bearer wrong-token-000000",
                                          "Authorization: Basic abc", "Authorization:",
                                          "Authorization: Bearer " + WORKER])
    raw = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1", "replace") + bytes(data)
    return raw


def exchange(port, raw):
    """The status line's code of the reply, or None when the server closed
    without one (allowed: a request it refuses to read)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        try:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        got = b""
        while b"\r\n" not in got and len(got) < 4096:
            try:
                chunk = s.recv(4096)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
        if not got:
            return None
        line = got.split(b"\r\n", 1)[0].split(b" ")
        assert len(line) >= 2 and line[0] in (b"HTTP/1.0", b"HTTP/1.1"), got[:80]
        return int(line[1])
    finally:
        s.close()


class HttpMutation(unittest.TestCase):
    def test_mutated_requests_never_crash_or_500_and_leave_the_store_whole(self):
        srv = Server(args=["--token", "admin:" + ADMIN, "--token", "worker:" + WORKER,
                           "--head-timeout", "2s"]).start()
        self.addCleanup(srv.cleanup)
        rng = random.Random(16)
        base = seeds()
        statuses = {}
        for n in range(ROUNDS):
            method, target, token, body = rng.choice(base)
            head, data = render(method, target, token, body, srv.port)
            raw = mutate(rng, head, data) if n % 10 else (
                ("\r\n".join(head) + "\r\n\r\n").encode() + data)  # one in ten unmutated
            code = exchange(srv.port, raw)
            self.assertTrue(srv.alive(), "the server died on request %d: %r\n%s"
                            % (n, raw[:300], srv.log_text()[-2000:]))
            self.assertNotEqual(code, 500, "request %d: %r" % (n, raw[:300]))
            statuses[code] = statuses.get(code, 0) + 1
        print("mutation: %d requests, statuses %s" % (ROUNDS, sorted(
            statuses.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))))
        self.assertGreater(sum(v for k, v in statuses.items() if k and k < 300), 0,
                           "no request succeeded: the seeds are broken")
        st, b, _ = srv.get("/healthz")
        self.assertEqual(st, 200)
        hdr = {"Authorization": "Bearer " + ADMIN}
        for state in ("waiting", "active", "scheduled", "completed", "dead", "cancelled"):
            st, b, _ = srv.get("/v1/queues/mq/jobs?state=%s&limit=1000" % state, headers=hdr)
            self.assertEqual(st, 200, b)
            for j in b["jobs"]:
                st, one, _ = srv.get("/v1/jobs/" + j["id"], headers=hdr)
                self.assertEqual(st, 200, (j["id"], one))  # may have moved on since
                self.assertEqual((one["job"]["id"], one["job"]["queue"]), (j["id"], "mq"))
                self.assertIn(one["job"]["state"], ("waiting", "active", "scheduled",
                                                    "completed", "dead", "cancelled"))


if __name__ == "__main__":
    unittest.main()
