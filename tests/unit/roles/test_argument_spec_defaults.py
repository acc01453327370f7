# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A role's argument spec is rendered at role entry (validate_argument_spec), before the role's own facts exist.

A ``default:`` expression there that names a fact the role sets later (``_sglang_rank0``: a ``_<role>_*`` fact,
roles/*/tasks/facts.yml) fails every role entry with "'_sglang_rank0' is undefined". The lab's sglang_role
and sglang_role_ranks targets found it (issue 24's sglang_dist_init_host); this keeps it from coming back.
"""

from __future__ import annotations

import glob
import os
import re

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PRIVATE = re.compile(r"(?<![\w.'\"])(_(?:model|sglang)_\w+)")


def _defaults(spec, where):
    for entry, body in (spec.get("argument_specs") or {}).items():
        for name, option in (body.get("options") or {}).items():
            default = option.get("default")
            for text in default if isinstance(default, list) else [default]:
                if isinstance(text, str) and "{{" in text:
                    yield "%s %s.%s" % (where, entry, name), text


def test_no_role_default_names_a_fact_the_role_sets_later():
    # validate_argument_spec also renders the value each option has: a defaults/main.yml expression too
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "defaults", "main.yml"))):
        with open(path) as handle:
            defaults = yaml.safe_load(handle) or {}
        for name, value in defaults.items():
            for text in value if isinstance(value, list) else [value]:
                if isinstance(text, str) and "{{" in text:
                    found.extend("%s %s: %s" % (os.path.relpath(path, ROOT), name, fact) for fact in PRIVATE.findall(text))
    assert found == []


def test_no_argument_spec_default_names_a_fact_the_role_sets_later():
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml"))):
        with open(path) as handle:
            spec = yaml.safe_load(handle)
        for where, text in _defaults(spec, os.path.relpath(path, ROOT)):
            found.extend("%s: %s" % (where, name) for name in PRIVATE.findall(text))
    assert found == []


def test_the_check_sees_a_private_fact_in_a_default():
    spec = {"argument_specs": {"main": {"options": {"x": {"default": "{{ hostvars[_sglang_rank0].ansible_host }}"},
                                                    "y": {"default": "{{ sglang_user }}"}}}}}
    assert [PRIVATE.findall(text) for _w, text in _defaults(spec, "s")] == [["_sglang_rank0"], []]
