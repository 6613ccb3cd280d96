"""JUnit XML for conversation test results (one ``testsuite`` per test file, one ``testcase`` per case)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from .runner import CaseResult


def failure_text(r: CaseResult) -> str:
    """The readable diff of a failed case: each failed step (file:line), expected vs got, then the transcript."""
    lines = []
    if r.error:
        lines.append(f"error: {r.error}")
    for s in r.failures():
        lines += [f"step {s.index + 1} at {r.case.file}:{s.step.line}: {s.step.describe()}",
                  f"  expected: {s.expected}", f"  got:      {s.got}"]
    lines += ["transcript:"] + [f"  {t}" for t in r.transcript]
    return "\n".join(lines)


def write_junit(results: list[CaseResult], path: str | Path) -> Path:
    by_file: dict[str, list[CaseResult]] = defaultdict(list)
    for r in results:
        by_file[r.case.file].append(r)
    root = ET.Element("testsuites", name="flowdesk conversation tests", tests=str(len(results)),
                      skipped=str(sum(1 for r in results if r.outcome == "xfail")),
                      failures=str(sum(1 for r in results if not r.passed and not r.error)),
                      errors=str(sum(1 for r in results if r.error)),
                      time=f"{sum(r.seconds for r in results):.3f}")
    for file, rs in by_file.items():
        suite = ET.SubElement(root, "testsuite", name=file, tests=str(len(rs)),
                              failures=str(sum(1 for r in rs if not r.passed and not r.error)),
                              errors=str(sum(1 for r in rs if r.error)), time=f"{sum(r.seconds for r in rs):.3f}")
        for r in rs:
            tc = ET.SubElement(suite, "testcase", classname=Path(file).stem, name=r.case.name,
                               file=file, line=str(r.case.line), time=f"{r.seconds:.3f}")
            if r.outcome == "xfail":
                ET.SubElement(tc, "skipped", message=f"known failure: {r.case.known_failure}"[:300]).text = \
                    failure_text(r)
            elif r.outcome == "XPASS":
                ET.SubElement(tc, "failure", message=f"passed, but is marked as a known failure "
                                                     f"({r.case.known_failure}); remove the mark"[:300])
            elif r.error:
                ET.SubElement(tc, "error", message=r.error[:300]).text = failure_text(r)
            elif not r.passed:
                first = r.failures()[0]
                ET.SubElement(tc, "failure", message=f"{first.step.describe()}: expected {first.expected}, "
                                                     f"got {first.got}"[:300]).text = failure_text(r)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return path
