"""Output for CI systems: JUnit XML and GitHub Actions workflow commands."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from . import PolicyValue, Report
from .drift import Drift


def _anomaly_line(report: Report, code: str) -> str:
    a = report.anomalies[code]
    ex = ", ".join(report.examples(code))
    if a["count"] and not report.flags_samples(code):
        # A finding about the corpus or a category that flags no sample (`category_split`, `draft_vocab_stale`).
        return f"{a['count']} finding(s) {code}: {a['description']}"
    share = 100 * a["count"] / max(1, report.n_samples)
    return f"{a['count']} sample(s) ({share:.2f}%) flagged {code}: {a['description']}" + (f"; e.g. {ex}" if ex else "")


def _flagged_line(x: Mapping[str, Any], code: str) -> str:
    pos = x["positions"].get(code)
    return f"row {x['row']} sample_id={x['sample_id']} source={x['source']}" + (
        f" position={pos}" if pos is not None else ""
    )


def junit(
    report: Report,
    fail_on: str | None = None,
    policy: Mapping[str, PolicyValue] | None = None,
    drifts: list[Drift] | None = None,
) -> str:
    """One test case per anomaly code and per drift check; failures carry counts and example sample ids, a
    found code that does not fail says why (its policy status, as the terminal and the HTML word it).
    `fail_on` and `policy` default to what the scan ran with."""
    words = report.status_words(fail_on, policy)
    suites = ET.Element("testsuites", name="tokscan")
    s = ET.SubElement(suites, "testsuite", name="tokscan.anomalies")
    n_fail = 0
    for code, a in report.anomalies.items():
        case = ET.SubElement(s, "testcase", classname="tokscan.anomalies", name=code)
        status, said = words.get(code, ("clean", ""))
        if status == "fails":
            n_fail += 1
            f = ET.SubElement(case, "failure", message=_anomaly_line(report, code), type=a["severity"])
            lines = [_flagged_line(x, code) for x in report.flagged if code in x["codes"]]
            more = int(report.data.get("flagged_summarized", {}).get("by_code", {}).get(code, 0))
            if more:
                lines.append(f"... and {more:,} more sample(s) without detail (flagged_summarized; --flagged-detail)")
            f.text = "\n".join(lines)
        elif status != "clean":
            ET.SubElement(case, "system-out").text = f"{_anomaly_line(report, code)} ({said})"
    s.set("tests", str(len(report.anomalies)))
    s.set("failures", str(n_fail))
    s.set("errors", "0")
    if drifts is not None:
        d = ET.SubElement(suites, "testsuite", name="tokscan.drift")
        checks = ("samples", "tokens", "median", "ks", "special_rate", "anomaly_rate", "categories")
        for check in checks:
            case = ET.SubElement(d, "testcase", classname="tokscan.drift", name=check)
            found = [
                x for x in drifts if x.check == check or (check == "categories" and x.check.startswith("category_"))
            ]
            if found:
                f = ET.SubElement(case, "failure", message=f"{len(found)} drift(s): {found[0].message}", type="drift")
                f.text = "\n".join(x.message for x in found)
        d.set("tests", str(len(checks)))
        d.set("failures", str(sum(1 for c in d if c.find("failure") is not None)))
        d.set("errors", "0")
    ET.indent(suites)
    return _XML_INVALID.sub(_escaped, ET.tostring(suites, encoding="unicode", xml_declaration=True)) + "\n"


#: Characters XML 1.0 allows nowhere, not even escaped (a sample id may hold them).
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _escaped(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def _escape(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape(s).replace(":", "%3A").replace(",", "%2C")


def _command(level: str, message: str, **props: str) -> str:
    params = ",".join(f"{k}={_escape_property(v)}" for k, v in props.items() if v)
    return f"::{level} {params}::{_escape(message)}"


def github(
    report: Report,
    fail_on: str | None = None,
    policy: Mapping[str, PolicyValue] | None = None,
    drifts: list[Drift] | None = None,
) -> str:
    """Workflow-command annotations: `::error` for failing codes and drift, `::warning`/`::notice` for found
    codes that do not fail the run (with their policy status); codes the policy ignores are not annotated.
    `fail_on` and `policy` default to what the scan ran with."""
    lines = []
    for code, (status, said) in report.status_words(fail_on, policy).items():
        if status == "ignored":
            continue
        a = report.anomalies[code]
        if status == "fails":
            level, message = "error", _anomaly_line(report, code)
        else:
            level = "warning" if a["severity"] != "info" else "notice"
            message = f"{_anomaly_line(report, code)} ({said})"
        first = next((f for f in report.flagged if code in f["codes"]), None)
        file = first["source"] if first else ""
        lines.append(_command(level, message, file=file, title=f"tokscan {code}"))
    for d in drifts or []:
        lines.append(_command("error", d.message, title=f"tokscan drift {d.check}"))
    return "\n".join(lines) + ("\n" if lines else "")
