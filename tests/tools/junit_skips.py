# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every skipped test of a unit run, with its reason, from pytest's JUnit XML; a skip fails the run.

    junit_skips.py DIR [--allow REGEX]...

Reads every *.xml under DIR (ansible-test units writes one per test context under the collection's
tests/output/junit/), prints each skipped (or xfailed) test and why, and exits 1 if there is any
whose reason no --allow REGEX matches; 2 if DIR holds no JUnit XML (the run wrote none).

make test (tests/stages.sh, the units stage) allows none: a full run there skips nothing (lab-local
builds the SGLang 0.5.23 venv first), so a skip means a test that did not run. The real-parser tests
(tests/unit/plugins/module_utils/fixtures/sglang_env.py) are named apart, with what to do.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import xml.etree.ElementTree as ET  # nosec B405 - our own pytest's output

# sglang_env.sglang_python's skip reason: the real SGLang 0.5.23 parser was not found.
REAL_PARSER = re.compile(r"no lab venv with sglang==")


def skips(directory):
    """(file, test id, reason) of every skipped or xfailed test case in the JUnit XML under directory."""
    found = []
    files = []
    for root, dummy, names in os.walk(directory):
        files.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(".xml"))
    for path in sorted(files):
        for case in ET.parse(path).getroot().iter("testcase"):  # nosec B314 - our own pytest's output
            for skipped in case.findall("skipped"):
                reason = skipped.get("message") or (skipped.text or "").strip() or "(no reason given)"
                test = "%s::%s" % (case.get("classname", "?"), case.get("name", "?"))
                found.append((os.path.basename(path), test, reason))
    return files, found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("directory")
    parser.add_argument("--allow", action="append", default=[], metavar="REGEX",
                        help="a skip whose reason matches REGEX does not fail the run")
    args = parser.parse_args(argv)
    files, found = skips(args.directory)
    if not files:
        print("junit_skips: no JUnit XML under %s: the unit run wrote no results" % args.directory)
        return 2
    allowed = [re.compile(r) for r in args.allow]
    failing = [s for s in found if not any(r.search(s[2]) for r in allowed)]
    print("junit_skips: %d skipped test(s) in %s" % (len(found), ", ".join(os.path.basename(f) for f in files)))
    for source, test, reason in found:
        print("  SKIPPED %s (%s): %s" % (test, source, reason))
    real = [s for s in failing if REAL_PARSER.search(s[2])]
    if real:
        print("junit_skips: %d test(s) of SGLang 0.5.23's real parser did not run (no verified SGLang venv: the "
              "lab-local stage builds it, tests/lab/tests/test_wheelhouse.py)" % len(real))
    if failing:
        print("junit_skips: FAILED: %d skip(s) not allowed (a skipped test is a test that did not run)" % len(failing))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
