# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The orphan report of a cloud whose teardown is a table of rows (azure_rows.py, gcp_rows.py): its words.

What is there comes from the engine (``orphans``, below: the rows' discovery in check mode, each owned item with the
age its cloud gives); this file says it, as Markdown and JSON in the shape of the AWS report (aws_report.py),
and writes the two files. Importing it needs no cloud SDK.
"""

from __future__ import annotations

import datetime
import json
import re

from ansible_collections.krops.platform.plugins.module_utils import shell

# cloud -> (its name in the title, the JSON key and the label of where the report looked)
WHERE = {
    "azure": ("Azure", "subscription_id", "Subscription"),
    "gcp": ("GCP", "project", "Project"),
}
# A cloud whose rows file krops.platform.cloud_teardown runs: where it looked is its settings (secrets left out).
GENERIC_WHERE = ("scope", "Settings")


def where(cloud):
    """(title, JSON key, label) of a cloud's report."""
    return WHERE.get(cloud) or (cloud, *GENERIC_WHERE)


def now():
    """The report's time: now, in UTC, to the second."""
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def orphan_report(run, cloud, environment, scope, min_age_hours, report_path=None, check_mode=False, at=None):
    """The module result of an orphan report over ``run`` (a steps.Run in check mode): ``report`` (markdown and
    json), ``report_files`` when written (``report_path``, not in check mode), ``msg``, ``not_owned`` and the
    run's plan. Nothing in the cloud is written: the run discovers only."""
    at = at or now()
    result, entries = orphans(run, at, min_age_hours)
    title, key, dummy = where(cloud)
    data = {
        "cloud": cloud,
        "environment": environment,
        key: scope,
        "generated_at": at.isoformat(),
        "min_age_hours": min_age_hours,
        "count": len(entries),
        "resources": entries,
        "not_owned": list(result.get("not_owned") or []),
        "held_networks": list(result.get("held_networks") or []),
    }
    out = {
        "changed": False,
        "environment": environment,
        key: scope,
        "plan": result["plan"],
        "results": [],  # a report deletes nothing (as the AWS sweep's report mode)
        "leftovers": [],
        "not_owned": data["not_owned"],
        "report": {"markdown": render_markdown(data), "json": data},
        "msg": summary(data),
    }
    if report_path and not check_mode:
        out["report_files"] = write_report(report_path, out["report"]["markdown"], data)
    return out


def render_markdown(data):
    title, key, label = where(data["cloud"])
    lines = [
        f"# krops {title} orphan report",
        "",
        "- Environment: `{}`".format(data["environment"]),
        f"- {label}: `{data[key]}`",
        "- Generated: {}".format(data["generated_at"]),
        "- Threshold: owned resources older than {} hours (no creation time: always reported)".format(
            number(data["min_age_hours"])
        ),
        "",
    ]
    if not data["resources"]:
        lines += ["No orphaned resources found.", ""]
    else:
        lines += orphan_table(
            data["resources"],
            ("Type", "Name", "Created", "Age (hours)", "Reason"),
            lambda item: (
                item["type"],
                f"`{item['name']}`",
                item["created"] or "unknown",
                age(item),
                cell(item["reason"]),
            ),
        )
        lines.append("")
    if data["held_networks"]:
        lines += [
            "## Owned VPCs left whole",
            "",
            "They hold what krops does not own (below), so no teardown deletes them or anything in them: "
            + ", ".join(f"`{name}`" for name in data["held_networks"]),
            "",
        ]
    if data["not_owned"]:
        lines += ["## Not proven owned (never deleted)", ""]
        lines += ["- {} `{}`: {}".format(n["type"], n["name"], n["reason"]) for n in data["not_owned"]]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def summary(data):
    title, key, label = where(data["cloud"])
    text = "orphan report: %d owned resources older than the threshold in %s %s" % (
        data["count"],
        label.lower(),
        data[key],
    )
    if data["held_networks"]:
        text += "; owned VPCs left whole: {}".format(", ".join(data["held_networks"]))
    if data["not_owned"]:
        text += "; %d resources not proven owned, left alone (not_owned)" % len(data["not_owned"])
    return text


def write_report(path, markdown, data):
    """Write the Markdown to ``path`` and the JSON beside it (``.md`` replaced by ``.json``); the two paths."""
    base = path[:-3] if path.endswith(".md") else path
    json_path = base + ".json"
    shell.write_output("report_path", path, markdown.encode())
    shell.write_output("report_path", json_path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
    return {"markdown": path, "json": json_path}


def orphan_table(resources, columns, cells):
    """The count line and the Markdown table of an orphan report (this one's and aws_report's): ``columns`` the
    headings, ``cells(item)`` the cells of one resource's row."""
    lines = ["Found %d orphaned resources." % len(resources), "", "| " + " | ".join(columns) + " |"]
    lines.append("|" + "---|" * len(columns))
    return lines + ["| " + " | ".join(cells(item)) + " |" for item in resources]


def age(item):
    """A resource's age in hours as the report prints it (``unknown`` when its cloud gave no creation time)."""
    return "unknown" if item["age_hours"] is None else number(item["age_hours"])


def number(value):
    return f"{value:g}" if isinstance(value, float) else str(value)


def cell(text):
    """Text that cannot end a Markdown table cell."""
    return (text or "").replace("|", "/")


# --- the orphan report: discovery only, with each owned item's age --------------------------------------------

ORPHAN = "orphan"  # the outcome of an entry of an orphan report (the AWS sweep's report says the same)
_RFC3339 = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?([Zz]|[+-]\d\d:\d\d)$")


def created_at(text):
    """An aware UTC datetime of a creation time as a cloud states it (RFC 3339: ARM's systemData.createdAt with
    seven fractional digits, Google's creationTimestamp with an offset); None when absent or not such a time."""
    match = _RFC3339.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        zone_of = datetime.UTC
        if zone not in "Zz":
            sign = -1 if zone[0] == "-" else 1
            zone_of = datetime.timezone(sign * datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
        micro = int((fraction or "0")[:6].ljust(6, "0"))
        when = datetime.datetime(*map(int, (year, month, day, hour, minute, second)), micro, tzinfo=zone_of)
        return when.astimezone(datetime.UTC)
    except (ValueError, OverflowError):  # a month 13, an offset of 25 hours, a year 9999 past UTC: not a time
        return None


def orphans(run, now, min_age_hours):
    """The orphan report of a table of rows: (the run's result, the entries).

    ``run`` must be in check mode: it discovers and plans, and writes nothing. Each owned item of an acting row
    that is at least ``min_age_hours`` old (``now``: an aware datetime) is an entry, in the table's order: its
    result entry (``run.public``) with outcome ``orphan``, its row's ``stage`` (``group``), ``created`` (UTC, ISO
    8601) and ``age_hours`` (to a tenth). An item whose row found no creation time (the cloud gives none for
    that type, or gave none) has both None, and one created after ``now`` has no age: both are always reported, the
    report does not know they are young.
    """
    if not run.check_mode:
        raise ValueError("cloud_report.orphans needs a run in check mode: a report writes nothing")
    result = run.result or run.execute()  # one the caller executed first (to complete its items) is not run again
    entries = []
    for step in run.acting:
        for item in run.plan[step.name]:
            created = created_at(item.get("_created"))
            # a creation time after now (a skewed clock, a bogus stamp) is no age: the item is always reported
            age = None if created is None or created > now else round((now - created).total_seconds() / 3600.0, 1)
            if age is not None and age < min_age_hours:
                continue
            entry = run.public(item, ORPHAN)
            entry.update(stage=step.group, created=created.isoformat() if created else None, age_hours=age)
            entries.append(entry)
    return result, entries
