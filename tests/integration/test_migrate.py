#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# Explicit migrations: `errand migrate` on a database of the previous
# release (fixtures/release-0.1.0.db, and a PostgreSQL schema one step
# behind) lists the pending steps with --dry-run and changes nothing, shows
# the versions with --status, applies them and says which; `errand serve
# --no-auto-migrate` refuses an old schema with exit 2 and a message naming
# `errand migrate`, and starts once it is current. Plus the flags' bad input.

import os
import re
import shutil
import sqlite3
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (PG_SKIP, PG_SKIP_WHY, PG_URL, Server, psql, psql_bin,  # noqa: E402
                     run_errand, with_params)

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                       "release-0.1.0.db")
SQLITE_STEPS = ["tombstones of deleted jobs' ids", "groups and rate limits",
                "dashboard sessions and the audit log", "a Faktory job's custom object",
                "the Faktory worker registry", "a Faktory unique job's lock token"]
LATEST = 3 + len(SQLITE_STEPS)  # the fixture is at version 3


def serve_refused(store, *extra, env=None):
    return run_errand(["serve", "--listen", "127.0.0.1:0", "--store", store] + list(extra),
                      env=env, timeout=20)


class SqliteMigrate(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="errand-migrate-")
        self.db = os.path.join(self.tmp, "errand.db")
        shutil.copyfile(FIXTURE, self.db)
        self.store = "sqlite:" + self.db

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def version(self, path=None):
        con = sqlite3.connect("file:%s?mode=ro" % (path or self.db), uri=True)
        try:
            return con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
        finally:
            con.close()

    def migrate(self, *args, env=None):
        rc, out, err = run_errand(["migrate"] + list(args), env=env, timeout=20)
        self.assertIsNotNone(rc, "errand migrate did not finish")
        return rc, out, err

    def test_dry_run_lists_the_previous_release_steps_and_changes_nothing(self):
        rc, out, err = self.migrate("--store", self.store, "--dry-run")
        self.assertEqual((rc, err), (0, ""))
        lines = out.splitlines()
        self.assertEqual(lines[:-1], ["pending %d: %s" % (4 + i, n)
                                      for i, n in enumerate(SQLITE_STEPS)])
        self.assertEqual(lines[-1], "schema version 3; `errand migrate` would bring it to %d"
                         % LATEST)
        self.assertEqual(self.version(), 3)

    def test_status_shows_both_versions(self):
        rc, out, err = self.migrate("--store", self.store, "--status")
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("schema version: 3\nthis errand: %d\npending: %d\n"
                      % (LATEST, len(SQLITE_STEPS)), out)
        self.assertEqual(self.version(), 3)

    def test_no_auto_migrate_refuses_then_migrate_applies_and_it_starts(self):
        rc, out, err = serve_refused(self.store, "--no-auto-migrate")
        self.assertEqual(rc, 2, err)
        self.assertIn("schema version 3 is older than this errand's (%d)" % LATEST, err)
        self.assertIn("errand migrate", err)
        self.assertEqual(self.version(), 3, "a refused start changes nothing")
        rc, out, err = self.migrate("--store", self.store)
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(out.splitlines(), ["applied %d: %s" % (4 + i, n)
                                            for i, n in enumerate(SQLITE_STEPS)] +
                         ["schema version %d (was 3)" % LATEST])
        self.assertEqual(self.version(), LATEST)
        rc, out, err = self.migrate("--store", self.store)
        self.assertEqual((rc, out), (0, "nothing to apply: schema version %d is this errand's\n"
                                     % LATEST))
        s = Server(tmpdir=self.tmp, args=["--no-auto-migrate"]).start()
        try:
            st, body, _ = s.get("/v1/jobs/j-wait")
            self.assertEqual((st, body["job"]["state"]), (200, "waiting"), body)
        finally:
            s.cleanup()

    def test_a_missing_file_is_version_0_and_is_not_created(self):
        path = os.path.join(self.tmp, "none.db")
        rc, out, err = self.migrate("--store", "sqlite:" + path, "--status")
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("schema version: 0\n", out)
        rc, out, err = serve_refused("sqlite:" + path, "--no-auto-migrate")
        self.assertEqual(rc, 2, err)
        self.assertIn("errand migrate", err)
        self.assertFalse(os.path.exists(path))
        rc, out, err = self.migrate("--store", "sqlite:" + path)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines()[-1], "schema version %d (was 0)" % LATEST)
        self.assertEqual(self.version(path), LATEST)

    def test_store_from_the_environment_and_from_serve_config_file(self):
        rc, out, _ = self.migrate("--status", env={"ERRAND_STORE": self.store})
        self.assertEqual(rc, 0)
        self.assertIn("schema version: 3\n", out)
        conf = os.path.join(self.tmp, "errand.conf")
        with open(conf, "w") as f:
            f.write("# errand serve's file\nlisten = 127.0.0.1:7999\nstore = %s\n"
                    "auto-migrate = false\n" % self.store)
        rc, out, err = self.migrate("--config", conf, "--dry-run")
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("pending 4:", out)
        # the same file refuses serve's start, by its auto-migrate = false
        rc, out, err = run_errand(["serve", "--config", conf, "--listen", "127.0.0.1:0"],
                                  timeout=20)
        self.assertEqual(rc, 2, err)
        self.assertIn("errand migrate", err)

    def test_a_newer_schema_is_an_error(self):
        con = sqlite3.connect(self.db)
        con.execute("UPDATE meta SET value = 99 WHERE key = 'schema_version'")
        con.commit()
        con.close()
        for extra in ([], ["--dry-run"], ["--status"]):
            rc, out, err = self.migrate("--store", self.store, *extra)
            self.assertEqual(rc, 1, (extra, out, err))
            self.assertIn("newer than this errand supports", err)

    def test_a_file_that_is_no_database_is_a_store_error(self):
        junk = os.path.join(self.tmp, "junk.db")
        with open(junk, "w") as f:
            f.write("not a database, " * 100)
        for extra in ([], ["--dry-run"], ["--status"]):
            rc, out, err = self.migrate("--store", "sqlite:" + junk, *extra)
            self.assertEqual((rc, out), (1, ""), (extra, err))
            self.assertIn("errand migrate:", err)
        rc, out, err = serve_refused("sqlite:" + junk, "--no-auto-migrate")
        self.assertEqual(rc, 1, err)
        with open(junk) as f:
            self.assertTrue(f.read().startswith("not a database"))

    def test_bad_input_is_refused_with_status_2_and_changes_nothing(self):
        conf = os.path.join(self.tmp, "bad.conf")
        cases = [
            (["migrate", "--dry-run=1"], "--dry-run takes no value"),
            (["migrate", "--status=yes"], "--status takes no value"),
            (["migrate", "--no-dry-run"], "unknown flag"),
            (["migrate", "--dry-run", "--status"], "exclude each other"),
            (["migrate", "extra"], "unexpected argument"),
            (["migrate", "--frobnicate"], "unknown flag"),
            (["migrate", "--store", "mysql://x/y"], "unknown store scheme"),
            (["migrate", "--store"], "needs a value"),
            (["migrate", "--config", conf], "unknown setting 'lisen'"),
            (["migrate", "--config", os.path.join(self.tmp, "nope.conf")], "cannot open"),
            (["serve", "--no-auto-migrate=1"], "--no-auto-migrate takes no value"),
            (["serve", "--auto-migrate=maybe"], "true or false"),
            (["serve", "--no-no-auto-migrate"], "unknown flag"),
        ]
        with open(conf, "w") as f:
            f.write("lisen = 127.0.0.1:1\n")
        for args, want in cases:
            a = args + ([] if "--store" in args or "--config" in args else
                        ["--store", self.store])
            rc, out, err = run_errand(a, timeout=20)
            self.assertEqual(rc, 2, (args, out, err))
            self.assertIn(want, err, args)
        rc, out, err = serve_refused(self.store, env={"ERRAND_AUTO_MIGRATE": "perhaps"})
        self.assertEqual(rc, 2, err)
        self.assertIn("true or false", err)
        for text, cmd, want in (("auto-migrate = perhaps\n", "serve", "true or false"),
                                ("dry-run = true\n", "migrate", "unknown setting 'dry-run'"),
                                ("status = true\n", "migrate", "unknown setting 'status'")):
            with open(conf, "w") as f:
                f.write(text)
            rc, out, err = run_errand([cmd, "--store", self.store, "--config", conf] +
                                      (["--listen", "127.0.0.1:0"] if cmd == "serve" else []),
                                      timeout=20)
            self.assertEqual(rc, 2, (text, out, err))
            self.assertIn(want, err, text)
        # --dry-run and --status are flags alone: no ERRAND_* variable sets them
        rc, out, err = self.migrate("--store", self.store, env={"ERRAND_DRY_RUN": "1",
                                                                "ERRAND_STATUS": "1"})
        self.assertEqual(rc, 0, err)
        self.assertIn("applied 4:", out)

    def test_auto_migrate_stays_the_default_and_can_be_spelled_out(self):
        for args in ([], ["--auto-migrate"], ["--auto-migrate=true"]):
            shutil.copyfile(FIXTURE, self.db)
            for suffix in ("-wal", "-shm"):
                if os.path.exists(self.db + suffix):
                    os.remove(self.db + suffix)
            s = Server(tmpdir=self.tmp, args=args).start()
            s.cleanup()
            self.assertEqual(self.version(), LATEST, args)


LAST_STEP = "jobs_queue_state by queue in byte order, which fetches cannot take"


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class PostgresMigrate(unittest.TestCase):
    """A schema one step behind this binary: the current schema with its
    last migration undone (jobs_queue_state keyed by the queue in the
    default collation again, its row taken out; queue_states2, which it
    replaced in place, stays, and the step replaces it again)."""

    def setUp(self):
        if not PG_URL or not psql_bin():
            self.fail("ERRAND_TEST_PG_URL and psql are needed (ERRAND_TEST_PG_SKIP=1 skips)")
        self.schema = "errand_mig" + os.urandom(4).hex()
        self.store = with_params(PG_URL, schema=self.schema)
        rc, out, err = run_errand(["migrate", "--store", self.store], timeout=30)
        self.assertEqual(rc, 0, err)
        self.latest = int(re.search(r"schema version (\d+)", out).group(1))
        # a server ran on it and wrote its limits
        Server(store=self.store, args=["--payload-max", "777777"]).start().cleanup()
        psql('DROP INDEX "{0}".jobs_queue_state; CREATE INDEX jobs_queue_state ON "{0}".jobs'
             ' (queue, state, seq); DELETE FROM "{0}".migrations WHERE '
             'version = {1}'.format(self.schema, self.latest))

    def tearDown(self):
        psql('DROP SCHEMA IF EXISTS "%s" CASCADE' % self.schema)

    def test_dry_run_refusal_apply_and_start(self):
        rc, out, err = run_errand(["migrate", "--store", self.store, "--dry-run"], timeout=30)
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(out.splitlines()[0],
                         "pending %d: %s" % (self.latest, LAST_STEP))
        rc, out, err = run_errand(["migrate", "--store", self.store, "--status"], timeout=30)
        self.assertIn("schema version: %d\nthis errand: %d\npending: 1\n"
                      % (self.latest - 1, self.latest), out)
        rc, out, err = serve_refused(self.store, "--no-auto-migrate")
        self.assertEqual(rc, 2, err)
        self.assertIn("older than this errand's", err)
        self.assertIn("errand migrate", err)
        self.assertEqual(psql('SELECT max(version) FROM "%s".migrations' % self.schema),
                         [[str(self.latest - 1)]])
        # errand migrate keeps the limits the servers wrote
        rc, out, err = run_errand(["migrate", "--store", self.store], timeout=30)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines(),
                         ["applied %d: %s" % (self.latest, LAST_STEP),
                          "schema version %d (was %d)" % (self.latest, self.latest - 1)])
        self.assertEqual(psql('SELECT payload_max FROM "%s".limits' % self.schema),
                         [["777777"]])
        self.assertEqual(psql("SELECT indexdef LIKE '%%(queue COLLATE \"C\", state, seq)'"
                              " FROM pg_indexes WHERE schemaname = '%s'"
                              " AND indexname = 'jobs_queue_state'" % self.schema), [["t"]])
        s = Server(store=self.store, args=["--no-auto-migrate"]).start()
        try:
            st, body, _ = s.enqueue("q", {"name": "n"})
            self.assertEqual(st, 201, body)
            st, body, _ = s.enqueue("q", {"name": "n"})
            self.assertEqual(st, 201, body)
            self.assertEqual(len(s.fetch_jobs("q", max=1)), 1)
        finally:
            s.cleanup()
        # the previous version's fetch function stays, signature and all,
        # for its servers during a rolling upgrade
        rows = psql("SELECT count(*) FROM \"{0}\".lease_jobs(ARRAY['q'], ARRAY[10::bigint],"
                    " ARRAY[30000::bigint], 'old', 10, 0, ARRAY['{1}'])"
                    .format(self.schema, "a" * 32))
        self.assertEqual(rows, [["1"]])

    def test_a_role_without_ddl_rights_starts_with_no_auto_migrate(self):
        run_errand(["migrate", "--store", self.store], timeout=30)
        role = "errand_rt_" + os.urandom(3).hex()
        psql('CREATE ROLE {r} LOGIN; GRANT USAGE ON SCHEMA "{s}" TO {r};'
             ' GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{s}" TO {r};'
             ' GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{s}" TO {r};'
             ' GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA "{s}" TO {r}'
             .format(r=role, s=self.schema))
        try:
            url = re.sub(r"^(postgres(?:ql)?://)[^@/]*@", r"\1%s@" % role, self.store)
            self.assertIn(role + "@", url)
            # the default runs the migration's DDL, which this role may not
            rc, out, err = serve_refused(url)
            self.assertEqual(rc, 1, err)
            s = Server(store=url, args=["--no-auto-migrate"]).start()
            try:
                st, body, _ = s.enqueue("q", {"name": "n"})
                self.assertEqual(st, 201, body)
            finally:
                s.cleanup()
        finally:
            psql('DROP OWNED BY {r}; DROP ROLE {r}'.format(r=role))


if __name__ == "__main__":
    unittest.main(verbosity=2)
