#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# Writes tests/store/enqueue_corpus.jsonl: enqueue request bodies and the
# verdict each must get (test_enqueue_corpus.c runs them through the HTTP
# frontend's jansson and fast readers and through PostgreSQL's
# errand.enqueue_job, which must all agree). One line per document:
#   {"doc": "<body as sent>", "expect": "ok" | "<field>" | "body", "why": "..."}
# "body" means the text is not a JSON object the API accepts at all. A line
# may add "pg": the verdict errand.enqueue_job gives instead, with
# "exception": why it may differ (jsonb normalises what it is given), or
# "pg_message": why its message may differ. "doc_hex" replaces "doc" for
# bytes that are not UTF-8. The limits the test runs with: payload_max 1024.
#   python3 tests/store/gen_enqueue_corpus.py > tests/store/enqueue_corpus.jsonl
import json

rows = []


def add(doc, expect, why, **kw):
    r = {"doc": doc if isinstance(doc, str) else json.dumps(doc, ensure_ascii=False),
         "expect": expect, "why": why}
    r.update(kw)
    rows.append(r)


def raw(text, expect, why, **kw):
    rows.append(dict({"doc": text, "expect": expect, "why": why}, **kw))


N = {"name": "n"}


def j(**kw):
    d = dict(N)
    d.update(kw)
    return d


# ---- accepted: every field, and null meaning "not given" ----
add(N, "ok", "the minimal request")
add({"name": "send-email", "payload": {"to": "a@b", "n": [1, 2]}}, "ok", "a payload object")
add(j(payload=None), "ok", "a null payload is a payload")
add(j(payload="text"), "ok", "a string payload")
add(j(payload=[1, "x", None, True]), "ok", "an array payload")
add(j(payload=-5), "ok", "a number payload")
add(j(payload=False), "ok", "a boolean payload")
add(j(id="job-1"), "ok", "a client id")
add(j(id="!#$%&'()*+,-.:;<=>?@[]^_`{|}~"), "ok", "every punctuation an id may hold")
add(j(priority=0), "ok", "priority 0")
add(j(priority=1000), "ok", "priority at the limit")
add(j(delay_ms=0), "ok", "no delay")
add(j(delay_ms=31622400000), "ok", "delay at the limit (366 days)")
add(j(max_attempts=1), "ok", "one attempt")
add(j(max_attempts=1000), "ok", "max_attempts at the limit")
add(j(timeout_ms=1), "ok", "timeout 1 ms")
add(j(timeout_ms=86400000), "ok", "timeout at the limit")
add(j(group="tenant:42"), "ok", "a group")
add(j(trace_id="tr~1"), "ok", "a trace id")
add(j(idempotency_key="key-1"), "ok", "an idempotency key")
add(j(id=None, priority=None, delay_ms=None, run_at=None, max_attempts=None, backoff=None,
      timeout_ms=None, group=None, trace_id=None, idempotency_key=None),
    "ok", "every option null")
add({"name": "n", "payload": {"x": 1}, "id": "all-1", "priority": 7, "delay_ms": 5000,
     "max_attempts": 3, "backoff": {"type": "fixed", "delay_ms": 100, "max_delay_ms": 200,
                                    "jitter": 0.25},
     "timeout_ms": 1000, "group": "g", "trace_id": "t-1", "idempotency_key": "k-1"},
    "ok", "every field set")
add(j(name="a.b:c-d_E9"), "ok", "every character a name may hold")
add(j(name="n" * 128), "ok", "a 128-byte name")
add(j(id="i" * 186), "ok", "a 186-byte id (room for a redriven copy's suffix)")
add(j(id="i" * 187), "id", "a 187-byte id")
add(j(id="i" * 200), "id", "a 200-byte id")
add(j(id="x-redrive-3"), "id", "the id of a redriven copy")
add(j(id="x-redrive-"), "ok", "-redrive- without a number")
add(j(idempotency_key="k" * 200), "ok", "a 200-byte idempotency key")
add(j(trace_id="t" * 200), "ok", "a 200-byte trace id")
add(j(group="g" * 128), "ok", "a 128-byte group")
raw('  {\r\n\t"name" : "n" , "payload" : { "k" : [ 1 , 2 ] } }  ', "ok", "whitespace everywhere")
raw('{"name":"n","payload":{"s":"\\u00e9\\n\\"\\\\"}}', "ok", "escapes in the payload")
add(j(payload={"s": "é日本🎉"}), "ok", "non-ASCII text in the payload")
add(j(payload={"é": 1}), "ok", "a non-ASCII key in the payload")
raw('{"name":"n","payload":{"a":1},"id":"x"}', "ok", "id after the payload")

# ---- unknown fields ----
add(j(colour="red"), "colour", "an unknown field")
add(j(jobs=[]), "jobs", "jobs in a single request is unknown")
add(j(Name="x"), "Name", "field names are case-sensitive")
add(j(queue="other"), "queue", "queue is not a body field")
add({"name": "n", "é" * 40: 1}, "é" * 40, "a non-ASCII unknown field named whole")
add({"name": "n", "é" * 100: 1}, "é" * 63, "a long unknown field cut at a character boundary")
add({"name": "n", "🎉": 1}, "🎉", "an emoji field name")
add(j(priority=5000, colour=1), "colour", "an unknown field is reported before a bad value")
add({"colour": 1, "name": 5}, "colour", "an unknown field before a bad name")
add(j(zz=1, a=2), "zz", "two unknown fields: C names the first in the text",
    pg="a", exception="jsonb orders keys (by length, then bytes), so the first unknown "
    "field it sees may be another one")
add(j(backoff={"colour": 1}), "backoff.colour", "an unknown backoff member")
add(j(backoff={"Type": "fixed"}), "backoff.Type", "backoff members are case-sensitive")

# ---- name ----
add({"payload": {}}, "name", "name is required")
add(j(name=None), "name", "a null name is no name")
add(j(name=5), "name", "a number name")
add(j(name=True), "name", "a boolean name")
add(j(name=["n"]), "name", "an array name")
add(j(name={"n": 1}), "name", "an object name")
add(j(name=""), "name", "an empty name")
add(j(name="a b"), "name", "a space in a name")
add(j(name="a/b"), "name", "a slash in a name")
add(j(name="n" * 129), "name", "a 129-byte name")
add(j(name="é"), "name", "a non-ASCII name")
add(j(name="a\tb"), "name", "a tab in a name")
raw('{"name":"a\\u0000b"}', "body", "a NUL inside a string (jansson refuses it without "
    "JSON_ALLOW_NUL, jsonb when the text is cast)")

# ---- payload size (limit 1024 bytes, serialized compactly) ----
add(j(payload="x" * 1022), "ok", "a 1024-byte payload (the string and its quotes)")
add(j(payload="x" * 1023), "payload", "a 1025-byte payload")
add(j(payload="x" * 5000), "payload", "a 5002-byte payload")
add(j(payload={"a": "x" * 900}), "ok", "a 908-byte object payload")
add(j(payload={"a": "x" * 1100}), "payload", "an object payload over the limit",
    pg_message="jsonb::text adds a space after ':'; the byte count in the message differs")

# ---- id ----
add(j(id=5), "id", "a number id")
add(j(id=""), "id", "an empty id")
add(j(id="a b"), "id", "a space in an id")
add(j(id="a/b"), "id", "a slash in an id")
add(j(id="i" * 201), "id", "a 201-byte id")
add(j(id="é"), "id", "a non-ASCII id")
add(j(id="a\u007fb"), "id", "DEL in an id")
add(j(id=["x"]), "id", "an array id")

# ---- integers: priority, delay_ms, max_attempts, timeout_ms ----
for f, lo, hi in (("priority", 0, 1000), ("delay_ms", 0, 31622400000),
                  ("max_attempts", 1, 1000), ("timeout_ms", 1, 86400000)):
    add(j(**{f: lo - 1}), f, "%s below its range" % f)
    add(j(**{f: hi + 1}), f, "%s above its range" % f)
    add(j(**{f: str(lo)}), f, "%s as a string" % f)
    add(j(**{f: True}), f, "%s as a boolean" % f)
    add(j(**{f: [lo]}), f, "%s as an array" % f)
    add(j(**{f: lo + 0.5}), f, "%s with a fraction" % f)
raw('{"name":"n","priority":1.0}', "priority", "1.0 is a real, not an integer")
raw('{"name":"n","priority":1E1}', "priority", "1E1 is a real",
    pg="ok", exception="jsonb normalises 1E1 to the integer 10")
raw('{"name":"n","priority":1e2}', "priority", "1e2 is a real",
    pg="ok", exception="jsonb normalises 1e2 to the integer 100")
raw('{"name":"n","priority":-0}', "ok", "-0 is the integer 0")
raw('{"name":"n","priority":9223372036854775807}', "priority", "the largest integer")
raw('{"name":"n","priority":99999999999999999999}', "body",
    "an integer beyond 64 bits is not JSON jansson reads",
    pg="priority", exception="jsonb keeps numbers of any size, so it is a range error")
raw('{"name":"n","max_attempts":00}', "body", "a leading zero is not JSON")

# ---- run_at and delay_ms ----
add(j(run_at="2027-06-01T00:00:00Z"), "ok", "a future time")
add(j(run_at="2027-06-01T00:00:00.000Z"), "ok", "with milliseconds")
add(j(run_at="2027-06-01T00:00:00.5Z"), "ok", "one fraction digit")
add(j(run_at="2027-06-01T00:00:00.123456789Z"), "ok", "nine fraction digits")
add(j(run_at="2027-06-01t00:00:00z"), "ok", "lower-case t and z")
add(j(run_at="2027-06-01 00:00:00Z"), "ok", "a space for the T")
add(j(run_at="2027-06-01T00:00:00+07:00"), "ok", "a positive offset")
add(j(run_at="2027-06-01T00:00:00-23:59"), "ok", "the largest negative offset")
add(j(run_at="2027-06-30T23:59:60Z"), "ok", "a leap second")
add(j(run_at="2024-02-29T00:00:00Z"), "ok", "a leap day (past: it means now)")
add(j(run_at="2020-01-01T00:00:00Z"), "ok", "a past time means now")
add(j(run_at="1970-01-01T00:00:00Z"), "ok", "the epoch")
add(j(run_at="1970-01-01T00:00:00+01:00"), "ok", "before the epoch by its offset")
add(j(run_at="tomorrow"), "run_at", "a word is not a time")
add(j(run_at="now"), "run_at", "now is not a time")
add(j(run_at="2027-06-01"), "run_at", "a date alone")
add(j(run_at="2027-06-01T00:00"), "run_at", "no seconds")
add(j(run_at="2027-06-01T00:00:00"), "run_at", "no zone")
add(j(run_at="2027-06-01T00:00:00.Z"), "run_at", "a dot without digits")
add(j(run_at="2027-13-01T00:00:00Z"), "run_at", "month 13")
add(j(run_at="2027-06-31T00:00:00Z"), "run_at", "June 31")
add(j(run_at="2027-02-29T00:00:00Z"), "run_at", "February 29 of a common year")
add(j(run_at="2027-06-01T24:00:00Z"), "run_at", "hour 24")
add(j(run_at="2027-06-01T00:60:00Z"), "run_at", "minute 60")
add(j(run_at="2027-06-01T00:00:61Z"), "run_at", "second 61")
add(j(run_at="2027-06-01T00:00:00+24:00"), "run_at", "offset hour 24")
add(j(run_at="2027-06-01T00:00:00+0700"), "run_at", "an offset without a colon")
add(j(run_at="1969-12-31T23:59:59Z"), "run_at", "before 1970")
add(j(run_at="27-06-01T00:00:00Z"), "run_at", "a two-digit year")
add(j(run_at=" 2027-06-01T00:00:00Z"), "run_at", "a leading space")
add(j(run_at="2999-01-01T00:00:00Z"), "run_at", "more than 366 days ahead")
add(j(run_at=1796004000000), "run_at", "a number is not a time")
add(j(run_at=True), "run_at", "a boolean is not a time")
add(j(delay_ms=5, run_at="2027-06-01T00:00:00Z"), "run_at", "delay_ms and run_at together")
add(j(delay_ms="x", run_at="y"), "run_at", "both given, however wrong")
add(j(delay_ms=None, run_at="2027-06-01T00:00:00Z"), "ok", "a null delay is not given")

# ---- backoff ----
add(j(backoff={}), "ok", "an empty backoff")
add(j(backoff={"type": "exponential"}), "ok", "exponential")
add(j(backoff={"type": "fixed"}), "ok", "fixed")
add(j(backoff={"type": "capped", "delay_ms": 10, "max_delay_ms": 10}), "ok", "capped, cap = delay")
add(j(backoff={"jitter": 0}), "ok", "jitter 0")
add(j(backoff={"jitter": 1}), "ok", "jitter 1 (an integer is a number)")
add(j(backoff={"jitter": 0.75}), "ok", "a fractional jitter")
add(j(backoff={"delay_ms": 5000}), "ok", "a delay above the default cap raises the cap")
add(j(backoff={"max_delay_ms": 10}), "ok", "a cap alone, below the default delay")
add(j(backoff={"type": None, "delay_ms": None, "max_delay_ms": None, "jitter": None}), "ok",
    "null members are not given")
add(j(backoff=5), "backoff", "a number backoff")
add(j(backoff="fixed"), "backoff", "a string backoff")
add(j(backoff=[1]), "backoff", "an array backoff")
add(j(backoff={"type": "random"}), "backoff.type", "an unknown type")
add(j(backoff={"type": "Fixed"}), "backoff.type", "types are case-sensitive")
add(j(backoff={"type": 1}), "backoff.type", "a number type")
add(j(backoff={"delay_ms": -1}), "backoff.delay_ms", "a negative delay")
add(j(backoff={"delay_ms": 31622400001}), "backoff.delay_ms", "a delay over 366 days")
add(j(backoff={"delay_ms": 1.5}), "backoff.delay_ms", "a fractional delay")
add(j(backoff={"max_delay_ms": "x"}), "backoff.max_delay_ms", "a string cap")
add(j(backoff={"delay_ms": 10, "max_delay_ms": 5}), "backoff.max_delay_ms", "cap below delay")
add(j(backoff={"jitter": 2}), "backoff.jitter", "jitter over 1")
add(j(backoff={"jitter": -0.1}), "backoff.jitter", "a negative jitter")
add(j(backoff={"jitter": "0.5"}), "backoff.jitter", "a string jitter")
add(j(backoff={"type": "random", "jitter": 5}), "backoff.type", "type is checked before jitter")
add(j(backoff={"jitter": 5, "colour": 1}), "backoff.colour", "an unknown member comes first")

# ---- group, trace_id, idempotency_key ----
add(j(group=""), "group", "an empty group")
add(j(group="a b"), "group", "a space in a group")
add(j(group="g" * 129), "group", "a 129-byte group")
add(j(group=5), "group", "a number group")
add(j(trace_id=7), "trace_id", "a number trace id")
add(j(trace_id="a b"), "trace_id", "a space in a trace id")
add(j(trace_id="t" * 201), "trace_id", "a 201-byte trace id")
add(j(idempotency_key=" "), "idempotency_key", "a blank idempotency key")
add(j(idempotency_key="a/b"), "idempotency_key", "a slash in an idempotency key")
add(j(idempotency_key=False), "idempotency_key", "a boolean idempotency key")

# ---- the order of the checks ----
add(j(name=5, priority=5000), "name", "name before priority")
add(j(priority=5000, max_attempts=0), "priority", "priority before max_attempts")
add(j(max_attempts=0, backoff=5), "max_attempts", "max_attempts before backoff")
add(j(backoff=5, timeout_ms=0), "backoff", "backoff before timeout_ms")
add(j(timeout_ms=0, group=""), "timeout_ms", "timeout_ms before group")
add(j(group="", trace_id=""), "group", "group before trace_id")
add(j(trace_id="", idempotency_key=""), "trace_id", "trace_id before idempotency_key")
add(j(id="a b", payload="x" * 2000), "payload", "the payload size before id")
add(j(id="a b", priority=-1), "id", "id before priority")
add(j(priority=-1, run_at="x"), "priority", "priority before run_at")
add(j(run_at="x", max_attempts=0), "run_at", "run_at before max_attempts")

# ---- bodies that are not a request object ----
raw('', "body", "an empty body")
raw('[]', "body", "an array", pg="job", exception="errand.enqueue_job takes any jsonb and "
    "refuses a non-object naming the job, where HTTP refuses the body")
raw('"x"', "body", "a string", pg="job", exception="as above: a non-object names the job")
raw('{"name":"n"', "body", "cut short")
raw('{"name":"n"}x', "body", "trailing bytes")
raw('{"name":"n",}', "body", "a trailing comma")
raw('{"name":"a","name":"b"}', "body", "a duplicate key",
    pg="ok", exception="jsonb keeps the last of duplicate keys")
raw('{"name":"n","payload":{"k":1,"k":2}}', "body", "a duplicate key in the payload",
    pg="ok", exception="jsonb keeps the last of duplicate keys")
raw('{"name":"n","priority":NaN}', "body", "NaN is not JSON")
raw('{\'name\':\'n\'}', "body", "single quotes are not JSON")
raw('\ufeff{"name":"n"}', "body", "a byte order mark")
rows.append({"doc_hex": '7b226e616d65223a226e222c227061796c6f6164223a22ff227d', "expect": "body",
             "why": "a payload string that is not UTF-8"})
rows.append({"doc_hex": '7b226e616d65223a22c3227d', "expect": "body",
             "why": "a name cut inside a character"})

for r in rows:
    print(json.dumps(r, ensure_ascii=False))
