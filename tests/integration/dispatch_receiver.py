# SPDX-License-Identifier: MIT
#
# A real HTTP receiver for HTTP dispatch tests (test_dispatch.py): a separate
# process (so a test can kill -9 it and start it again on the same port)
# that applies each request's effect at most once per Idempotency-Key,
# durably, in a SQLite file, and records every request it saw. The path
# picks the answer:
#
#   /ok                    apply, 200 with {"applied": KEY}
#   /crash-once            apply; the first request of a key then exits the
#                          process before answering (the effect is on disk)
#   /status/N?retry_after=V&body=B&times=T
#                          answer N (with Retry-After V, body B) to the
#                          first T requests of a key (all when T is absent),
#                          then apply and answer 200
#   /slow?ms=M             wait M ms, then apply and answer 200
#   /text                  apply, 200 with a text body
#
#   python3 dispatch_receiver.py PORT DBFILE     (prints "ready" when listening)

import http.server
import json
import os
import sqlite3
import sys
import threading
import time
import urllib.parse

SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, job_id TEXT, at REAL);
CREATE TABLE IF NOT EXISTS requests (n INTEGER PRIMARY KEY, key TEXT, job_id TEXT,
    attempt TEXT, method TEXT, path TEXT, headers TEXT, body TEXT, at REAL);
"""

lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_one(self):
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n).decode("utf-8", "replace")
        key = self.headers.get("Idempotency-Key", "")
        db = self.server.db
        with lock:
            db.execute("INSERT INTO requests (key, job_id, attempt, method, path, headers, body,"
                       " at) VALUES (?,?,?,?,?,?,?,?)",
                       (key, self.headers.get("X-Errand-Job-Id"),
                        self.headers.get("X-Errand-Attempt"), self.command, url.path,
                        json.dumps({k.lower(): v for k, v in self.headers.items()}), body,
                        time.time()))
            seen = db.execute("SELECT count(*) FROM requests WHERE key = ? AND path = ?",
                              (key, url.path)).fetchone()[0]
            db.commit()
        if url.path.startswith("/status/"):
            times = int(q.get("times", "1000000"))
            if seen <= times:
                out = q.get("body", "").encode()
                self.send_response(int(url.path.split("/")[2]))
                if "retry_after" in q:
                    self.send_header("Retry-After", q["retry_after"])
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
                return
        if url.path == "/slow":
            time.sleep(int(q.get("ms", "1000")) / 1000.0)
        with lock:
            db.execute("INSERT OR IGNORE INTO effects (key, job_id, at) VALUES (?,?,?)",
                       (key, self.headers.get("X-Errand-Job-Id"), time.time()))
            db.commit()
        if url.path == "/crash-once" and seen == 1:
            os._exit(3)  # the effect is committed; the answer never leaves
        if url.path == "/text":
            out, ctype = b"plain words, not JSON", "text/plain"
        else:
            out, ctype = json.dumps({"applied": key}).encode(), "application/json"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_POST = do_PUT = do_PATCH = handle_one


class Server(http.server.ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True


def main():
    port, path = int(sys.argv[1]), sys.argv[2]
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(SCHEMA)
    db.isolation_level = ""
    srv = Server(("127.0.0.1", port), Handler)
    srv.db = db
    print("ready", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
