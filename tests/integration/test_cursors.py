# SPDX-License-Identifier: MIT
#
# Cursors (GET/PUT /v1/cursors/{name}) against a real server: the first
# write with expected null, compare-and-set against the previous value
# (409 with the current value, nothing changed), unconditional writes, bad
# input; and examples/rollup/rollup.sh, which catches up after downtime and
# is harmless to run twice.

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import REPO_ROOT, Server, clean_env, error_of  # noqa: E402

ROLLUP = os.path.join(REPO_ROOT, "examples", "rollup", "rollup.sh")


class CursorsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server().start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def put(self, name, body, **kw):
        return self.s.request("PUT", "/v1/cursors/" + name, body=body, **kw)

    def rows(self):
        return sorted(self.s.query("SELECT * FROM cursors"))

    def test_compare_and_set(self):
        st, b, _ = self.s.get("/v1/cursors/c1")
        self.assertEqual(st, 404, b)
        st, b, _ = self.put("c1", {"value": {"day": "2026-01-01", "n": 1}, "expected": None})
        self.assertEqual(st, 200, b)
        st, b, _ = self.put("c1", {"value": {"day": "2026-01-09"}, "expected": None})
        self.assertEqual(st, 409, b)
        self.assertEqual(b["current"], {"day": "2026-01-01", "n": 1})
        self.assertEqual(error_of(b).get("code"), "conflict")
        before = self.rows()
        st, b, _ = self.put("c1", {"value": {"day": "2026-01-02"}, "expected": {"day": "2025"}})
        self.assertEqual(st, 409, b)
        self.assertEqual(self.rows(), before)
        # expected compares JSON values, not texts: key order does not matter
        st, b, _ = self.put("c1", {"value": {"day": "2026-01-02"},
                                   "expected": {"n": 1, "day": "2026-01-01"}})
        self.assertEqual(st, 200, b)
        st, b, _ = self.s.get("/v1/cursors/c1")
        self.assertEqual((st, b["value"]), (200, {"day": "2026-01-02"}), b)
        self.assertTrue(b["updated_at"])
        st, b, _ = self.put("c1", {"value": 42})
        self.assertEqual(st, 200, b)
        self.assertEqual(self.s.get("/v1/cursors/c1")[1]["value"], 42)

    def test_bad_input_changes_nothing(self):
        self.put("c2", {"value": "a"})
        before = self.rows()
        for body, field, status in (({}, "value", 400), ({"value": None}, "value", 400),
                                    ({"value": 1, "other": 2}, "other", 400),
                                    ({"value": "x" * 70000}, "value", 413),
                                    ({"value": 1, "expected": "y" * 70000}, "expected", 413)):
            st, b, _ = self.put("c2", body)
            self.assertEqual((st, error_of(b).get("field")), (status, field), (body, b))
        st, b, _ = self.put("bad%20name", {"value": 1})
        self.assertEqual((st, error_of(b).get("field")), (400, "name"), b)
        st, b, _ = self.s.request("PUT", "/v1/cursors/c2", raw="[1]")
        self.assertEqual(st, 400, b)
        self.assertEqual(self.rows(), before)

    def run_rollup(self, data, out, today, start=None):
        env = {"ERRAND_SERVER": "http://%s:%d" % (self.s.host, self.s.port),
               "ROLLUP_TODAY": today, "ROLLUP_CURSOR": "rollup-test"}
        if start:
            env["ROLLUP_START"] = start
        p = subprocess.run(["bash", ROLLUP, data, out], env=clean_env(env),
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout, p.stderr

    def test_rollup_example_catches_up_and_is_harmless_twice(self):
        if not shutil.which("curl"):
            self.skipTest("curl not installed")
        tmp = tempfile.mkdtemp(prefix="errand-rollup-")
        try:
            data, out = os.path.join(tmp, "data"), os.path.join(tmp, "out")
            os.makedirs(data)
            for d, nums in (("2026-03-01", [1, 2]), ("2026-03-02", [5]), ("2026-03-03", [7, 3]),
                            ("2026-03-04", [100]), ("2026-03-05", [1])):
                with open(os.path.join(data, d + ".csv"), "w") as f:
                    f.write("".join("%d\n" % n for n in nums))
            rc, so, se = self.run_rollup(data, out, "2026-03-02", start="2026-03-01")
            self.assertEqual(rc, 0, se)
            self.assertEqual(sorted(os.listdir(out)), ["2026-03-01.json"])
            # "downtime": three days later it catches up by itself, oldest first
            rc, so, se = self.run_rollup(data, out, "2026-03-05")
            self.assertEqual(rc, 0, se)
            self.assertEqual(so.split("\n")[0], "rollup: 2026-03-02 total 5")
            files = sorted(os.listdir(out))
            self.assertEqual(files, ["2026-03-0%d.json" % i for i in range(1, 5)])
            snap = {f: open(os.path.join(out, f)).read() for f in files}
            self.assertEqual(json.loads(snap["2026-03-03.json"]), {"day": "2026-03-03",
                                                                    "total": 10})
            # twice: nothing left to do, nothing changes
            rc, so, se = self.run_rollup(data, out, "2026-03-05")
            self.assertEqual((rc, so), (0, ""), se)
            self.assertEqual({f: open(os.path.join(out, f)).read()
                              for f in sorted(os.listdir(out))}, snap)
            self.assertEqual(self.s.get("/v1/cursors/rollup-test")[1]["value"], "2026-03-04")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
