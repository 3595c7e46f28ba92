# SPDX-License-Identifier: MIT
#
# `errand work` outcomes against a real server: each exit status and fd-3
# control line gives the documented outcome (0 complete with JSON stdout as
# the result, 75 and other codes transient, 65 permanent, retry_later and
# throttled from fd 3), the job facts reach the command's environment and
# stdin, a hanging command is killed at its timeout, bad input (garbage on
# fd 3, a command that does not exist, a payload the command refuses) gives a
# clear outcome with the job kept, and bad timeout/grace/lease settings are
# refused with a message naming the wrong number.

import json
import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, parse_time, run_errand, wait_until  # noqa: E402
from worker_util import Worker, write_script  # noqa: E402

YEAR_MS = 366 * 24 * 3600 * 1000

# The command: its behaviour is chosen by the payload's "do" field.
SCRIPT = r'''
payload=$(cat)
case "$payload" in
  *'"do":"env"'*)
    printf '{"id":"%s","name":"%s","queue":"%s","attempt":"%s","key":"%s","trace":"%s","token":"%s","stdin":%s}\n' \
      "$ERRAND_JOB_ID" "$ERRAND_JOB_NAME" "$ERRAND_QUEUE" "$ERRAND_ATTEMPT" \
      "$ERRAND_IDEMPOTENCY_KEY" "$ERRAND_TRACE_ID" "${ERRAND_TOKEN-unset}" "$payload"; exit 0;;
  *'"do":"text"'*) echo "plain text, not JSON"; exit 0;;
  *'"do":"tempfail"'*) exit 75;;
  *'"do":"dataerr"'*) exit 65;;
  *'"do":"other"'*) exit 3;;
  *'"do":"later"'*) echo '{"errand": {"retry_later_ms": 600000}}' >&3; exit 0;;
  *'"do":"throttle"'*) echo '{"errand": {"throttled_ms": 600000}}' >&3; exit 1;;
  *'"do":"later-forever"'*) echo '{"errand": {"retry_later_ms": 99999999999999}}' >&3; exit 0;;
  *'"do":"throttle-forever"'*) echo '{"errand": {"throttled_ms": 99999999999999}}' >&3; exit 1;;
  *'"do":"garbage"'*) echo 'this is not json {' >&3; exit 0;;
  *'"do":"garbage-fail"'*) echo '{"errand": {"retry_later_ms": "soon"}}' >&3; exit 75;;
  *'"do":"http503"'*) echo '{"errand": {"http_status": 503, "retry_after": "120"}}' >&3; exit 1;;
  *'"do":"http500"'*) echo '{"errand": {"http_status": 500}}' >&3; exit 0;;
  *'"do":"http404"'*) echo '{"errand": {"http_status": 404, "retry_after": "5"}}' >&3; exit 0;;
  *'"do":"http201"'*) echo '{"errand": {"http_status": 201}}' >&3; echo '{"made": 1}'; exit 1;;
  *'"do":"http-bad"'*) echo '{"errand": {"http_status": "503"}}' >&3; exit 65;;
  *'"do":"hang"'*) trap '' TERM; echo $$ > "$PIDFILE"; while :; do sleep 1; done;;
  *'"do":"signal"'*) kill -9 $$;;
  *'"do":"big"'*) printf '"'; head -c 600000 /dev/zero | tr '\0' x; printf '"'; exit 0;;
  *'"email"'*) echo '{"sent": true}'; exit 0;;
  *) echo "payload has no email field" >&2; exit 65;;
esac
'''


def process_gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split()[2] == "Z"
    except OSError:
        return True


class WorkOutcomeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=["--maintenance-interval", "50ms"]).start()
        cls.tmp = tempfile.mkdtemp(prefix="errand-work-")
        cls.pidfile = os.path.join(cls.tmp, "hang.pid")
        cls.script = write_script(cls.tmp, "job.sh", SCRIPT)
        # "thr" and "thr-big" only for throttled jobs: a throttled queue pauses.
        cls.w = Worker.work(cls.s, ["out", "thr", "thr-big"], [cls.script], "--concurrency", "4",
                            "--timeout", "1s", "--grace", "2s", "--lease", "5s",
                            "--kill-after", "300ms", "--poll-wait", "200ms",
                            env={"PIDFILE": cls.pidfile, "ERRAND_TOKEN": "a-secret-token-x"})

    @classmethod
    def tearDownClass(cls):
        rc = cls.w.stop()
        cls.s.cleanup()
        assert rc == 0, "errand work exited %r:\n%s" % (rc, cls.w.text())

    def run_job(self, job_id, payload, state, queue="out", **extra):
        body = {"name": "t", "id": job_id, "payload": payload, "max_attempts": 1}
        body.update(extra)
        st, b, _ = self.s.enqueue(queue, body)
        self.assertEqual(st, 201, b)
        ok = wait_until(lambda: self.s.job(job_id)["state"] == state, timeout=10)
        job = self.s.job(job_id)
        self.assertTrue(ok, "job %s is %s, not %s\nworker log:\n%s"
                        % (job_id, job["state"], state, self.w.text()))
        return job

    def test_exit_0_completes_with_json_stdout_as_result(self):
        j = self.run_job("ok-1", {"email": "a@example.com"}, "completed")
        self.assertEqual(j["result"], {"sent": True})

    def test_exit_0_with_text_stdout_completes_without_result(self):
        j = self.run_job("text-1", {"do": "text"}, "completed")
        self.assertIsNone(j["result"])

    def test_job_facts_in_environment_and_payload_on_stdin(self):
        j = self.run_job("env-1", {"do": "env", "n": 7}, "completed",
                         trace_id="trace-abc", idempotency_key="key-42")
        r = j["result"]
        self.assertEqual((r["id"], r["name"], r["queue"], r["attempt"], r["key"], r["trace"]),
                         ("env-1", "t", "out", "1", "key-42", "trace-abc"))
        self.assertEqual(r["stdin"], {"do": "env", "n": 7})
        self.assertEqual(r["token"], "unset", "the server token must not leak to commands")

    def test_exit_75_is_transient(self):
        j = self.run_job("tf-1", {"do": "tempfail"}, "dead")
        self.assertEqual(j["last_error"]["class"], "transient")
        self.assertIn("75", j["last_error"]["message"])

    def test_exit_65_is_permanent(self):
        j = self.run_job("de-1", {"do": "dataerr"}, "dead", max_attempts=5)
        self.assertEqual(j["last_error"]["class"], "permanent")
        self.assertEqual(j["attempts"], 1, "a permanent failure is not retried")

    def test_other_exit_status_is_transient(self):
        j = self.run_job("ot-1", {"do": "other"}, "dead")
        self.assertEqual(j["last_error"]["class"], "transient")
        self.assertIn("status 3", j["last_error"]["message"])

    def test_killed_by_signal_is_transient(self):
        j = self.run_job("sig-1", {"do": "signal"}, "dead")
        self.assertEqual(j["last_error"]["class"], "transient")
        self.assertIn("signal 9", j["last_error"]["message"])

    def test_fd3_retry_later(self):
        j = self.run_job("rl-1", {"do": "later"}, "scheduled")
        self.assertEqual(j["last_error"]["class"], "retry_later")
        self.assertEqual(j["last_error"]["delay_ms"], 600000)
        self.assertEqual(j["attempts"], 0, "retry_later gives the attempt back")

    def test_fd3_throttled_wins_over_exit_status(self):
        j = self.run_job("th-1", {"do": "throttle"}, "scheduled", queue="thr")
        self.assertEqual(j["last_error"]["class"], "throttled")
        self.assertEqual(j["last_error"]["retry_after_ms"], 600000)

    def test_fd3_delays_past_the_servers_bound_are_cut_to_it(self):
        # 366 days is the longest the server takes; more used to be refused
        # and the job ran again at once
        t0 = time.time() * 1000
        j = self.run_job("rl-big", {"do": "later-forever"}, "scheduled")
        self.assertEqual((j["last_error"]["class"], j["last_error"]["delay_ms"]),
                         ("retry_later", YEAR_MS))
        self.assertEqual(j["started"], 1, "not run again")
        self.assertGreaterEqual(parse_time(j["run_at"]), t0 + YEAR_MS - 1000)
        j = self.run_job("th-big", {"do": "throttle-forever"}, "scheduled", queue="thr-big")
        self.assertEqual((j["last_error"]["class"], j["last_error"]["retry_after_ms"]),
                         ("throttled", YEAR_MS))
        self.assertEqual(j["started"], 1)
        # the queue's throttle_max_ms (1 h by default) bounds the pause
        self.assertLessEqual(parse_time(j["run_at"]), time.time() * 1000 + 3600000 + 1000)
        self.assertIsNotNone(self.s.queue_info("thr-big")["throttled_until"])

    def test_fd3_http_status_goes_through_the_response_classifier(self):
        j = self.run_job("h503", {"do": "http503"}, "scheduled")
        self.assertEqual((j["last_error"]["class"], j["last_error"]["delay_ms"]),
                         ("retry_later", 120000))
        self.assertEqual(j["attempts"], 0)
        j = self.run_job("h500", {"do": "http500"}, "dead")
        self.assertEqual(j["last_error"]["class"], "transient")
        self.assertIn("HTTP status 500", j["last_error"]["message"])
        j = self.run_job("h404", {"do": "http404"}, "dead", max_attempts=5)
        self.assertEqual((j["last_error"]["class"], j["attempts"]), ("permanent", 1))
        self.assertIn("HTTP status 404", j["last_error"]["message"])
        j = self.run_job("h201", {"do": "http201"}, "completed")
        self.assertEqual(j["result"], {"made": 1}, "a 2xx completes, whatever the exit status")
        j = self.run_job("hbad", {"do": "http-bad"}, "dead", max_attempts=5)
        self.assertEqual(j["last_error"]["class"], "permanent", "a string status is ignored")
        self.assertIn("status 65", j["last_error"]["message"])

    def test_fd3_garbage_is_ignored_and_exit_status_used(self):
        j = self.run_job("gb-1", {"do": "garbage"}, "completed")
        self.assertIsNone(j["last_error"])
        warned = [l for l in self.w.logs() if l.get("job_id") == "gb-1" and "fd 3" in l.get("msg", "")]
        self.assertTrue(warned, self.w.text())
        j = self.run_job("gb-2", {"do": "garbage-fail"}, "dead")
        self.assertEqual(j["last_error"]["class"], "transient")

    def test_payload_the_command_refuses_is_permanent_and_kept(self):
        j = self.run_job("bad-payload-1", {"no_email": True}, "dead", max_attempts=3)
        self.assertEqual(j["last_error"]["class"], "permanent")
        self.assertEqual(self.s.job("bad-payload-1")["payload"], {"no_email": True})

    def test_result_over_the_server_limit_is_a_clear_dead_letter(self):
        j = self.run_job("big-1", {"do": "big"}, "dead")
        self.assertEqual(j["last_error"]["class"], "permanent")
        self.assertIn("result was refused", j["last_error"]["message"])

    def test_timeout_kills_a_hanging_command(self):
        t0 = time.monotonic()
        j = self.run_job("hang-1", {"do": "hang"}, "dead")
        self.assertLess(time.monotonic() - t0, 6)
        self.assertEqual(j["last_error"]["class"], "transient")
        self.assertIn("timed out", j["last_error"]["message"])
        with open(self.pidfile) as f:
            pid = int(f.read())
        gone = wait_until(lambda: process_gone(pid), timeout=3)
        self.assertTrue(gone, "the command survived its timeout (it ignores SIGTERM: SIGKILL expected)")


class WorkCommandLineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server().start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def url(self):
        return "http://%s:%d" % (self.s.host, self.s.port)

    def test_command_not_found_is_permanent_with_clear_message(self):
        w = Worker.work(self.s, "nf", ["/nonexistent/errand-test-cmd"], "--poll-wait", "200ms")
        try:
            self.s.enqueue("nf", {"name": "t", "id": "nf-1", "max_attempts": 5})
            ok = wait_until(lambda: self.s.job("nf-1")["state"] == "dead", timeout=10)
            j = self.s.job("nf-1")
            self.assertTrue(ok, "%r\n%s" % (j, w.text()))
            self.assertEqual(j["last_error"]["class"], "permanent")
            self.assertIn("command not found", j["last_error"]["message"])
        finally:
            self.assertEqual(w.stop(), 0, w.text())

    def test_shell_example_worker(self):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                              "examples", "shell_worker.sh")
        w = Worker.work(self.s, "emails", [script], "--concurrency", "2", "--poll-wait", "200ms")
        try:
            self.s.enqueue("emails", {"name": "send-welcome", "id": "ex-1",
                                      "payload": {"to": "ada@example.com"}})
            self.s.enqueue("emails", {"name": "send-welcome", "id": "ex-2", "payload": {}})
            ok = wait_until(lambda: (self.s.job("ex-1")["state"], self.s.job("ex-2")["state"])
                            == ("completed", "dead"), timeout=10)
            self.assertTrue(ok, w.text())
        finally:
            self.assertEqual(w.stop(), 0, w.text())
        self.assertEqual(self.s.job("ex-1")["result"], {"sent_to": "ada@example.com", "attempt": 1})
        self.assertEqual(self.s.job("ex-2")["last_error"]["class"], "permanent")

    def check_refused(self, args, words):
        rc, out, err = run_errand(["work", "--server", self.url(), "--queue", "q"] + args
                                  + ["--", "true"], timeout=10)
        self.assertEqual(rc, 2, err)
        for w in words:
            self.assertIn(w, err)

    def test_timeout_not_below_grace_is_refused(self):
        self.check_refused(["--timeout", "30s", "--grace", "20s", "--lease", "60s"],
                           ["timeout (30000 ms)", "grace (20000 ms)", "timeout < grace < lease"])

    def test_grace_not_below_lease_is_refused(self):
        self.check_refused(["--timeout", "10s", "--grace", "60s", "--lease", "60s"],
                           ["grace (60000 ms)", "lease (60000 ms)"])

    def test_default_grace_with_long_timeout_is_refused(self):
        self.check_refused(["--timeout", "5m"], ["timeout (300000 ms)", "grace (45000 ms)"])

    def test_missing_command_and_queue_are_usage_errors(self):
        rc, _, err = run_errand(["work", "--queue", "q"], timeout=10)
        self.assertEqual(rc, 2)
        self.assertIn("after '--'", err)
        rc, _, err = run_errand(["work", "--", "true"], timeout=10)
        self.assertEqual(rc, 2)
        self.assertIn("--queue", err)

    def test_bad_duration_is_refused(self):
        rc, _, err = run_errand(["work", "--queue", "q", "--timeout", "soon", "--", "true"],
                                timeout=10)
        self.assertEqual(rc, 2)
        self.assertIn("timeout", err)


if __name__ == "__main__":
    unittest.main()
