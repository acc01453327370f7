# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Expectations over a model's config.json: JMESPath expression -> expected value.

Private to the collection: not a public API, may change without notice.

Expressions are compiled before any file is read, so a typo is a parameter error, not a
"mismatch". Values compare strictly by JSON meaning: ``61`` equals ``61.0`` but not ``"61"``, and
``true`` is not ``1`` (Python alone would say ``True == 1``): a config that says
``"num_hidden_layers": "61"`` is not what a server expects.
"""

from __future__ import annotations

import json
import traceback

try:
    import jmespath
    from jmespath.exceptions import JMESPathError

    HAS_JMESPATH = True
    JMESPATH_IMPORT_ERROR = None
except ImportError:  # the module reports it with missing_required_lib
    HAS_JMESPATH = False
    JMESPATH_IMPORT_ERROR = traceback.format_exc()

    class JMESPathError(Exception):
        """Stand-in so that except clauses still parse without the library."""


class ExpectError(ValueError):
    """An ``expect`` parameter that cannot be used (bad expression); a parameter error."""


class Expectation(object):
    __slots__ = ("expression", "compiled", "expected")

    def __init__(self, expression, compiled, expected):
        self.expression = expression
        self.compiled = compiled
        self.expected = expected


def compile_expectations(expect):
    """[Expectation] for ``expect`` ({expression: value}); ExpectError naming every bad expression."""
    if not expect:
        return []
    if not isinstance(expect, dict):
        raise ExpectError("expect must be a dict of JMESPath expression -> expected value, got %s"
                          % type(expect).__name__)
    out = []
    bad = []
    for expression in sorted(expect, key=str):
        if not isinstance(expression, str) or not expression.strip():
            bad.append("%r: empty or not a string" % (expression,))
            continue
        try:
            compiled = jmespath.compile(expression)
        except JMESPathError as exc:
            # jmespath's messages span lines (with a caret under the column): keep the first.
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            bad.append("%r: %s" % (expression, first))
            continue
        out.append(Expectation(expression, compiled, expect[expression]))
    if bad:
        raise ExpectError("expect has expression(s) that are not valid JMESPath: %s. "
                          "Fix the key (e.g. text_config.num_hidden_layers; quote keys with dashes as \"key-name\")"
                          % "; ".join(bad))
    return out


def same_value(expected, actual):
    """Equality by JSON meaning (see the module docstring)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return expected == actual
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        return len(expected) == len(actual) and all(same_value(e, a) for e, a in zip(expected, actual))
    if isinstance(expected, dict) and isinstance(actual, dict):
        return set(expected) == set(actual) and all(same_value(expected[k], actual[k]) for k in expected)
    if type(expected) is not type(actual):
        return False
    return expected == actual


def _show(value):
    try:
        text = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def evaluate(expectations, config, source="config.json"):
    """Check every expectation; returns (details [{expression, expected, actual, ok}], problem lines)."""
    details = []
    problems = []
    for exp in expectations:
        try:
            actual = exp.compiled.search(config)
        except (JMESPathError, TypeError, ValueError, ArithmeticError, RecursionError) as exc:
            # A valid expression can still raise on this config (length(missing), sort over mixed types):
            # that is one problem line, never a crash that would lose the rest of the report.
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            details.append({"expression": exp.expression, "expected": exp.expected, "actual": None, "ok": False})
            problems.append("%s: expect %s cannot be evaluated on this file (%s); fix the expression in expect "
                            "(e.g. guard it: length(key || `[]`))" % (source, exp.expression, first))
            continue
        ok = same_value(exp.expected, actual)
        details.append({"expression": exp.expression, "expected": exp.expected, "actual": actual, "ok": ok})
        if ok:
            continue
        if actual is None:
            got = "nothing (the expression matches no value in %s)" % source
        else:
            got = _show(actual)
            if _show(exp.expected) == got or str(exp.expected) == str(actual):
                got += " (a %s where a %s was expected)" % (type(actual).__name__, type(exp.expected).__name__)
        problems.append("%s: expect %s == %s, got %s; this is not the model you expected: fetch the right repo or "
                        "revision, or correct expect" % (source, exp.expression, _show(exp.expected), got))
    return details, problems
