#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# Summarises bench/pg.sh's JSON lines: per measurement and system, the runs'
# jobs/s (median, then every run in order) and the ratios errand/graphile-worker
# and two nodes/one node. Usage: bench/pg_report.py FILE.jsonl
import json
import statistics
import sys


def key(r):
    """(measurement, system) of one line, or None."""
    s = r.get("system", "")
    if s == "errand":
        sysname = "errand " + r["build"]
        lab = r.get("label", "")
        m = {"bulk": "bulk enqueue", "process-c10": "process c=10",
             "process-c50": "process c=50", "nodes-1": "1 node, 2 workers c=10",
             "nodes-2": "2 nodes, 1 worker c=10 each"}.get(lab)
        return (m, sysname) if m else None
    ph = r.get("phase")
    if ph == "enqueue_bulk":
        return ("bulk enqueue", s)
    if ph == "process" and r.get("variant", "fetch-loop") == "fetch-loop":
        return ("process c=%d" % r["conc"], s)
    return None


rows = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    k = key(r)
    if k and r.get("jobs_per_s"):
        rows.setdefault(k, []).append(float(r["jobs_per_s"]))

med = {k: statistics.median(v) for k, v in rows.items()}
order = ["bulk enqueue", "process c=10", "process c=50", "1 node, 2 workers c=10",
         "2 nodes, 1 worker c=10 each"]
systems = sorted({k[1] for k in rows})
print("| measurement (jobs/s) | " + " | ".join(systems) + " |")
print("|---" * (len(systems) + 1) + "|")
for m in order:
    cells = []
    for s in systems:
        v = rows.get((m, s))
        cells.append("%.0f (%s)" % (med[(m, s)], ", ".join("%.0f" % x for x in v)) if v else "—")
    print("| %s | %s |" % (m, " | ".join(cells)))
print()
for s in systems:
    if not s.startswith("errand"):
        continue
    for m in order[:3]:
        g = med.get((m, "graphile-worker"))
        e = med.get((m, s))
        if g and e:
            print("%s / graphile-worker, %s: %.2f×" % (s, m, e / g))
    one, two = med.get((order[3], s)), med.get((order[4], s))
    if one and two:
        print("%s two nodes / one node: %.2f×" % (s, two / one))
