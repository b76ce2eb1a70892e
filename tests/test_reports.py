"""Every output format against its contract, plus merging and fixes.

The outcome here is built by hand (static, dynamic and merged findings, a
notebook finding, a file error, target results with checks) so the formats
are tested independently of which rules exist.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from xml.etree import ElementTree

import jsonschema
import pytest
import xmlschema

from attncheck.catalogue import CODES
from attncheck.findings import Check, Edit, Finding, Severity, Span, Target, TargetResult
from attncheck.fixes import apply_edits, fix_source
from attncheck.merge import REFUTED_REASON, merge
from attncheck.pipeline import Outcome
from attncheck.report import FORMATS, location, writer
from attncheck.report.text_format import frame, summary_line
from attncheck.sources import FileError, Source

DATA = Path(__file__).parent / "data"
JSON_SCHEMA = Path(__file__).parent.parent / "attncheck" / "report" / "schema.json"

MODEL = "import torch\n\nclass Attn:\n    def forward(self, q, k):\n        return q @ k / torch.sqrt(64)\n"


def finding(code="ATT204", line=5, *, path="model.py", source="static", target="Attn", cell=None,
            severity=Severity.ERROR, message="torch.sqrt(64) on a number", fix=()):
    return Finding(code, severity, message, path, Span(line, 24, line, 37, cell=cell), source=source,
                   target=target, hint="use math.sqrt(64)", fix=fix)


def target(name="Attn", path="model.py"):
    return Target(path=path, name=name, line=3, kinds=("mha",), is_class=True)


@pytest.fixture
def outcome() -> Outcome:
    results = [
        TargetResult(target(), "failed", "2 checks failed", [
            Check("reference", "failed", "max error 0.4 > 1e-5"), Check("batch-independence", "passed")]),
        TargetResult(target("Other"), "passed", "", [Check("reference", "passed", "")],
                     refuted={"ATT201": "a wrong scale would move the output by 0.3"}),
    ]
    static = [finding(), finding("ATT201", 5, target="Other", severity=Severity.WARNING)]
    dynamic = [finding("ATT204", 3, source="dynamic", message="TypeError on forward"),
               finding("ATT903", 3, source="dynamic", message="output differs")]
    nb = finding(path="nb.ipynb", line=2, cell=3, target=None)
    merged = [*merge(static, dynamic, results), nb]
    sources = {"model.py": Source("model.py", MODEL),
               "nb.ipynb": Source("nb.ipynb", "import torch\ny = torch.sqrt(64)\n", cells=((1, 3),))}
    return Outcome(findings=merged, targets=results, errors=[FileError("bad.py", "syntax error at line 1")],
                   paths=["bad.py", "model.py", "nb.ipynb", "clean.py"], sources=sources)


def render(name: str, outcome: Outcome) -> str:
    stream = io.StringIO()
    writer(name)(outcome, stream, color=False)
    return stream.getvalue()


def test_merge_joins_static_and_dynamic_and_downgrades_passed_targets(outcome):
    by_code = {f.code: f for f in outcome.findings if f.path == "model.py"}
    both = by_code["ATT204"]
    assert both.source == "both" and both.line == 5  # the static location is kept
    assert "dynamic: TypeError on forward" in both.evidence
    assert by_code["ATT903"].source == "dynamic"
    downgraded = by_code["ATT201"]
    assert downgraded.severity == Severity.INFO and REFUTED_REASON in downgraded.message
    assert "dynamic: a wrong scale would move the output by 0.3" in downgraded.evidence
    assert len([f for f in outcome.findings if f.code == "ATT204" and f.path == "model.py"]) == 1


def test_json_report_matches_its_schema_and_contract(outcome):
    document = json.loads(render("json", outcome))
    jsonschema.validate(document, json.loads(JSON_SCHEMA.read_text()))
    first = document["findings"][0]
    assert list(first)[:11] == ["code", "name", "severity", "path", "line", "column", "end_line",
                                "end_column", "message", "source", "target"]
    assert {f["source"] for f in document["findings"]} == {"static", "dynamic", "both"}
    assert document["targets"][0]["checks"][0] == {"name": "reference", "status": "failed",
                                                   "detail": "max error 0.4 > 1e-5"}
    assert document["errors"] == [{"path": "bad.py", "message": "syntax error at line 1", "level": "error",
                                   "line": None, "column": None, "cell": None}]
    assert document["summary"]["targets"] == {"total": 2, "passed": 1, "failed": 1, "skipped": 0, "error": 0}
    notebook = next(f for f in document["findings"] if f["path"] == "nb.ipynb")
    assert (notebook["cell"], notebook["line"]) == (3, 2)


def test_json_schema_rejects_a_broken_report(outcome):
    document = json.loads(render("json", outcome))
    document["findings"][0]["source"] = "guess"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, json.loads(JSON_SCHEMA.read_text()))


def test_sarif_is_valid_sarif_2_1_0(outcome):
    document = json.loads(render("sarif", outcome))
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text())
    jsonschema.validate(document, schema)
    run = document["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert {"id", "name", "shortDescription", "fullDescription", "defaultConfiguration"} <= set(rules[0])
    result = run["results"][0]
    assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 5, "startColumn": 24, "endLine": 5, "endColumn": 38}
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "model.py"
    notification = run["invocations"][0]["toolExecutionNotifications"][0]
    assert notification["message"]["text"] == "syntax error at line 1"
    assert {r["level"] for r in run["results"]} == {"error", "note"}


def test_sarif_schema_catches_an_invalid_level(outcome):
    document = json.loads(render("sarif", outcome))
    document["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, json.loads((DATA / "sarif-schema-2.1.0.json").read_text()))


def test_github_annotations_parse(outcome):
    lines = render("github", outcome).splitlines()
    assert lines[0] == "::error file=bad.py,title=attncheck::syntax error at line 1"
    first = lines[1]
    command, rest = first[2:].split(" ", 1)
    properties, message = rest.split("::", 1)
    fields = dict(item.split("=", 1) for item in properties.split(","))
    assert command == "error"
    assert fields == {"file": "model.py", "line": "5", "col": "24", "endLine": "5", "endColumn": "37",
                      "title": "ATT204 sqrt-of-number"}
    assert message == "torch.sqrt(64) on a number%0Ahint: use math.sqrt(64)"
    assert any(line.startswith("::notice ") for line in lines)  # the downgraded finding
    assert any("title=ATT204 sqrt-of-number (cell 3)" in line for line in lines)


def test_junit_has_one_case_per_file(outcome):
    root = ElementTree.fromstring(render("junit", outcome).split("\n", 1)[1])
    suite = root.find("testsuite")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert list(cases) == ["bad.py", "model.py", "nb.ipynb", "clean.py"]
    assert suite.get("tests") == "4" and suite.get("failures") == "2" and suite.get("errors") == "1"
    assert cases["bad.py"].find("error") is not None
    assert "ATT204 [error]" in cases["model.py"].find("failure").text
    assert len(cases["clean.py"]) == 0


def test_text_report_has_locations_frames_hints_tables_and_summary(outcome):
    text = render("text", outcome)
    assert "bad.py: error: syntax error at line 1" in text
    assert "model.py:5:24: ATT204 [error] torch.sqrt(64) on a number (both)" in text
    assert " > 5 |         return q @ k / torch.sqrt(64)" in text
    assert "  hint: use math.sqrt(64)" in text
    assert "nb.ipynb:cell 3:2:24: ATT204 [error]" in text
    assert "    reference: failed: max error 0.4 > 1e-5" in text
    assert "batch-independence" not in text  # to a pipe, a passing check says nothing without --show-checks
    assert text.rstrip().endswith("Found 3 problems (3 errors) in 4 files, 1 info; "
                                  "1 file could not be checked; 2 targets: 1 passed, 1 failed")
    assert "\x1b[" not in text


def test_text_to_a_pipe_lists_checks_only_when_asked_without_cut_or_padding(outcome):
    long = "x" * 150
    outcome.targets[1].checks.append(Check("causality", "passed", long))
    quiet = render("text", outcome)
    assert "Other" not in quiet and long not in quiet  # a passing target says nothing
    stream = io.StringIO()
    writer("text")(outcome, stream, color=False, show_checks=True)
    every = stream.getvalue()
    assert "    batch-independence: passed" in every
    assert f"    causality: passed: {long}" in every  # no 80-column cut
    assert [line for line in every.splitlines() if line != line.rstrip()] == []


def test_text_on_a_terminal_keeps_the_check_tables(outcome):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    writer("text")(outcome, stream, color=False)
    assert "batch-independence" in stream.getvalue() and "Other" in stream.getvalue()


def test_concise_is_one_line_per_finding_error_and_failing_target(outcome):
    lines = render("concise", outcome).splitlines()
    assert lines[0] == "bad.py: error: syntax error at line 1"
    assert "model.py:5:24: ATT204 torch.sqrt(64) on a number" in lines
    assert "nb.ipynb:cell 3:2:24: ATT204 torch.sqrt(64) on a number" in lines
    assert "model.py:3: Attn: failed: 2 checks failed" in lines
    assert lines[-1].startswith("Found 3 problems")
    assert len(lines) == 1 + len(outcome.findings) + 1 + 1


def test_statistics_count_each_code(outcome):
    outcome.findings[0].fix = (Edit(0, 1, "x"),)
    lines = render("statistics", outcome).splitlines()
    code = outcome.findings[0].code
    count = sum(f.code == code for f in outcome.findings)
    assert f"{count}  {code}  [*] {CODES[code].name}" in lines
    assert lines[-1].startswith("Found 3 problems")


def test_text_colour_only_when_asked(outcome):
    stream = io.StringIO()
    writer("text")(outcome, stream, color=True)
    assert "\x1b[" in stream.getvalue()


def test_notebook_frame_numbers_lines_within_the_cell():
    source = Source("nb.ipynb", "a = 1\nimport torch\ny = torch.sqrt(64)\n", cells=((1, 1), (2, 4)))
    lines = frame(source, finding(path="nb.ipynb", line=2, cell=4))
    assert lines[:2] == ["   1 | import torch", " > 2 | y = torch.sqrt(64)"]  # no line from cell 1
    assert location(finding(path="nb.ipynb", line=2, cell=4)) == "nb.ipynb:cell 4:2:24"


def test_summary_when_clean():
    assert summary_line(Outcome(paths=["a.py"])) == "No problems found in 1 file"


def test_every_format_is_registered():
    assert FORMATS == ("text", "json", "sarif", "github", "junit")
    with pytest.raises(ValueError, match="unknown format"):
        writer("yaml")


def test_apply_edits_last_to_first_and_skips_overlaps():
    text = "abcdefghij"
    edits = [Edit(0, 2, "XY"), Edit(1, 3, "zz"), Edit(5, 5, "+"), Edit(8, 10, "")]
    new, applied = apply_edits(text, edits)
    assert new == "XYcde+fgh"
    assert Edit(1, 3, "zz") not in applied and len(applied) == 3
    assert apply_edits(text, [Edit(4, 99, "")]) == (text, set())


def test_fix_source_reports_which_findings_were_fixed():
    source = Source("m.py", "x = torch.sqrt(64)\n")
    fixable = finding(line=1, fix=(Edit(4, 18, "math.sqrt(64)"),))
    clash = finding(line=1, fix=(Edit(10, 14, "SQRT"),))
    fixed = fix_source(source, [fixable, clash, finding(line=1)])
    assert fixed.text == "x = math.sqrt(64)\n"
    assert fixed.fixed == (fixable,)
    assert "-x = torch.sqrt(64)" in fixed.diff() and "+x = math.sqrt(64)" in fixed.diff()
    assert fix_source(source, [finding(line=1)]) is None


def test_an_isolated_run_keeps_a_static_error_on_a_target_that_passed():
    """Issue 17 item 2: code that detects the checker may pass the dynamic check; its static error
    (ATT201, the normal path) must still fail a CI or grading run. A warning is still downgraded."""
    # the dynamic check could see both mistakes on its inputs (issue 16's evidence), and did not
    refuted = {"ATT201": "a wrong scale would move the output by 0.3", "ATT204": "the probe ran and held"}
    passed = [TargetResult(target("Other"), "passed", "", [Check("reference", "passed", "")], refuted=refuted)]
    static = [finding("ATT201", 5, target="Other", severity=Severity.ERROR),
              finding("ATT204", 6, target="Other", severity=Severity.WARNING)]
    kept, warning = merge(static, [], passed, keep_static_errors=True)
    assert kept.severity == Severity.ERROR and REFUTED_REASON not in kept.message
    assert warning.severity == Severity.INFO
    assert merge(static, [], passed)[0].severity == Severity.INFO  # a plain local run, as before


@pytest.fixture
def target_error(outcome) -> Outcome:
    """The outcome with its file error gone and a target whose dynamic check ended in an error instead:
    the run fails (exit 1) with no finding at all for it."""
    crashed = TargetResult(target("Crashy", path="clean.py"), "error", "timed out after 20 s")
    return Outcome(findings=[], targets=[*outcome.targets, crashed], errors=[], paths=outcome.paths)


def test_sarif_says_a_target_error_failed_the_run(target_error):
    document = json.loads(render("sarif", target_error))
    jsonschema.validate(document, json.loads((DATA / "sarif-schema-2.1.0.json").read_text()))
    invocation = document["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    [notification] = invocation["toolExecutionNotifications"]
    assert notification["level"] == "error"
    assert notification["message"]["text"] == "Crashy (class, line 3): dynamic check error: timed out after 20 s"
    assert notification["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "clean.py"}, "region": {"startLine": 3}}


def test_sarif_execution_is_successful_only_without_errors(outcome):
    passing = Outcome(findings=outcome.findings, targets=outcome.targets[1:], paths=outcome.paths)
    assert json.loads(render("sarif", passing))["runs"][0]["invocations"][0]["executionSuccessful"] is True
    assert json.loads(render("sarif", outcome))["runs"][0]["invocations"][0]["executionSuccessful"] is False


def test_junit_says_a_target_error_and_is_valid(target_error, outcome):
    schema = xmlschema.XMLSchema(DATA / "junit-10.xsd")
    for each in (target_error, outcome):
        schema.validate(render("junit", each).split("\n", 1)[1])
    root = ElementTree.fromstring(render("junit", target_error).split("\n", 1)[1])
    suite = root.find("testsuite")
    assert suite.get("errors") == "1"
    case = next(c for c in suite.findall("testcase") if c.get("name") == "clean.py")
    error = case.find("error")
    assert error.get("type") == "target-error"
    assert error.get("message") == "Crashy (class, line 3): dynamic check error: timed out after 20 s"


def test_junit_schema_catches_a_broken_report(outcome):
    broken = render("junit", outcome).split("\n", 1)[1].replace('<testsuite name="attncheck"', "<testsuite")
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        xmlschema.XMLSchema(DATA / "junit-10.xsd").validate(broken)


def test_github_says_a_target_error(target_error):
    lines = render("github", target_error).splitlines()
    assert lines[0] == ("::error file=clean.py,line=3,title=attncheck::"
                        "Crashy (class, line 3): dynamic check error: timed out after 20 s")


@pytest.mark.parametrize("name", ["text", "concise", "junit"])
def test_a_file_name_with_terminal_escapes_is_shown_escaped(name):
    """Issue 17: a file named ``a\\x1b[1A\\x1b[2K.py`` would move up and erase the report's line
    above on a terminal (and is no valid XML in JUnit): human formats show its escapes."""
    path = "a\x1b[1A\x1b[2K\r.py"
    found = finding(path=path, source="dynamic", target=None)
    hostile = Outcome(findings=[found], targets=[TargetResult(target(path=path), "failed", "output differs")],
                      errors=[FileError(path, "syntax error at line 1")], paths=[path])
    stream = io.StringIO()
    writer(name)(hostile, stream, color=False)
    assert "\x1b" not in stream.getvalue() and "a\\x1b[1A\\x1b[2K\\r.py" in stream.getvalue()
