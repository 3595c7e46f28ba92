# SPDX-License-Identifier: MIT
#
# Span export (--otlp-endpoint, docs/metrics.md "Traces"): a local receiver
# parses the OTLP/HTTP JSON errand sends. A job enqueued with a W3C
# traceparent yields one span per attempt in that trace, under that parent,
# with its queue, name, attempt and outcome; a 32-hex trace_id is the trace;
# an expired lease is a span too; a malformed traceparent is refused; and a
# collector that is down loses spans (counted), never jobs.

import http.server
import json
import os
import re
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, free_port, wait_until  # noqa: E402

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


class Receiver:
    """An OTLP/HTTP collector stand-in: keeps every span POSTed to /v1/traces."""

    def __init__(self):
        self.spans, self.requests, self.lock = [], [], threading.Lock()
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with outer.lock:
                    outer.requests.append((self.path, self.headers.get("Content-Type")))
                    doc = json.loads(body)
                    for rs in doc["resourceSpans"]:
                        for ss in rs["scopeSpans"]:
                            outer.spans.extend(ss["spans"])
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def of_job(self, job_id):
        with self.lock:
            return [s for s in self.spans if attrs(s).get("errand.job.id") == job_id]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def attrs(span):
    out = {}
    for kv in span.get("attributes", []):
        v = kv["value"]
        out[kv["key"]] = v.get("stringValue", v.get("intValue"))
    return out


class TracesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rx = Receiver()
        cls.s = Server(args=["--otlp-endpoint", "http://127.0.0.1:%d" % cls.rx.port,
                             "--maintenance-interval", "20ms"]).start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()
        cls.rx.close()

    def spans_of(self, job_id, n):
        return wait_until(lambda: (lambda got: got if len(got) >= n else None)(
            self.rx.of_job(job_id)), timeout=20, interval=0.1,
            what="%d spans of %s" % (n, job_id))

    def test_one_span_per_attempt_in_the_callers_trace(self):
        s, q = self.s, "tr-q"
        tp = "00-%s-%s-01" % (TRACE, PARENT)
        st, b, _ = s.enqueue(q, {"name": "send", "id": "tr-1", "max_attempts": 3,
                                 "backoff": {"type": "fixed", "delay_ms": 100}},
                             headers={"traceparent": tp})
        self.assertEqual(st, 201, b)
        self.assertEqual(s.job("tr-1")["trace_id"], tp)
        j = s.fetch_jobs([q])[0]
        self.assertEqual(s.fail(j["id"], j["lease_token"],
                                {"class": "transient", "message": "x"})[0], 200)
        j = wait_until(lambda: (s.fetch_jobs([q]) or [None])[0], timeout=10,
                       what="the retry")
        self.assertEqual(j["attempt"], 2)
        self.assertEqual(s.complete(j["id"], j["lease_token"])[0], 200)
        spans = sorted(self.spans_of("tr-1", 2), key=lambda sp: attrs(sp)["errand.attempt"])
        self.assertEqual(len(spans), 2, spans)
        for sp, attempt, outcome, code in [(spans[0], "1", "retried", 2),
                                           (spans[1], "2", "completed", 1)]:
            a = attrs(sp)
            self.assertEqual(sp["traceId"], TRACE)
            self.assertEqual(sp["parentSpanId"], PARENT)
            self.assertRegex(sp["spanId"], r"^[0-9a-f]{16}$")
            self.assertEqual(sp["name"], "tr-q send")
            self.assertEqual(a["errand.attempt"], attempt)
            self.assertEqual(a["errand.outcome"], outcome)
            self.assertEqual(a["messaging.destination.name"], q)
            self.assertEqual(sp["status"]["code"], code)
            start, end = int(sp["startTimeUnixNano"]), int(sp["endTimeUnixNano"])
            self.assertLessEqual(start, end)
            self.assertEqual(sp["events"][0]["name"], "leased")
            self.assertTrue(start <= int(sp["events"][0]["timeUnixNano"]) <= end)
        self.assertNotEqual(spans[0]["spanId"], spans[1]["spanId"])
        with self.rx.lock:
            self.assertTrue(all(p == "/v1/traces" and t == "application/json"
                                for p, t in self.rx.requests), self.rx.requests)

    def test_a_hex_trace_id_is_the_trace_and_an_expired_lease_a_span(self):
        s, q = self.s, "tr-stall"
        st, b, _ = s.put_queue(q, {"max_stalled": 0})
        self.assertEqual(st, 200, b)
        tid = "0af7651916cd43dd8448eb211c80319c"
        self.assertEqual(s.enqueue(q, {"name": "n", "id": "tr-2", "trace_id": tid})[0], 201)
        j = s.fetch_jobs([q], lease_ms=1000)[0]
        self.assertEqual(j["id"], "tr-2")
        (sp,) = self.spans_of("tr-2", 1)
        self.assertEqual(sp["traceId"], tid)
        self.assertNotIn("parentSpanId", sp)
        self.assertEqual(attrs(sp)["errand.outcome"], "lease_expired")
        self.assertEqual(sp["status"]["code"], 2)

    def test_a_malformed_traceparent_is_refused(self):
        for tp in ["01-%s-%s-01" % (TRACE, PARENT), "00-%s-%s-01" % ("0" * 32, PARENT),
                   "00-%s-%s-01" % (TRACE.upper(), PARENT), "garbage", ""]:
            with self.subTest(tp=tp):
                st, b, _ = self.s.enqueue("tr-bad", {"name": "n"}, headers={"traceparent": tp})
                self.assertEqual(st, 400, b)
                self.assertEqual(b["error"]["field"], "traceparent")
        st, b, _ = self.s.get("/v1/queues/tr-bad")
        self.assertEqual(b["queue"]["counts"]["waiting"], 0, "nothing half-written")


class CollectorDownTest(unittest.TestCase):
    def test_a_collector_that_is_down_loses_spans_never_jobs(self):
        port = free_port()  # nothing listens there
        with Server(args=["--otlp-endpoint", "http://127.0.0.1:%d/v1/traces" % port]) as s:
            n = 20
            st, b, _ = s.enqueue("down", {"jobs": [{"name": "n"} for _ in range(n)]})
            self.assertEqual(st, 201, b)
            done = 0
            while done < n:
                for j in s.fetch_jobs(["down"], max=n):
                    self.assertEqual(s.complete(j["id"], j["lease_token"])[0], 200)
                    done += 1
            self.assertEqual(s.queue_info("down")["counts"]["completed"], n)

            def dropped():
                st, text, _ = s.get("/metrics")
                m = re.search(r'^errand_otlp_spans_dropped_total\{reason="export_failed"\} (\d+)$',
                              text, re.M)
                return m and int(m.group(1)) >= n
            wait_until(dropped, timeout=30, interval=0.2, what="20 spans counted as lost")
            self.assertEqual(s.metric("errand_otlp_spans_exported_total"), 0)
            self.assertGreaterEqual(s.metric("errand_otlp_export_failures_total"), 1)

    def test_a_bad_endpoint_is_refused(self):
        from harness import run_errand
        import tempfile
        for url in ["ftp://x", "127.0.0.1:4318", ""]:
            with self.subTest(url=url), tempfile.TemporaryDirectory() as d:
                rc, _, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                         "sqlite:%s/e.db" % d, "--otlp-endpoint", url])
                self.assertIsNotNone(rc)
                self.assertNotEqual(rc, 0)
                self.assertIn("otlp-endpoint", err)


if __name__ == "__main__":
    unittest.main()
