# SPDX-License-Identifier: MIT
#
# Schedulers against a real server: upserting one key ten times leaves one
# schedule; a server stopped across at least three ticks of an every-second
# schedule follows each missed-run policy exactly (skip, once, all, all
# capped by max_catchup); GET shows the next runs in the schedule's zone
# and the last tick; trigger; cron/next; the CLI; and bad input for every
# endpoint gets a clear error with nothing stored.

import datetime
import json
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, error_of, now_ms, parse_time, qpath, run_errand, wait_until  # noqa: E402

EVERY_SECOND = "* * * * * *"


def sched_rows(s):
    """Every scheduler row on disk (empty before the table exists)."""
    try:
        return sorted(s.query("SELECT * FROM schedulers"))
    except Exception:  # noqa: BLE001 - table missing
        return []


def tick_jobs(s, key):
    """Ticks (ms) of the jobs of scheduler `key` on disk, sorted."""
    rows = s.query("SELECT id FROM jobs WHERE id LIKE ?", ("sched:%s:%%" % key,))
    return sorted(parse_time(r[0][len("sched:%s:" % key):]) for r in rows)


def catchup_count(s, key):
    """The catch-up count the server logged for key after a restart, or None."""
    for line in list(s.lines):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o.get("scheduler") == key and "missed ticks" in o.get("msg", ""):
            m = re.search(r"fired (\d+) catch-up", o["msg"])
            return int(m.group(1)) if m else None
    return None


class SchedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=["--maintenance-interval", "20ms"]).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def setUp(self):
        if not self.s.alive():
            self.s.start()

    def put(self, key, spec, **kw):
        return self.s.request("PUT", "/v1/schedulers/" + qpath(key), body=spec, **kw)

    def test_upserting_the_same_key_ten_times_leaves_one_schedule(self):
        spec = {"cron": "0 3 * * *", "tz": "Asia/Ho_Chi_Minh", "queue": "billing",
                "name": "invoice", "payload": {"plan": "pro"}}
        for i in range(10):
            st, b, _ = self.put("upsert-10", spec)
            self.assertEqual(st, 201 if i == 0 else 200, b)
            self.assertEqual(b["scheduler"]["key"], "upsert-10")
            self.assertIsNotNone(parse_time(b["scheduler"]["next_run_at"]))
        st, b, _ = self.s.get("/v1/schedulers")
        self.assertEqual(st, 200, b)
        self.assertEqual([x["key"] for x in b["schedulers"]].count("upsert-10"), 1)
        self.assertEqual(len(self.s.query("SELECT key FROM schedulers WHERE key='upsert-10'")), 1)
        # a changed spec updates the one schedule
        spec["cron"] = "0 4 * * *"
        st, b, _ = self.put("upsert-10", spec)
        self.assertEqual(st, 200, b)
        self.assertEqual(b["scheduler"]["cron"], "0 4 * * *")
        self.assertEqual(len(self.s.query("SELECT key FROM schedulers WHERE key='upsert-10'")), 1)

    def test_get_shows_next_runs_in_the_zone_and_the_last_tick(self):
        st, b, _ = self.put("ny-daily", {"cron": "0 3 * * *", "tz": "America/New_York",
                                          "queue": "q-ny", "name": "n"})
        self.assertEqual(st, 201, b)
        st, b, _ = self.s.get("/v1/schedulers/ny-daily")
        self.assertEqual(st, 200, b)
        sc = b["scheduler"]
        self.assertIsNone(sc["last_tick"])
        self.assertEqual(len(sc["next_runs"]), 5)
        for r in sc["next_runs"]:
            self.assertRegex(r, r"T03:00:00-0[45]:00$")
        local = datetime.datetime.fromisoformat(sc["next_runs"][0])
        self.assertEqual(parse_time(sc["next_run_at"]), int(local.timestamp() * 1000))
        # an every-second schedule fires, and GET reports the last tick fired
        st, b, _ = self.put("sec-last", {"cron": EVERY_SECOND, "queue": "q-last", "name": "n"})
        self.assertEqual(st, 201, b)
        self.assertTrue(wait_until(lambda: self.s.get("/v1/schedulers/sec-last")[1]
                                   ["scheduler"]["last_tick"], timeout=5))
        sc = self.s.get("/v1/schedulers/sec-last")[1]["scheduler"]
        ticks = tick_jobs(self.s, "sec-last")
        self.assertIn(parse_time(sc["last_tick"]), ticks)
        job = self.s.job("sched:sec-last:" + sc["last_tick"])
        self.assertEqual(job["payload"]["run_key"], sc["last_tick"])
        self.assertEqual(job["queue"], "q-last")
        st, _, _ = self.s.request("DELETE", "/v1/schedulers/sec-last")
        self.assertEqual(st, 200)
        st, _, _ = self.s.get("/v1/schedulers/sec-last")
        self.assertEqual(st, 404)

    def test_trigger_enqueues_the_current_second_once(self):
        st, b, _ = self.put("trig", {"cron": "0 0 1 1 *", "queue": "q-trig", "name": "n",
                                      "payload": {"x": 1}})
        self.assertEqual(st, 201, b)
        before = now_ms() // 1000 * 1000
        st, b, _ = self.s.post("/v1/schedulers/trig/trigger")
        self.assertEqual(st, 201, b)
        job = b["job"]
        tick = job["id"][len("sched:trig:"):]
        self.assertGreaterEqual(parse_time(tick), before)
        self.assertEqual(job["payload"], {"x": 1, "run_key": tick})
        st, b, _ = self.s.post("/v1/schedulers/nope/trigger")
        self.assertEqual(st, 404, b)

    def test_cron_next(self):
        st, b, _ = self.s.get("/v1/cron/next?expr=0+3+*+*+*&tz=Asia/Ho_Chi_Minh"
                              "&from=2026-01-01T00:00:00Z&count=2")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["next"], ["2026-01-01T20:00:00.000Z", "2026-01-02T20:00:00.000Z"])
        self.assertEqual(b["tz"], "Asia/Ho_Chi_Minh")
        st, b, _ = self.s.get("/v1/cron/next?expr=@daily&from=2026-01-01T00:00:00Z&count=1")
        self.assertEqual((st, b), (200, {"next": ["2026-01-02T00:00:00.000Z"], "tz": "UTC"}))
        for q, field in (("expr=0+25+*+*+*", "expr"), ("", "expr"), ("expr=@daily&tz=Nowhere/X", "tz"),
                         ("expr=@daily&count=0", "count"), ("expr=@daily&count=1001", "count"),
                         ("expr=@daily&from=yesterday", "from"), ("expr=@daily&bogus=1", "bogus")):
            st, b, _ = self.s.get("/v1/cron/next?" + q)
            self.assertEqual(st, 400, (q, b))
            self.assertEqual(error_of(b).get("field"), field, (q, b))

    def test_bad_input_gets_a_clear_error_and_stores_nothing(self):
        base = {"cron": "0 3 * * *", "queue": "q", "name": "n"}
        cases = [
            ({"cron": "0 25 * * *"}, "cron"),
            ({"cron": "not a cron"}, "cron"),
            ({"cron": ""}, "cron"),
            ({"cron": "0 0 30 2 *"}, "cron"),
            ({"tz": "Mars/Olympus_Mons"}, "tz"),
            ({"tz": "../../etc/passwd"}, "tz"),
            ({"max_catchup": 0}, "max_catchup"),
            ({"max_catchup": 1000000}, "max_catchup"),
            ({"max_catchup": -3}, "max_catchup"),
            ({"max_catchup": "24"}, "max_catchup"),
            ({"missed": "sometimes"}, "missed"),
            ({"name": ""}, "name"),
            ({"queue": "has space"}, "queue"),
            ({"payload": [1, 2]}, "payload"),
            ({"job": {"priority": 99999}}, "job.priority"),
            ({"job": {"id": "x"}}, "job.id"),
            ({"colour": "blue"}, "colour"),
        ]
        before = sched_rows(self.s)
        jobs_before = self.s.snapshot()
        for patch, field in cases:
            spec = dict(base)
            spec.update(patch)
            st, b, _ = self.put("bad-input", spec)
            self.assertEqual(st, 400, (patch, b))
            self.assertEqual(error_of(b).get("field"), field, (patch, b))
            self.assertTrue(error_of(b).get("message"), b)
        spec = dict(base)
        del spec["cron"]
        st, b, _ = self.put("bad-input", spec)
        self.assertEqual((st, error_of(b).get("field")), (400, "cron"), b)
        st, b, _ = self.s.request("PUT", "/v1/schedulers/bad%20key", body=base)
        self.assertEqual((st, error_of(b).get("field")), (400, "key"), b)
        st, b, _ = self.s.request("PUT", "/v1/schedulers/bad-input", raw="{not json")
        self.assertEqual(st, 400, b)
        st, b, _ = self.s.request("DELETE", "/v1/schedulers/never-was")
        self.assertEqual(st, 404, b)
        st, b, _ = self.s.get("/v1/schedulers?limit=0")
        self.assertEqual((st, error_of(b).get("field")), (400, "limit"), b)
        self.assertEqual(sched_rows(self.s), before)
        self.assertEqual(self.s.snapshot(), jobs_before)

    def test_cli_add_list_trigger_rm(self):
        srv = ["--server", "http://%s:%d" % (self.s.host, self.s.port)]
        rc, out, err = run_errand(["cron", "add", "cli-k", "--cron", "0 3 * * *", "--tz",
                                   "Europe/London", "--queue", "q-cli", "--name", "n",
                                   "--payload", '{"a":1}', "--missed", "all",
                                   "--max-catchup", "5"] + srv)
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out)["scheduler"]["max_catchup"], 5)
        rc, out, err = run_errand(["cron", "add", "cli-k", "--cron", "0 3 * * *", "--queue",
                                   "q-cli", "--name", "n", "--max-catchup", "5000"] + srv)
        self.assertEqual(rc, 2, err)
        rc, out, err = run_errand(["cron", "add", "cli-k", "--cron", "0 3 * * *", "--tz", "X/Y",
                                   "--queue", "q-cli", "--name", "n"] + srv)
        self.assertEqual(rc, 1, err)
        self.assertIn("tz", err)
        rc, out, err = run_errand(["cron", "list"] + srv)
        self.assertEqual(rc, 0, err)
        self.assertIn("cli-k", out)
        self.assertIn("Europe/London", out)
        rc, out, err = run_errand(["cron", "trigger", "cli-k"] + srv)
        self.assertEqual(rc, 0, err)
        self.assertTrue(json.loads(out)["job"]["id"].startswith("sched:cli-k:"))
        rc, out, err = run_errand(["cron", "rm", "cli-k"] + srv)
        self.assertEqual(rc, 0, err)
        rc, out, err = run_errand(["cron", "rm", "cli-k"] + srv)
        self.assertEqual(rc, 1, err)


class MissedRunsTest(unittest.TestCase):
    """One server, four every-second schedules (one per policy), stopped for
    about four seconds and started again."""

    POLICIES = {"m-skip": ("skip", 24), "m-once": ("once", 24), "m-all": ("all", 24),
                "m-cap": ("all", 2)}

    def test_a_server_stopped_across_ticks_follows_each_policy(self):
        with Server(args=["--maintenance-interval", "20ms"]) as s:
            for key, (missed, cap) in self.POLICIES.items():
                st, b, _ = s.request("PUT", "/v1/schedulers/" + key, body={
                    "cron": EVERY_SECOND, "queue": "q-" + key, "name": "tick",
                    "missed": missed, "max_catchup": cap})
                self.assertEqual(st, 201, b)
            for key in self.POLICIES:
                self.assertTrue(wait_until(lambda k=key: len(tick_jobs(s, k)) >= 2, timeout=6),
                                key)
            self.assertEqual(s.term(), 0)
            last = {k: v for k, v in s.query("SELECT key, last_tick FROM schedulers")}
            before = {k: tick_jobs(s, k) for k in self.POLICIES}
            for k in self.POLICIES:
                self.assertEqual(before[k][-1], last[k], k)
            time.sleep(4.2)  # a duration: at least three ticks pass with no server
            r0 = now_ms()
            s.start()
            r1 = now_ms()
            # the catch-ups are made at the start; then two ticks on time each
            wait_until(lambda: all(len([t for t in tick_jobs(s, k) if t > r1]) >= 2
                                   for k in self.POLICIES), timeout=15,
                       what="two on-time ticks of every schedule after the restart")
            self.assertEqual(s.term(), 0)
            after = {k: tick_jobs(s, k)[len(before[k]):] for k in self.POLICIES}

        for k, (missed, cap) in self.POLICIES.items():
            L, ticks = last[k], after[k]
            missed_ticks = [t for t in range(L + 1000, r0 + 1, 1000)]
            self.assertGreaterEqual(len(missed_ticks), 3, k)
            self.assertTrue(ticks, "%s fired nothing after the restart" % k)
            self.assertEqual(len(set(ticks)), len(ticks), k)
            # after the catch-up every tick fires on time, without gaps
            first_ontime = next(t for t in ticks if t > r1)
            tail = [t for t in ticks if t >= first_ontime]
            self.assertEqual(tail, list(range(first_ontime, tail[-1] + 1, 1000)), k)
            catchups = [t for t in ticks if t <= r0]
            fired = catchup_count(s, k)
            if missed == "skip":
                self.assertEqual(catchups, [], k)
                self.assertEqual(fired, 0, k)
            elif missed == "once":
                self.assertLessEqual(len(catchups), 1, k)
                self.assertEqual(fired, 1, k)
                # the catch-up is the latest missed tick: every earlier one was skipped
                self.assertGreaterEqual(ticks[0] - L, 3000, (k, ticks[0] - L))
            elif cap >= 24:
                self.assertEqual(ticks[0], L + 1000, k)  # every missed tick, oldest first
                self.assertEqual(ticks, list(range(ticks[0], ticks[-1] + 1, 1000)), k)
                self.assertGreaterEqual(fired, 3, k)
            else:
                self.assertEqual(fired, 2, k)
                self.assertLessEqual(len(catchups), 2, k)
                self.assertEqual(ticks[1] - ticks[0], 1000, k)  # the latest two
                self.assertGreaterEqual(ticks[0] - L, 2000, k)


if __name__ == "__main__":
    unittest.main(verbosity=2)
