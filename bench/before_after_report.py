#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# Medians per measurement and build of a bench/before_after.sh file, each
# round's after ÷ before, and the spread of the repeated runs of each build.
import json
import statistics
import sys


def key_value(rec):
    """(measurement label, value, unit) of one JSON line of run.sh or worker.sh."""
    label = rec.get("label", "")
    if rec.get("bench") == "worker":  # noop_worker; its default: = concurrency before, then auto
        c, pf = rec["concurrency"], rec["prefetch"]
        label = "worker c=%s prefetch %s" % (c, "default" if pf in (c, "auto") else pf)
        return label, rec.get("jobs_per_s"), "jobs/s"
    if "server-ceiling" in label:
        return "server ceiling (C client, 1 conn, batch 500)", rec.get("jobs_per_s"), "jobs/s"
    if rec.get("scenario") == "latency":
        return label + " p99", rec.get("p99_ms"), "ms"
    return label, rec.get("jobs_per_s"), "jobs/s"


def main(path):
    rows = {}
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        label, v, unit = key_value(rec)
        if v is None:
            continue
        rows.setdefault((label, unit), {}).setdefault(rec["build"], []).append((rec["pair"], v))
    print("| measurement | before (median; runs) | after (median; runs) | after ÷ before, by round |")
    print("|---|---|---|---|")
    for (label, unit), by in rows.items():
        b = dict(by.get("before", []))
        a = dict(by.get("after", []))

        def cell(d):
            vs = [d[k] for k in sorted(d)]
            if not vs:
                return "—"
            f = "%.2f" if unit == "ms" else "%.0f"
            return (f % statistics.median(vs)) + " " + unit + "; " + " / ".join(f % v for v in vs)

        ratios = " / ".join("%.2f" % (a[k] / b[k]) for k in sorted(set(a) & set(b)) if b[k])
        print("| %s | %s | %s | %s |" % (label, cell(b), cell(a), ratios))


if __name__ == "__main__":
    main(sys.argv[1])
