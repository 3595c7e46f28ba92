# SPDX-License-Identifier: MIT
#
# Run-once leases (POST /v1/leases and renew/complete/release) against a
# real server: identical (type, code, run_key) give identical idempotency
# keys (the documented SHA-256 derivation), different run keys different
# ones; a reclaimed lease rotates the owner token and raises the fence but
# keeps the key; the old owner's renew/complete/release are refused and
# change nothing; a completed key answers "done"; bad input is refused with
# nothing stored; roles; and `errand lease run` end to end.

import hashlib
import os
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, error_of, now_ms, parse_time, run_errand, wait_until  # noqa: E402

ADMIN = "admin-token-0123456789"
WORKER = "worker-token-0123456789"
PRODUCER = "producer-token-0123456789"


def expected_key(t, c, k):
    def frame(s):
        b = s.encode()
        return struct.pack(">I", len(b)) + b
    h = hashlib.sha256(frame("errand-lease-v1") + frame(t) + frame(c) + frame(k)).hexdigest()
    return "ik_" + h[:32]


class LeasesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=["--token", "admin:" + ADMIN, "--token", "worker:" + WORKER,
                             "--token", "producer:" + PRODUCER], token=WORKER).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def acquire(self, run_key, ttl_ms=60000, code="daily-billing", type_="schedule", **kw):
        return self.s.post("/v1/leases", {"type": type_, "code": code, "run_key": run_key,
                                          "ttl_ms": ttl_ms}, **kw)

    def rows(self):
        return sorted(self.s.query("SELECT * FROM leases"))

    def test_identical_inputs_identical_keys_and_different_run_keys_differ(self):
        st, a, _ = self.acquire("2026-11-30")
        self.assertEqual(st, 200, a)
        self.assertEqual(a["idempotency_key"], expected_key("schedule", "daily-billing",
                                                            "2026-11-30"))
        st, b, _ = self.s.post("/v1/leases/complete", {"owner_token": a["owner_token"]})
        self.assertEqual(st, 200, b)
        st, b, _ = self.acquire("2026-11-30")
        self.assertEqual((st, b.get("state")), (409, "done"), b)
        self.assertEqual(b["idempotency_key"], a["idempotency_key"])
        st, c, _ = self.acquire("2026-12-01")
        self.assertEqual(st, 200, c)
        self.assertNotEqual(c["idempotency_key"], a["idempotency_key"])

    def test_held_lease_answers_held(self):
        st, a, _ = self.acquire("held-1")
        self.assertEqual(st, 200, a)
        self.assertEqual(a["fence"], 1)
        st, b, _ = self.acquire("held-1")
        self.assertEqual(st, 409, b)
        self.assertEqual(b["state"], "held")
        self.assertEqual(error_of(b).get("code"), "conflict")
        self.assertNotIn("owner_token", b)

    def test_reclaim_rotates_token_raises_fence_keeps_key_and_refuses_the_old_owner(self):
        st, a, _ = self.acquire("reclaim-1", ttl_ms=1000)
        self.assertEqual(st, 200, a)
        wait_until(lambda: now_ms() > parse_time(a["expires_at"]), timeout=10,
                   what="the clock to pass the lease's expires_at")
        st, b, _ = self.acquire("reclaim-1", ttl_ms=60000)
        self.assertEqual(st, 200, b)
        self.assertEqual(b["idempotency_key"], a["idempotency_key"])
        self.assertNotEqual(b["owner_token"], a["owner_token"])
        self.assertGreater(b["fence"], a["fence"])
        before = self.rows()
        for what, body in (("renew", {"owner_token": a["owner_token"], "ttl_ms": 60000}),
                           ("complete", {"owner_token": a["owner_token"]}),
                           ("release", {"owner_token": a["owner_token"]})):
            st, r, _ = self.s.post("/v1/leases/" + what, body)
            self.assertEqual(st, 409, (what, r))
            self.assertEqual(error_of(r).get("code"), "lease_lost", (what, r))
        self.assertEqual(self.rows(), before, "a stale owner changed a lease")
        st, r, _ = self.s.post("/v1/leases/renew", {"owner_token": b["owner_token"],
                                                    "ttl_ms": 5000})
        self.assertEqual(st, 200, r)
        self.assertEqual(r["fence"], b["fence"])
        self.assertLess(parse_time(r["expires_at"]), parse_time(b["expires_at"]))

    def test_release_frees_at_once_and_complete_is_forever(self):
        st, a, _ = self.acquire("rel-1")
        st, r, _ = self.s.post("/v1/leases/release", {"owner_token": a["owner_token"]})
        self.assertEqual((st, r.get("state")), (200, "free"), r)
        st, b, _ = self.acquire("rel-1", ttl_ms=1000)
        self.assertEqual(st, 200, b)
        self.assertEqual(b["fence"], a["fence"] + 1)
        st, r, _ = self.s.post("/v1/leases/complete", {"owner_token": b["owner_token"]})
        self.assertEqual((st, r.get("state")), (200, "done"), r)
        time.sleep(1.1)  # longer than the ttl: done does not expire
        st, r, _ = self.acquire("rel-1")
        self.assertEqual((st, r.get("state")), (409, "done"), r)

    def test_bad_input_is_refused_and_nothing_is_stored(self):
        before = self.rows()
        good = {"type": "schedule", "code": "c", "run_key": "k", "ttl_ms": 60000}
        cases = [({"code": ""}, "code"), ({"type": ""}, "type"), ({"run_key": "x" * 201}, "run_key"),
                 ({"code": "a\nb"}, "code"), ({"ttl_ms": 999}, "ttl_ms"),
                 ({"ttl_ms": 86400001}, "ttl_ms"), ({"ttl_ms": "60s"}, "ttl_ms"),
                 ({"extra": 1}, "extra"), ({"code": 7}, "code")]
        for patch, field in cases:
            body = dict(good)
            body.update(patch)
            st, b, _ = self.s.post("/v1/leases", body)
            self.assertEqual(st, 400, (patch, b))
            self.assertEqual(error_of(b).get("field"), field, (patch, b))
        body = dict(good)
        del body["run_key"]
        st, b, _ = self.s.post("/v1/leases", body)
        self.assertEqual((st, error_of(b).get("field")), (400, "run_key"), b)
        for what, body, field in (("renew", {}, "owner_token"), ("renew", {"owner_token": ""},
                                  "owner_token"), ("renew", {"owner_token": "x", "ttl_ms": 5},
                                  "ttl_ms"), ("complete", {"owner_token": "x", "ttl_ms": 1000},
                                  "ttl_ms"), ("release", {"owner_token": 5}, "owner_token")):
            st, b, _ = self.s.post("/v1/leases/" + what, body)
            self.assertEqual((st, error_of(b).get("field")), (400, field), (what, body, b))
        self.assertEqual(self.rows(), before)

    def test_roles(self):
        st, b, _ = self.acquire("role-1", token=PRODUCER)
        self.assertEqual(st, 403, b)
        st, b, _ = self.acquire("role-1", token=None)
        self.assertEqual(st, 401, b)
        st, b, _ = self.acquire("role-1", token=ADMIN)
        self.assertEqual(st, 200, b)

    def run_lease(self, run_key, cmd, ttl="3s"):
        env = {"ERRAND_SERVER": "http://%s:%d" % (self.s.host, self.s.port),
               "ERRAND_TOKEN": WORKER}
        return run_errand(["lease", "run", "--type", "job", "--code", "cli", "--run-key", run_key,
                           "--ttl", ttl, "--"] + cmd, env=env, timeout=30)

    def test_lease_run_cli(self):
        rc, out, err = self.run_lease("r1", ["sh", "-c", "echo $ERRAND_IDEMPOTENCY_KEY "
                                             "$ERRAND_FENCE ${#ERRAND_OWNER_TOKEN}; sleep 2.2"])
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.split(), [expected_key("job", "cli", "r1"), "1", "32"])
        rc, out, err = self.run_lease("r1", ["sh", "-c", "echo ran"])
        self.assertEqual((rc, out), (0, ""), err)
        self.assertIn("already done", err)
        rc, out, err = self.run_lease("r2", ["sh", "-c", "exit 7"])
        self.assertEqual(rc, 7, err)
        rc, out, err = self.run_lease("r2", ["sh", "-c", "echo $ERRAND_FENCE"])
        self.assertEqual((rc, out.strip()), (0, "2"), err)  # released, then taken again
        st, b, _ = self.acquire("r3", code="cli", type_="job")
        self.assertEqual(st, 200, b)
        rc, out, err = self.run_lease("r3", ["sh", "-c", "echo ran"])
        self.assertEqual((rc, out), (75, ""), err)
        rc, out, err = run_errand(["lease", "run", "--type", "job", "--code", "", "--run-key",
                                   "x", "--", "true"])
        self.assertEqual(rc, 2, err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
