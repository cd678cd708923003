# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The AWS orphan sweep's words: the orphan report (Markdown and JSON, one account or several) and the one-line
summary of a sweep, a plan or a report. aws_sweep.py decides what is there; this file only says it."""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import cloud_report


def generated_at():
    """The report's time stamp: now, in UTC, to the second (ISO 8601), as the other clouds' reports give it."""
    return cloud_report.now().isoformat()


def render_markdown(data):
    lines = [
        "# krops AWS orphan report",
        "",
        "- Environment: `{}`".format(data["environment"]),
        "- Account: `{}`".format(data["account_id"]),
        "- Regions: {}".format(", ".join(f"`{r}`" for r in data["regions"])),
        "- Generated: {}".format(data["generated_at"]),
        "- Threshold: owned resources older than {} hours (no creation time: the cluster's oldest resource)".format(
            cloud_report.number(data["min_age_hours"])
        ),
        "",
    ]
    if data["errors"]:
        lines += ["## Discovery errors", ""]
        lines += ["- {}".format(e["error"]) for e in data["errors"]]
        lines.append("")
    if data.get("candidates"):
        lines += ["## Candidates (names that resemble a cluster; nothing proves them owned, never deleted)", ""]
        lines += ["- {} `{}` (like {})".format(c["type"], c["id"], c["cluster"]) for c in data["candidates"]]
        lines.append("")
    if not data["resources"]:
        lines.append("No orphaned resources found.")
        return "\n".join(lines) + "\n"
    lines += cloud_report.orphan_table(
        data["resources"], ("Region", "Cluster", "Type", "ID", "Age (hours)", "Note"), _cells
    )
    return "\n".join(lines) + "\n"


def _cells(item):
    age = cloud_report.age(item) + (" (cluster)" if item["age_from_cluster"] else "")
    return (
        item["region"],
        item["cluster"] or "-",
        item["type"],
        f"`{item['id']}`",
        age,
        cloud_report.cell(item["reason"]),
    )


def render_accounts_markdown(data):
    """The orphan report of several accounts: a header, then one section per account (render_markdown's)."""
    lines = [
        "# krops AWS orphan report",
        "",
        "- Environment: `{}`".format(data["environment"]),
        "- Accounts: {}".format(", ".join(f"`{a}`" for a in data["account_ids"])),
        "- Generated: {}".format(data["generated_at"]),
        "- Found {} orphaned resources in all.".format(data["count"]),
        "",
    ]
    for account in data["accounts"]:
        section = dict(account, environment=data["environment"], generated_at=data["generated_at"])
        section["min_age_hours"] = data["min_age_hours"]
        body = render_markdown(section).splitlines()
        body[0] = "## Account `{}` (role `{}`)".format(account["account_id"], account["role_arn"])
        body = [line for line in body if not line.startswith(("- Environment:", "- Generated:", "- Account:"))]
        lines += [
            line.replace("## ", "### ", 1) if line.startswith("## ") and i else line for i, line in enumerate(body)
        ]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def summary(result, mode, check_mode):
    if mode == "report":
        text = "orphan report: %d owned resources older than the threshold in %s" % (
            result["report"]["json"]["count"],
            ", ".join(result["regions"]),
        )
        if result.get("candidates"):
            text += "; %d resources whose names resemble a cluster, not proven owned (candidates)" % len(
                result["candidates"]
            )
    elif check_mode:
        text = "plan: %d resources would be deleted in %s" % (len(result["plan"]), ", ".join(result["regions"]))
    else:
        counts = {}
        for item in result["results"]:
            counts[item["outcome"]] = counts.get(item["outcome"], 0) + 1
        text = "sweep of {}: {}".format(
            ", ".join(result["regions"]),
            ", ".join("%d %s" % (n, o) for o, n in sorted(counts.items())) or "nothing owned found",
        )
        failed = [r for r in result["results"] if r["outcome"] == "failed"]
        if failed:
            text += "; failed: {}".format(
                "; ".join("{} {} in {} ({})".format(r["type"], r["id"], r["region"], r["reason"]) for r in failed[:10])
            )
        if result["leftovers"]:
            text += "; still owned after the sweep: {}; fix the causes above and run the sweep again".format(
                ", ".join("{} {} in {}".format(r["type"], r["id"], r["region"]) for r in result["leftovers"][:20])
            )
    if result.get("kept"):
        text += "; kept: {}".format(
            "; ".join("{} {} ({})".format(k["type"], k["id"], k["reason"]) for k in result["kept"])
        )
    if result["errors"]:
        text += "; discovery errors: {}".format("; ".join(e["error"] for e in result["errors"][:10]))
    return text


def accounts_report(parts, result, job):
    """The report of several accounts (aws_sweep's parts, one per account) into result: markdown and JSON, with
    each account's section and the flat lists, each entry with its account_id; its files written unless in check
    mode."""
    data = {
        "environment": job["environment"],
        "account_ids": result["account_ids"],
        "regions": result["regions"],
        "generated_at": generated_at(),
        "min_age_hours": 6 if job["params"].get("min_age_hours") is None else job["params"]["min_age_hours"],
        "accounts": [],
    }
    for part in parts:
        one = part["report"]["json"]
        data["accounts"].append(
            {
                "account_id": part["account_id"],
                "role_arn": part["role_arn"],
                "regions": part["regions"],
                "count": one.get("count", 0),
                "resources": one.get("resources", []),
                "errors": part["errors"],
                "candidates": one.get("candidates", []),
                "kept": one.get("kept", []),
            }
        )
    for key in ("resources", "errors", "candidates", "kept"):
        data[key] = [dict(item, account_id=a["account_id"]) for a in data["accounts"] for item in a[key]]
    data["count"] = len(data["resources"])
    result["report"] = {"markdown": render_accounts_markdown(data), "json": data}
    params = job["params"]
    if params.get("report_path") and not job["check_mode"]:
        result["report_files"] = cloud_report.write_report(params["report_path"], result["report"]["markdown"], data)
