# SPDX-License-Identifier: MIT
#
# Bad input on every endpoint: each case sends one malformed request and
# asserts the documented status, error.code and (where it applies)
# error.field, and that the SQLite store is exactly as before. The cases are
# a table; each row becomes its own test method named for the case and the
# expected status. The server runs with --payload-max 1k --max-body 8k.

import json
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, error_of, raw_bytes  # noqa: E402

FIX_Q = "fixture"
ENQ = "/v1/queues/%s/jobs" % FIX_Q
TEXT = {"Content-Type": "text/plain"}
LONG = "a" * 200
TOK = "$TOK"  # replaced by the lease token of job active-1
# "$HOST" in a header is replaced by the server's HOST:PORT

# (name, method, path, request, status, code, field)
# request: {"body": obj} | {"raw": str, "headers": {...}} | {} ; field None = not checked,
# a field ending in "*" is a prefix.
CASES = [
    # ---- POST /v1/queues/{queue}/jobs ----
    ("enqueue_malformed_json", "POST", ENQ, {"raw": '{"name": "x",'}, 400, "invalid_argument", None),
    ("enqueue_not_json", "POST", ENQ, {"raw": "name=x"}, 400, "invalid_argument", None),
    ("enqueue_empty_body", "POST", ENQ, {"raw": ""}, 400, "invalid_argument", None),
    ("enqueue_body_is_array", "POST", ENQ, {"body": [{"name": "x"}]}, 400, "invalid_argument", None),
    ("enqueue_wrong_content_type", "POST", ENQ, {"raw": '{"name": "x"}', "headers": TEXT}, 400,
     "invalid_argument", None),
    ("enqueue_missing_name", "POST", ENQ, {"body": {"payload": {}}}, 400, "invalid_argument", "name"),
    ("enqueue_name_not_string", "POST", ENQ, {"body": {"name": 5}}, 400, "invalid_argument", "name"),
    ("enqueue_name_with_space", "POST", ENQ, {"body": {"name": "a b"}}, 400, "invalid_argument",
     "name"),
    ("enqueue_name_too_long", "POST", ENQ, {"body": {"name": "n" * 129}}, 400, "invalid_argument",
     "name"),
    ("enqueue_priority_string", "POST", ENQ, {"body": {"name": "x", "priority": "high"}}, 400,
     "invalid_argument", "priority"),
    ("enqueue_priority_1001", "POST", ENQ, {"body": {"name": "x", "priority": 1001}}, 400,
     "invalid_argument", "priority"),
    ("enqueue_priority_negative", "POST", ENQ, {"body": {"name": "x", "priority": -1}}, 400,
     "invalid_argument", "priority"),
    ("enqueue_priority_fraction", "POST", ENQ, {"body": {"name": "x", "priority": 1.5}}, 400,
     "invalid_argument", "priority"),
    ("enqueue_max_attempts_0", "POST", ENQ, {"body": {"name": "x", "max_attempts": 0}}, 400,
     "invalid_argument", "max_attempts"),
    ("enqueue_max_attempts_1001", "POST", ENQ, {"body": {"name": "x", "max_attempts": 1001}}, 400,
     "invalid_argument", "max_attempts"),
    ("enqueue_negative_delay", "POST", ENQ, {"body": {"name": "x", "delay_ms": -1}}, 400,
     "invalid_argument", "delay_ms"),
    ("enqueue_delay_over_a_year", "POST", ENQ,
     {"body": {"name": "x", "delay_ms": 367 * 24 * 3600 * 1000}}, 400, "invalid_argument",
     "delay_ms"),
    ("enqueue_delay_and_run_at", "POST", ENQ,
     {"body": {"name": "x", "delay_ms": 5, "run_at": "2030-01-01T00:00:00.000Z"}}, 400,
     "invalid_argument", "run_at"),
    ("enqueue_run_at_not_a_time", "POST", ENQ, {"body": {"name": "x", "run_at": "tomorrow"}}, 400,
     "invalid_argument", "run_at"),
    ("enqueue_timeout_0", "POST", ENQ, {"body": {"name": "x", "timeout_ms": 0}}, 400,
     "invalid_argument", "timeout_ms"),
    ("enqueue_backoff_not_object", "POST", ENQ, {"body": {"name": "x", "backoff": "fast"}}, 400,
     "invalid_argument", "backoff"),
    ("enqueue_backoff_type_unknown", "POST", ENQ,
     {"body": {"name": "x", "backoff": {"type": "linear"}}}, 400, "invalid_argument",
     "backoff.type"),
    ("enqueue_backoff_jitter_1_5", "POST", ENQ, {"body": {"name": "x", "backoff": {"jitter": 1.5}}},
     400, "invalid_argument", "backoff.jitter"),
    ("enqueue_backoff_negative_delay", "POST", ENQ,
     {"body": {"name": "x", "backoff": {"delay_ms": -5}}}, 400, "invalid_argument",
     "backoff.delay_ms"),
    ("enqueue_backoff_max_below_delay", "POST", ENQ,
     {"body": {"name": "x", "backoff": {"delay_ms": 5000, "max_delay_ms": 10}}}, 400,
     "invalid_argument", "backoff.max_delay_ms"),
    ("enqueue_backoff_unknown_field", "POST", ENQ,
     {"body": {"name": "x", "backoff": {"colour": 1}}}, 400, "invalid_argument", "backoff.colour"),
    ("enqueue_unknown_field", "POST", ENQ, {"body": {"name": "x", "colour": "red"}}, 400,
     "invalid_argument", "colour"),
    # the error names the field whole (80 bytes), never cut inside a character
    ("enqueue_unknown_field_40_e_acute", "POST", ENQ, {"body": {"name": "x", "\u00e9" * 40: 1}},
     400, "invalid_argument", "\u00e9" * 40),
    # longer than the field limit (127 bytes): cut at a character boundary
    ("enqueue_unknown_field_100_e_acute", "POST", ENQ,
     {"body": {"name": "x", "\u00e9" * 100: 1}}, 400, "invalid_argument", "\u00e9" * 63 + "*"),
    ("enqueue_unknown_field_100_e_acute_fast_path", "POST", ENQ,
     {"raw": '{"name":"x","' + "\u00e9" * 100 + '":1}'}, 400, "invalid_argument",
     "\u00e9" * 63 + "*"),
    ("enqueue_id_with_space", "POST", ENQ, {"body": {"name": "x", "id": "a b"}}, 400,
     "invalid_argument", "id"),
    ("enqueue_id_with_slash", "POST", ENQ, {"body": {"name": "x", "id": "a/b"}}, 400,
     "invalid_argument", "id"),
    ("enqueue_id_201_chars", "POST", ENQ, {"body": {"name": "x", "id": "i" * 201}}, 400,
     "invalid_argument", "id"),
    ("enqueue_id_not_string", "POST", ENQ, {"body": {"name": "x", "id": 5}}, 400,
     "invalid_argument", "id"),
    ("enqueue_group_with_space", "POST", ENQ, {"body": {"name": "x", "group": "a b"}}, 400,
     "invalid_argument", "group"),
    ("enqueue_group_129_chars", "POST", ENQ, {"body": {"name": "x", "group": "g" * 129}}, 400,
     "invalid_argument", "group"),
    ("enqueue_group_control_char", "POST", ENQ, {"body": {"name": "x", "group": "a\u0007b"}},
     400, "invalid_argument", "group"),
    ("enqueue_group_number", "POST", ENQ, {"body": {"name": "x", "group": 42}}, 400,
     "invalid_argument", "group"),
    ("enqueue_trace_id_with_space", "POST", ENQ, {"body": {"name": "x", "trace_id": "a b"}}, 400,
     "invalid_argument", "trace_id"),
    ("enqueue_idempotency_key_201_chars", "POST", ENQ,
     {"body": {"name": "x", "idempotency_key": "k" * 201}}, 400, "invalid_argument",
     "idempotency_key"),
    ("enqueue_payload_2k_over_payload_max", "POST", ENQ,
     {"body": {"name": "x", "payload": {"blob": "p" * 2048}}}, 413, "payload_too_large", "payload"),
    ("enqueue_body_16k_over_max_body", "POST", ENQ,
     {"body": {"jobs": [{"name": "x", "payload": "p" * 500} for _ in range(32)]}}, 413,
     "payload_too_large", None),
    ("enqueue_bulk_with_one_bad_item", "POST", ENQ,
     {"body": {"jobs": [{"name": "x", "id": "bulk-ok-1"}, {"name": "x", "id": "bulk-ok-2"},
                        {"name": "x", "id": "bulk-bad", "priority": 5000}]}}, 400,
     "invalid_argument", "jobs[2].priority"),
    ("enqueue_bulk_item_unknown_field", "POST", ENQ,
     {"body": {"jobs": [{"name": "x", "id": "bulk-ok-3"}, {"name": "x", "zzz": 1}]}}, 400,
     "invalid_argument", "jobs[1].zzz"),
    ("enqueue_bulk_item_payload_too_large", "POST", ENQ,
     {"body": {"jobs": [{"name": "x", "id": "bulk-ok-4"}, {"name": "x", "payload": "p" * 2048}]}},
     413, "payload_too_large", "jobs[1].payload"),
    ("enqueue_bulk_jobs_not_list", "POST", ENQ, {"body": {"jobs": {"name": "x"}}}, 400,
     "invalid_argument", "jobs"),
    ("enqueue_queue_name_with_space", "POST", "/v1/queues/bad%20name/jobs", {"body": {"name": "x"}},
     400, "invalid_argument", "queue"),
    ("enqueue_queue_name_200_chars", "POST", "/v1/queues/%s/jobs" % LONG, {"body": {"name": "x"}},
     400, "invalid_argument", "queue"),
    ("enqueue_queue_name_encoded_slash", "POST", "/v1/queues/a%2Fb/jobs", {"body": {"name": "x"}},
     400, "invalid_argument", "queue"),
    ("enqueue_name_with_nul", "POST", ENQ, {"raw": '{"name": "a\\u0000b"}'}, 400,
     "invalid_argument", None),
    ("enqueue_run_at_beyond_a_year", "POST", ENQ,
     {"body": {"name": "x", "run_at": "2099-01-01T00:00:00.000Z"}}, 400, "invalid_argument",
     "run_at"),
    ("enqueue_invalid_utf8", "POST", ENQ, {"raw": b'{"name": "x", "payload": "\xff\xfe"}'}, 400,
     "invalid_argument", None),
    ("enqueue_deeply_nested_payload", "POST", ENQ,
     {"raw": '{"name": "x", "payload": ' + "[" * 3000 + "]" * 3000 + "}"}, 400,
     "invalid_argument", None),
    ("enqueue_priority_huge_integer", "POST", ENQ,
     {"raw": '{"name": "x", "priority": 99999999999999999999999}'}, 400, "invalid_argument", None),
    ("enqueue_priority_1e400", "POST", ENQ, {"raw": '{"name": "x", "priority": 1e400}'}, 400,
     "invalid_argument", None),
    ("enqueue_trailing_garbage", "POST", ENQ, {"raw": '{"name": "x"} {"name": "y"}'}, 400,
     "invalid_argument", None),
    ("enqueue_wrong_method_put", "PUT", ENQ, {"body": {"name": "x"}}, 405, None, None),
    ("enqueue_wrong_method_delete", "DELETE", ENQ, {}, 405, None, None),

    # ---- POST /v1/fetch ----
    ("fetch_malformed_json", "POST", "/v1/fetch", {"raw": '{"queues": ['}, 400, "invalid_argument",
     None),
    ("fetch_wrong_content_type", "POST", "/v1/fetch",
     {"raw": '{"queues": ["fixture"], "worker_id": "w"}', "headers": TEXT}, 400,
     "invalid_argument", None),
    ("fetch_missing_queues", "POST", "/v1/fetch", {"body": {"worker_id": "w"}}, 400,
     "invalid_argument", "queues"),
    ("fetch_empty_queues", "POST", "/v1/fetch", {"body": {"queues": [], "worker_id": "w"}}, 400,
     "invalid_argument", "queues"),
    ("fetch_queues_not_list", "POST", "/v1/fetch", {"body": {"queues": FIX_Q, "worker_id": "w"}},
     400, "invalid_argument", "queues"),
    ("fetch_bad_queue_name", "POST", "/v1/fetch",
     {"body": {"queues": [FIX_Q, "bad name"], "worker_id": "w"}}, 400, "invalid_argument",
     "queues[1]"),
    ("fetch_queue_not_string", "POST", "/v1/fetch", {"body": {"queues": [5], "worker_id": "w"}},
     400, "invalid_argument", "queues[0]"),
    ("fetch_max_0", "POST", "/v1/fetch", {"body": {"queues": [FIX_Q], "worker_id": "w", "max": 0}},
     400, "invalid_argument", "max"),
    ("fetch_max_1001", "POST", "/v1/fetch",
     {"body": {"queues": [FIX_Q], "worker_id": "w", "max": 1001}}, 400, "invalid_argument", "max"),
    ("fetch_max_string", "POST", "/v1/fetch",
     {"body": {"queues": [FIX_Q], "worker_id": "w", "max": "3"}}, 400, "invalid_argument", "max"),
    ("fetch_negative_wait", "POST", "/v1/fetch",
     {"body": {"queues": [FIX_Q], "worker_id": "w", "wait_ms": -1}}, 400, "invalid_argument",
     "wait_ms"),
    ("fetch_wait_over_60s", "POST", "/v1/fetch",
     {"body": {"queues": [FIX_Q], "worker_id": "w", "wait_ms": 60001}}, 400, "invalid_argument",
     "wait_ms"),
    ("fetch_lease_999ms_too_small", "POST", "/v1/fetch",
     {"body": {"queues": [FIX_Q], "worker_id": "w", "lease_ms": 999}}, 400, "invalid_argument",
     "lease_ms"),
    ("fetch_lease_over_24h", "POST", "/v1/fetch",
     {"body": {"queues": [FIX_Q], "worker_id": "w", "lease_ms": 86400001}}, 400,
     "invalid_argument", "lease_ms"),
    ("fetch_worker_id_with_space", "POST", "/v1/fetch",
     {"body": {"queues": [FIX_Q], "worker_id": "w 1"}}, 400, "invalid_argument", "worker_id"),
    ("fetch_unknown_field", "POST", "/v1/fetch",
     {"body": {"queues": [FIX_Q], "worker_id": "w", "colour": 1}}, 400, "invalid_argument",
     "colour"),
    ("fetch_acks_not_list", "POST", "/v1/fetch",
     {"body": {"queues": [FIX_Q], "worker_id": "w", "acks": {}}}, 400, "invalid_argument", "acks"),
    ("fetch_ack_without_token", "POST", "/v1/fetch",
     {"body": {"queues": [FIX_Q], "worker_id": "w",
               "acks": [{"id": "active-1", "complete": {}}]}}, 400, "invalid_argument", "acks[0]*"),
    ("fetch_wrong_method_get", "GET", "/v1/fetch", {}, 405, None, None),

    # ---- POST /v1/jobs/{id}/heartbeat ----
    ("heartbeat_malformed_json", "POST", "/v1/jobs/active-1/heartbeat", {"raw": "{"}, 400,
     "invalid_argument", None),
    ("heartbeat_wrong_content_type", "POST", "/v1/jobs/active-1/heartbeat",
     {"raw": '{"lease_token": "%s"}' % TOK, "headers": TEXT}, 400, "invalid_argument", None),
    ("heartbeat_missing_token", "POST", "/v1/jobs/active-1/heartbeat", {"body": {}}, 400,
     "invalid_argument", "lease_token"),
    ("heartbeat_token_not_string", "POST", "/v1/jobs/active-1/heartbeat",
     {"body": {"lease_token": 5}}, 400, "invalid_argument", "lease_token"),
    ("heartbeat_extend_10ms_too_small", "POST", "/v1/jobs/active-1/heartbeat",
     {"body": {"lease_token": TOK, "extend_ms": 10}}, 400, "invalid_argument", "extend_ms"),
    ("heartbeat_extend_string", "POST", "/v1/jobs/active-1/heartbeat",
     {"body": {"lease_token": TOK, "extend_ms": "5s"}}, 400, "invalid_argument", "extend_ms"),
    ("heartbeat_unknown_field", "POST", "/v1/jobs/active-1/heartbeat",
     {"body": {"lease_token": TOK, "colour": 1}}, 400, "invalid_argument", "colour"),
    ("heartbeat_unknown_job", "POST", "/v1/jobs/no-such-job/heartbeat",
     {"body": {"lease_token": TOK}}, 404, "not_found", None),
    ("heartbeat_wrong_token", "POST", "/v1/jobs/active-1/heartbeat",
     {"body": {"lease_token": "not-the-token-123"}}, 409, "lease_lost", None),
    ("heartbeat_bad_job_id", "POST", "/v1/jobs/a%20b/heartbeat", {"body": {"lease_token": TOK}},
     400, "invalid_argument", "id"),
    ("heartbeat_wrong_method_get", "GET", "/v1/jobs/active-1/heartbeat", {}, 405, None, None),

    # ---- POST /v1/jobs/{id}/complete ----
    ("complete_malformed_json", "POST", "/v1/jobs/active-1/complete", {"raw": '{"lease_token"'},
     400, "invalid_argument", None),
    ("complete_wrong_content_type", "POST", "/v1/jobs/active-1/complete",
     {"raw": '{"lease_token": "%s"}' % TOK, "headers": TEXT}, 400, "invalid_argument", None),
    ("complete_missing_token", "POST", "/v1/jobs/active-1/complete", {"body": {"result": 1}}, 400,
     "invalid_argument", "lease_token"),
    ("complete_unknown_field", "POST", "/v1/jobs/active-1/complete",
     {"body": {"lease_token": TOK, "colour": 1}}, 400, "invalid_argument", "colour"),
    ("complete_unknown_job", "POST", "/v1/jobs/no-such-job/complete",
     {"body": {"lease_token": TOK}}, 404, "not_found", None),
    ("complete_wrong_token", "POST", "/v1/jobs/active-1/complete",
     {"body": {"lease_token": "not-the-token-123"}}, 409, "lease_lost", None),
    ("complete_waiting_job", "POST", "/v1/jobs/waiting-1/complete",
     {"body": {"lease_token": TOK}}, 409, "lease_lost", None),
    ("complete_wrong_method_get", "GET", "/v1/jobs/active-1/complete", {}, 405, None, None),

    # ---- POST /v1/jobs/{id}/fail ----
    ("fail_malformed_json", "POST", "/v1/jobs/active-1/fail", {"raw": "[}"}, 400,
     "invalid_argument", None),
    ("fail_wrong_content_type", "POST", "/v1/jobs/active-1/fail",
     {"raw": '{"lease_token": "%s", "error": {"class": "permanent"}}' % TOK, "headers": TEXT},
     400, "invalid_argument", None),
    ("fail_missing_error", "POST", "/v1/jobs/active-1/fail", {"body": {"lease_token": TOK}}, 400,
     "invalid_argument", "error"),
    ("fail_error_not_object", "POST", "/v1/jobs/active-1/fail",
     {"body": {"lease_token": TOK, "error": "boom"}}, 400, "invalid_argument", "error"),
    ("fail_unknown_class", "POST", "/v1/jobs/active-1/fail",
     {"body": {"lease_token": TOK, "error": {"class": "oops"}}}, 400, "invalid_argument",
     "error.class"),
    ("fail_missing_class", "POST", "/v1/jobs/active-1/fail",
     {"body": {"lease_token": TOK, "error": {"message": "m"}}}, 400, "invalid_argument",
     "error.class"),
    ("fail_retry_later_without_delay", "POST", "/v1/jobs/active-1/fail",
     {"body": {"lease_token": TOK, "error": {"class": "retry_later"}}}, 400, "invalid_argument",
     "error.delay_ms"),
    ("fail_retry_later_negative_delay", "POST", "/v1/jobs/active-1/fail",
     {"body": {"lease_token": TOK, "error": {"class": "retry_later", "delay_ms": -5}}}, 400,
     "invalid_argument", "error.delay_ms"),
    ("fail_throttled_without_retry_after", "POST", "/v1/jobs/active-1/fail",
     {"body": {"lease_token": TOK, "error": {"class": "throttled"}}}, 400, "invalid_argument",
     "error.retry_after_ms"),
    ("fail_message_not_string", "POST", "/v1/jobs/active-1/fail",
     {"body": {"lease_token": TOK, "error": {"class": "permanent", "message": 5}}}, 400,
     "invalid_argument", "error.message"),
    ("fail_error_unknown_field", "POST", "/v1/jobs/active-1/fail",
     {"body": {"lease_token": TOK, "error": {"class": "permanent", "colour": 1}}}, 400,
     "invalid_argument", "error.colour"),
    ("fail_missing_token", "POST", "/v1/jobs/active-1/fail",
     {"body": {"error": {"class": "permanent"}}}, 400, "invalid_argument", "lease_token"),
    ("fail_unknown_job", "POST", "/v1/jobs/no-such-job/fail",
     {"body": {"lease_token": TOK, "error": {"class": "permanent"}}}, 404, "not_found", None),
    ("fail_wrong_token", "POST", "/v1/jobs/active-1/fail",
     {"body": {"lease_token": "not-the-token-123", "error": {"class": "permanent"}}}, 409,
     "lease_lost", None),

    # ---- POST /v1/jobs/{id}/release ----
    ("release_malformed_json", "POST", "/v1/jobs/active-1/release", {"raw": "{{"}, 400,
     "invalid_argument", None),
    ("release_missing_token", "POST", "/v1/jobs/active-1/release", {"body": {}}, 400,
     "invalid_argument", "lease_token"),
    ("release_unknown_field", "POST", "/v1/jobs/active-1/release",
     {"body": {"lease_token": TOK, "colour": 1}}, 400, "invalid_argument", "colour"),
    ("release_unknown_job", "POST", "/v1/jobs/no-such-job/release",
     {"body": {"lease_token": TOK}}, 404, "not_found", None),
    ("release_wrong_token", "POST", "/v1/jobs/active-1/release",
     {"body": {"lease_token": "not-the-token-123"}}, 409, "lease_lost", None),

    # ---- POST /v1/acks (a bad item rejects the whole request) ----
    ("acks_malformed_json", "POST", "/v1/acks", {"raw": '{"acks": [{]}'}, 400, "invalid_argument",
     None),
    ("acks_wrong_content_type", "POST", "/v1/acks", {"raw": '{"acks": []}', "headers": TEXT}, 400,
     "invalid_argument", None),
    ("acks_missing_acks", "POST", "/v1/acks", {"body": {}}, 400, "invalid_argument", "acks"),
    ("acks_not_list", "POST", "/v1/acks", {"body": {"acks": "x"}}, 400, "invalid_argument", "acks"),
    ("acks_unknown_field", "POST", "/v1/acks", {"body": {"acks": [], "colour": 1}}, 400,
     "invalid_argument", "colour"),
    ("acks_item_not_object", "POST", "/v1/acks",
     {"body": {"acks": [{"id": "active-1", "lease_token": TOK, "complete": {}}, 5]}}, 400,
     "invalid_argument", "acks[1]*"),
    ("acks_item_missing_id", "POST", "/v1/acks",
     {"body": {"acks": [{"id": "active-1", "lease_token": TOK, "complete": {}},
                        {"lease_token": TOK, "complete": {}}]}}, 400, "invalid_argument",
     "acks[1].id"),
    ("acks_item_missing_token", "POST", "/v1/acks",
     {"body": {"acks": [{"id": "active-1", "lease_token": TOK, "complete": {}},
                        {"id": "active-1", "complete": {}}]}}, 400, "invalid_argument",
     "acks[1].lease_token"),
    ("acks_item_without_outcome", "POST", "/v1/acks",
     {"body": {"acks": [{"id": "active-1", "lease_token": TOK, "complete": {}},
                        {"id": "active-1", "lease_token": TOK}]}}, 400, "invalid_argument",
     "acks[1]*"),
    ("acks_item_two_outcomes", "POST", "/v1/acks",
     {"body": {"acks": [{"id": "active-1", "lease_token": TOK, "complete": {}, "release": {}}]}},
     400, "invalid_argument", "acks[0]*"),
    ("acks_item_bad_fail_class", "POST", "/v1/acks",
     {"body": {"acks": [{"id": "active-1", "lease_token": TOK, "complete": {}},
                        {"id": "active-1", "lease_token": TOK, "fail": {"error": {"class": "oops"}}}]}}, 400,
     "invalid_argument", "acks[1]*"),
    ("acks_item_unknown_field", "POST", "/v1/acks",
     {"body": {"acks": [{"id": "active-1", "lease_token": TOK, "complete": {}, "colour": 1}]}},
     400, "invalid_argument", "acks[0]*"),
    ("acks_wrong_method_get", "GET", "/v1/acks", {}, 405, None, None),

    # ---- GET/DELETE /v1/jobs/{id} ----
    ("get_job_unknown", "GET", "/v1/jobs/no-such-job", {}, 404, "not_found", None),
    ("get_job_id_with_space", "GET", "/v1/jobs/a%20b", {}, 400, "invalid_argument", "id"),
    ("get_job_id_201_chars", "GET", "/v1/jobs/" + "i" * 201, {}, 400, "invalid_argument", "id"),
    ("get_job_wait_negative", "GET", "/v1/jobs/waiting-1?wait_ms=-1", {}, 400,
     "invalid_argument", "wait_ms"),
    ("get_job_wait_60001", "GET", "/v1/jobs/waiting-1?wait_ms=60001", {}, 400, "invalid_argument",
     "wait_ms"),
    ("get_job_wait_not_a_number", "GET", "/v1/jobs/waiting-1?wait_ms=abc", {}, 400,
     "invalid_argument", "wait_ms"),
    ("get_job_wait_empty", "GET", "/v1/jobs/waiting-1?wait_ms=", {}, 400, "invalid_argument",
     "wait_ms"),
    ("get_job_wait_without_value", "GET", "/v1/jobs/waiting-1?wait_ms", {}, 400,
     "invalid_argument", "wait_ms"),
    ("get_job_wait_fraction", "GET", "/v1/jobs/waiting-1?wait_ms=1.5", {}, 400, "invalid_argument",
     "wait_ms"),
    ("get_job_wait_signed", "GET", "/v1/jobs/waiting-1?wait_ms=%2B5", {}, 400, "invalid_argument",
     "wait_ms"),
    ("get_job_wait_huge", "GET", "/v1/jobs/waiting-1?wait_ms=99999999999999999999", {}, 400,
     "invalid_argument", "wait_ms"),
    ("get_job_unknown_query_parameter", "GET", "/v1/jobs/waiting-1?colour=red", {}, 400,
     "invalid_argument", "colour"),
    ("get_job_unknown_with_wait", "GET", "/v1/jobs/no-such-job?wait_ms=30000", {}, 404,
     "not_found", None),
    ("job_wrong_method_put", "PUT", "/v1/jobs/waiting-1", {"body": {}}, 405, None, None),
    ("job_wrong_method_post", "POST", "/v1/jobs/waiting-1", {"body": {}}, 405, None, None),
    ("delete_job_unknown", "DELETE", "/v1/jobs/no-such-job", {}, 404, "not_found", None),
    ("delete_job_active", "DELETE", "/v1/jobs/active-1", {}, 409, "conflict", None),
    ("delete_job_dead", "DELETE", "/v1/jobs/dead-1", {}, 409, "conflict", None),

    # ---- GET /v1/queues/{queue}/jobs ----
    ("list_jobs_bad_state", "GET", ENQ + "?state=bogus", {}, 400, "invalid_argument", "state"),
    ("list_jobs_limit_0", "GET", ENQ + "?state=waiting&limit=0", {}, 400, "invalid_argument",
     "limit"),
    ("list_jobs_limit_not_number", "GET", ENQ + "?state=waiting&limit=abc", {}, 400,
     "invalid_argument", "limit"),
    ("list_jobs_garbage_cursor", "GET", ENQ + "?state=waiting&cursor=%21%21garbage", {}, 400,
     "invalid_argument", "cursor"),
    ("list_jobs_bad_percent_encoding", "GET", ENQ + "?state=wait%zzing", {}, 400,
     "invalid_argument", None),
    ("list_jobs_bad_queue_name", "GET", "/v1/queues/bad%20name/jobs?state=waiting", {}, 400,
     "invalid_argument", "queue"),

    # ---- POST /v1/fetch: queue_weights ----
    ("fetch_queue_weights_array", "POST", "/v1/fetch",
     {"body": {"queues": ["a", "b"], "worker_id": "w", "queue_weights": [1, 2]}}, 400,
     "invalid_argument", "queue_weights"),
    ("fetch_queue_weights_unnamed_queue", "POST", "/v1/fetch",
     {"body": {"queues": ["a", "b"], "worker_id": "w", "queue_weights": {"c": 2}}}, 400,
     "invalid_argument", "queue_weights.c"),
    ("fetch_queue_weight_0", "POST", "/v1/fetch",
     {"body": {"queues": ["a", "b"], "worker_id": "w", "queue_weights": {"a": 0}}}, 400,
     "invalid_argument", "queue_weights.a"),
    ("fetch_queue_weight_1001", "POST", "/v1/fetch",
     {"body": {"queues": ["a", "b"], "worker_id": "w", "queue_weights": {"b": 1001}}}, 400,
     "invalid_argument", "queue_weights.b"),
    ("fetch_queue_weight_string", "POST", "/v1/fetch",
     {"body": {"queues": ["a", "b"], "worker_id": "w", "queue_weights": {"a": "6"}}}, 400,
     "invalid_argument", "queue_weights.a"),

    # ---- PUT /v1/queues/{queue} ----
    ("put_queue_malformed_json", "PUT", "/v1/queues/" + FIX_Q, {"raw": '{"paused": tru'}, 400,
     "invalid_argument", None),
    ("put_queue_wrong_content_type", "PUT", "/v1/queues/" + FIX_Q,
     {"raw": '{"paused": true}', "headers": TEXT}, 400, "invalid_argument", None),
    ("put_queue_body_is_array", "PUT", "/v1/queues/" + FIX_Q, {"body": []}, 400,
     "invalid_argument", None),
    ("put_queue_unknown_field", "PUT", "/v1/queues/" + FIX_Q, {"body": {"colour": 1}}, 400,
     "invalid_argument", "colour"),
    ("put_queue_paused_string", "PUT", "/v1/queues/" + FIX_Q, {"body": {"paused": "yes"}}, 400,
     "invalid_argument", "paused"),
    ("put_queue_negative_concurrency", "PUT", "/v1/queues/" + FIX_Q, {"body": {"concurrency": -1}},
     400, "invalid_argument", "concurrency"),
    ("put_queue_lease_10ms", "PUT", "/v1/queues/" + FIX_Q, {"body": {"lease_ms": 10}}, 400,
     "invalid_argument", "lease_ms"),
    ("put_queue_negative_max_stalled", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"lease_ms": 5000, "max_stalled": -1}}, 400, "invalid_argument", "max_stalled"),
    ("put_queue_rate_max_0", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"rate_limit": {"max": 0, "per_ms": 1000}}}, 400, "invalid_argument",
     "rate_limit.max"),
    ("put_queue_rate_burst_above_max", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"rate_limit": {"max": 5, "per_ms": 1000, "burst": 6}}},
     400, "invalid_argument", "rate_limit.burst"),
    ("put_queue_rate_burst_0", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"rate_limit": {"max": 5, "per_ms": 1000, "burst": 0}}},
     400, "invalid_argument", "rate_limit.burst"),
    ("put_queue_rate_burst_string", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"rate_limit": {"max": 5, "per_ms": 1000, "burst": "2"}}},
     400, "invalid_argument", "rate_limit.burst"),
    ("put_queue_rate_per_ms_0", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"rate_limit": {"max": 5, "per_ms": 0}}},
     400, "invalid_argument", "rate_limit.per_ms"),
    ("put_queue_rate_per_ms_two_years", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"rate_limit": {"max": 5, "per_ms": 63072000000}}},
     400, "invalid_argument", "rate_limit.per_ms"),
    ("put_queue_rate_max_float", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"rate_limit": {"max": 4.5, "per_ms": 1000}}},
     400, "invalid_argument", "rate_limit.max"),
    ("put_queue_rate_is_number", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"rate_limit": 4}}, 400, "invalid_argument", "rate_limit"),
    ("put_queue_fairness_array", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"fairness": []}}, 400, "invalid_argument", "fairness"),
    ("put_queue_fairness_unknown", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"fairness": {"weight": {}}}}, 400, "invalid_argument", "fairness.weight"),
    ("put_queue_fairness_weights_array", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"fairness": {"weights": [1]}}}, 400, "invalid_argument", "fairness.weights"),
    ("put_queue_fairness_weight_0", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"fairness": {"weights": {"tenant:1": 0}}}},
     400, "invalid_argument", "fairness.weights.tenant:1"),
    ("put_queue_fairness_weight_1001", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"fairness": {"weights": {"tenant:1": 1001}}}},
     400, "invalid_argument", "fairness.weights.tenant:1"),
    ("put_queue_fairness_weight_string", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"fairness": {"weights": {"tenant:1": "3"}}}},
     400, "invalid_argument", "fairness.weights.tenant:1"),
    ("put_queue_fairness_weight_null", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"fairness": {"weights": {"tenant:1": None}}}},
     400, "invalid_argument", "fairness.weights.tenant:1"),
    ("put_queue_fairness_group_with_space", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"fairness": {"weights": {"a b": 2}}}}, 400, "invalid_argument", "fairness.weights"),
    ("put_queue_fairness_group_control_char", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"fairness": {"weights": {"a\x01": 2}}}},
     400, "invalid_argument", "fairness.weights"),
    ("put_queue_fairness_group_129_chars", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"fairness": {"weights": {"ggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggg": 2}}}},
     400, "invalid_argument", "fairness.weights"),
    ("put_queue_fairness_101_weights", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"fairness": {"weights": {"t%d" % i: 2 for i in range(101)}}}}, 400,
     "invalid_argument", "fairness.weights"),
    ("put_queue_fairness_default_weight_0", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"fairness": {"default_weight": 0}}},
     400, "invalid_argument", "fairness.default_weight"),
    ("put_queue_group_limits_string", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"group_limits": "2"}}, 400, "invalid_argument", "group_limits"),
    ("put_queue_group_limits_unknown", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"group_limits": {"max": 2}}}, 400, "invalid_argument", "group_limits.max"),
    ("put_queue_group_concurrency_0", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"group_limits": {"concurrency": 0}}},
     400, "invalid_argument", "group_limits.concurrency"),
    ("put_queue_group_concurrency_huge", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"group_limits": {"concurrency": 1000001}}},
     400, "invalid_argument", "group_limits.concurrency"),
    ("put_queue_group_rate_without_max", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"group_limits": {"rate_limit": {"per_ms": 1000}}}},
     400, "invalid_argument", "group_limits.rate_limit.max"),
    ("put_queue_group_rate_per_ms_negative", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"group_limits": {"rate_limit": {"max": 1, "per_ms": -5}}}},
     400, "invalid_argument", "group_limits.rate_limit.per_ms"),
    ("put_queue_aging_array", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"aging": [1]}}, 400, "invalid_argument", "aging"),
    ("put_queue_aging_without_per_s", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"aging": {"max_boost": 5}}}, 400, "invalid_argument", "aging.per_s"),
    ("put_queue_aging_per_s_negative", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"aging": {"per_s": -1}}}, 400, "invalid_argument", "aging.per_s"),
    ("put_queue_aging_per_s_1001", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"aging": {"per_s": 1001}}}, 400, "invalid_argument", "aging.per_s"),
    ("put_queue_aging_per_s_string", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"aging": {"per_s": "1"}}}, 400, "invalid_argument", "aging.per_s"),
    ("put_queue_aging_max_boost_0", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"aging": {"per_s": 1, "max_boost": 0}}}, 400, "invalid_argument", "aging.max_boost"),
    ("put_queue_aging_max_boost_1001", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"aging": {"per_s": 1, "max_boost": 1001}}},
     400, "invalid_argument", "aging.max_boost"),
    ("put_queue_aging_unknown", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"aging": {"per_s": 1, "cap": 3}}}, 400, "invalid_argument", "aging.cap"),
    ("put_queue_rate_without_per_ms", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"rate_limit": {"max": 5}}}, 400, "invalid_argument", "rate_limit.per_ms"),
    ("put_queue_defaults_max_attempts_0", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"defaults": {"max_attempts": 0}}}, 400, "invalid_argument",
     "defaults.max_attempts"),
    ("put_queue_defaults_backoff_type", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"defaults": {"backoff": {"type": "linear"}}}}, 400, "invalid_argument",
     "defaults.backoff.type"),
    ("put_queue_defaults_unknown_field", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"defaults": {"colour": 1}}}, 400, "invalid_argument", "defaults.colour"),
    ("put_queue_retention_dead_forever", "PUT", "/v1/queues/" + FIX_Q,
     {"body": {"retention": {"dead": "forever"}}}, 400, "invalid_argument", "retention.dead"),
    ("put_new_queue_bad_body", "PUT", "/v1/queues/never-seen",
     {"body": {"lease_ms": 5000, "paused": 1}}, 400, "invalid_argument", "paused"),
    ("put_queue_bad_name", "PUT", "/v1/queues/bad%20name", {"body": {"paused": True}}, 400,
     "invalid_argument", "queue"),
    ("put_queue_name_200_chars", "PUT", "/v1/queues/" + LONG, {"body": {"paused": True}}, 400,
     "invalid_argument", "queue"),

    # ---- pause / resume ----
    ("pause_bad_queue_name", "POST", "/v1/queues/bad%20name/pause", {"body": {}}, 400,
     "invalid_argument", "queue"),
    ("resume_encoded_slash_queue", "POST", "/v1/queues/a%2Fb/resume", {"body": {}}, 400,
     "invalid_argument", "queue"),
    ("pause_wrong_method_get", "GET", "/v1/queues/%s/pause" % FIX_Q, {}, 405, None, None),

    # ---- dead letters ----
    ("dead_list_limit_0", "GET", "/v1/dead?limit=0", {}, 400, "invalid_argument", "limit"),
    # a parameter name that is not UTF-8: named with U+FFFD, still a 400
    ("dead_list_param_not_utf8", "GET", "/v1/dead?%FF%FE=1", {}, 400, "invalid_argument",
     "\ufffd\ufffd"),
    ("dead_list_bad_queue", "GET", "/v1/dead?queue=bad%20name", {}, 400, "invalid_argument",
     "queue"),
    ("dead_list_garbage_cursor", "GET", "/v1/dead?cursor=%21%21garbage", {}, 400,
     "invalid_argument", "cursor"),
    ("redrive_unknown_job", "POST", "/v1/dead/no-such-job/redrive", {"body": {}}, 404, "not_found",
     None),
    ("redrive_job_not_dead", "POST", "/v1/dead/waiting-1/redrive", {"body": {}}, 404, "not_found",
     None),
    ("redrive_bad_id", "POST", "/v1/dead/a%20b/redrive", {"body": {}}, 400, "invalid_argument",
     "id"),
    ("redrive_wrong_method_get", "GET", "/v1/dead/dead-1/redrive", {}, 405, None, None),
    ("delete_dead_unknown", "DELETE", "/v1/dead/no-such-job", {}, 404, "not_found", None),
    ("delete_dead_job_not_dead", "DELETE", "/v1/dead/waiting-1", {}, 404, "not_found", None),

    # ---- the lease and cursor lists (test_lists.py has the rest) ----
    ("lease_list_limit_0", "GET", "/v1/leases?limit=0", {}, 400, "invalid_argument", "limit"),
    ("lease_list_limit_1001", "GET", "/v1/leases?limit=1001", {}, 400, "invalid_argument",
     "limit"),
    ("lease_list_limit_not_number", "GET", "/v1/leases?limit=ten", {}, 400, "invalid_argument",
     "limit"),
    ("lease_list_bad_cursor", "GET", "/v1/leases?cursor=a%20b", {}, 400, "invalid_argument",
     "cursor"),
    ("lease_list_long_cursor", "GET", "/v1/leases?cursor=" + "c" * 129, {}, 400,
     "invalid_argument", "cursor"),
    ("lease_list_unknown_param", "GET", "/v1/leases?state=held", {}, 400, "invalid_argument",
     "state"),
    ("lease_list_wrong_method_put", "PUT", "/v1/leases", {"body": {}}, 405, None, None),
    ("cursor_list_limit_0", "GET", "/v1/cursors?limit=0", {}, 400, "invalid_argument", "limit"),
    ("cursor_list_limit_negative", "GET", "/v1/cursors?limit=-5", {}, 400, "invalid_argument",
     "limit"),
    ("cursor_list_bad_cursor", "GET", "/v1/cursors?cursor=%21%21garbage", {}, 400,
     "invalid_argument", "cursor"),
    ("cursor_list_bad_escape", "GET", "/v1/cursors?cursor=%ZZ", {}, 400, "invalid_argument",
     None),
    ("cursor_list_unknown_param", "GET", "/v1/cursors?name=x", {}, 400, "invalid_argument",
     "name"),
    ("cursor_list_wrong_method_post", "POST", "/v1/cursors", {"body": {}}, 405, None, None),

    # ---- routes ----
    ("unknown_route_v1", "GET", "/v1/nope", {}, 404, "not_found", None),
    ("unknown_route_v2", "GET", "/v2/queues", {}, 404, "not_found", None),
    # compact bodies as fast clients send them, each wrong in one way
    ("enqueue_compact_duplicate_name", "POST", ENQ, {"raw": '{"name":"x","name":"y"}'}, 400,
     "invalid_argument", "body"),
    ("enqueue_compact_duplicate_payload_key", "POST", ENQ,
     {"raw": '{"name":"x","payload":{"k":{"a":1,"b":2,"a":3}}}'}, 400, "invalid_argument", "body"),
    ("enqueue_compact_trailing_garbage", "POST", ENQ, {"raw": '{"name":"x"}x'}, 400,
     "invalid_argument", "body"),
    ("enqueue_compact_trailing_comma", "POST", ENQ, {"raw": '{"name":"x",}'}, 400,
     "invalid_argument", "body"),
    ("enqueue_compact_leading_zero", "POST", ENQ, {"raw": '{"name":"x","payload":[01]}'}, 400,
     "invalid_argument", "body"),
    ("enqueue_compact_cut_short", "POST", ENQ, {"raw": '{"name":"x","payload":{"a":1}'}, 400,
     "invalid_argument", "body"),
    ("enqueue_compact_bad_priority", "POST", ENQ, {"raw": '{"name":"x","priority":1001}'}, 400,
     "invalid_argument", "priority"),
    ("enqueue_compact_null_name", "POST", ENQ, {"raw": '{"name":null}'}, 400, "invalid_argument",
     "name"),
    ("enqueue_compact_bulk_key_beside_name", "POST", ENQ,
     {"raw": '{"name":"x","jobs":[{"name":"x"}]}'}, 400, "invalid_argument", "name"),
    ("enqueue_compact_payload_over_payload_max", "POST", ENQ,
     {"raw": '{"name":"x","payload":"' + "p" * 1100 + '"}'}, 413, "payload_too_large", "payload"),
    ("unknown_route_root", "GET", "/", {}, 404, "not_found", None),
    ("unknown_route_extra_segment", "GET", "/v1/jobs/waiting-1/extra", {}, 404, "not_found", None),
    ("queues_wrong_method_post", "POST", "/v1/queues", {"body": {}}, 405, None, None),
    ("enqueue_id_of_a_redriven_copy", "POST", ENQ, {"body": {"name": "n", "id": "j-redrive-2"}},
     400, "invalid_argument", "id"),
    ("enqueue_id_no_room_for_redrive", "POST", ENQ, {"body": {"name": "n", "id": "i" * 187}},
     400, "invalid_argument", "id"),
    ("queues_bad_history", "GET", "/v1/queues?history=2", {}, 400, "invalid_argument", "history"),
    ("queues_unknown_param", "GET", "/v1/queues?limit=5", {}, 400, "invalid_argument", "limit"),
    ("queue_bad_history", "GET", "/v1/queues/" + FIX_Q + "?history=yes", {}, 400,
     "invalid_argument", "history"),
    ("queue_history_bad_encoding", "GET", "/v1/queues/" + FIX_Q + "?history=%zz", {}, 400,
     "invalid_argument", "history"),
    ("fetch_wrong_method_delete", "DELETE", "/v1/fetch", {}, 405, None, None),
    ("healthz_wrong_method_post", "POST", "/healthz", {"body": {}}, 405, None, None),

    # ---- GET /v1/audit, POST /v1/bulk, the dashboard ----
    ("audit_limit_0", "GET", "/v1/audit?limit=0", {}, 400, "invalid_argument", "limit"),
    ("audit_cursor_not_a_number", "GET", "/v1/audit?cursor=x1", {}, 400, "invalid_argument",
     "cursor"),
    ("audit_unknown_parameter", "GET", "/v1/audit?queue=q", {}, 400, "invalid_argument", "queue"),
    ("bulk_no_action", "POST", "/v1/bulk", {"body": {"ids": ["dead-1"]}}, 400, "invalid_argument",
     "action"),
    ("bulk_ids_and_filter", "POST", "/v1/bulk",
     {"body": {"action": "redrive", "ids": ["dead-1"], "filter": {}}}, 400, "invalid_argument",
     "filter"),
    ("bulk_cancel_dead_state", "POST", "/v1/bulk",
     {"body": {"action": "cancel", "filter": {"state": "dead"}}}, 400, "invalid_argument",
     "filter.state"),
    ("bulk_not_json", "POST", "/v1/bulk", {"raw": "action=redrive"}, 400, "invalid_argument",
     None),
    ("ui_login_json_body", "POST", "/ui/login",
     {"raw": '{"token": "x"}', "headers": {"Origin": "http://$HOST"}}, 400, "invalid_argument",
     "content-type"),
    ("ui_login_without_origin", "POST", "/ui/login",
     {"raw": "token=x", "headers": {"Content-Type": "application/x-www-form-urlencoded"}}, 403,
     "permission_denied", "origin"),
    ("ui_login_unknown_field", "POST", "/ui/login",
     {"raw": "token=x&user=y", "headers": {"Content-Type": "application/x-www-form-urlencoded",
                                          "Origin": "http://$HOST"}}, 400, "invalid_argument",
     "token"),
    ("ui_asset_unknown", "GET", "/ui/assets/nope.js", {}, 404, "not_found", "name"),
    ("ui_asset_bad_name", "GET", "/ui/assets/a%20b", {}, 400, "invalid_argument", "name"),
    ("ui_logout_without_session", "POST", "/ui/logout", {"body": {}}, 400, "invalid_argument",
     "session"),
]


def _subst(v, tok):
    if isinstance(v, str):
        return v.replace(TOK, tok)
    if isinstance(v, list):
        return [_subst(x, tok) for x in v]
    if isinstance(v, dict):
        return {k: _subst(x, tok) for k, x in v.items()}
    return v


class BadInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(args=["--payload-max", "1k", "--max-body", "8k"]).start()
        s = cls.s

        def ok(r, status=(200, 201)):
            if r[0] not in status:
                raise AssertionError("fixture request failed: %r\n%s" % (r, s.log_text()))
            return r[1]

        ok(s.enqueue(FIX_Q, {"name": "fx", "id": "active-1"}))
        jobs = ok(s.fetch(FIX_Q, lease_ms=600000))["jobs"]
        assert jobs and jobs[0]["id"] == "active-1", jobs
        cls.token = jobs[0]["lease_token"]
        ok(s.enqueue(FIX_Q, {"name": "fx", "id": "dead-1"}))
        d = ok(s.fetch(FIX_Q, lease_ms=600000))["jobs"][0]
        ok(s.fail(d["id"], d["lease_token"], {"class": "permanent"}))
        ok(s.enqueue(FIX_Q, {"name": "fx", "id": "waiting-1"}))
        ok(s.enqueue(FIX_Q, {"name": "fx", "id": "scheduled-1", "delay_ms": 3600000}))

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def check(self, method, path, req, status, code, field):
        s = self.s
        self.assertTrue(s.alive(), "server died:\n" + s.log_text())
        before = s.snapshot()
        kw = {}
        if "body" in req:
            kw["body"] = _subst(req["body"], self.token)
        if "raw" in req:
            kw["raw"] = _subst(req["raw"], self.token)
        if "headers" in req:
            host = "127.0.0.1:%d" % s.port
            kw["headers"] = {k: v.replace("$HOST", host) for k, v in req["headers"].items()}
        st, b, h = s.request(method, path, **kw)
        what = "%s %s %r -> %s %r" % (method, path, req, st, b)
        self.assertEqual(st, status, what)
        if code is not None:
            self.assertIn("application/json", h.get("content-type", ""), what)
            e = error_of(b)
            self.assertEqual(e.get("code"), code, what)
            self.assertTrue(e.get("message"), what)
        if field is not None:
            got = error_of(b).get("field")
            if field.endswith("*"):
                self.assertTrue(isinstance(got, str) and got.startswith(field[:-1]), what)
            else:
                self.assertEqual(got, field, what)
        self.assertEqual(s.snapshot(), before, "store changed after " + what)
        self.assertTrue(s.alive(), "server died after %s:\n%s" % (what, s.log_text()))

    # runs last (name order): the fixture is where the cases left it
    def test_zz_fixture_states_are_as_set_up(self):
        states = {i: self.s.job(i)["state"] for i in ("active-1", "dead-1", "waiting-1",
                                                       "scheduled-1")}
        self.assertEqual(states, {"active-1": "active", "dead-1": "dead", "waiting-1": "waiting",
                                  "scheduled-1": "scheduled"})
        for i in ("bulk-ok-1", "bulk-ok-2", "bulk-ok-3", "bulk-ok-4", "bulk-bad"):
            self.assertIsNone(self.s.job(i), i)
        self.assertIsNone(self.s.queue_info("never-seen"))


def _make(case):
    name, method, path, req, status, code, field = case

    def t(self):
        self.check(method, path, req, status, code, field)
    return t


for _c in CASES:
    _suffix = "_is_%d" % _c[4] + ("_" + re.sub(r"[^a-z0-9]+", "_", _c[6].lower()).strip("_")
                                  if _c[6] else "")
    _n = "test_" + _c[0] + _suffix
    assert not hasattr(BadInputTest, _n), _n
    setattr(BadInputTest, _n, _make(_c))


def raw_exchange(port, data):
    """Sends raw bytes on a fresh connection; returns (status, body) of the
    first reply (the server closes after a refusal)."""
    head, _, body = raw_bytes(port, data).partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


class FramingTest(unittest.TestCase):
    """Requests a proxy might frame otherwise are refused with 400, and
    change nothing (issue 16 item 11)."""

    @classmethod
    def setUpClass(cls):
        cls.s = Server().start()

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def enqueue_raw(self, headers, body=b'{"name":"n","id":"framing-1"}'):
        req = (b"POST /v1/queues/framing/jobs HTTP/1.1\r\n" + headers +
               b"Content-Type: application/json\r\nConnection: close\r\n\r\n" + body)
        return raw_exchange(self.s.port, req)

    def test_duplicate_or_signed_content_length_and_a_missing_host_are_refused(self):
        n = str(len(b'{"name":"n","id":"framing-1"}')).encode()
        cases = [
            (b"Host: x\r\nContent-Length: " + n + b"\r\nContent-Length: " + n + b"\r\n",
             "more than one Content-Length"),
            (b"Host: x\r\nContent-Length: +" + n + b"\r\n", "decimal digits only"),
            (b"Content-Length: " + n + b"\r\n", "needs a Host header"),
            (b"Host: x\r\nHost: y\r\nContent-Length: " + n + b"\r\n", "more than one Host"),
        ]
        for headers, why in cases:
            st, body = self.enqueue_raw(headers)
            self.assertEqual(st, 400, (headers, body))
            err = json.loads(body)["error"]
            self.assertEqual(err["field"], "headers")
            self.assertIn(why, err["message"])
        st, body, _ = self.s.get("/v1/jobs/framing-1")
        self.assertEqual(st, 404, "nothing was enqueued")
        # the same request, well framed, works (Host names this server: no tokens)
        host = b"Host: 127.0.0.1:%d\r\n" % self.s.port
        st, body = self.enqueue_raw(host + b"Content-Length: " + n + b"\r\n")
        self.assertEqual(st, 201, body)

    def test_http_1_0_without_host_is_fine(self):
        st, body = raw_exchange(self.s.port, b"GET /healthz HTTP/1.0\r\n\r\n")
        self.assertEqual((st, body), (200, b'{"status":"ok"}'))

if __name__ == "__main__":
    unittest.main()
