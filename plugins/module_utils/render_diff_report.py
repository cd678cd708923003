# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""render_diff's report as a pull-request comment (``markdown``, found again by :data:`MARKER`) and as text lines."""

from __future__ import annotations

import json

MARKER = "<!-- krops-render-diff -->"
COMMENT_LIMIT = 60000  # GitHub rejects comments over 65536 characters


def _value(value):
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:117] + "..."


def markdown(report):
    lines = [MARKER, "## krops render diff `{}` → `{}`".format(report["base"][:12], report["head"][:12]), ""]
    lines += _markdown_findings(report)
    for env, section in report["environments"].items():
        lines += _markdown_environment(env, section)
    text = "\n".join(lines) + "\n"
    if len(text) > COMMENT_LIMIT:
        text = text[:COMMENT_LIMIT] + "\n\n… truncated: the full report is in the job's JSON artifact.\n"
    return text


def _markdown_findings(report):
    """The verdict, the findings table, stale acknowledgements and the CEL rules not evaluated."""
    lines = []
    findings = report["findings"]
    if report["blocking"]:
        lines.append(
            "**%d blocking finding(s).** Fix them, or acknowledge each id in the accept file, or add the "
            "accept label." % report["blocking"]
        )
    elif findings:
        lines.append(
            "All %d finding(s) acknowledged%s."
            % (len(findings), " by label" if report["acknowledged_by_label"] else "")
        )
    else:
        lines.append("No danger findings.")
    if findings:
        lines += ["", "| | finding id | what |", "|---|---|---|"]
        for f in findings:
            mark = "✅ acknowledged" if f["acknowledged"] else "❌"
            lines.append("| {} | `{}` | {} |".format(mark, f["id"], f["message"].replace("|", "\\|")))
    for stale in report["stale_acknowledgements"]:
        lines.append(f"- accept file {stale} matches no finding")
    if report["cel_unevaluable"]:
        lines += ["", "CEL rules not evaluated (check them by hand):"]
        lines += ["- {} {}: {}".format(u["environment"], u["object"], u["message"]) for u in report["cel_unevaluable"]]
    return lines


def _markdown_environment(env, section):
    lines = ["", f"### {env}"]
    if not section["present"]["head"]:
        lines.append("Environment removed by this change.")
    elif not section["present"]["base"]:
        lines.append("Environment added by this change.")
    changed = any(b[k] for b in section["kustomizations"].values() for k in ("added", "changed", "removed"))
    if not changed:
        lines.append("No object changes.")
    lines.append("Clusters touched: %s" % (", ".join(section["clusters"]) or "none"))
    if section["cloud_resources"]:
        lines.append(
            "Cloud resources touched: {}".format(
                ", ".join("{} {} ({})".format(c["cloud"], c["object"], c["change"]) for c in section["cloud_resources"])
            )
        )
    for when in ("base", "head"):
        for failure in section["render_failures"][when]:
            lines.append("- render failure at {}: `{}`: {}".format(when, failure["file"], failure["message"]))
    if section["not_applied"]:
        lines.append(
            "Not applied by any Flux Kustomization or FluxInstance: {}".format(
                ", ".join(f"`{d}`" for d in section["not_applied"])
            )
        )
    if section["not_compared"]:
        lines.append("Not compared (a render failed): {}".format(", ".join(f"`{d}`" for d in section["not_compared"])))
    if section["versions"]:
        lines += ["", "| object | field | base | head |", "|---|---|---|---|"]
        lines += [
            "| {} | `{}` | {} | {} |".format(v["object"], v["path"], v["base"] or "—", v["head"] or "—")
            for v in section["versions"]
        ]
    for ks, bucket in sorted(section["kustomizations"].items()):
        lines += _markdown_kustomization(ks, bucket)
    return lines


def _markdown_kustomization(ks, bucket):
    lines = ["", f"#### Kustomization {ks}"]
    for what in ("added", "removed"):
        lines += ["- {} `{}`".format(what, o["object"]) for o in bucket[what]]
    for obj in bucket["changed"]:
        lines.append("- changed `{}`".format(obj["object"]))
        lines.append("  <details><summary>%d field(s)</summary>\n" % len(obj["fields"]))
        lines.append("  ```diff")
        for field in obj["fields"]:
            if field["base"] is not None:
                lines.append("  - {}: {}".format(field["path"], _value(field["base"])))
            if field["head"] is not None:
                lines.append("  + {}: {}".format(field["path"], _value(field["head"])))
        lines += ["  ```", "  </details>"]
    return lines


def text_lines(report):
    lines = [
        "{} {}: {}".format("ACK " if f["acknowledged"] else "FAIL", f["id"], f["message"]) for f in report["findings"]
    ]
    for env, section in report["environments"].items():
        counts = {
            k: sum(len(b[k]) for b in section["kustomizations"].values()) for k in ("added", "changed", "removed")
        }
        lines.append(
            "%s: %d added, %d changed, %d removed; clusters: %s"
            % (env, counts["added"], counts["changed"], counts["removed"], ", ".join(section["clusters"]) or "none")
        )
    lines.append("%d blocking finding(s)" % report["blocking"])
    return lines
