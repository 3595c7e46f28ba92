#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# A daily roll-up that catches up by itself and is harmless to run twice.
# For every whole day after the cursor (the last day rolled up) and before
# today, it sums DATA_DIR/DAY.csv (one number a line) into OUT_DIR/DAY.json,
# written atomically, then moves the cursor from the previous day to DAY with
# compare-and-set (PUT /v1/cursors/NAME {"value", "expected"}). A run after a
# week of downtime rolls up the whole week; a second run, or one racing it,
# finds nothing left or loses the compare-and-set and stops.
#
# usage: rollup.sh DATA_DIR OUT_DIR
# env:   ERRAND_SERVER (default http://127.0.0.1:7400), ERRAND_TOKEN,
#        ROLLUP_CURSOR (cursor name, default rollup-daily),
#        ROLLUP_START  (first day when the cursor does not exist yet, default yesterday),
#        ROLLUP_TODAY  (today's date, UTC, default `date -u +%F`; for tests)
set -euo pipefail

data=${1:?usage: rollup.sh DATA_DIR OUT_DIR}
out=${2:?usage: rollup.sh DATA_DIR OUT_DIR}
server=${ERRAND_SERVER:-http://127.0.0.1:7400}
name=${ROLLUP_CURSOR:-rollup-daily}
today=${ROLLUP_TODAY:-$(date -u +%F)}
mkdir -p "$out"

auth=()
if [[ -n "${ERRAND_TOKEN:-}" ]]; then
    auth=(-H "Authorization: Bearer $ERRAND_TOKEN")
fi

# api METHOD PATH [BODY]: sets $body and $status (HTTP code).
api() {
    local resp
    resp=$(curl -sS -X "$1" "${auth[@]}" -H 'Content-Type: application/json' \
        ${3:+--data "$3"} -w '\n%{http_code}' "$server$2")
    status=${resp##*$'\n'}
    body=${resp%$'\n'*}
}

next_day() { date -u -d "$1 + 1 day" +%F; }

api GET "/v1/cursors/$name"
if [[ $status == 200 ]]; then
    last=$(sed -n 's/.*"value":"\([0-9-]*\)".*/\1/p' <<<"$body")
    expected="\"$last\""
elif [[ $status == 404 ]]; then
    # no cursor yet: start the day before ROLLUP_START
    start=${ROLLUP_START:-$(date -u -d "$today - 1 day" +%F)}
    last=$(date -u -d "$start - 1 day" +%F)
    expected=null
else
    echo "rollup: GET cursor: HTTP $status $body" >&2
    exit 1
fi

day=$(next_day "$last")
while [[ "$day" < "$today" ]]; do
    # the roll-up of one day: deterministic, so writing it again changes nothing
    sum=0
    if [[ -f "$data/$day.csv" ]]; then
        sum=$(awk '{ s += $1 } END { printf "%d", s }' "$data/$day.csv")
    fi
    tmp=$(mktemp "$out/.$day.XXXXXX")
    printf '{"day":"%s","total":%s}\n' "$day" "$sum" >"$tmp"
    mv -f "$tmp" "$out/$day.json"

    api PUT "/v1/cursors/$name" "{\"value\":\"$day\",\"expected\":$expected}"
    if [[ $status == 409 ]]; then
        echo "rollup: another runner moved the cursor past $last; stopping" >&2
        exit 0
    elif [[ $status != 200 ]]; then
        echo "rollup: PUT cursor: HTTP $status $body" >&2
        exit 1
    fi
    echo "rollup: $day total $sum"
    last=$day
    expected="\"$day\""
    day=$(next_day "$day")
done
