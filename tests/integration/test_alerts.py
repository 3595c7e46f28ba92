# SPDX-License-Identifier: MIT
#
# The Prometheus rules and the Grafana dashboard of deploy/: promtool accepts
# the rules and passes their unit tests (deploy/prometheus/alerts_test.yml),
# the dashboard is well formed and its queries parse, and every metric name
# the three files use is one a real server's /metrics serves, which promtool
# also lints. promtool comes with Debian's `prometheus` package (scripts/deps);
# without it these tests fail.

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import REPO_ROOT, Server  # noqa: E402

PROM_DIR = os.path.join(REPO_ROOT, "deploy", "prometheus")
ALERTS = os.path.join(PROM_DIR, "alerts.yml")
ALERTS_TEST = os.path.join(PROM_DIR, "alerts_test.yml")
DASHBOARD = os.path.join(REPO_ROOT, "deploy", "grafana", "errand.json")

ALERT_NAMES = {"ErrandQueueDepthRising", "ErrandQueueOldestWaiting", "ErrandQueueFailureRate",
               "ErrandDeadLetters", "ErrandMaintenanceLeaderMissing"}

TOKEN = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
YAML_COMMENT = re.compile(r"(^|\s)#.*$", re.M)


def promtool(*args, stdin=None):
    """Runs promtool ARGS in deploy/prometheus; returns (returncode, stdout + stderr)."""
    exe = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if not exe:
        raise AssertionError("promtool not found: install the Debian package prometheus "
                             "(scripts/deps does) or set PROMTOOL")
    p = subprocess.run([exe] + list(args), cwd=PROM_DIR, input=stdin, capture_output=True,
                       text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def metric_names(text):
    """errand_* metric names in PromQL or YAML text; recording rules (with ':') excluded."""
    return {t for t in TOKEN.findall(text) if t.startswith("errand_") and ":" not in t}


def yaml_names(path):
    """Metric names in a rules or rule-test file, comments left out."""
    with open(path) as f:
        return metric_names(YAML_COMMENT.sub("", f.read()))


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def dashboard_queries(d):
    """Every PromQL text of the dashboard: panel targets and variable queries."""
    out = []
    for p in d["panels"]:
        out += [t["expr"] for t in p.get("targets", [])]
    for v in d["templating"]["list"]:
        if v.get("type") == "query":
            q = v.get("query")
            out.append(q.get("query", "") if isinstance(q, dict) else q)
            out.append(v.get("definition", ""))
    return out


def scraped_names(text):
    """Names a scrape provides: samples, and each # TYPE with its histogram and
    summary series."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            names.add(name)
            if kind == "histogram":
                names |= {name + "_bucket", name + "_sum", name + "_count"}
            elif kind == "summary":
                names |= {name + "_sum", name + "_count"}
        elif line and not line.startswith("#"):
            names.add(TOKEN.match(line).group(0))
    return names


class PromtoolRulesTest(unittest.TestCase):
    def test_check_rules(self):
        # --lint-fatal: a duplicate rule (two thresholds for one queue) fails.
        rc, out = promtool("check", "rules", "--lint-fatal", ALERTS)
        self.assertEqual(rc, 0, out)
        self.assertIn("SUCCESS", out)

    def test_rule_unit_tests(self):
        rc, out = promtool("test", "rules", ALERTS_TEST)
        self.assertEqual(rc, 0, out)

    def test_every_alert_has_severity_for_and_annotations_and_a_test(self):
        with open(ALERTS) as f:
            rules = f.read()
        with open(ALERTS_TEST) as f:
            tests = f.read()
        # One alert's text runs from its "- alert:" to the next rule.
        blocks = re.split(r"\n(?=      - (?:alert|record):)", rules)
        alerts = {}
        for b in blocks:
            m = re.match(r"\s*- alert: (\w+)", b)
            if m:
                alerts[m.group(1)] = b
        self.assertEqual(set(alerts), ALERT_NAMES)
        for name, b in alerts.items():
            self.assertRegex(b, r"\n        for: \d+[smh]", name)
            self.assertRegex(b, r"\n          severity: (warning|critical)", name)
            self.assertIn("summary:", b, name)
            self.assertIn("description:", b, name)
            self.assertIn("$labels.", b, name)
            # Each alert is tested firing (a listed alert) and not firing (an empty list).
            self.assertRegex(tests, r"alertname: %s\n\s+exp_alerts:\n" % name, name)
            self.assertRegex(tests, r"alertname: %s\n\s+exp_alerts: \[\]" % name, name)

    def test_dashboard_queries_parse(self):
        # promtool has no expression parser of its own here: each query becomes a
        # recording rule, with Grafana's variables replaced by values.
        exprs = dashboard_queries(load_dashboard())
        rules = {"groups": [{"name": "dashboard", "rules": [
            {"record": "dashboard:q%d" % i,
             "expr": e.replace("$__rate_interval", "5m").replace("$queue", ".*")}
            for i, e in enumerate(exprs) if not e.startswith("label_values(")]}]}
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
            json.dump(rules, f)  # JSON is YAML
        try:
            rc, out = promtool("check", "rules", f.name)
        finally:
            os.unlink(f.name)
        self.assertEqual(rc, 0, out)


class DashboardTest(unittest.TestCase):
    def setUp(self):
        self.d = load_dashboard()

    def test_top_level_and_variables(self):
        d = self.d
        self.assertGreaterEqual(d["schemaVersion"], 36)
        self.assertTrue(d["title"])
        self.assertTrue(d["uid"])
        v = {x["name"]: x for x in d["templating"]["list"]}
        self.assertEqual(v["datasource"]["type"], "datasource")
        self.assertEqual(v["datasource"]["query"], "prometheus")
        q = v["queue"]
        self.assertEqual(q["type"], "query")
        self.assertEqual(q["datasource"], {"type": "prometheus", "uid": "${datasource}"})
        self.assertEqual(q["definition"], "label_values(errand_queue_jobs, queue)")
        self.assertEqual(q["query"]["query"], "label_values(errand_queue_jobs, queue)")
        self.assertTrue(q["includeAll"] and q["multi"])

    def test_panels(self):
        panels = self.d["panels"]
        self.assertGreaterEqual(len(panels), 8)
        ids = [p["id"] for p in panels]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat: %r" % ids)
        ds = {"type": "prometheus", "uid": "${datasource}"}
        cells = set()
        for p in panels:
            what = "panel %s %r" % (p.get("id"), p.get("title"))
            self.assertTrue(p["title"], what)
            g = p["gridPos"]
            for k in ("x", "y", "w", "h"):
                self.assertIsInstance(g[k], int, what)
            self.assertTrue(0 <= g["x"] and g["w"] > 0 and g["x"] + g["w"] <= 24, what)
            self.assertTrue(g["y"] >= 0 and g["h"] > 0, what)
            mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                    for y in range(g["y"], g["y"] + g["h"])}
            self.assertFalse(cells & mine, what + " overlaps another panel")
            cells |= mine
            self.assertEqual(p["datasource"], ds, what)
            self.assertTrue(p["targets"], what)
            refs = [t["refId"] for t in p["targets"]]
            self.assertEqual(len(refs), len(set(refs)), what)
            for t in p["targets"]:
                self.assertTrue(t["expr"].strip(), what)
                self.assertEqual(t["datasource"], ds, what)

    def test_panels_cover_the_topics(self):
        exprs = "\n".join(dashboard_queries(self.d))
        for name in ("errand_queue_jobs", "errand_queue_oldest_waiting_age_seconds",
                     "errand_jobs_enqueued_total", "errand_jobs_completed_total",
                     "errand_jobs_failed_total", "errand_jobs_dead_total",
                     "errand_job_wait_seconds_bucket", "errand_job_run_seconds_bucket",
                     "errand_store_commit_seconds_bucket", "errand_maintenance_leader"):
            self.assertIn(name, exprs)
        for q in ("0.5", "0.95", "0.99"):
            self.assertIn("histogram_quantile(%s, sum by (queue, le) (rate("
                          "errand_job_wait_seconds_bucket" % q, exprs)
            self.assertIn("histogram_quantile(%s, sum by (queue, le) (rate("
                          "errand_job_run_seconds_bucket" % q, exprs)


class ScrapeTest(unittest.TestCase):
    """The names the rules and the dashboard use against a real scrape."""

    @classmethod
    def setUpClass(cls):
        cls.used = {
            "deploy/prometheus/alerts.yml": yaml_names(ALERTS),
            "deploy/prometheus/alerts_test.yml": yaml_names(ALERTS_TEST),
            "deploy/grafana/errand.json": metric_names("\n".join(dashboard_queries(
                load_dashboard()))),
        }
        cls.all_used = set().union(*cls.used.values())
        cls.s = Server(args=["--maintenance-interval", "50ms"]).start()
        try:
            cls.scrape = cls.run_sequence()
        except BaseException:
            cls.s.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    @classmethod
    def run_sequence(cls):
        """Enqueue 4 jobs, complete one, fail one for a retry and one into the
        dead letters, leave one waiting; returns /metrics once the leader's
        gauges show them (or after 5 s)."""
        s, q = cls.s, "alerts-q"
        for i in range(4):
            st, b, _ = s.enqueue(q, {"name": "x", "id": "al-%d" % i, "max_attempts": 3})
            assert st == 201, (st, b)
        outcomes = [lambda j: s.complete(j["id"], j["lease_token"]),
                    lambda j: s.fail(j["id"], j["lease_token"], {"class": "transient"}),
                    lambda j: s.fail(j["id"], j["lease_token"], {"class": "permanent"})]
        for act in outcomes:
            jobs = s.fetch_jobs(q)
            assert len(jobs) == 1, jobs
            st, b, _ = act(jobs[0])
            assert st == 200, (st, b)
        deadline = time.monotonic() + 5.0
        while True:
            st, text, _ = s.get("/metrics", timeout=10)
            assert st == 200, (st, text)
            if cls.all_used <= scraped_names(text) or time.monotonic() > deadline:
                return text
            time.sleep(0.1)

    def setUp(self):
        self.assertTrue(self.s.alive(), "server died:\n" + self.s.log_text())

    def test_names_were_found(self):
        # The extraction itself: each file names metrics.
        for path, names in self.used.items():
            self.assertGreaterEqual(len(names), 3, "%s: %r" % (path, names))

    def test_every_metric_used_is_served(self):
        have = scraped_names(self.scrape)
        missing = {path: sorted(names - have) for path, names in self.used.items()
                   if names - have}
        if missing:
            self.fail("metric names used but not in /metrics: %s\nall missing: %s"
                      % (json.dumps(missing, indent=1), " ".join(sorted(self.all_used - have))))

    def test_labels_the_rules_group_by_are_served(self):
        # The rules and panels aggregate by these labels; the sequence above
        # makes a sample of each (reason="permanent" from the permanent failure).
        need = {"errand_queue_jobs": {"queue", "state"},
                "errand_queue_oldest_waiting_age_seconds": {"queue"},
                "errand_queue_dead_letters": {"queue"},
                "errand_jobs_enqueued_total": {"queue"},
                "errand_jobs_fetched_total": {"queue"},
                "errand_jobs_completed_total": {"queue"},
                "errand_jobs_failed_total": {"queue"},
                "errand_jobs_retried_total": {"queue"},
                "errand_jobs_dead_total": {"queue", "reason"},
                "errand_job_wait_seconds_bucket": {"queue", "le"},
                "errand_job_run_seconds_bucket": {"queue", "le"},
                "errand_store_commit_seconds_bucket": {"le"}}
        seen = {}
        for m in re.finditer(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}", self.scrape, re.M):
            seen.setdefault(m.group(1), set()).update(
                re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=\"", m.group(2)))
        wrong = {name: "has %s, needs %s" % (sorted(seen.get(name, ())), sorted(labels))
                 for name, labels in need.items() if not labels <= seen.get(name, set())}
        if wrong:
            self.fail("metrics without the labels the rules use (no sample of them with "
                      "these labels in /metrics):\n" + "\n".join(
                          "%s: %s" % kv for kv in sorted(wrong.items())))

    def test_promtool_check_metrics_accepts_the_scrape(self):
        rc, out = promtool("check", "metrics", stdin=self.scrape)
        self.assertEqual(rc, 0, "promtool check metrics:\n%s" % out)


if __name__ == "__main__":
    unittest.main()
