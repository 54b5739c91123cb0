"""The report of `warden policy test`: text for people, JSON for tools, JUnit XML for CI."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from checkpoint.policytest import Case, CaseResult, Coverage

Ran = list[tuple[str, int, str, "Case", "CaseResult"]]  # (file, line, suite, case, result)


def report(fmt: str, ran: Ran, cov: Coverage, revision: str, suites: int, *, verbose: bool = False) -> str:
    if fmt == "json":
        return _json(ran, cov, revision) + "\n"
    if fmt == "junit":
        return _junit(ran, revision)
    return _text(ran, cov, revision, suites, verbose)


def _text(ran: Ran, cov: Coverage, revision: str, suites: int, verbose: bool) -> str:
    lines = []
    for shown, line, suite, case, result in ran:
        if not result.ok:
            lines.append(f"FAIL {shown}:{line}: {suite} / {case.name}: {result.detail}")
        elif verbose:
            lines.append(f"ok   {shown}:{line}: {suite} / {case.name}: {result.detail}")
    passed = sum(r.ok for *_, r in ran)
    lines.append(f"{passed} passed, {len(ran) - passed} failed, in {suites} suite(s); policy revision {revision}")
    if cov.rules_never_held:
        lines.append("coverage: rules no case made hold: " + ", ".join(cov.rules_never_held))
    if cov.scope_never_touched:
        lines.append("coverage: scope entries no case touched: "
                     + ", ".join(f"{a} scope.{d} {e}" for a, d, e in cov.scope_never_touched))
    return "\n".join(lines) + "\n"


def _json(ran: Ran, cov: Coverage, revision: str) -> str:
    cases: list[dict[str, Any]] = [
        {"file": shown, "line": line, "suite": suite, "name": case.name, "ok": result.ok,
         "detail": result.detail, "verdict": result.verdict, "code": result.code,
         "expect": case.expect.model_dump(exclude_none=True)}
        for shown, line, suite, case, result in ran
    ]
    passed = sum(c["ok"] for c in cases)
    return json.dumps({"policy_revision": revision, "passed": passed, "failed": len(cases) - passed,
                       "cases": cases, "coverage": cov.as_dict()}, indent=2)


def _junit(ran: Ran, revision: str) -> str:
    root = ET.Element("testsuites", name="warden policy test", tests=str(len(ran)),
                      failures=str(sum(not r.ok for *_, r in ran)))
    by_suite: dict[str, ET.Element] = {}
    for shown, line, suite, case, result in ran:
        element = by_suite.get(suite)
        if element is None:
            element = by_suite[suite] = ET.SubElement(root, "testsuite", name=suite, tests="0", failures="0")
            ET.SubElement(ET.SubElement(element, "properties"), "property", name="policy_revision", value=revision)
        element.set("tests", str(int(element.get("tests", "0")) + 1))
        test = ET.SubElement(element, "testcase", name=case.name, classname=suite, file=shown, line=str(line))
        if not result.ok:
            element.set("failures", str(int(element.get("failures", "0")) + 1))
            ET.SubElement(test, "failure", message=result.detail).text = f"{shown}:{line}: {result.detail}"
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
