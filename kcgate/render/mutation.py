"""The mutation report (``kcgate mutate``) as text: a console summary and a Markdown page (for a job summary).

Pure: both take the report's JSON document (``MutationReport.to_json``), so this layer never imports the
calibration layer that builds it, and a saved report renders the same as a fresh one.
"""

from __future__ import annotations

from typing import Any

from kcgate.render.escape import md_cell, md_fenced, md_text

MAX_DIFF_LINES = 12  # a survivor's diff in the Markdown report (the JSON has it whole)


def rate(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _counts(d: dict[str, Any]) -> str:
    c = d["counts"]
    out = f"{c['killed']} killed, {c['survived']} survived"
    extra = [f"{c[k]} {k}" for k in ("within-rounding", "equivalent", "not-run") if c.get(k)]
    return out + (", " + ", ".join(extra) if extra else "")


def _alarms(c: dict[str, Any]) -> str:
    fa = c["false_alarms"]
    if c["skipped"]:
        return "-"
    return "not run" if fa is None else f"{fa}/{c['cases']}"


def headline(doc: dict[str, Any]) -> str:
    sample = " (a seeded sample: the budget ran out)" if doc["sampled"] else ""
    return (
        f"unmutated kernels' false alarms: {doc['false_alarms']} case(s); "
        f"kill rate {rate(doc['kill_rate'])}: {_counts(doc)}{sample}"
    )


def text(doc: dict[str, Any]) -> str:
    """The console summary: false alarms first, then per contract, per rule, and the survivors."""
    lines = [headline(doc), ""]
    head = f"{'contract':<24} {'class':<9} {'false alarms':>12} {'kill rate':>9}  mutants"
    lines += [head, "-" * len(head)]
    for c in doc["contracts"]:
        what = c["skipped"] or _counts(c)
        lines.append(
            f"{c['contract_id']:<24} {c['class']:<9} {_alarms(c):>12} {rate(c['kill_rate']):>9}  {what}"
        )
    lines += ["", f"{'rule':<26} {'family':<13} {'kill rate':>9}  mutants"]
    for name, r in doc["rules"].items():
        if any(r["counts"].values()):
            lines.append(f"{name:<26} {r['family']:<13} {rate(r['kill_rate']):>9}  {_counts(r)}")
    survivors = [m for c in doc["contracts"] for m in c["mutants"] if m["outcome"] == "survived"]
    if survivors:
        lines += ["", "survivors (a bug these contracts let through):"]
        for m in survivors:
            lines.append(f"  {m['contract_id']} {m['rule']} line {m['line']}: {m['change']}")
            for a in m["advice"] or [m["advice_note"]]:
                if a:
                    lines.append(f"    -> {a}")
    return "\n".join(lines)


def markdown(doc: dict[str, Any]) -> str:
    """The Markdown report: a summary, the tables per contract and per rule, each survivor with its diff."""
    out = ["## kcgate mutate: how strong are the contracts?", "", f"**{headline(doc)}**", ""]
    out += ["| contract | class | false alarms | kill rate | mutants |", "|---|---|---:|---:|---|"]
    for c in doc["contracts"]:
        what = c["skipped"] or _counts(c)
        out.append(
            f"| {md_cell(c['contract_id'])} | {c['class']} | {_alarms(c)} | {rate(c['kill_rate'])} | "
            f"{md_cell(what)} |"
        )
    out += ["", "| rule | family | bug | kill rate | mutants |", "|---|---|---|---:|---|"]
    for name, r in doc["rules"].items():
        if any(r["counts"].values()):
            out.append(
                f"| {name} | {r['family']} | {md_cell(r['bug'])} | {rate(r['kill_rate'])} | {_counts(r)} |"
            )
    for title, outcome in (("Survivors", "survived"), ("Survive within rounding", "within-rounding")):
        found = [m for c in doc["contracts"] for m in c["mutants"] if m["outcome"] == outcome]
        if not found:
            continue
        out += ["", f"### {title} ({len(found)})", ""]
        for m in found:
            budget = "-" if m["budget_used"] is None else f"{m['budget_used']:.3g}"
            out.append(
                f"- **{md_cell(m['contract_id'])}** `{m['rule']}` line {m['line']}: {md_cell(m['change'])} "
                f"(budget used {budget})"
            )
            for a in m["advice"]:
                out.append(f"  - what would kill it: {md_text(a, 600)}")
            if not m["advice"]:
                out.append(f"  - {md_text(m['advice_note'] or 'advice not asked for (--no-advice)')}")
            diff = m["diff"].splitlines()
            cut = diff[:MAX_DIFF_LINES] + (["..."] if len(diff) > MAX_DIFF_LINES else [])
            out += ["", *md_fenced(cut, "diff", "  ")]  # a ``` in the kernel's source cannot close it
    return "\n".join(out) + "\n"
