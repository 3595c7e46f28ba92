#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Summarises the system-wide profiles that `PROFILE=DIR bench/pg.sh` records
# of its nodes rounds. For each DIR/*.data, in % of all CPU samples (both
# cores): the share by command (swapper is idle time); PostgreSQL's share by
# process, so a saturated backend shows; its user and kernel space; the
# share spent in (children of) a few PostgreSQL functions that name where
# its time goes; and its hottest functions.
# Usage: bench/pg_profile.sh DIR [TOP (12)]
set -eu
DIR=${1:?usage: bench/pg_profile.sh DIR [TOP]}
TOP=${2:-12}
rows() { grep -E '^ +[0-9.]+%' | head -n "$1"; }
rep() { perf report -i "$f" --stdio -g none "$@" 2>/dev/null; }
FUNCS='PortalRun|plpgsql_exec_function|ExecInsertIndexTuples|_bt_bottomupdel_pass|heap_update'
FUNCS="$FUNCS|index_getnext_slot|XLogInsert|XLogFlush|CommitTransactionCommand|array_in"
for f in "$DIR"/*.data; do
    echo "== $(basename "$f" .data): $(rep --header-only | sed -n 's/^# sample duration : *//p')"
    echo "-- all samples, by command"
    rep --sort comm --no-children | rows 6
    echo "-- postgres, by process"
    rep --comm postgres --sort pid --no-children | rows 4
    echo "-- postgres, user and kernel space"
    rep --comm postgres --sort dso,sym --no-children | rows 100000 |
        awk '{s[$3 == "[k]" ? "kernel" : "user"] += $1}
             END {printf "    %.2f%%  user\n    %.2f%%  kernel\n", s["user"], s["kernel"]}'
    echo "-- postgres, in these functions and what they call"
    rep --comm postgres --sort sym --children | rows 100000 | grep -E " ($FUNCS)\$" |
        awk '{print "    " $1 "  " $4}'
    echo "-- postgres, hottest functions"
    rep --comm postgres --sort sym --no-children | rows "$TOP"
done
