"""JUnit XML for CI test viewers: one suite, one test case per file checked.

A file with findings at warning or above fails (the findings are the failure's
text); a file that could not be checked, or one with a target whose dynamic
check ended in an error, is an error.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TextIO
from xml.etree import ElementTree

from attncheck.findings import Finding, Severity
from attncheck.pipeline import Outcome
from attncheck.report import location, place, target_error_message, target_errors


def write(outcome: Outcome, stream: TextIO, *, color: bool = False) -> None:
    by_path: dict[str, list[Finding]] = defaultdict(list)
    for finding in outcome.findings:
        by_path[finding.path].append(finding)
    failing = {path for path, found in by_path.items() if any(f.severity >= Severity.WARNING for f in found)}
    errors: dict[str, list[str]] = defaultdict(list)
    unreadable = {error.path for error in outcome.errors if error.level == "error"}
    for error in outcome.errors:
        if error.level == "error":
            errors[error.path].append(f"{place(error.path, error.span)}: {error.message}" if error.span
                                      else error.message)
    for result in target_errors(outcome):
        errors[result.target.path].append(target_error_message(result))
    suite = ElementTree.Element("testsuite", {
        "name": "attncheck",
        "tests": str(outcome.files),
        "failures": str(len(failing)),
        "errors": str(len(errors)),
        "skipped": "0",
    })
    for path in outcome.paths:
        case = ElementTree.SubElement(suite, "testcase", {"classname": "attncheck", "name": place(path, None)})
        if path in errors:
            error = ElementTree.SubElement(case, "error", {
                "message": errors[path][0], "type": "file-error" if path in unreadable else "target-error"})
            error.text = "\n".join(errors[path])
        found = by_path.get(path, [])
        if path in failing:
            body = "\n".join(f"{location(f)}: {f.code} [{f.severity}] {f.message}" for f in found)
            failure = ElementTree.SubElement(case, "failure", {
                "message": f"{len(found)} finding(s)", "type": "attncheck"})
            failure.text = body
    root = ElementTree.Element("testsuites")
    root.append(suite)
    ElementTree.indent(root)
    stream.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    stream.write(ElementTree.tostring(root, encoding="unicode"))
    stream.write("\n")
