# SPDX-License-Identifier: MIT
#
# The outbox relay against a real PostgreSQL application database and a
# real `errand serve` (docs/outbox.md): events written in the application's
# transaction become one job per route, exactly once; a rolled-back
# transaction gives nothing; a SIGKILL between enqueue and mark gives no
# second job; two relays never publish a row twice; unroutable and broken
# rows neither block the rows behind them nor vanish; 10,000 events drain
# on both errand stores; bad settings are refused at start; an unreachable
# outbox database is shown, not fatal. Needs ERRAND_TEST_PG_URL.

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, StartError, free_port, run_errand, wait_until  # noqa: E402
from test_pg_multinode import PG_URL, psql, psql_bin, with_params  # noqa: E402

ROUTES = {
    "order.placed": [{"queue": "payments", "name": "capture-payment"},
                     {"queue": "emails", "name": "send-receipt"}],
    "user.signed_up": [{"queue": "emails", "name": "welcome"}],
}


def app_url(db):
    """ERRAND_TEST_PG_URL with its database replaced by db."""
    u = urllib.parse.urlsplit(PG_URL)
    return urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + db, u.query, u.fragment))


def app_sql(url, sql):
    """Runs sql (on stdin, ON_ERROR_STOP) against url; rows as lists of strings."""
    out = subprocess.run([psql_bin(), url, "-X", "-A", "-t", "-F", "|", "-q",
                          "-v", "ON_ERROR_STOP=1", "-f", "-"], input=sql,
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError("psql failed: %s" % out.stderr)
    return [line.split("|") for line in out.stdout.splitlines() if line]


def metric(srv, name):
    st, body, _ = srv.get("/metrics", timeout=5)
    assert st == 200, st
    m = re.search(r"^%s (\S+)$" % re.escape(name), body.decode() if isinstance(body, bytes)
                  else body, re.M)
    return float(m.group(1)) if m else None


class AppDb:
    """A fresh application database with the outbox tables installed."""

    def __init__(self, tag, notify=True):
        self.name = "app_%s_%d_%d" % (tag, os.getpid(), int(time.time() * 1000) % 10**7)
        psql("CREATE DATABASE %s" % self.name)
        self.url = app_url(self.name)
        args = ["outbox", "install", "--db", self.url] + (["--notify"] if notify else [])
        rc, out, err = run_errand(args, timeout=60)
        assert rc == 0, (rc, out, err)

    def sql(self, sql):
        return app_sql(self.url, sql)

    def drop(self):
        psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % self.name)


def relay_server(db, routes=ROUTES, args=(), store="default", routes_path=None, **kw):
    if routes_path is None:
        fd, routes_path = tempfile.mkstemp(prefix="routes-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(routes, f, indent=1)
    return Server(args=["--outbox-db", db.url, "--outbox-routes", routes_path,
                        "--outbox-poll", "100ms"] + list(args), store=store, **kw)


def jobs_of(srv, queue, state="waiting"):
    st, body, _ = srv.get("/v1/queues/%s/jobs?state=%s&limit=1000" % (queue, state))
    assert st == 200, (st, body)
    return body["jobs"]


def insert_events(db, n, topic="order.placed", payload="jsonb_build_object('n', i)"):
    return db.sql("INSERT INTO outbox_events (topic, payload) SELECT '%s', %s"
                  " FROM generate_series(1, %d) AS i" % (topic, payload, n))


def unpublished(db, extra=""):
    return int(db.sql("SELECT count(*) FROM outbox_events WHERE published_at IS NULL %s"
                      % extra)[0][0])


@unittest.skipUnless(PG_URL, "ERRAND_TEST_PG_URL is not set")
class RelayTest(unittest.TestCase):
    def setUp(self):
        self.db = AppDb("relay")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.cleanup()
        self.db.drop()

    def start(self, **kw):
        s = relay_server(self.db, **kw).start()
        self.servers.append(s)
        return s

    def test_an_event_written_with_its_order_becomes_one_job_per_route(self):
        s = self.start()
        self.db.sql("CREATE TABLE orders (id int PRIMARY KEY, total int)")
        # the documented snippet: the order and its event in one transaction
        eid = self.db.sql("""
            BEGIN;
            INSERT INTO orders VALUES (1, 42);
            INSERT INTO outbox_events (idempotency_key, topic, aggregate_id, payload, trace_id)
              VALUES ('order-1-placed', 'order.placed', '1', '{"order": 1, "total": 42}',
                      'trace-1')
              ON CONFLICT (idempotency_key) DO NOTHING RETURNING id;
            COMMIT;""")[0][0]
        # a transaction that rolls back leaves nothing to relay
        self.db.sql("""
            BEGIN;
            INSERT INTO orders VALUES (2, 7);
            INSERT INTO outbox_events (topic, payload) VALUES ('order.placed', '{"order": 2}');
            ROLLBACK;""")
        wait_until(lambda: unpublished(self.db) == 0 and len(jobs_of(s, "emails")) == 1,
                   timeout=15, what="the event relayed")
        pay, mail = jobs_of(s, "payments"), jobs_of(s, "emails")
        self.assertEqual(len(pay), 1, pay)
        for j, name in ((pay[0], "capture-payment"), (mail[0], "send-receipt")):
            self.assertEqual(j["name"], name)
            self.assertTrue(re.fullmatch(r"outbox:%s:[0-9a-f]{16}" % eid, j["id"]), j["id"])
            self.assertEqual(j["idempotency_key"], "order-1-placed")
            self.assertEqual(j["trace_id"], "trace-1")
            self.assertEqual(j["payload"], {"event_id": eid, "topic": "order.placed",
                                            "trace_id": "trace-1",
                                            "payload": {"order": 1, "total": 42}})
        self.assertNotEqual(pay[0]["id"], mail[0]["id"])
        # a second write of the same key adds no event
        rows = self.db.sql("INSERT INTO outbox_events (idempotency_key, topic, payload)"
                           " VALUES ('order-1-placed', 'order.placed', '{}')"
                           " ON CONFLICT (idempotency_key) DO NOTHING RETURNING id")
        self.assertEqual(rows, [])
        time.sleep(0.5)
        self.assertEqual(len(jobs_of(s, "payments")), 1)
        self.assertEqual(metric(s, "errand_outbox_events_published_total"), 1)
        self.assertEqual(metric(s, "errand_outbox_jobs_enqueued_total"), 2)
        st, body, _ = s.get("/readyz")
        self.assertEqual(st, 200)
        self.assertEqual(body["outbox"]["status"], "connected")

    def hold_marks(self):
        """Makes the relay's mark (UPDATE ... published_at) wait on an
        advisory lock a psql session of the test holds; returns that session
        (write COMMIT to it to let the marks go)."""
        self.db.sql("""
            CREATE FUNCTION hold_mark() RETURNS trigger LANGUAGE plpgsql AS
              $$BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NEW; END$$;
            CREATE TRIGGER hold_mark BEFORE UPDATE ON outbox_events
              FOR EACH ROW EXECUTE FUNCTION hold_mark();""")
        holder = subprocess.Popen([psql_bin(), self.db.url, "-X", "-q", "-f", "-"],
                                  stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.addCleanup(lambda: holder.poll() is None and holder.kill())
        holder.stdin.write("BEGIN; SELECT pg_advisory_xact_lock(4242);\n")
        holder.stdin.flush()
        # pg_locks is the cluster's: other tests hold advisory locks too
        wait_until(lambda: self.db.sql("SELECT count(*) FROM pg_locks WHERE locktype ="
                                       " 'advisory' AND classid = 0 AND objid = 4242"
                                       " AND objsubid = 1 AND granted AND database ="
                                       " (SELECT oid FROM pg_database"
                                       "  WHERE datname = current_database())")[0][0] == "1",
                   timeout=10, what="the test holds the lock")
        return holder

    def release_marks(self, holder):
        holder.stdin.write("COMMIT;\n")
        holder.stdin.close()
        holder.wait(timeout=10)
        self.db.sql("DROP TRIGGER hold_mark ON outbox_events")

    def test_a_relay_killed_between_enqueue_and_mark_creates_no_second_job(self):
        # errand's store has committed the jobs, the rows are not marked
        holder = self.hold_marks()
        insert_events(self.db, 20)
        s = self.start()
        wait_until(lambda: len(jobs_of(s, "payments")) == 20, timeout=15,
                   what="the jobs committed in errand's store")
        before = sorted(j["id"] for j in jobs_of(s, "payments") + jobs_of(s, "emails"))
        self.assertEqual(len(before), 40)
        self.assertEqual(unpublished(self.db), 20, "the mark is held back")
        s.kill()
        # the killed relay's session still waits on the lock: end it
        self.db.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'errand-outbox-relay'")
        self.release_marks(holder)
        s.start()
        wait_until(lambda: unpublished(self.db) == 0, timeout=15, what="the rows marked")
        after = sorted(j["id"] for j in jobs_of(s, "payments") + jobs_of(s, "emails"))
        self.assertEqual(after, before, "the second relay created no job")
        self.assertEqual(metric(s, "errand_outbox_events_published_total"), 20)
        self.assertEqual(metric(s, "errand_outbox_jobs_enqueued_total"), 0,
                         "every job of the second relay was a duplicate")

    def test_shutdown_cancels_a_statement_the_database_does_not_answer(self):
        holder = self.hold_marks()
        insert_events(self.db, 10)
        s = self.start()
        wait_until(lambda: len(jobs_of(s, "payments")) == 10, timeout=15, what="jobs committed")
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)
        self.assertEqual(s.wait(20), 0, s.log_text())
        self.assertLess(time.monotonic() - t0, 15)
        self.assertIn("was cancelled", s.log_text())
        self.assertEqual(unpublished(self.db), 10, "the cancelled mark rolled back")
        self.release_marks(holder)

    def test_two_relays_on_one_table_never_publish_a_row_twice(self):
        a, b = self.start(), self.start()
        for _ in range(10):
            insert_events(self.db, 200)
            time.sleep(0.05)
        wait_until(lambda: unpublished(self.db) == 0, timeout=60, what="every row published")
        pa = metric(a, "errand_outbox_events_published_total")
        pb = metric(b, "errand_outbox_events_published_total")
        self.assertEqual(pa + pb, 2000, (pa, pb))
        ids_a = {r[0] for r in a.query("SELECT id FROM jobs WHERE queue = 'payments'")}
        ids_b = {r[0] for r in b.query("SELECT id FROM jobs WHERE queue = 'payments'")}
        self.assertEqual(len(ids_a) + len(ids_b), 2000)
        self.assertEqual(ids_a & ids_b, set(), "a row relayed by both")
        self.assertGreater(min(len(ids_a), len(ids_b)), 0, "both relays took part")

    def test_unroutable_rows_at_the_head_neither_block_nor_get_marked(self):
        insert_events(self.db, 150, topic="invoice.paid")
        insert_events(self.db, 10, topic="user.signed_up")
        s = self.start()
        wait_until(lambda: len(jobs_of(s, "emails")) == 10, timeout=15,
                   what="the routable rows relayed")
        self.assertEqual(unpublished(self.db), 150)
        self.assertEqual(unpublished(self.db, "AND topic = 'invoice.paid'"), 150)
        wait_until(lambda: metric(s, "errand_outbox_unroutable_rows") == 150, timeout=10,
                   what="the unroutable rows counted")
        self.assertTrue(any("no route" in line for line in s.log_text().splitlines()),
                        s.log_text())

    def test_a_row_that_cannot_be_a_job_is_set_aside_and_the_rows_behind_flow(self):
        self.db.sql("""
            INSERT INTO outbox_events (topic, payload, created_at) VALUES
              ('user.signed_up', '{"u": 1}', now() - interval '3 s'),
              ('user.signed_up', '[1, 2]', now() - interval '2 s'),
              ('user.signed_up', '{"u": 3}', now() - interval '1 s');""")
        s = self.start()
        wait_until(lambda: len(jobs_of(s, "emails")) == 2, timeout=15, what="two jobs")
        rows = self.db.sql("SELECT payload::text, attempts, last_error, set_aside_at IS NOT NULL,"
                           " published_at IS NULL FROM outbox_events WHERE payload = '[1, 2]'")
        self.assertEqual(rows[0][1:], ["1", "payload: the event's payload must be a JSON object",
                                       "t", "t"])
        self.assertEqual(sorted(j["payload"]["payload"]["u"] for j in jobs_of(s, "emails")), [1, 3])
        wait_until(lambda: metric(s, "errand_outbox_set_aside_rows") == 1, timeout=10,
                   what="the set-aside row counted")
        # set aside is not deleted: still there after a while, never retried
        time.sleep(0.5)
        self.assertEqual(self.db.sql("SELECT attempts FROM outbox_events"
                                     " WHERE payload = '[1, 2]'"), [["1"]])

    def test_a_row_refused_by_enqueue_is_retried_with_backoff(self):
        s = self.start(args=["--payload-max", "1k"])
        self.db.sql("INSERT INTO outbox_events (topic, payload, created_at) VALUES"
                    " ('user.signed_up', jsonb_build_object('s', repeat('x', 2000)),"
                    "  now() - interval '1 s'),"
                    " ('user.signed_up', '{\"ok\": true}', now())")
        wait_until(lambda: len(jobs_of(s, "emails")) == 1, timeout=15, what="the small row")
        row = self.db.sql("SELECT attempts, set_aside_at IS NULL, retry_at > now(),"
                          " last_error FROM outbox_events WHERE payload ? 's'")[0]
        self.assertEqual(row[:3], ["1", "t", "t"], row)
        self.assertIn("payload-max", row[3])
        wait_until(lambda: self.db.sql("SELECT attempts FROM outbox_events"
                                       " WHERE payload ? 's'")[0][0] == "2",
                   timeout=10, what="a second try after the backoff")

    def test_shutdown_mid_drain_marks_only_rows_whose_jobs_are_committed(self):
        insert_events(self.db, 20000, topic="user.signed_up")
        s = self.start()
        wait_until(lambda: unpublished(self.db) < 19000, timeout=30, what="the drain under way")
        s.signal(signal.SIGTERM)
        self.assertEqual(s.wait(20), 0, s.log_text())
        published = {r[0] for r in self.db.sql("SELECT id FROM outbox_events"
                                                " WHERE published_at IS NOT NULL")}
        self.assertGreater(len(published), 0)
        jobs = {r[0].split(":")[1] for r in s.query("SELECT id FROM jobs")}
        self.assertEqual(published - jobs, set(), "a row marked without its job")
        self.assertEqual(jobs - published, set(), "the batch in flight was not finished")

    def test_a_notify_wakes_the_relay_before_its_poll(self):
        # installed with --notify (AppDb): an insert wakes the relay at once
        s = self.start(args=["--outbox-poll", "60s"])
        wait_until(lambda: s.get("/readyz")[1].get("outbox", {}).get("status") == "connected",
                   timeout=15, what="connected")
        time.sleep(0.3)  # the relay has found nothing and waits for its 60 s poll
        t0 = time.monotonic()
        insert_events(self.db, 3, topic="user.signed_up")
        wait_until(lambda: len(jobs_of(s, "emails")) == 3, timeout=10, what="woken by NOTIFY")
        self.assertLess(time.monotonic() - t0, 5)

    def test_old_processed_messages_are_deleted(self):
        self.db.sql("INSERT INTO processed_messages (consumer, message_id, processed_at) VALUES"
                    " ('billing', 'old', now() - interval '2 h'), ('billing', 'new', now())")
        self.start(args=["--outbox-processed-retention", "1h"])
        wait_until(lambda: self.db.sql("SELECT message_id FROM processed_messages") == [["new"]],
                   timeout=15, what="the old message deleted")

    def test_published_rows_are_deleted_past_the_retention(self):
        s = self.start(args=["--outbox-retention", "1s"])
        insert_events(self.db, 5, topic="user.signed_up")
        wait_until(lambda: len(jobs_of(s, "emails")) == 5, timeout=15, what="relayed")
        self.db.sql("INSERT INTO outbox_events (topic, payload) VALUES ('other', '{}')")
        wait_until(lambda: self.db.sql("SELECT count(*) FROM outbox_events")[0][0] == "1",
                   timeout=15, what="published rows deleted")
        self.assertEqual(self.db.sql("SELECT topic FROM outbox_events"), [["other"]])


@unittest.skipUnless(PG_URL, "ERRAND_TEST_PG_URL is not set")
class SameDatabaseTest(unittest.TestCase):
    """The outbox in errand's own PostgreSQL database: claim, enqueue (with
    errand's SQL functions) and mark are one transaction."""

    def setUp(self):
        self.db = AppDb("same")
        self.store = with_params(self.db.url, schema="errand")
        self.s = relay_server(self.db, store=self.store).start()
        wait_until(lambda: self.s.get("/readyz")[1].get("outbox", {}).get("transactions") == 1,
                   timeout=15, what="one-transaction mode")

    def tearDown(self):
        self.s.cleanup()
        self.db.drop()

    def test_events_become_jobs_in_the_claims_transaction(self):
        insert_events(self.db, 300)
        wait_until(lambda: unpublished(self.db) == 0, timeout=15, what="relayed")
        self.assertEqual(len(jobs_of(self.s, "payments")), 300)
        self.assertEqual(len(jobs_of(self.s, "emails")), 300)
        j = jobs_of(self.s, "payments")[0]
        self.assertTrue(j["id"].startswith("outbox:"), j)
        self.assertEqual(j["idempotency_key"], j["payload"]["event_id"])
        self.assertEqual(metric(self.s, "errand_outbox_events_published_total"), 300)

    def test_a_mark_that_fails_takes_the_jobs_with_it(self):
        # in two transactions the jobs would exist; here they never commit
        self.db.sql("""
            CREATE FUNCTION no_mark() RETURNS trigger LANGUAGE plpgsql AS
              $$BEGIN RAISE EXCEPTION 'marking refused by the test'; END$$;
            CREATE TRIGGER no_mark BEFORE UPDATE ON outbox_events
              FOR EACH ROW EXECUTE FUNCTION no_mark();""")
        insert_events(self.db, 5)
        wait_until(lambda: "marking refused" in (self.s.get("/readyz")[1]["outbox"]["error"]
                                                 or ""), timeout=15, what="the refusal shown")
        self.assertEqual(jobs_of(self.s, "payments"), [])
        self.db.sql("DROP TRIGGER no_mark ON outbox_events")
        wait_until(lambda: unpublished(self.db) == 0, timeout=15, what="relayed after the fix")
        self.assertEqual(len(jobs_of(self.s, "payments")), 5)

    def test_a_row_errands_sql_refuses_fails_alone(self):
        # errand's SQL functions read their limits from the schema: make them
        # stricter than the relay's own check, so only SQL refuses the big row
        self.db.sql("UPDATE errand.limits SET payload_max = 2000")
        self.db.sql("INSERT INTO outbox_events (topic, payload, created_at) VALUES"
                    " ('user.signed_up', '{\"small\": 1}', now() - interval '2 s'),"
                    " ('user.signed_up', jsonb_build_object('big', repeat('x', 3000)),"
                    "  now() - interval '1 s'),"
                    " ('user.signed_up', '{\"small\": 2}', now())")
        wait_until(lambda: len(jobs_of(self.s, "emails")) == 2, timeout=15, what="the small rows")
        row = self.db.sql("SELECT attempts, published_at IS NULL, last_error FROM outbox_events"
                          " WHERE payload ? 'big'")[0]
        self.assertEqual(row[:2], ["1", "t"], row)
        self.assertIn("payload", row[2])


@unittest.skipUnless(PG_URL, "ERRAND_TEST_PG_URL is not set")
class DrainTest(unittest.TestCase):
    """10,000 events drain on each errand store; the lag falls to zero."""

    N = 10000

    def drain(self, store, tag):
        db = AppDb(tag)
        s = None
        try:
            insert_events(db, self.N, topic="user.signed_up")
            s = relay_server(db, store=store).start()
            t0 = time.monotonic()
            wait_until(lambda: unpublished(db) == 0, timeout=120, interval=0.1,
                       what="the backlog drained")
            secs = time.monotonic() - t0
            wait_until(lambda: metric(s, "errand_outbox_lag_seconds") == 0, timeout=15,
                       what="the lag metric at zero")
            self.assertEqual(metric(s, "errand_outbox_events_published_total"), self.N)
            self.assertEqual(metric(s, "errand_outbox_jobs_enqueued_total"), self.N)
            self.assertEqual(metric(s, "errand_outbox_backlog_rows"), 0)
            print("outbox drain (%s store): %d events in %.2f s, %.0f events/s"
                  % (tag, self.N, secs, self.N / secs), file=sys.stderr)
        finally:
            if s:
                s.cleanup()
            db.drop()

    def test_drain_on_sqlite(self):
        self.drain("default", "sqlite")

    def test_drain_on_postgres(self):
        schema = "obd_%d" % os.getpid()
        try:
            self.drain(with_params(PG_URL, schema=schema), "postgres")
        finally:
            psql('DROP SCHEMA IF EXISTS "%s" CASCADE' % schema)


@unittest.skipUnless(PG_URL, "ERRAND_TEST_PG_URL is not set")
class BadSettingsTest(unittest.TestCase):
    def refused(self, args, expect):
        rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                   "sqlite:" + os.path.join(tempfile.mkdtemp(), "e.db")] + args)
        self.assertEqual(rc, 2, (rc, out, err))
        self.assertIn(expect, err)

    def routes_file(self, text):
        fd, path = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return path

    def test_bad_routes_files_are_refused_naming_the_line(self):
        url = app_url("postgres")
        bad = self.routes_file('{"order.placed": [\n  {"queue": "payments", "name": "x"},\n'
                               '  {"queue": "no such/queue", "name": "y"}]}')
        self.refused(["--outbox-db", url, "--outbox-routes", bad], "line 3: route 2 of topic")
        broken = self.routes_file('{"a": [{"queue": "q", "name": "n"}],\n"b": [}')
        self.refused(["--outbox-db", url, "--outbox-routes", broken], "line 2: ")
        self.refused(["--outbox-db", url, "--outbox-routes", "/nonexistent/routes.json"],
                     "No such file")
        self.refused(["--outbox-db", url], "--outbox-routes is missing")
        ok = self.routes_file(json.dumps(ROUTES))
        self.refused(["--outbox-routes", ok], "--outbox-db is missing")
        self.refused(["--outbox-db", "mysql://x/y", "--outbox-routes", ok], "postgres://")
        self.refused(["--outbox-db", url, "--outbox-routes", ok, "--outbox-poll", "1ms"],
                     "outbox-poll")

    def test_install_refuses_a_bad_url_and_an_unreachable_database(self):
        rc, out, err = run_errand(["outbox", "install"])
        self.assertEqual(rc, 2, err)
        rc, out, err = run_errand(["outbox", "install", "--db", "sqlite:x.db"])
        self.assertEqual(rc, 2, err)
        port = free_port()
        rc, out, err = run_errand(["outbox", "install", "--db",
                                   "postgres://u:secret@127.0.0.1:%d/app" % port], timeout=30)
        self.assertEqual(rc, 1, err)
        self.assertIn("cannot connect", err)
        self.assertNotIn("secret", err)

    def test_an_unreachable_outbox_database_is_shown_not_fatal(self):
        port = free_port()
        fd, routes = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(ROUTES, f)
        with Server(args=["--outbox-db", "postgres://u:secret@127.0.0.1:%d/app" % port,
                          "--outbox-routes", routes]) as s:
            wait_until(lambda: (metric(s, "errand_outbox_connect_failures_total") or 0) >= 1,
                       timeout=15, what="a failed connection counted")
            st, body, _ = s.get("/readyz")
            self.assertEqual(st, 200, body)
            ob = body["outbox"]
            self.assertEqual(ob["status"], "unreachable")
            self.assertIn("cannot connect", ob["error"])
            self.assertNotIn("secret", ob["error"])
            self.assertEqual(metric(s, "errand_outbox_connected"), 0)
            # the server's own queues still work
            st, body, _ = s.enqueue("own", {"name": "n"})
            self.assertEqual(st, 201, body)
            self.assertTrue(any("outbox relay" in l and "cannot connect" in l
                                for l in s.log_text().splitlines()))
            self.assertNotIn("secret", s.log_text())

    def test_tables_not_installed_are_named_in_readyz(self):
        db = "app_noinst_%d" % os.getpid()
        psql("CREATE DATABASE %s" % db)
        try:
            fd, routes = tempfile.mkstemp(suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(ROUTES, f)
            with Server(args=["--outbox-db", app_url(db), "--outbox-routes", routes]) as s:
                def shown():
                    st, body, _ = s.get("/readyz")
                    return st == 200 and "errand outbox install" in (
                        body["outbox"]["error"] or "")
                wait_until(shown, timeout=15, what="readyz names the install command")
        finally:
            psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)


if __name__ == "__main__":
    unittest.main()
