#!/usr/bin/env python3
"""Checks deploy/grafana/kvd-dashboard.json against the metrics kvd exports.

Usage: python3 deploy/check_dashboard.py [dashboard.json]

It reads the metric definitions from server/metrics.go and server/ingressmetrics.go (names,
label names, counter/gauge/histogram) and checks that:
  - the dashboard is valid JSON, panel ids are unique, gridPos rectangles fit the 24-column
    grid and do not overlap;
  - every PromQL expression (panel targets and template variable queries) selects only series
    the server exports (histograms as _bucket/_sum/_count), with label names the metric has
    (plus the scrape labels instance and job, and le on _bucket), and literal label values
    that occur in the Go source;
  - counters (and histogram series) are only used through a range (rate over
    $__rate_interval) and gauges never are;
  - every function or aggregation used is a PromQL one.
Exits non-zero on any problem.
"""
import itertools
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SOURCES = [os.path.join(ROOT, "server", "metrics.go"), os.path.join(ROOT, "server", "ingressmetrics.go")]
DASHBOARD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "grafana", "kvd-dashboard.json")

PROMQL_FUNCS = {
    "sum", "avg", "min", "max", "count", "topk", "bottomk", "quantile", "stddev", "stdvar",
    "count_values", "group", "rate", "irate", "increase", "delta", "idelta", "deriv",
    "histogram_quantile", "clamp_min", "clamp_max", "clamp", "vector", "scalar", "abs", "ceil",
    "floor", "round", "label_replace", "label_join", "avg_over_time", "max_over_time",
    "min_over_time", "sum_over_time", "absent", "time", "sort", "sort_desc",
}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
                   "and", "or", "unless", "offset"}
SCRAPE_LABELS = {"instance", "job"}
# labels whose values come from run time (bucket names, targets, histogram bounds), not the source
ENUM_LABELS_EXEMPT = {"bucket", "instance", "job", "le"}

problems = []


def problem(msg):
    problems.append(msg)


# ------------------------------------------------------------------ metrics from the source
src = "\n".join(open(p).read() for p in SOURCES)
metrics = {}  # name -> {"labels": set, "type": str}
var_to_name = {}
for m in re.finditer(r'(\w+)\s*=\s*desc\("(kvd_\w+)",\s*"(?:[^"\\]|\\.)*"((?:,\s*"\w+")*)\)', src):
    var, name, labels = m.group(1), m.group(2), re.findall(r'"(\w+)"', m.group(3))
    var_to_name[var] = name
    metrics[name] = {"labels": set(labels), "type": None}
for m in re.finditer(r'Name:\s*"(kvd_\w+)".*?\},\s*\[\]string\{([^}]*)\}', src, re.S):
    metrics[m.group(1)] = {"labels": set(re.findall(r'"(\w+)"', m.group(2))), "type": "histogram"}
for m in re.finditer(r'\b(counter|gauge|c|g)\((desc\w+)\b', src):
    metrics[var_to_name[m.group(2)]]["type"] = "counter" if m.group(1) in ("counter", "c") else "gauge"
for m in re.finditer(r'MustNewConstMetric\((desc\w+),\s*prometheus\.(Counter|Gauge)Value', src):
    metrics[var_to_name[m.group(1)]]["type"] = m.group(2).lower()
for m in re.finditer(r'MustNewConstHistogram\((desc\w+)', src):
    metrics[var_to_name[m.group(1)]]["type"] = "histogram"
for name, info in metrics.items():
    if info["type"] is None:
        problem(f"source: cannot tell the type of {name}")

series = {}  # series name -> (labels, kind) where kind is "counter" or "gauge"
for name, info in metrics.items():
    if info["type"] == "histogram":
        series[name + "_bucket"] = (info["labels"] | {"le"} | SCRAPE_LABELS, "counter")
        series[name + "_sum"] = (info["labels"] | SCRAPE_LABELS, "counter")
        series[name + "_count"] = (info["labels"] | SCRAPE_LABELS, "counter")
    else:
        series[name] = (info["labels"] | SCRAPE_LABELS, info["type"])
go_literals = set(re.findall(r'"([A-Za-z0-9_]+)"', src))

# ------------------------------------------------------------------ dashboard structure
try:
    dash = json.load(open(DASHBOARD))
except (OSError, ValueError) as e:
    print(f"FAIL: {DASHBOARD}: {e}")
    sys.exit(1)


def all_panels(ps):
    for p in ps:
        yield p
        yield from all_panels(p.get("panels", []))


panels = list(all_panels(dash.get("panels", [])))
ids = [p.get("id") for p in panels]
for i in {i for i in ids if ids.count(i) > 1}:
    problem(f"panel id {i} is used {ids.count(i)} times")
rects = []
for p in panels:
    g = p.get("gridPos")
    if not g:
        problem(f"panel {p.get('id')} has no gridPos")
        continue
    if g["x"] < 0 or g["w"] <= 0 or g["h"] <= 0 or g["x"] + g["w"] > 24:
        problem(f"panel {p['id']} gridPos {g} does not fit the 24-column grid")
    rects.append((p["id"], p.get("title"), g))
for (ia, ta, a), (ib, tb, b) in itertools.combinations(rects, 2):
    if a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and \
            a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]:
        problem(f"panels {ia} ({ta!r}) and {ib} ({tb!r}) overlap: {a} / {b}")

# ------------------------------------------------------------------ PromQL expressions
exprs = []  # (where, expr)
for p in panels:
    for t in p.get("targets", []):
        if "expr" in t:
            exprs.append((f"panel {p['id']} {p.get('title')!r} {t.get('refId')}", t["expr"]))
for v in dash.get("templating", {}).get("list", []):
    if v.get("type") == "query":
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        exprs.append((f"variable ${v['name']}", q))

SELECTOR = re.compile(r'([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?\s*(\[[^\]]*\])?\s*(\()?')
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def check_selector(where, name, braces, rng):
    if name not in series:
        problem(f"{where}: unknown metric {name}")
        return
    labels, kind = series[name]
    for lname, op, val in MATCHER.findall(braces or ""):
        if lname not in labels:
            problem(f"{where}: {name} has no label {lname!r} (has {sorted(labels)})")
        if "$" not in val and op in ("=", "=~") and lname not in ENUM_LABELS_EXEMPT:
            for alt in val.split("|"):
                if alt not in go_literals:
                    problem(f"{where}: {name}{{{lname}{op}{val!r}}}: value {alt!r} not in the Go source")
    if kind == "counter" and not rng:
        problem(f"{where}: counter {name} used without a range (rate)")
    if kind == "gauge" and rng:
        problem(f"{where}: gauge {name} used with a range {rng}")
    if rng and rng != "[$__rate_interval]":
        problem(f"{where}: {name} range {rng} is not [$__rate_interval]")


checked = 0
for where, expr in exprs:
    checked += 1
    # grep-level check: every kvd_ token is an exported series
    for tok in re.findall(r'\bkvd_\w+', expr):
        if tok not in series:
            problem(f"{where}: unknown metric {tok}")
    lv = re.fullmatch(r'\s*label_values\(\s*([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?\s*,\s*(\w+)\s*\)\s*', expr)
    if lv:
        name = lv.group(1)
        if name not in series:
            problem(f"{where}: unknown metric {name}")
        elif lv.group(3) not in series[name][0]:
            problem(f"{where}: {name} has no label {lv.group(3)!r}")
        continue
    if expr.count("(") != expr.count(")") or expr.count("{") != expr.count("}"):
        problem(f"{where}: unbalanced brackets")
    # drop grouping label lists so their label names are not taken for metrics
    e = re.sub(r'\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)', ' ', expr)
    pos = 0
    while True:
        m = SELECTOR.search(e, pos)
        if not m:
            break
        pos = m.end() if not m.group(4) else m.end(4)
        ident, braces, rng, call = m.groups()
        before = e[:m.start()]
        if re.search(r'[\d.]$', before) or (ident[0] in "eE" and re.search(r'\d$', before)):
            continue  # part of a number
        if call and not braces and not rng:
            if ident not in PROMQL_FUNCS:
                problem(f"{where}: unknown function {ident}")
            continue
        if ident in PROMQL_KEYWORDS:
            continue
        check_selector(where, ident, braces, rng)
    if re.search(r'(^|[^\w])\{', e):
        problem(f"{where}: selector without a metric name")

print(f"metrics in source: {len(metrics)} ({len(series)} series)")
for name in sorted(metrics):
    print(f"  {name:48s} {metrics[name]['type']:9s} {sorted(metrics[name]['labels'])}")
used = sorted({t for _, e in exprs for t in re.findall(r'\bkvd_\w+', e)})
print(f"panels: {len(panels)} (ids unique: {len(set(ids)) == len(ids)}), expressions checked: {checked}")
print(f"series used by the dashboard: {len(used)}")
for u in used:
    print(f"  {u}")
unused = sorted(n for n in metrics if not any(u == n or u.startswith(n + "_") for u in used))
print(f"exported metrics the dashboard does not use: {unused or 'none'}")
if problems:
    print(f"FAIL: {len(problems)} problem(s)")
    for p in problems:
        print("  " + p)
    sys.exit(1)
print("OK")
