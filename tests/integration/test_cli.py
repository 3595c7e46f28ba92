# SPDX-License-Identifier: MIT
#
# The client commands (errand enqueue, job get, queues, dlq list/redrive)
# against a real server: what they print, what they store, and their exit
# statuses (0 ok, 1 refused by the server, 2 usage, 3 unreachable), with
# --server/--token and the ERRAND_SERVER/ERRAND_TOKEN fallbacks.

import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Server, clean_env, errand_bin, free_port, now_ms, parse_time,  # noqa: E402
                     run_errand)

ADMIN = "admin-token-cli-0123456789"
PRODUCER = "producer-token-cli-012345"


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server().start()
        cls.url = "http://127.0.0.1:%d" % cls.s.port

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def cli(self, *args, env=None):
        e = {"ERRAND_SERVER": self.url}
        e.update(env or {})
        rc, out, err = run_errand(list(args), env=e)
        self.assertIsNotNone(rc, "errand %s did not finish" % " ".join(args))
        return rc, out, err

    def make_dead(self, queue, job_id, message):
        st, b, _ = self.s.enqueue(queue, {"name": "d", "id": job_id})
        self.assertEqual(st, 201, b)
        jobs = self.s.fetch_jobs(queue)
        self.assertEqual([j["id"] for j in jobs], [job_id])
        st, b, _ = self.s.fail(job_id, jobs[0]["lease_token"],
                               {"class": "permanent", "message": message})
        self.assertEqual((st, b.get("state")), (200, "dead"), b)

    # ---- enqueue ----

    def test_enqueue_prints_the_stored_job_and_exits_0(self):
        rc, out, err = self.cli("enqueue", "cli-q", "send-mail", '{"to":"a@example.com"}',
                                "--id", "cli-e1")
        self.assertEqual(rc, 0, err)
        job = json.loads(out)
        self.assertEqual((job["id"], job["queue"], job["name"], job["state"]),
                         ("cli-e1", "cli-q", "send-mail", "waiting"))
        self.assertEqual(job["payload"], {"to": "a@example.com"})
        self.assertEqual(self.s.job("cli-e1")["payload"], {"to": "a@example.com"})

    def test_enqueue_flags_become_job_fields(self):
        before = now_ms()
        rc, out, err = self.cli("enqueue", "cli-q", "report", "--id", "cli-e2", "--delay", "1h",
                                "--priority", "7", "--max-attempts", "3", "--timeout", "5s",
                                "--group", "tenant:9", "--idempotency-key", "k-9",
                                "--trace-id", "trace-9")
        self.assertEqual(rc, 0, err)
        job = self.s.job("cli-e2")
        self.assertEqual(job["state"], "scheduled")
        self.assertGreaterEqual(parse_time(job["run_at"]), before + 3600 * 1000 - 1000)
        self.assertEqual((job["priority"], job["max_attempts"], job["timeout_ms"]), (7, 3, 5000))
        self.assertEqual((job["group"], job["idempotency_key"], job["trace_id"]),
                         ("tenant:9", "k-9", "trace-9"))
        self.assertEqual(job["payload"], {})

    def test_enqueue_reads_the_payload_from_stdin_with_dash(self):
        p = subprocess.run([errand_bin(), "enqueue", "cli-q", "n", "-", "--id", "cli-stdin"],
                           input='[1, "two"]', capture_output=True, text=True, timeout=10,
                           env=clean_env({"ERRAND_SERVER": self.url}))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.s.job("cli-stdin")["payload"], [1, "two"])

    def test_enqueue_of_an_existing_id_says_duplicate_and_changes_nothing(self):
        rc, _, err = self.cli("enqueue", "cli-q", "a", '{"v":1}', "--id", "cli-dup")
        self.assertEqual(rc, 0, err)
        rc, out, err = self.cli("enqueue", "cli-q", "a", '{"v":2}', "--id", "cli-dup")
        self.assertEqual(rc, 0, err)
        self.assertIn("duplicate", err)
        self.assertEqual(json.loads(out)["payload"], {"v": 1})
        self.assertEqual(self.s.job("cli-dup")["payload"], {"v": 1})

    def test_enqueue_refused_by_the_server_exits_1_naming_the_field_and_stores_nothing(self):
        before = self.s.snapshot()
        rc, out, err = self.cli("enqueue", "cli-q", "a", "--id", "cli-bad", "--priority", "5000")
        self.assertEqual(rc, 1, err)
        self.assertIn("priority", err)
        self.assertIn("invalid_argument", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertEqual(out, "")
        self.assertEqual(self.s.snapshot(), before)

    def test_enqueue_usage_errors_exit_2_and_send_nothing(self):
        before = self.s.snapshot()
        cases = [
            (["enqueue", "cli-q"], "NAME"),
            (["enqueue", "cli-q", "a", "{not json"], "payload"),
            (["enqueue", "cli-q", "a", "--delay", "soon"], "--delay"),
            (["enqueue", "cli-q", "a", "--priority", "high"], "--priority"),
            (["enqueue", "cli-q", "a", "--delay", "1s", "--run-at", "2030-01-01T00:00:00Z"],
             "--run-at"),
            (["enqueue", "cli-q", "a", "--frobnicate", "1"], "--frobnicate"),
            (["enqueue", "cli-q", "a", "--id"], "--id"),
        ]
        for args, word in cases:
            rc, out, err = self.cli(*args)
            self.assertEqual(rc, 2, "%r: %s" % (args, err))
            self.assertIn(word, err, args)
        self.assertEqual(self.s.snapshot(), before)

    def test_unreachable_server_exits_3(self):
        dead = "http://127.0.0.1:%d" % free_port()
        for args in (["enqueue", "q", "n"], ["job", "get", "x"], ["queues"], ["dlq", "list"],
                     ["dlq", "redrive", "x"]):
            rc, out, err = self.cli(*args, "--server", dead)
            self.assertEqual(rc, 3, "%r: %s" % (args, err))
            self.assertIn("cannot reach", err)

    def test_server_flag_beats_errand_server_variable(self):
        rc, out, err = self.cli("queues", "--server", self.url,
                                env={"ERRAND_SERVER": "http://127.0.0.1:%d" % free_port()})
        self.assertEqual(rc, 0, err)
        rc, out, err = self.cli("queues", env={"ERRAND_SERVER": "http://127.0.0.1:%d"
                                               % free_port()})
        self.assertEqual(rc, 3, err)

    # ---- job get ----

    def test_job_get_prints_the_job_and_a_missing_one_exits_1(self):
        self.cli("enqueue", "cli-q", "a", "--id", "cli-get")
        rc, out, err = self.cli("job", "get", "cli-get")
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out)["id"], "cli-get")
        rc, out, err = self.cli("job", "get", "cli-no-such-job")
        self.assertEqual(rc, 1, err)
        self.assertIn("not_found", err)
        rc, out, err = self.cli("job", "get")
        self.assertEqual(rc, 2, err)

    def test_job_get_handles_ids_with_url_characters(self):
        jid = "cli?odd#id%2F&x=y"
        rc, out, err = self.cli("enqueue", "cli-q", "a", "--id", jid)
        self.assertEqual(rc, 0, err)
        rc, out, err = self.cli("job", "get", jid)
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out)["id"], jid)

    # ---- queues ----

    def test_queues_table_shows_counts_and_json_prints_the_reply(self):
        for i in range(2):
            self.cli("enqueue", "cli-counts", "a", "--id", "cli-c%d" % i)
        self.cli("enqueue", "cli-counts", "a", "--id", "cli-c-later", "--delay", "1h")
        rc, out, err = self.cli("queues")
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[0].split()[:6],
                         ["QUEUE", "SCHEDULED", "WAITING", "ACTIVE", "COMPLETED", "DEAD"])
        row = [ln.split() for ln in lines if ln.split()[0] == "cli-counts"]
        self.assertEqual(len(row), 1, out)
        self.assertEqual(row[0][1:7], ["1", "2", "0", "0", "0", "no"])
        rc, out, err = self.cli("queues", "--json")
        self.assertEqual(rc, 0, err)
        q = [q for q in json.loads(out)["queues"] if q["name"] == "cli-counts"][0]
        self.assertEqual((q["counts"]["waiting"], q["counts"]["scheduled"]), (2, 1))

    def test_queues_table_shows_a_throttled_queue(self):
        self.cli("enqueue", "cli-thr", "a", "--id", "cli-thr1")
        jobs = self.s.fetch_jobs("cli-thr")
        st, b, _ = self.s.fail("cli-thr1", jobs[0]["lease_token"],
                               {"class": "throttled", "retry_after_ms": 600000})
        self.assertEqual(st, 200, b)
        rc, out, err = self.cli("queues")
        self.assertEqual(rc, 0, err)
        row = [ln.split() for ln in out.splitlines() if ln.split()[0] == "cli-thr"]
        self.assertEqual(row[0][6], "throttled", out)
        st, b, _ = self.s.post("/v1/queues/cli-thr/resume")
        self.assertEqual(st, 200, b)
        rc, out, err = self.cli("queues")
        row = [ln.split() for ln in out.splitlines() if ln.split()[0] == "cli-thr"]
        self.assertEqual(row[0][6], "no", out)

    # ---- dead letters ----

    def test_dlq_list_shows_dead_jobs_and_redrive_makes_a_new_job(self):
        self.make_dead("cli-dead", "cli-d1", "card declined")
        rc, out, err = self.cli("dlq", "list", "--queue", "cli-dead")
        self.assertEqual(rc, 0, err)
        self.assertIn("cli-d1", out)
        self.assertIn("permanent: card declined", out)
        rc, out, err = self.cli("dlq", "list", "--queue", "cli-dead", "--json", "--limit", "5")
        self.assertEqual(rc, 0, err)
        self.assertEqual([j["id"] for j in json.loads(out)["jobs"]], ["cli-d1"])

        rc, out, err = self.cli("dlq", "redrive", "cli-d1")
        self.assertEqual(rc, 0, err)
        new = json.loads(out)
        self.assertEqual((new["id"], new["state"]), ("cli-d1-redrive-1", "waiting"))
        self.assertEqual(self.s.job("cli-d1-redrive-1")["queue"], "cli-dead")

        rc, out, err = self.cli("dlq", "redrive", "cli-not-dead")
        self.assertEqual(rc, 1, err)
        self.assertIn("not_found", err)

    def test_dlq_usage_errors_exit_2(self):
        for args in (["dlq"], ["dlq", "list", "--limit", "0"], ["dlq", "redrive"],
                     ["dlq", "purge"]):
            rc, out, err = self.cli(*args)
            self.assertEqual(rc, 2, "%r: %s" % (args, err))


class CliTokenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=["--token", "admin:" + ADMIN, "--token", "producer:" + PRODUCER],
                       token=ADMIN).start()
        cls.url = "http://127.0.0.1:%d" % cls.s.port

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def cli(self, *args, env=None):
        rc, out, err = run_errand(list(args) + ["--server", self.url], env=env)
        self.assertIsNotNone(rc)
        return rc, out, err

    def test_missing_or_unknown_token_exits_1_with_a_hint(self):
        rc, out, err = self.cli("queues")
        self.assertEqual(rc, 1, err)
        self.assertIn("unauthenticated", err)
        self.assertIn("ERRAND_TOKEN", err)
        rc, out, err = self.cli("queues", "--token", "not-a-real-token-at-all")
        self.assertEqual(rc, 1, err)

    def test_token_from_flag_or_environment_is_sent(self):
        rc, out, err = self.cli("enqueue", "tok-q", "a", "--id", "tok-1", "--token", PRODUCER)
        self.assertEqual(rc, 0, err)
        rc, out, err = self.cli("job", "get", "tok-1", env={"ERRAND_TOKEN": PRODUCER})
        self.assertEqual(rc, 0, err)

    def test_redrive_with_a_producer_token_is_permission_denied(self):
        rc, out, err = self.cli("dlq", "redrive", "whatever", "--token", PRODUCER)
        self.assertEqual(rc, 1, err)
        self.assertIn("permission_denied", err)


if __name__ == "__main__":
    unittest.main()
