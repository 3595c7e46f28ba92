# SPDX-License-Identifier: MIT
#
# docs/openapi.yaml against the server it describes:
#
# - the document is OpenAPI 3.1 as far as cheaply checkable (openapi 3.1.x,
#   every $ref resolves, every schema is a valid JSON Schema 2020-12);
# - routes both ways: every row of er_routes (src/server/http/http_dispatch.c,
#   parsed strictly: a row the parser cannot read fails the test) is
#   documented with the same method, path template and access level
#   (x-errand-access), and every documented operation is a row; each row's
#   audit action is one AuditEntry's action enum lists. Rows of /ui and
#   /ui/... (the dashboard's pages, not the JSON API) are left out of both
#   directions by that rule alone, and their recorded responses are not
#   checked. A running server answers each documented
#   operation without its "no such endpoint" 404 or a 405, and counts it in
#   /metrics under the same route template;
# - real responses validate: RECORDED modules of the integration tests run
#   in subprocesses with ERRAND_TEST_RECORD set (harness.py records every
#   response of Server.request), then every recorded response, and the
#   responses of this file's own calls, is checked against its operation:
#   a status the operation does not document fails, and so does a body
#   that does not validate, a content type or required header missing from
#   the document, and a request body or query parameter of a 2xx reply
#   that the operation's schemas refuse. Replies of the router itself (a
#   "no such endpoint" 404, a 405, a framing 400) must have the error body.
#   Every operation with a documented 2xx must have had a validated 2xx
#   reply, unless NO_2XX_OK says why not.
#
# Needs python3-yaml and python3-jsonschema (scripts/deps).

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
from collections import Counter, defaultdict

try:
    import yaml
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match
except ImportError as e:
    raise SystemExit("test_openapi.py needs python3-yaml and python3-jsonschema "
                     "(scripts/deps installs them): %s" % e)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import REPO_ROOT, Server, qpath  # noqa: E402

SPEC_PATH = os.path.join(REPO_ROOT, "docs", "openapi.yaml")
ROUTES_C = os.path.join(REPO_ROOT, "src", "server", "http", "http_dispatch.c")
HERE = os.path.dirname(os.path.abspath(__file__))

# Integration modules whose responses are recorded and validated: fast ones
# (about 100 s one after another in a Debug build; run four at a time) that
# between them reach every operation, errors included. Longest first.
RECORDED = ["test_dispatch", "test_api", "test_sched", "test_tombstones", "test_auth",
            "test_worker_outcomes", "test_leases", "test_bad_input", "test_cursors",
            "test_wait", "test_longpoll", "test_roles", "test_lists", "test_sessions",
            "test_bulk", "test_faktory"]
PARALLEL = 4
MODULE_TIMEOUT_S = 400

# Operations with a documented 2xx that no recorded module nor this file's
# own calls get a 2xx from, with the reason. Keep it short.
NO_2XX_OK = {}

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
HTTP_OK = re.compile(r"^2\d\d$")


def is_ui(pattern):
    """The dashboard's routes: HTML pages, not the JSON API; not in openapi.yaml."""
    return pattern == "/ui" or pattern.startswith("/ui/")


# ---- the route table ----

# {EVHTTP_REQ_<METHOD>, "<pattern>", ER_ACCESS_<LEVEL>, <handler>, <flags>, <audit>},
# where <audit> is NULL or the audit action, a string literal
ROW = re.compile(r'\s*\{\s*EVHTTP_REQ_([A-Z]+)\s*,\s*"(/[^"\\\s]*)"\s*,\s*ER_ACCESS_([A-Z]+)\s*,'
                 r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*,\s*([A-Za-z0-9_|() ]+?)\s*,'
                 r'\s*(NULL|"[a-z_.]+")\s*\}\s*,?\s*', re.A)


def server_routes():
    """[(METHOD, pattern, access)] of er_routes in http_dispatch.c."""
    with open(ROUTES_C, encoding="utf-8") as f:
        return parse_routes(f.read())


def server_route_audits():
    """{(METHOD, pattern): audit action or None} of er_routes."""
    with open(ROUTES_C, encoding="utf-8") as f:
        audits = {}
        parse_routes(f.read(), audits)
        return audits


def parse_routes(src, audits=None):
    """[(METHOD, pattern, access)] of the er_routes table in C source src
    (and into audits, when given, {(METHOD, pattern): action or None}).
    Every row must parse; anything else between the braces is an error."""
    m = re.search(r"\bconst er_route er_routes\[\]\s*=\s*\{(.*?)\n\};", src, re.S)
    if not m:
        raise AssertionError("no `const er_route er_routes[] = {...};` in %s" % ROUTES_C)
    body = re.sub(r"/\*.*?\*/", " ", m.group(1), flags=re.S)
    body = re.sub(r"//[^\n]*", " ", body)
    rows, pos = [], 0
    while body[pos:].strip():
        row = ROW.match(body, pos)
        if not row:
            raise AssertionError("cannot parse er_routes at: %r" % body[pos:pos + 160].strip())
        method, pattern, access, _fn, _flags, audit = row.groups()
        rows.append((method, pattern, access.lower()))
        if audits is not None:
            audits[(method, pattern)] = None if audit == "NULL" else audit.strip('"')
        pos = row.end()
    if not rows or len(rows) != src[m.start():m.end()].count("EVHTTP_REQ_"):
        raise AssertionError("er_routes: parsed %d rows of %d" %
                             (len(rows), src[m.start():m.end()].count("EVHTTP_REQ_")))
    return rows


# ---- the document ----

def load_spec():
    with open(SPEC_PATH, encoding="utf-8") as f:
        return yaml.safe_load(f)


SPEC = load_spec()


def pointer(doc, ref):
    """The object a local $ref ("#/a/b") names; KeyError when none."""
    if not ref.startswith("#/"):
        raise KeyError("not a local reference: %s" % ref)
    node = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def deref(obj):
    while isinstance(obj, dict) and "$ref" in obj:
        obj = pointer(SPEC, obj["$ref"])
    return obj


def operations():
    """{(METHOD, template): operation} of the document."""
    ops = {}
    for path, item in SPEC["paths"].items():
        for m in METHODS:
            if m in item:
                ops[(m.upper(), path)] = item[m]
    return ops


def op_parameters(template, op):
    item = SPEC["paths"][template]
    params = {}
    for p in list(item.get("parameters", [])) + list(op.get("parameters", [])):
        p = deref(p)
        params[(p["in"], p["name"])] = p
    return params


_validators = {}


def validator(schema):
    """A Draft 2020-12 validator of schema, whose $refs resolve in the document."""
    key = json.dumps(schema, sort_keys=True)
    v = _validators.get(key)
    if v is None:
        root = dict(schema)
        root["components"] = SPEC["components"]
        v = _validators[key] = Draft202012Validator(root)
    return v


def schema_error(schema, value):
    """None when value validates, else the best error as one line."""
    err = best_match(validator(schema).iter_errors(value))
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path)
    return "at /%s: %s" % (where, err.message[:300])


def template_regex(template):
    parts = re.split(r"(\{[a-z_]+\})", template)
    return re.compile("^" + "".join("([^/]+)" if p.startswith("{") else re.escape(p)
                                    for p in parts) + "$")


TEMPLATES = sorted(((template_regex(t), t) for t in SPEC["paths"]),
                   key=lambda rt: rt[1].count("{"))


def match_template(path):
    for rx, t in TEMPLATES:
        if rx.match(path):
            return t
    return None


def base_type(ct):
    return (ct or "").split(";")[0].strip().lower()


def error_message(body):
    try:
        return json.loads(body)["error"]["message"]
    except (ValueError, TypeError, KeyError):
        return None


def error_field(body):
    try:
        return json.loads(body)["error"]["field"]
    except (ValueError, TypeError, KeyError):
        return None


# ---- validating recorded responses ----

class Report:
    def __init__(self):
        self.validated = defaultdict(Counter)  # (METHOD, template) -> status -> n
        self.ok_from = defaultdict(set)        # (METHOD, template) -> sources of a 2xx
        self.routing = Counter()               # unrouted replies: "404 no such endpoint", ...
        self.skipped = Counter()               # why a reply's body was not checked
        self.failures = []

    def fail(self, rec, why):
        if len(self.failures) < 5000:
            self.failures.append("%s %s -> %s: %s" % (rec["method"], rec["path"], rec["status"],
                                                      why))

    def check(self, rec, source="?"):
        split = urllib.parse.urlsplit(rec["path"])
        path, query = split.path, split.query
        status, body = rec["status"], rec.get("body")
        ct = rec["headers"].get("content-type")
        method = rec["method"].upper()
        head = method == "HEAD"
        if is_ui(path):  # the dashboard's pages: not in the document
            self.skipped["dashboard (/ui) replies"] += 1
            return
        ops = operations()
        template = match_template(path)
        op = ops.get(("GET" if head else method, template)) if template else None
        if op is None:
            # errors of the router itself, before any operation: no such
            # path, another method, bad framing
            msg = error_message(body) if body is not None else None
            if status == 404 and (msg == "no such endpoint" or (head and template is None)):
                kind = "404 no such endpoint"
            elif status == 405 and template is not None:
                kind = "405 method not allowed"
                if not rec["headers"].get("allow"):
                    self.fail(rec, "a 405 without Allow")
            elif status == 400 and error_field(body) == "headers":
                kind = "400 framing"
            else:
                self.fail(rec, "no documented operation for %s %s" % (method, path))
                return
            self.routing[kind] += 1
            if body is not None and not head:
                why = schema_error({"$ref": "#/components/schemas/Error"}, _json(body))
                if why:
                    self.fail(rec, "router error body: " + why)
            return
        key = ("GET" if head else method, template)
        resp = op["responses"].get(str(status))
        if resp is None:
            self.fail(rec, "status %s is not documented for %s %s (documented: %s)"
                      % (status, key[0], template, ", ".join(sorted(op["responses"]))))
            return
        resp = deref(resp)
        content = resp.get("content", {})
        for name, h in resp.get("headers", {}).items():
            got = rec["headers"].get(name.lower())
            if got is None:
                if h.get("required"):
                    self.fail(rec, "no %s header" % name)
            elif schema_error(h.get("schema", {}), got):
                self.fail(rec, "header %s: %s" % (name, schema_error(h.get("schema", {}), got)))
        # a HEAD reply of a JSON route has no Content-Type (libevent adds
        # its default only to a body), as /healthz's does
        if content and base_type(ct) not in content and not (head and ct is None):
            self.fail(rec, "content type %r is not documented (%s)" % (ct, ", ".join(content)))
            return
        if head:
            if rec.get("body_len"):
                self.fail(rec, "a HEAD reply has a body")
            self.validated[key]["HEAD " + str(status)] += 1
            return
        if not content:
            if rec.get("body_len"):
                self.fail(rec, "a body where none is documented")
            self.validated[key][str(status)] += 1
            return
        if body is None:
            self.skipped["reply body over RECORD_MAX"] += 1
            return
        schema = content[base_type(ct)].get("schema", {})
        value = _json(body) if base_type(ct) == "application/json" else body
        if value is _BAD:
            self.fail(rec, "the body is not JSON: %r" % body[:200])
            return
        why = schema_error(schema, value)
        if why:
            self.fail(rec, "reply body: %s; body %s" % (why, body[:300]))
            return
        if HTTP_OK.match(str(status)):
            self.check_request(rec, key, op, query)
            self.ok_from[key].add(source)
        self.validated[key][str(status)] += 1

    def check_request(self, rec, key, op, query):
        """A request the server accepted must be one the document allows."""
        params = op_parameters(key[1], op)
        takes_query = any(where == "query" for where, _ in params)
        for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True):
            p = params.get(("query", k))
            if p is None:
                if takes_query:
                    self.fail(rec, "query parameter %r is not documented" % k)
                continue
            schema = p.get("schema", {})
            value = v
            if deref(schema).get("type") == "integer":
                try:
                    value = int(v)
                except ValueError:
                    pass
            why = schema_error(schema, value)
            if why:
                self.fail(rec, "query parameter %s=%r: %s" % (k, v, why))
        body = op.get("requestBody")
        if body is None or rec.get("request") is None:
            if body is not None:
                self.skipped["request body absent or over RECORD_MAX"] += 1
            return
        schema = deref(body)["content"]["application/json"]["schema"]
        value = _json(rec["request"])
        if value is _BAD:
            self.fail(rec, "an accepted request body is not JSON")
            return
        why = schema_error(schema, value)
        if why:
            self.fail(rec, "accepted request body refused by the schema: %s; request %s"
                      % (why, rec["request"][:300]))

    def summary(self):
        lines = []
        for (m, t) in sorted(operations(), key=lambda k: (k[1], k[0])):
            c = self.validated.get((m, t), Counter())
            shown = ", ".join("%s x%d" % (s, n) for s, n in sorted(c.items()))
            own = " (2xx from own calls only)" if self.ok_from.get((m, t)) == {"own"} else ""
            lines.append("  %-6s %-32s %5d  %s%s" % (m, t, sum(c.values()), shown or "-", own))
        lines.append("  router errors: %s" % dict(self.routing))
        if self.skipped:
            lines.append("  not checked: %s" % dict(self.skipped))
        return "\n".join(lines)


_BAD = object()


def _json(text):
    try:
        return json.loads(text)
    except (ValueError, TypeError):
        return _BAD


def read_records(path):
    out = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    out.append(json.loads(line))
    return out


# ---- the tests ----

class DocumentTest(unittest.TestCase):
    def test_openapi_31_refs_and_schemas(self):
        self.assertRegex(str(SPEC.get("openapi")), r"^3\.1\.\d+$")
        for k in ("info", "paths", "components"):
            self.assertIn(k, SPEC)
        refs = []

        def walk(node, where):
            if isinstance(node, dict):
                if isinstance(node.get("$ref"), str):
                    refs.append((node["$ref"], where))
                for k, v in node.items():
                    walk(v, where + "/" + str(k))
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, "%s/%d" % (where, i))
        walk(SPEC, "#")
        self.assertTrue(refs)
        for ref, where in refs:
            try:
                pointer(SPEC, ref)
            except (KeyError, IndexError, ValueError) as e:
                self.fail("%s: $ref %s does not resolve (%s)" % (where, ref, e))
        schemas = list(SPEC["components"]["schemas"].items())
        ops = operations()
        for (m, t), op in ops.items():
            for (where, name), p in op_parameters(t, op).items():
                schemas.append(("%s %s parameter %s" % (m, t, name), p["schema"]))
            if "requestBody" in op:
                for mt, c in deref(op["requestBody"])["content"].items():
                    schemas.append(("%s %s request %s" % (m, t, mt), c["schema"]))
            for st, r in op["responses"].items():
                for mt, c in deref(r).get("content", {}).items():
                    schemas.append(("%s %s %s %s" % (m, t, st, mt), c["schema"]))
                for h, hd in deref(r).get("headers", {}).items():
                    schemas.append(("%s %s %s header %s" % (m, t, st, h), hd["schema"]))
        for name, schema in schemas:
            try:
                Draft202012Validator.check_schema(schema)
            except Exception as e:  # SchemaError; its message names the keyword
                self.fail("%s is not a valid JSON Schema: %s" % (name, str(e)[:400]))
            validator(schema)  # builds with the document's components
        ids = [op.get("operationId") for op in ops.values()]
        self.assertEqual(len(ids), len(set(ids)), "operationIds must be unique")
        self.assertNotIn(None, ids, "every operation has an operationId")
        for (m, t), op in ops.items():
            self.assertTrue(op.get("responses"), "%s %s documents no response" % (m, t))
            declared = {n for (where, n) in op_parameters(t, op) if where == "path"}
            self.assertEqual(declared, set(re.findall(r"\{([a-z_]+)\}", t)),
                             "%s %s: path parameters" % (m, t))
            for st in op["responses"]:
                self.assertRegex(str(st), r"^[1-5]\d\d$", "%s %s" % (m, t))


    def test_full_openapi_validator_when_installed(self):
        """openapi-spec-validator (not a Debian 12 package) checks the whole
        document against the OpenAPI 3.1 schema where it is installed."""
        try:
            from openapi_spec_validator import validate
        except ImportError:
            self.skipTest("openapi-spec-validator is not installed")
        validate(SPEC)

    def test_validation_refuses_what_it_should(self):
        """The validator sees the document's schemas (refs resolved, strict)."""
        err = {"error": {"code": "not_found", "message": "job 'x' not found", "field": "id"}}
        self.assertIsNone(schema_error({"$ref": "#/components/schemas/NotFoundError"}, err))
        for bad in ({"error": dict(err["error"], code="conflict")},
                    {"error": dict(err["error"], extra=1)},
                    {"error": {"code": "not_found", "message": "m"}}):
            self.assertIsNotNone(schema_error({"$ref": "#/components/schemas/NotFoundError"},
                                              bad), bad)
        self.assertIsNotNone(schema_error({"$ref": "#/components/schemas/JobEnvelope"},
                                          {"job": {}}))
        self.assertIsNotNone(schema_error({"$ref": "#/components/schemas/JobSpec"},
                                          {"name": "n", "priority": 1001}))
        self.assertIsNone(schema_error({"$ref": "#/components/schemas/JobSpec"},
                                       {"name": "n", "priority": None, "payload": None}))
        # a viewer's job and scheduler: redacted members are null, and only they
        job = {"id": "j", "queue": "q", "name": "n", "payload": None, "state": "completed",
               "priority": 0, "group": None, "run_at": "2026-01-01T00:00:00.000Z",
               "max_attempts": 3, "backoff": {"type": "fixed", "delay_ms": 0,
                                              "max_delay_ms": 0, "jitter": 0},
               "timeout_ms": 1000, "trace_id": None, "idempotency_key": "j", "attempts": 1,
               "started": 1, "stalled": 0, "lease_owner": None, "lease_expires_at": None,
               "last_error": None, "result": None, "progress": None,
               "created_at": "2026-01-01T00:00:00.000Z",
               "updated_at": "2026-01-01T00:00:00.000Z", "started_at": None,
               "finished_at": None, "redriven_at": None, "redrive_count": 0,
               "redacted": ["payload", "result"]}
        self.assertIsNone(schema_error({"$ref": "#/components/schemas/Job"}, job))
        for bad in ({"payload": {"p": 1}}, {"result": 1}, {"redacted": ["payload"]},
                    {"redacted": ["payload", "progress"]}):
            self.assertIsNotNone(schema_error({"$ref": "#/components/schemas/Job"},
                                              dict(job, **bad)), bad)
        sched = {"cron": "0 3 * * *", "tz": "UTC", "queue": "q", "name": "n", "payload": None,
                 "missed": "skip", "max_catchup": 24, "key": "k",
                 "created_at": "2026-01-01T00:00:00.000Z",
                 "updated_at": "2026-01-01T00:00:00.000Z", "last_tick": None,
                 "next_run_at": None, "next_runs": [], "redacted": ["payload"]}
        self.assertIsNone(schema_error({"$ref": "#/components/schemas/Scheduler"}, sched))
        self.assertIsNotNone(schema_error({"$ref": "#/components/schemas/Scheduler"},
                                          dict(sched, payload={})))
        del sched["redacted"]
        self.assertIsNotNone(schema_error({"$ref": "#/components/schemas/Scheduler"}, sched))


class RoutesTest(unittest.TestCase):
    def test_route_table_parser_is_strict(self):
        rows = server_routes()
        self.assertGreaterEqual(len(rows), 30)
        self.assertIn(("POST", "/v1/fetch", "work"), rows)
        self.assertIn(("POST", "/v1/schedulers/{key}/trigger", "admin"), rows)  # two lines
        self.assertIn(("GET", "/ui", "open"), rows)
        self.assertTrue(is_ui("/ui") and is_ui("/ui/") and is_ui("/ui/assets/{name}"))
        self.assertFalse(is_ui("/uix") or is_ui("/v1/ui"))
        table = ("const er_route er_routes[] = {\n"
                 "    {EVHTTP_REQ_GET, \"/a\", ER_ACCESS_OPEN, er_route_a, 0, NULL}, /* a */\n"
                 "    {EVHTTP_REQ_POST, \"/b/{id}\", ER_ACCESS_WORK, er_route_b,\n"
                 "     ER_ACK_FAIL, \"b.fail\"},\n%s};\n")
        audits = {}
        self.assertEqual(parse_routes(table % "", audits),
                         [("GET", "/a", "open"), ("POST", "/b/{id}", "work")])
        self.assertEqual(audits, {("GET", "/a"): None, ("POST", "/b/{id}"): "b.fail"})
        for bad in ("#ifdef X\n", "    {EVHTTP_REQ_GET, ROUTE_C, ER_ACCESS_READ, f, 0, NULL},\n",
                    "    ROUTES_MORE\n", "    {EVHTTP_REQ_GET, \"/c\", f, 0, NULL},\n",
                    "    {EVHTTP_REQ_GET, \"/c\", ER_ACCESS_READ, f, 0},\n",
                    "    {EVHTTP_REQ_GET, \"/c\", ER_ACCESS_READ, f, 0, AUDIT_C},\n"):
            with self.assertRaises(AssertionError, msg=bad):
                parse_routes(table % bad)
        with self.assertRaises(AssertionError):
            parse_routes("static const er_route other[] = {};")

    def test_routes_both_ways(self):
        table = {(m, p): a for m, p, a in server_routes() if not is_ui(p)}
        ops = operations()
        documented = {k for k in ops if not is_ui(k[1])}
        self.assertEqual(sorted(set(table) - documented), [],
                         "routes of er_routes that docs/openapi.yaml does not document")
        self.assertEqual(sorted(documented - set(table)), [],
                         "operations of docs/openapi.yaml that er_routes does not have")
        for k, access in table.items():
            self.assertEqual(ops[k].get("x-errand-access"), access,
                             "%s %s: x-errand-access must be the route's ER_ACCESS_%s"
                             % (k[0], k[1], access.upper()))
            open_ = access == "open"
            self.assertEqual(ops[k].get("security") == [], open_,
                             "%s %s: security [] exactly when the route is open" % k)
            if not open_:
                self.assertIn("401", ops[k]["responses"], "%s %s" % k)
            if access not in ("open", "read"):
                self.assertIn("403", ops[k]["responses"], "%s %s" % k)
        actions = set(deref(SPEC["components"]["schemas"]["AuditEntry"])["properties"]
                      ["action"]["enum"])
        for k, audit in server_route_audits().items():
            if audit is not None:
                self.assertIn(audit, actions, "%s %s: audit action %s is not in AuditEntry"
                              % (k[0], k[1], audit))

    def test_every_documented_operation_is_served(self):
        """Each documented operation reaches its route on a real server (no
        "no such endpoint" 404, no 405), and /metrics counts it under the
        same method and route template."""
        with tempfile.TemporaryDirectory(prefix="errand-openapi-") as tmp:
            rec_path = os.path.join(tmp, "probe.jsonl")
            old, harness.RECORD = harness.RECORD, rec_path
            try:
                with Server() as s:
                    for (m, t) in sorted(operations()):
                        path = re.sub(r"\{[a-z_]+\}", "openapi-probe", t)
                        body = {} if m in ("POST", "PUT") else None
                        st, b, _ = s.request(m, path, body=body)
                        self.assertNotEqual(st, 405, "%s %s: %r" % (m, path, b))
                        self.assertFalse(st == 404 and isinstance(b, dict) and
                                         b.get("error", {}).get("message") == "no such endpoint",
                                         "%s %s: no such endpoint" % (m, path))
                    st, text, _ = s.get("/metrics")
                    self.assertEqual(st, 200)
                counted = set(re.findall(r'^errand_http_requests_total\{method="([A-Z]+)",'
                                         r'route="([^"]+)",', text, re.M))
                for m, t in operations():
                    shown = m if m in ("GET", "POST", "PUT", "DELETE") else "OTHER"
                    self.assertIn((shown, t), counted, "/metrics does not count %s %s" % (m, t))
            finally:
                harness.RECORD = old
            rep = Report()
            for rec in read_records(rec_path):
                rep.check(rec)
            self.assertEqual(rep.failures, [], "\n".join(rep.failures[:40]))


class ResponsesTest(unittest.TestCase):
    """Real responses validate against the document."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="errand-openapi-")
        cls.outcomes = run_recorded(cls.tmp)

    @classmethod
    def tearDownClass(cls):
        if not os.environ.get("ERRAND_KEEP_TMP"):
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_recorded_and_own_responses_validate(self):
        own = os.path.join(self.tmp, "own.jsonl")
        old, harness.RECORD = harness.RECORD, own
        try:
            own_calls(self)
        finally:
            harness.RECORD = old
        rep = Report()
        n = 0
        for name in RECORDED + ["own"]:
            for rec in read_records(os.path.join(self.tmp, name + ".jsonl")):
                rep.check(rec, name)
                n += 1
        print("\nopenapi: %d responses checked; modules: %s\n%s"
              % (n, ", ".join("%s %s" % kv for kv in self.outcomes.items()), rep.summary()),
              file=sys.stderr)
        self.assertGreater(n, 1000, "too few responses recorded: %s" % self.outcomes)
        self.assertEqual(rep.failures, [], "%d responses do not match docs/openapi.yaml:\n%s"
                         % (len(rep.failures), "\n".join(rep.failures[:60])))
        missing = []
        for k, op in operations().items():
            if not any(HTTP_OK.match(st) for st in op["responses"]):
                continue
            got = any(HTTP_OK.match(st) for st in rep.validated.get(k, {}))
            if not got and k not in NO_2XX_OK:
                missing.append("%s %s" % k)
            if got and k in NO_2XX_OK:
                missing.append("%s %s is in NO_2XX_OK but had a 2xx: drop it" % k)
        self.assertEqual(missing, [], "operations without a validated 2xx reply")


def run_recorded(tmp):
    """Runs the RECORDED modules, PARALLEL at a time, each recording to
    tmp/NAME.jsonl. Returns {name: "ok" | "failed (rc)" | "timed out"}.
    A module's own failures are its own test's to report; here only the
    responses count (a module that ran short shows as missing coverage)."""
    env = dict(os.environ)
    env.pop("ERRAND_TEST_PG_URL", None)  # SQLite only: fast, and the writers are the same
    env["ERRAND_TEST_PG_SKIP"] = "1"
    pending, running, outcomes = list(RECORDED), [], {}
    while pending or running:
        while pending and len(running) < PARALLEL:
            name = pending.pop(0)
            env["ERRAND_TEST_RECORD"] = os.path.join(tmp, name + ".jsonl")
            log = open(os.path.join(tmp, name + ".log"), "wb")
            p = subprocess.Popen([sys.executable, os.path.join(HERE, name + ".py")], env=env,
                                 stdout=log, stderr=subprocess.STDOUT, cwd=HERE)
            running.append((name, p, log, time.monotonic()))
        time.sleep(0.1)
        for item in list(running):
            name, p, log, t0 = item
            if p.poll() is None and time.monotonic() - t0 < MODULE_TIMEOUT_S:
                continue
            if p.poll() is None:
                p.kill()
                p.wait()
                outcomes[name] = "timed out"
            else:
                outcomes[name] = "ok" if p.returncode == 0 else "failed (%d)" % p.returncode
            outcomes[name] += " %.0fs" % (time.monotonic() - t0)
            log.close()
            running.remove(item)
    return outcomes


def own_calls(t):
    """A 2xx of every operation, whatever the recorded modules reach (one
    that failed or was cut short must not hide a route), and reply shapes
    they may not produce: every policy setting set, acks of each kind, a
    duplicate trigger, a held lease's conflict, a released lease, a wait
    for an outcome that ends at once, pages of the lease and cursor lists,
    what a viewer is shown (redacted jobs and schedulers), bulk actions by
    ids and by a filter (a dry run too), the audit log's pages, and a
    dashboard session used in place of the token (with and without its
    CSRF token, a foreign Host, an unknown session). Recorded
    to own.jsonl by the caller; each status is asserted, so a call that
    stops working shows here."""
    def ok(st, b, want=200):
        t.assertEqual(st, want, b)
        return b

    with Server() as s:
        ok(*s.get("/healthz")[:2])
        ok(*s.get("/readyz")[:2])
        # a dead letter, redriven and deleted
        q = "openapi-dead"
        ok(*s.enqueue(q, {"name": "n", "id": "oa-dead", "max_attempts": 1})[:2], want=201)
        job = s.fetch_jobs(q)[0]
        b = ok(*s.fail(job["id"], job["lease_token"],
                       {"class": "permanent", "message": "m", "backtrace": ["x"]})[:2])
        t.assertEqual(b["state"], "dead")
        ok(*s.get("/v1/dead?queue=" + q + "&limit=5")[:2])
        ok(*s.post("/v1/dead/oa-dead/redrive")[:2], want=201)
        ok(*s.request("DELETE", "/v1/dead/oa-dead")[:2])
        # cancel, list, queue settings
        ok(*s.enqueue(q, {"name": "n", "id": "oa-cancel", "delay_ms": 60000})[:2], want=201)
        ok(*s.get("/v1/queues/%s/jobs?state=scheduled&limit=1" % q)[:2])
        ok(*s.request("DELETE", "/v1/jobs/oa-cancel")[:2])
        ok(*s.put_queue("openapi-settings", {"rate_limit": {"max": 5, "per_ms": 1000}, "aging":
                            {"per_s": 1.5, "max_boost": 10}, "group_limits":
                            {"concurrency": 2}, "fairness": {"weights": {"g": 2}},
                            "retention": {"dead": {"age_s": 3600}},
                            "defaults": {"backoff": {"type": "fixed"}}})[:2])
        ok(*s.post("/v1/queues/openapi-settings/pause")[:2])
        ok(*s.post("/v1/queues/openapi-settings/resume")[:2])
        ok(*s.get("/v1/queues/openapi-settings")[:2])
        # a bulk enqueue with a duplicate, then acks of each kind on a fetch
        ok(*s.enqueue(q, {"jobs": [{"name": "a", "id": "oa-1"}, {"name": "b", "id": "oa-2"},
                                   {"name": "c", "id": "oa-3"}, {"name": "a", "id": "oa-1"}]})[:2],
           want=201)
        ok(*s.enqueue(q, {"name": "a", "id": "oa-1"})[:2])
        jobs = s.fetch_jobs(q, max=3)
        t.assertEqual(len(jobs), 3)
        hb = ok(*s.post("/v1/jobs/%s/heartbeat" % qpath(jobs[0]["id"]),
                        {"lease_token": jobs[0]["lease_token"], "progress": {"pct": 1}})[:2])
        t.assertIn("lease_expires_at", hb)
        acks = [{"id": jobs[0]["id"], "lease_token": jobs[0]["lease_token"],
                 "complete": {"result": 1}},
                {"id": jobs[1]["id"], "lease_token": jobs[1]["lease_token"],
                 "fail": {"error": {"class": "retry_later", "delay_ms": 10}}},
                {"id": jobs[2]["id"], "lease_token": "stale", "release": {}}]
        ok(*s.fetch(q, acks=acks)[:2])
        st, b, _ = s.post("/v1/acks", {"acks": [{"id": jobs[2]["id"], "lease_token":
                                                 jobs[2]["lease_token"], "release": {}}]})
        ok(st, b)
        ok(*s.get("/v1/jobs/" + qpath(jobs[0]["id"]))[:2])
        # a wait that ends at once: the job is finished; wait_ms=0 never waits
        b = ok(*s.get("/v1/jobs/%s?wait_ms=5000" % qpath(jobs[0]["id"]))[:2])
        t.assertEqual(b["job"]["state"], "completed")
        ok(*s.get("/v1/jobs/%s?wait_ms=0" % qpath(jobs[1]["id"]))[:2])
        ok(*s.get("/v1/queues")[:2])
        ok(*s.enqueue(q, {"name": "n", "id": "oa-4"})[:2], want=201)
        ok(*s.enqueue(q, {"name": "n", "id": "oa-5"})[:2], want=201)
        for job in s.fetch_jobs(q, max=10):
            if job["id"] == "oa-4":
                ok(*s.complete(job["id"], job["lease_token"], result={"r": 1})[:2])
            else:
                ok(*s.post("/v1/jobs/%s/release" % qpath(job["id"]),
                           {"lease_token": job["lease_token"]})[:2])
        # cron, schedulers, trigger twice
        ok(*s.get("/v1/cron/next?expr=0+3+*+*+*&tz=Asia/Ho_Chi_Minh&count=2")[:2])
        ok(*s.request("PUT", "/v1/schedulers/oa-s", body={
            "cron": "0 3 * * *", "tz": "Europe/Paris", "queue": q, "name": "tick",
            "job": {"priority": 3, "backoff": {"jitter": 0}}})[:2], want=201)
        ok(*s.get("/v1/schedulers?limit=1")[:2])
        ok(*s.get("/v1/schedulers/oa-s")[:2])
        st, b, _ = s.post("/v1/schedulers/oa-s/trigger")
        t.assertIn(st, (200, 201), b)
        ok(*s.post("/v1/schedulers/oa-s/trigger")[:2])
        ok(*s.request("DELETE", "/v1/schedulers/oa-s")[:2])
        # a lease taken, held, renewed, completed; then released
        a = ok(*s.post("/v1/leases", {"type": "t", "code": "c", "run_key": "1"})[:2])
        ok(*s.post("/v1/leases", {"type": "t", "code": "c", "run_key": "1"})[:2], want=409)
        ok(*s.post("/v1/leases/renew", {"owner_token": a["owner_token"], "ttl_ms": 5000})[:2])
        ok(*s.post("/v1/leases/complete", {"owner_token": a["owner_token"]})[:2])
        a = ok(*s.post("/v1/leases", {"type": "t", "code": "c", "run_key": "2"})[:2])
        ok(*s.post("/v1/leases/release", {"owner_token": a["owner_token"]})[:2])
        # cursors
        ok(*s.request("PUT", "/v1/cursors/oa-c", body={"value": {"at": 1}, "expected": None})[:2])
        ok(*s.request("PUT", "/v1/cursors/oa-c", body={"value": 2, "expected": {"at": 0}})[:2],
           want=409)
        ok(*s.get("/v1/cursors/oa-c")[:2])
        # the lists of leases (held, done, free) and cursors, a page and the next
        ok(*s.post("/v1/leases", {"type": "t", "code": "c", "run_key": "3"})[:2])
        b = ok(*s.get("/v1/leases?limit=2")[:2])
        t.assertEqual(len(b["leases"]), 2)
        t.assertEqual({x["state"] for x in ok(*s.get("/v1/leases?cursor=")[:2])["leases"]},
                      {"held", "done", "free"})
        ok(*s.get("/v1/leases?limit=2&cursor=" + b["next_cursor"])[:2])
        ok(*s.request("PUT", "/v1/cursors/oa-d", body={"value": [1, "x"]})[:2])
        b = ok(*s.get("/v1/cursors?limit=1")[:2])
        ok(*s.get("/v1/cursors?cursor=" + b["next_cursor"])[:2])
        # bulk actions: by ids, a filter's dry run and action; the audit log's pages
        q = "openapi-bulk"
        for i in range(3):
            ok(*s.enqueue(q, {"name": "b", "id": "oa-b%d" % i, "delay_ms": 60000})[:2], want=201)
        b = ok(*s.post("/v1/bulk", {"action": "cancel", "ids": ["oa-b0", "oa-nope"]})[:2])
        t.assertEqual((b["count"], b["chunks"]), (1, 1))
        flt = {"queue": q, "state": "scheduled", "name": None}
        b = ok(*s.post("/v1/bulk", {"action": "cancel", "dry_run": True, "filter": flt})[:2])
        t.assertEqual(b, {"action": "cancel", "count": 2, "dry_run": True})
        ok(*s.post("/v1/bulk", {"action": "cancel", "dry_run": False,
                                "filter": {"queue": q, "state": "scheduled", "name": "b"}})[:2])
        ok(*s.post("/v1/bulk", {"action": "redrive", "filter": {"queue": q}})[:2])
        b = ok(*s.get("/v1/audit?limit=2")[:2])
        t.assertEqual(len(b["entries"]), 2)
        ok(*s.get("/v1/audit?cursor=" + b["next_cursor"])[:2])
        ok(*s.get("/metrics")[:2])
        ok(*s.request("HEAD", "/v1/queues")[:2])
    # what a viewer is shown: jobs, dead letters and schedulers without payloads
    admin, viewer = "a" * 27 + "admin", "v" * 26 + "viewer"
    with Server(args=["--token", "admin:" + admin, "--token", "viewer@oa:" + viewer],
                token=admin) as s:
        q = "openapi-viewer"
        ok(*s.enqueue(q, {"name": "n", "id": "oa-v1", "payload": {"p": 1}})[:2], want=201)
        ok(*s.enqueue(q, {"name": "n", "id": "oa-v2", "max_attempts": 1})[:2], want=201)
        for job in s.fetch_jobs(q, max=2):
            if job["id"] == "oa-v1":
                ok(*s.complete(job["id"], job["lease_token"], result={"r": 1})[:2])
            else:
                ok(*s.fail(job["id"], job["lease_token"], {"class": "permanent"})[:2])
        ok(*s.request("PUT", "/v1/schedulers/oa-vs", body={
            "cron": "0 3 * * *", "queue": q, "name": "tick", "payload": {"p": 2}})[:2], want=201)
        b = ok(*s.get("/v1/jobs/oa-v1?wait_ms=0", token=viewer)[:2])
        t.assertEqual((b["job"]["payload"], b["job"]["result"], b["job"]["redacted"]),
                      (None, None, ["payload", "result"]))
        ok(*s.get("/v1/queues/%s/jobs?state=completed" % q, token=viewer)[:2])
        ok(*s.get("/v1/dead?queue=" + q, token=viewer)[:2])
        b = ok(*s.get("/v1/schedulers/oa-vs", token=viewer)[:2])
        t.assertEqual((b["scheduler"]["payload"], b["scheduler"]["redacted"]), (None, ["payload"]))
        ok(*s.get("/v1/schedulers", token=viewer)[:2])
        ok(*s.get("/v1/leases", token=viewer)[:2])
        ok(*s.get("/v1/cursors", token=viewer)[:2])
        ok(*s.get("/v1/jobs/oa-v1", token=admin)[:2])
        # a dashboard session in place of the token: its CSRF token on changes, its Host
        st, _, h = s.request("POST", "/ui/login", raw="token=" + admin, token=None,
                             headers={"Content-Type": "application/x-www-form-urlencoded",
                                      "Origin": "http://127.0.0.1:%d" % s.port})
        t.assertEqual(st, 303)
        cookie = {"Cookie": h["set-cookie"].split(";")[0]}
        csrf = ok(*s.get("/ui/session", token=None, headers=cookie)[:2])["csrf_token"]
        ok(*s.get("/v1/audit", token=None, headers=cookie)[:2])
        ok(*s.post("/v1/queues/openapi-viewer/pause", token=None,
                   headers=dict(cookie, **{"X-CSRF-Token": csrf}))[:2])
        ok(*s.post("/v1/queues/openapi-viewer/resume", token=None, headers=cookie)[:2], want=403)
        ok(*s.get("/v1/queues", token=None, headers=dict(cookie, Host="evil.example"))[:2],
           want=403)
        ok(*s.get("/v1/queues", token=None, headers={"Cookie": "errand_session=" + "ab" * 32})[:2],
           want=401)


if __name__ == "__main__":
    unittest.main()
