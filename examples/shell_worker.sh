#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Example: a job command run by `errand work` (docs/workers.md), one run per
# job. It "sends" a welcome email described by the payload on stdin:
#   errand enqueue emails send-welcome '{"to":"ada@example.com"}'
#   errand work --queue emails --concurrency 4 --timeout 20s -- examples/shell_worker.sh
# The exit status is the outcome: 0 complete (stdout, JSON, is the result),
# 65 permanent (a payload we can never use), 75 transient (try again later).
# A line on fd 3 asks for retry-later or throttled instead.
set -u

payload=$(cat)
to=$(printf '%s' "$payload" | sed -n 's/.*"to"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')

if [ -z "$to" ]; then
    echo "job $ERRAND_JOB_ID: payload has no \"to\" address: $payload" >&2
    exit 65                                   # EX_DATAERR: permanent, goes to the dead letters
fi

# Pretend the mail server sometimes asks us to slow down: the whole queue
# pauses for 30 s (throttled) rather than hammering it.
if [ -n "${MAIL_SERVER_BUSY:-}" ]; then
    echo '{"errand": {"throttled_ms": 30000}}' >&3
    exit 0
fi

# A real script would send the mail here, keyed by ERRAND_IDEMPOTENCY_KEY so
# that a second run of the same job (at-least-once delivery) sends nothing.
if ! printf 'To: %s\nX-Idempotency-Key: %s\n\nWelcome!\n' "$to" "$ERRAND_IDEMPOTENCY_KEY" \
        >/dev/null; then
    exit 75                                   # EX_TEMPFAIL: transient, retried with backoff
fi

echo "job $ERRAND_JOB_ID (attempt $ERRAND_ATTEMPT, trace ${ERRAND_TRACE_ID:-none}): sent to $to" >&2
printf '{"sent_to": "%s", "attempt": %s}\n' "$to" "$ERRAND_ATTEMPT"
