# SPDX-License-Identifier: MIT
#
# One limit for both enqueue paths on PostgreSQL: a server started with
# --payload-max 1m writes its limits into the schema, so HTTP and the
# application's errand.enqueue() both accept a 600 KB payload and both
# refuse a 1.1 MB one, naming the payload. Also: errand.enqueue() refuses
# "run_at":"tomorrow" naming run_at (it used to cast it), and its errors name
# the schema it lives in. And HTTP enqueues, single and bulk, take their
# queue's job defaults. Needs ERRAND_TEST_PG_URL (scripts/test starts one).

import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, error_of  # noqa: E402
from test_pg_multinode import PG_URL, psql, psql_bin, with_params  # noqa: E402


def psql_stdin(sql):
    """Runs sql (fed on stdin: large statements do not fit in argv). Returns
    (returncode, stdout, stderr)."""
    out = subprocess.run([psql_bin(), PG_URL, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                          "-v", "VERBOSITY=verbose", "-f", "-"], input=sql,
                         capture_output=True, text=True, timeout=60)
    return out.returncode, out.stdout, out.stderr


@unittest.skipUnless(PG_URL, "ERRAND_TEST_PG_URL is not set")
class PgEnqueueLimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.schema = "lim_%d_%d" % (os.getpid(), int(time.time()) % 100000)
        cls.s = Server(args=["--payload-max", "1m", "--max-body", "4m"],
                       store=with_params(PG_URL, schema=cls.schema)).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()
        psql('DROP SCHEMA IF EXISTS "%s" CASCADE' % cls.schema)

    def sql_enqueue(self, payload_bytes, options="{}"):
        text = "x" * (payload_bytes - 2)  # a JSON string: the text and its quotes
        return psql_stdin("SELECT \"%s\".enqueue('big', 'n', to_jsonb('%s'::text), '%s');\n"
                          % (self.schema, text, options))

    def http_enqueue(self, payload_bytes):
        return self.s.request("POST", "/v1/queues/big/jobs",
                              body={"name": "n", "payload": "x" * (payload_bytes - 2)})

    def test_600_kb_is_accepted_on_both_paths(self):
        st, body, _ = self.http_enqueue(600 * 1024)
        self.assertEqual(st, 201, body)
        rc, out, err = self.sql_enqueue(600 * 1024)
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(out.strip()), 26, out)  # the generated id

    def test_1_1_mb_is_refused_on_both_paths_naming_the_payload(self):
        size = 1100 * 1024
        st, body, _ = self.http_enqueue(size)
        self.assertEqual(st, 413, body)
        self.assertEqual(error_of(body).get("field"), "payload")
        rc, out, err = self.sql_enqueue(size)
        self.assertNotEqual(rc, 0)
        self.assertIn("payload is %d bytes; the limit is 1048576 bytes" % size, err)
        self.assertIn("COLUMN NAME:  payload", err)

    def test_run_at_tomorrow_is_refused_naming_run_at(self):
        rc, out, err = psql_stdin("SELECT \"%s\".enqueue('q', 'n', '{}', '{\"run_at\":\"tomorrow\"}');\n"
                                  % self.schema)
        self.assertNotEqual(rc, 0)
        self.assertIn("%s.enqueue: run_at must be an RFC 3339 time" % self.schema, err)
        self.assertIn("COLUMN NAME:  run_at", err)
        st, body, _ = self.s.request("POST", "/v1/queues/q/jobs",
                                     body={"name": "n", "run_at": "tomorrow"})
        self.assertEqual((st, error_of(body).get("field")), (400, "run_at"))

    def test_job_ids_follow_cores_rule_on_both_paths(self):
        for jid, why in [("x-redrive-3", "may not end in -redrive- and a number"),
                         ("a" * 187, "must be at most 186 bytes")]:
            with self.subTest(jid=jid[:20]):
                rc, out, err = psql_stdin(
                    "SELECT \"%s\".enqueue('q', 'n', '{}', '{\"id\":\"%s\"}');\n"
                    % (self.schema, jid))
                self.assertNotEqual(rc, 0)
                self.assertIn(why, err)
                self.assertIn("COLUMN NAME:  id", err)
                st, body, _ = self.s.request("POST", "/v1/queues/q/jobs",
                                             body={"name": "n", "id": jid})
                self.assertEqual((st, error_of(body).get("field")), (400, "id"))
                self.assertIn(why, error_of(body).get("message"))
        rc, out, err = psql_stdin("SELECT \"%s\".enqueue('q', 'n', '{}', '{\"id\":\"%s\", "
                                  "\"idempotency_key\":\"k-redrive-1\"}');\n"
                                  % (self.schema, "a" * 186))
        self.assertEqual(rc, 0, err)

    def test_http_enqueues_take_their_queues_defaults(self):
        for q, attempts in (("dq1", 4), ("dq2", 9)):
            st, b, _ = self.s.request("PUT", "/v1/queues/" + q,
                                      body={"defaults": {"max_attempts": attempts}})
            self.assertEqual(st, 200, b)
        st, b, _ = self.s.request("POST", "/v1/queues/dq1/jobs", body={"name": "n"})
        self.assertEqual(st, 201, b)
        self.assertEqual(b["job"]["max_attempts"], 4)
        st, b, _ = self.s.request("POST", "/v1/queues/dq2/jobs",
                                  body={"jobs": [{"name": "n"}, {"name": "n", "max_attempts": 2}]})
        self.assertEqual(st, 201, b)
        for jid, want in zip(b["ids"], (9, 2)):  # the job's own option wins
            st, j, _ = self.s.request("GET", "/v1/jobs/" + jid)
            self.assertEqual(st, 200, j)
            self.assertEqual(j["job"]["max_attempts"], want)

    def test_the_limits_row_is_the_servers(self):
        rows = psql('SELECT payload_max, written_by FROM "%s".limits' % self.schema)
        self.assertEqual(rows[0][0], str(1024 * 1024))
        self.assertTrue(rows[0][1].startswith("errand "), rows)


if __name__ == "__main__":
    unittest.main(verbosity=2)
