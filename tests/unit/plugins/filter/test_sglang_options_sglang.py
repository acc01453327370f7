# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_options' tables against the parser of the real SGLang they were read from.

The lab's SGLang venv builds ``ServerArgs.add_cli_args`` as ``prepare_server_args`` does and prints
every action; the alias table must be exactly its multi-spelling options, and every option the role
owns must exist. A version bump that adds, drops or renames an alias fails here. Skipped only where
no lab venv with that SGLang exists (sglang_env says how to build one).
"""
from __future__ import annotations

import json
import subprocess

import pytest

from ansible_collections.gpufleet.llm.plugins.filter import sglang_options as filter_module
from ansible_collections.gpufleet.llm.plugins.filter.sglang_options import (
    ALIASES, ALIASES_SGLANG_VERSION, ROLE_OWNED, sglang_options)

REFUSED = getattr(filter_module, "REFUSED", {})
LOAD_FORMAT_OPTIONS = getattr(filter_module, "LOAD_FORMAT_OPTIONS", ())
from ansible_collections.gpufleet.llm.tests.unit.plugins.filter.test_kimi_example import GROUPS, merged
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.sglang_env import (  # noqa: F401 pylint: disable=unused-import
    SGLANG_VERSION, sglang_python)

DUMP = r"""
import argparse, json
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
print("GPUFLEET-ACTIONS " + json.dumps([
    {"dest": a.dest, "options": a.option_strings, "negatable": isinstance(a, argparse.BooleanOptionalAction),
     "choices": sorted(a.choices) if a.choices else None}
    for a in parser._actions]))
"""


@pytest.fixture(scope="module")
def actions(sglang_python):  # pylint: disable=redefined-outer-name
    proc = subprocess.run([sglang_python, "-c", DUMP], capture_output=True, text=True, timeout=600, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("GPUFLEET-ACTIONS ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("GPUFLEET-ACTIONS "):])


def _long_names(action):
    names = [o[2:] for o in action["options"] if o.startswith("--")]
    if action["negatable"]:
        names = [n for n in names if not n.startswith("no-")]  # a negation, not a second spelling
    return names


def test_table_is_for_the_lab_sglang():
    assert ALIASES_SGLANG_VERSION == SGLANG_VERSION


def test_aliases_match_sglang_parser(actions):  # pylint: disable=redefined-outer-name
    expected = {}
    for action in actions:
        names = _long_names(action)
        if len(names) < 2:
            continue
        own = action["dest"].replace("_", "-")
        canonical = own if own in names else names[0]
        expected.update((name, canonical) for name in names if name != canonical)
    assert ALIASES == expected


def test_role_owned_options_exist(actions):  # pylint: disable=redefined-outer-name
    known = set(name for action in actions for name in _long_names(action))
    assert set(ROLE_OWNED) | set(REFUSED) | set(LOAD_FORMAT_OPTIONS) <= known


def test_verified_load_formats_are_sglang_choices(actions):  # pylint: disable=redefined-outer-name
    # every format let through is one of the parser's choices for both options (dummy is one too, refused)
    by_name = dict((name, action) for action in actions for name in _long_names(action))
    assert LOAD_FORMAT_OPTIONS == ("load-format", "speculative-draft-load-format")
    for option in LOAD_FORMAT_OPTIONS:
        choices = set(by_name[option]["choices"])
        assert set(filter_module.VERIFIED_LOAD_FORMATS) <= choices and "dummy" in choices, option


def test_no_other_option_is_a_prefix_of_a_guarded_one(actions):  # pylint: disable=redefined-outer-name
    # The filter refuses every prefix of an alias, an aliased option or a role-owned option as an
    # abbreviation; that is right only while no other option of SGLang is such a prefix.
    dest = dict((name, action["dest"]) for action in actions for name in _long_names(action))
    for guarded in set(ALIASES) | set(ALIASES.values()) | set(ROLE_OWNED) | set(REFUSED) | set(LOAD_FORMAT_OPTIONS):
        for name in dest:
            if guarded.startswith(name) and name != guarded:
                assert dest[name] == dest[guarded], "%s is a prefix of %s" % (name, guarded)


def test_every_alias_resolves_to_what_sglang_sets(actions):  # pylint: disable=redefined-outer-name
    dest = dict((name, action["dest"]) for action in actions for name in _long_names(action))
    for alias, canonical in ALIASES.items():
        if canonical in ROLE_OWNED:
            continue
        got = sglang_options({}, {alias: 1})
        assert list(got) == [canonical] and dest[canonical] == dest[alias]


def test_kimi_example_options_are_sglang_options(actions):  # pylint: disable=redefined-outer-name
    # every option of docs/examples/kimi-k2.6 is a full 0.5.23 option name (no alias, no abbreviation)
    # and the parsers it names are in SGLang's registries (the parser's choices)
    by_name = dict((name, action) for action in actions for name in _long_names(action))
    for group in GROUPS:
        options = merged(group)
        for key in options:
            assert key in by_name and by_name[key]["dest"].replace("_", "-") == key, (group, key)
        for key in ("tool-call-parser", "reasoning-parser"):
            assert options[key] in by_name[key]["choices"], (group, key)
