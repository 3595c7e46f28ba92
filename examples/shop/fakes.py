#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# The shop's outside world, faked: a payment gateway, a carrier and a mail
# service, each a small HTTP service that keeps its records in SQLite and
# commits before it answers (so a SIGKILL loses nothing it acknowledged).
# They stand for third parties, so they are not part of the example's C code.
#
#   fakes.py gateway --port 7501 --db gateway.db [--fail-rate 0.1] [--lost-reply-rate 0.1]
#   fakes.py carrier --port 7502 --db carrier.db [--limit 5]
#   fakes.py mail    --port 7503 --db mail.db
#
# --fail-rate answers 503 before doing anything; --lost-reply-rate (gateway)
# captures and then drops the connection without an answer, as a gateway
# that crashed after charging would. POST /faults {"fail_rate", "lost_reply_rate"}
# changes both while the fake runs.

import argparse
import json
import random
import secrets
import sqlite3
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCHEMAS = {
    "gateway": """
        CREATE TABLE IF NOT EXISTS auths (id TEXT PRIMARY KEY, amount INTEGER, status TEXT,
                                          capture_id TEXT);
        CREATE TABLE IF NOT EXISTS idem (key TEXT PRIMARY KEY, status INTEGER, body TEXT);
        CREATE TABLE IF NOT EXISTS charges (auth TEXT, capture_id TEXT, amount INTEGER, at REAL);
        CREATE TABLE IF NOT EXISTS capture_calls (auth TEXT, key TEXT, at REAL);""",
    "carrier": """
        CREATE TABLE IF NOT EXISTS shipments (id TEXT PRIMARY KEY, reference TEXT, at REAL);
        CREATE TABLE IF NOT EXISTS rejected (reference TEXT, at REAL);""",
    "mail": """
        CREATE TABLE IF NOT EXISTS mails (key TEXT PRIMARY KEY, body TEXT, at REAL);
        CREATE TABLE IF NOT EXISTS deliveries (key TEXT, at REAL);""",
}


def url_path(raw):
    return urllib.parse.urlsplit(raw).path


class Fake(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, obj, headers=()):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else {}

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def handle_any(self, method):
        srv = self.server
        try:
            body = self.body() if method == "POST" else {}
        except ValueError:
            return self.reply(400, {"error": "bad json"})
        if method == "POST" and url_path(self.path) == "/faults":  # test control
            srv.fail_rate = float(body.get("fail_rate", srv.fail_rate))
            srv.lost_reply_rate = float(body.get("lost_reply_rate", srv.lost_reply_rate))
            return self.reply(200, {"fail_rate": srv.fail_rate,
                                    "lost_reply_rate": srv.lost_reply_rate})
        if random.random() < srv.fail_rate:
            return self.reply(503, {"error": "injected failure"})
        url = urllib.parse.urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        with srv.lock:
            db = srv.db
            try:
                out = getattr(self, srv.kind)(db, method, parts, urllib.parse.parse_qs(url.query),
                                              body)
                db.commit()
            except Exception:
                db.rollback()
                raise
        if out is None:  # the effect is committed, the answer is lost
            self.close_connection = True
            return
        self.reply(*out)

    # ---- the gateway: authorizations, captures with Idempotency-Key, voids ----

    def gateway(self, db, method, parts, query, body):
        if parts == ["authorizations"] and method == "POST":
            aid = "auth_" + secrets.token_hex(8)
            db.execute("INSERT INTO auths VALUES (?, ?, 'authorized', NULL)",
                       (aid, int(body.get("amount", 0))))
            return 201, {"id": aid, "status": "authorized"}
        if len(parts) < 2 or parts[0] != "authorizations":
            return 404, {"error": "not found"}
        row = db.execute("SELECT amount, status, capture_id FROM auths WHERE id = ?",
                         (parts[1],)).fetchone()
        if row is None:
            return 404, {"error": "no such authorization"}
        amount, status, capture_id = row
        if len(parts) == 2 and method == "GET":
            out = {"id": parts[1], "status": status}
            if capture_id:
                out["capture_id"] = capture_id
            return 200, out
        action = parts[2] if len(parts) == 3 else ""
        if action == "expire" and method == "POST":  # test control
            db.execute("UPDATE auths SET status = 'expired' WHERE id = ? AND status = 'authorized'",
                       (parts[1],))
            return 200, {"id": parts[1]}
        if action not in ("capture", "void") or method != "POST":
            return 404, {"error": "not found"}
        key = self.headers.get("Idempotency-Key")
        if not key:
            return 400, {"error": "Idempotency-Key is required"}
        if action == "capture":
            db.execute("INSERT INTO capture_calls VALUES (?, ?, ?)", (parts[1], key, time.time()))
        seen = db.execute("SELECT status, body FROM idem WHERE key = ?", (key,)).fetchone()
        if seen:
            return seen[0], json.loads(seen[1])
        if action == "capture" and status == "authorized":
            capture_id = "cap_" + secrets.token_hex(8)
            db.execute("UPDATE auths SET status = 'captured', capture_id = ? WHERE id = ?",
                       (capture_id, parts[1]))
            db.execute("INSERT INTO charges VALUES (?, ?, ?, ?)",
                       (parts[1], capture_id, amount, time.time()))
            out = (200, {"capture_id": capture_id})
        elif action == "void" and status == "authorized":
            db.execute("UPDATE auths SET status = 'voided' WHERE id = ?", (parts[1],))
            out = (200, {"status": "voided"})
        else:
            out = (409, {"error": "authorization is %s" % status, "status": status})
        db.execute("INSERT INTO idem VALUES (?, ?, ?)", (key, out[0], json.dumps(out[1])))
        if action == "capture" and random.random() < self.server.lost_reply_rate:
            return None
        return out

    # ---- the carrier: no idempotency key, a lookup by reference, a rate limit ----

    def carrier(self, db, method, parts, query, body):
        if parts != ["shipments"]:
            return 404, {"error": "not found"}
        if method == "GET":
            ref = (query.get("reference") or [""])[0]
            rows = db.execute("SELECT id FROM shipments WHERE reference = ? ORDER BY at",
                              (ref,)).fetchall()
            return 200, {"shipments": [{"id": r[0], "reference": ref} for r in rows]}
        ref = str(body.get("reference", ""))
        if not ref:
            return 400, {"error": "reference is required"}
        now = time.time()
        recent = db.execute("SELECT count(*) FROM shipments WHERE at > ?",
                            (now - 1.0,)).fetchone()[0]
        if self.server.limit and recent >= self.server.limit:
            db.execute("INSERT INTO rejected VALUES (?, ?)", (ref, now))
            return 429, {"error": "slow down"}, [("Retry-After", "1")]
        sid = "shp_" + secrets.token_hex(8)
        db.execute("INSERT INTO shipments VALUES (?, ?, ?)", (sid, ref, now))
        return 201, {"id": sid, "reference": ref}

    # ---- the mail service: one mail per Idempotency-Key ----

    def mail(self, db, method, parts, query, body):
        if parts != ["send"] or method != "POST":
            return 404, {"error": "not found"}
        key = self.headers.get("Idempotency-Key")
        if not key:
            return 400, {"error": "Idempotency-Key is required"}
        now = time.time()
        db.execute("INSERT INTO deliveries VALUES (?, ?)", (key, now))
        db.execute("INSERT OR IGNORE INTO mails VALUES (?, ?, ?)", (key, json.dumps(body), now))
        return 200, {"queued": key}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=sorted(SCHEMAS))
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--fail-rate", type=float, default=0.0)
    ap.add_argument("--lost-reply-rate", type=float, default=0.0)
    ap.add_argument("--limit", type=int, default=0, help="carrier: creates per second (0: none)")
    a = ap.parse_args()
    db = sqlite3.connect(a.db, check_same_thread=False, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(SCHEMAS[a.kind])
    db.commit()
    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer.daemon_threads = True
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Fake)
    srv.kind, srv.db, srv.lock = a.kind, db, threading.Lock()
    srv.fail_rate, srv.lost_reply_rate, srv.limit = a.fail_rate, a.lost_reply_rate, a.limit
    print(json.dumps({"msg": "listening", "kind": a.kind, "port": a.port}), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
