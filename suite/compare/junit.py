"""JUnit XML for a Comparison: one <testcase> per cell and metric, so any CI system lists the checks.

    <testsuites><testsuite name="suite compare" tests= failures= skipped=>
      <properties>  thresholds, alpha, environment differences
      <testcase classname="<cell axes>" name="<cell id>.<metric>">   regression -> <failure>, skipped /
                                                                     inconclusive -> <skipped>, else passes
        <properties> noise, detectable   (timing checks: what the change was judged against)
      <testcase name="<cell id>.presence"> for cells on one side only -> <skipped>
Built with xml.etree, so every attribute and text is escaped properly.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from suite.compare.comparison import Comparison
from suite.compare.output import summary


def to_junit(c: Comparison) -> str:
    root = ET.Element("testsuites", name="suite compare")
    suite = ET.SubElement(root, "testsuite", name="suite compare")
    props = ET.SubElement(suite, "properties")
    for k, v in c.thresholds.items():
        ET.SubElement(props, "property", name=f"threshold.{k}", value=f"{v:g}")
    ET.SubElement(props, "property", name="alpha", value=f"{c.alpha:g}")
    for d in c.env:
        ET.SubElement(props, "property", name=f"environment.{d.field}", value=f"baseline: {d.baseline}; current: {d.current}")
    failures = skipped = 0
    for f in c.findings:
        case = ET.SubElement(suite, "testcase", classname=f.cell or f.cell_id, name=f"{f.cell_id}.{f.metric}", time="0")
        text = f"baseline {f.baseline}, current {f.current}" + (f"; {f.detail}" if f.detail else "")
        if f.noise:  # timing checks: what the change was judged against, and what it could have detected
            text += f"; judged against {f.noise}; detectable change {f.detectable:.1%}"
            props = ET.SubElement(case, "properties")
            for key, value in (("noise", f.noise), ("detectable", f"{f.detectable:.4f}")):
                ET.SubElement(props, "property", name=key, value=value)
        if f.verdict == "regression":
            failures += 1
            ET.SubElement(case, "failure", message=f"{f.metric} regression: {f.detail}" + (
                f" [judged against {f.noise}]" if f.noise else ""), type="regression").text = text
        elif f.verdict in ("skipped", "inconclusive", "machine-differs"):
            skipped += 1
            ET.SubElement(case, "skipped", message=f"{f.verdict}: {f.detail}")
        else:
            ET.SubElement(case, "system-out").text = f"{f.verdict}: {text}"
    for side, cells in (("baseline", c.only_baseline), ("current", c.only_current)):
        for cid, desc in cells:
            case = ET.SubElement(suite, "testcase", classname=desc or cid, name=f"{cid}.presence", time="0")
            ET.SubElement(case, "skipped", message=f"only in {side}")
            skipped += 1
    ET.SubElement(suite, "system-out").text = summary(c)
    tests = len(c.findings) + len(c.only_baseline) + len(c.only_current)
    for el in (root, suite):
        el.set("tests", str(tests))
        el.set("failures", str(failures))
        el.set("errors", "0")
        el.set("skipped", str(skipped))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
