# SPDX-License-Identifier: MIT
#
# `errand chaos` at a small N, as CI runs it on every submission: with the
# idempotent handler, workers SIGKILLed and SIGTERMed and the server
# SIGKILLed mid-run, every job completes and every effect is applied once
# (exit 0, every verdict ok, a report and a plot written). With the unsafe
# handler the same chaos must make the checker fail and name a duplicate:
# the check is shown to be able to fail.

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import clean_env, errand_bin  # noqa: E402

JOBS = "1500"
BASE = ["--jobs", JOBS, "--workers", "3", "--concurrency", "4", "--worker-kills", "3",
        "--worker-terms", "1", "--server-kills", "1", "--timeout", "120s"]


class ChaosTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="errand-chaos-test-")

    def tearDown(self):
        if not os.environ.get("ERRAND_KEEP_TMP"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def chaos(self, name, args):
        report = os.path.join(self.tmp, name + ".json")
        p = subprocess.run([errand_bin(), "chaos"] + BASE + args +
                           ["--report", report, "--dir", os.path.join(self.tmp, name)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=clean_env({"TMPDIR": self.tmp}), timeout=200)
        rep = None
        if os.path.exists(report):
            with open(report) as f:
                rep = json.load(f)
        return p, rep, os.path.join(self.tmp, name + ".svg")

    def test_safe_handler_passes_with_kills(self):
        p, rep, svg = self.chaos("safe", ["--seed", "11"])
        out = p.stdout + p.stderr
        self.assertEqual(p.returncode, 0, out)
        self.assertIn("PASS", p.stdout)
        self.assertIsNotNone(rep, out)
        self.assertTrue(rep["ok"])
        self.assertTrue(all(v["ok"] for v in rep["verdicts"]), rep["verdicts"])
        t = rep["totals"]
        self.assertEqual(t["acknowledged"], int(JOBS))
        self.assertEqual(t["completed"], int(JOBS))
        self.assertEqual(t["effects"], int(JOBS))
        self.assertGreaterEqual(t["executions"], t["effects"])
        self.assertEqual(t["duplicate_effects"], 0)
        self.assertEqual(t["worker_sigkills"], 3)
        self.assertEqual(t["server_sigkills"], 1)
        kinds = [e["type"] for e in rep["events"]]
        self.assertIn("server_up", kinds)
        self.assertTrue(rep["samples"], "no samples")
        with open(svg) as f:
            text = f.read()
        self.assertTrue(text.startswith("<svg"), text[:100])
        self.assertIn("server SIGKILL", text)

    def test_unsafe_handler_fails_naming_a_duplicate(self):
        # The unsafe handler waits 20 ms between its effect and the ack, so a
        # SIGKILL lands there and the job's redelivery applies it again.
        # Kills are random: up to three seeds, but one of them must fail.
        tries = []
        for seed in ("5", "6", "8"):
            p, rep, _ = self.chaos("unsafe-" + seed, ["--seed", seed, "--handler", "unsafe",
                                                      "--worker-kills", "4"])
            tries.append((seed, p.returncode, p.stdout[-600:]))
            if p.returncode == 1 and "DUPLICATE EFFECT: chaos-" in p.stderr:
                self.assertIn("FAIL", p.stdout)
                self.assertIsNotNone(rep)
                self.assertFalse(rep["ok"])
                eff = [v for v in rep["verdicts"] if v["name"] == "effects_once"][0]
                self.assertFalse(eff["ok"])
                self.assertGreater(rep["totals"]["duplicate_effects"], 0)
                self.assertTrue(rep["duplicates"][0]["job_id"].startswith("chaos-"))
                # every other promise held: only the effect check failed
                others = [v for v in rep["verdicts"] if v["name"] != "effects_once"]
                self.assertTrue(all(v["ok"] for v in others), others)
                return
        self.fail("the unsafe handler never produced a duplicate: %r" % tries)

    def test_bad_flags_are_refused(self):
        p = subprocess.run([errand_bin(), "chaos", "--server", "http://127.0.0.1:1",
                            "--server-kills", "1"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=clean_env(), timeout=20)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--server-kills", p.stderr)

    def test_help_lists_flags_only(self):
        """errand chaos reads no ERRAND_* variables, so --help lists none."""
        p = subprocess.run([errand_bin(), "chaos", "--help"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=clean_env(), timeout=20)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("--jobs", p.stdout)
        self.assertNotIn("ERRAND_JOBS", p.stdout)
        self.assertNotIn("environment variable", p.stdout)


if __name__ == "__main__":
    unittest.main()
