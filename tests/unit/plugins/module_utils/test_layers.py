# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The import direction of plugins/module_utils, and the size of its rooms (issue 21, items 2 and 3).

Every ``import`` and ``from ... import`` of every .py file under plugins/module_utils is read with
``ast``, at any depth (a function-level import counts: AnsiballZ follows it into the module's
payload), relative ones included, and held against ``ALLOWED``: which package may import which.
docs/architecture.md ("Import direction") shows the same table.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
import sysconfig

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")
PREFIX = "ansible_collections.gpufleet.llm.plugins.module_utils"
COLLECTION = "ansible_collections.gpufleet.llm"

# package -> the other packages it may import (itself always). Flat modules count as packages.
ALLOWED = {
    "_common": set(),
    "_hub": {"_common"},
    "_modeltree": {"_common"},
    "_fetch": {"_common", "_hub", "_modeltree"},
    "_verify": {"_common", "_hub", "_modeltree"},
    "_peerserve": {"_common"},
    "_sglang": {"_common"},
    "_router": {"_common"},
    "_gpu": {"_common"},
    "_rollout": {"_common"},
    "_bench": {"_common", "_sglang"},
}
# _common is the bottom: the standard library and, of Ansible, these only.
COMMON_ANSIBLE = ("ansible.module_utils.basic",)
# Scripts that also run standalone in SGLang's own venv (their docstrings say so): nothing of the
# collection and nothing of Ansible, whatever their package may import.
STANDALONE = ("_sglang/check.py", "_sglang/start_check.py")

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80
# Kept whole on purpose: they are copied alone into SGLang's venv (see STANDALONE).
SIZE_EXEMPT = STANDALONE


class Violation(object):
    def __init__(self, path, line, rule):
        self.path, self.line, self.rule = path, line, rule

    def __str__(self):
        return "%s:%s: %s" % (self.path, self.line, self.rule)

    __repr__ = __str__


def package_of(rel):
    """The package a file under module_utils belongs to: its first folder, or a flat module's name."""
    first = rel.split("/", 1)[0]
    return first[:-3] if first.endswith(".py") else first


def _dotted(rel):
    """The dotted name of ``rel`` (a path under module_utils) without the PREFIX."""
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return parts


def imported_names(tree, rel):
    """(line, absolute dotted name) of every import in ``tree`` (any depth), relative ones resolved.

    For ``from X import a``, ``X``; and ``X.a`` too when X is module_utils itself (``a`` is a package).
    """
    here = _dotted(rel)
    is_package = rel.endswith("__init__.py")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_package else here[:-1]
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                module = ".".join([PREFIX] + base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module
            if module == PREFIX:
                for alias in node.names:
                    yield node.lineno, module + "." + alias.name


def _stdlib(name):
    top = name.split(".", 1)[0]
    names = getattr(sys, "stdlib_module_names", None)
    if names is not None:
        return top in names or top == "__future__"
    # Python < 3.10: a module found in the standard library's own folder (or built in)
    if top in sys.builtin_module_names:
        return True
    spec = importlib.util.find_spec(top)
    origin = getattr(spec, "origin", None) or ""
    return bool(origin) and os.path.realpath(origin).startswith(os.path.realpath(sysconfig.get_paths()["stdlib"]))


def check_imports(root):
    """(violations, package edges) for every .py under ``root`` (a module_utils folder)."""
    violations, edges = [], set()
    for rel, source in _sources(root):
        package = package_of(rel)
        tree = ast.parse(source, rel)
        if package not in ALLOWED:
            violations.append(Violation(rel, 1, "package %s is not in the import table (ALLOWED in %s and docs/"
                                        "architecture.md): add it with what it may import" % (package, __file__)))
            continue
        seen = set()
        if rel in STANDALONE:
            violations.extend(Violation(rel, line, rule) for line, rule in _script_half(tree, rel))
        for line, name in imported_names(tree, rel):
            rule = _judge(rel, package, name, edges)
            if rule and (line, rule) not in seen:
                seen.add((line, rule))
                violations.append(Violation(rel, line, rule))
    return violations, edges


def _script_half(tree, rel):
    """(line, rule) of each module-level import of a two-lives script that its script half would run
    and that is not the standard library: only a block under ``if __name__ ...`` may hold those."""
    def walk(body, guarded):
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not guarded:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or "."]
                for name in names:
                    if getattr(node, "level", 0) or not _stdlib(name):
                        yield node.lineno, ("%s runs as a script in SGLang's venv: at module level it imports only the "
                                            "standard library, outside an `if __name__` block (got %s)" % (rel, name))
            elif isinstance(node, ast.If):
                names_name = any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(node.test))
                yield from walk(node.body, guarded or names_name)
                yield from walk(node.orelse, guarded or names_name)
            elif isinstance(node, ast.Try):
                for block in [node.body, node.orelse, node.finalbody] + [h.body for h in node.handlers]:
                    yield from walk(block, guarded)
    return list(walk(tree.body, False))


def _judge(rel, package, name, edges):
    """Why importing ``name`` from ``rel`` breaks the table (None: it does not)."""
    if name.startswith(PREFIX + "."):
        target = name[len(PREFIX) + 1:].split(".", 1)[0]
        if target == package:
            return None
        edges.add((package, target))
        if target not in ALLOWED.get(package, ()):
            return ("%s may import only %s; it imports %s (%s)"
                    % (package, ", ".join(sorted(ALLOWED[package])) or "the standard library", target, name))
        return None
    if name == PREFIX or name.startswith(COLLECTION):
        if name == PREFIX:
            return None  # "from ...module_utils import _x": judged by the name it imports
        return "module_utils imports nothing of the collection outside module_utils (got %s)" % name
    if package == "_common" and not _stdlib(name) and not any(
            name == allowed or name.startswith(allowed + ".") for allowed in COMMON_ANSIBLE):
        return "_common imports only the standard library (and %s); it imports %s" % (", ".join(COMMON_ANSIBLE), name)
    return None


def _sources(root):
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as handle:
                    yield os.path.relpath(path, root).replace(os.sep, "/"), handle.read()


def cycles(edges):
    """Every package on a loop of ``edges`` (a set of (importer, imported)), as a list of loops."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def long_rooms(root):
    """["<rel>: file" | "<rel>: <function> (line N)", why] of every file and function over the limits."""
    out = []
    for rel, source in _sources(root):
        if rel in SIZE_EXEMPT:
            continue
        lines = len(source.splitlines())
        if lines > MAX_FILE_LINES:
            out.append(("%s: file" % rel, "%d lines (limit %d)" % (lines, MAX_FILE_LINES)))
        for node in ast.walk(ast.parse(source, rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out.append(("%s: %s" % (rel, node.name),
                                "line %d, %d lines (limit %d)" % (node.lineno, length, MAX_FUNCTION_LINES)))
    return out


# --- the tree as it is ----------------------------------------------------------------------------------

def test_every_import_in_module_utils_follows_the_table():
    violations, _edges = check_imports(MODULE_UTILS)
    assert not violations, "imports against the grain (see docs/architecture.md, Import direction):\n" + "\n".join(
        str(v) for v in violations)


def test_no_package_loop():
    _violations, edges = check_imports(MODULE_UTILS)
    assert not cycles(edges), "package loops: %s" % cycles(edges)
    allowed = set((a, b) for a, targets in ALLOWED.items() for b in targets)
    assert not cycles(allowed), "the table itself has a loop: %s" % cycles(allowed)


def test_every_package_and_flat_module_is_in_the_table():
    present = set(package_of(rel) for rel, _source in _sources(MODULE_UTILS))
    assert present == set(ALLOWED), "in the tree, not the table: %s; in the table, not the tree: %s" % (
        sorted(present - set(ALLOWED)), sorted(set(ALLOWED) - present))


def test_no_long_rooms():
    offenders = dict(long_rooms(MODULE_UTILS))
    unexpected = ["%s: %s" % (key, why) for key, why in sorted(offenders.items())]
    assert not unexpected, ("files over %d lines or functions over %d lines (split them along their seams):\n%s"
                            % (MAX_FILE_LINES, MAX_FUNCTION_LINES, "\n".join(unexpected)))


def test_the_standalone_scripts_say_so_in_their_docstrings():
    for rel in STANDALONE:
        with open(os.path.join(MODULE_UTILS, rel), encoding="utf-8") as handle:
            doc = ast.get_docstring(ast.parse(handle.read())) or ""
        assert "two lives" in doc, rel


@pytest.mark.parametrize("folder", ["modules", "filter", "action"])
def test_plugins_import_only_module_utils_that_exist(folder):
    """Each module_utils import of a plugin names a module that exists and, for ``from X import a``,
    an ``a`` that X defines or a module of X (a stale name after a move fails here, not at run time)."""
    missing = []
    for rel, source in _sources(os.path.join(ROOT, "plugins", folder)):
        for node in ast.walk(ast.parse(source, rel)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PREFIX):
                for alias in node.names:
                    problem = _resolve(node.module, alias.name)
                    if problem:
                        missing.append("plugins/%s/%s:%d: %s" % (folder, rel, node.lineno, problem))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PREFIX + ".") and not _module_file(alias.name):
                        missing.append("plugins/%s/%s:%d: no module %s" % (folder, rel, node.lineno, alias.name))
    assert not missing, "\n".join(missing)


def _module_file(dotted):
    parts = dotted[len(PREFIX) + 1:].split(".") if dotted != PREFIX else []
    base = os.path.join(MODULE_UTILS, *parts)
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return MODULE_UTILS if not parts else (base if os.path.isdir(base) else None)


def _resolve(module, name):
    path = _module_file(module)
    if path is None:
        return "no module %s" % module
    if _module_file(module + "." + name):
        return None
    if os.path.isdir(path):
        return "no module %s.%s" % (module, name)
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Try):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    defined.update((a.asname or a.name).split(".")[0] for a in sub.names)
                elif isinstance(sub, ast.Assign):
                    defined.update(t.id for t in sub.targets if isinstance(t, ast.Name))
    return None if name in defined else "%s defines no %s" % (module, name)


# --- the checker catches what it must: these can fail ----------------------------------------------------

def _tree(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path)


def test_an_import_against_the_grain_is_caught_at_any_depth_and_relative(tmp_path):
    root = _tree(tmp_path, {
        "_common/__init__.py": "",
        "_common/ok.py": "import os\n",
        "_sglang/__init__.py": "",
        "_sglang/up.py": ("def f():\n    from %s._bench import bench\n    return bench\n" % PREFIX),
        "_sglang/rel.py": "from .._bench.chat import chat_body\n",
        "_hub/__init__.py": "",
        "_hub/side.py": "import %s._fetch.errors\n" % PREFIX,
        "_common/third.py": "import yaml\nfrom ansible.module_utils.basic import missing_required_lib\n",
        "_bench/__init__.py": "",
        "_bench/fine.py": "from %s._sglang import client\nfrom . import fine\n" % PREFIX,
        "_newpkg/__init__.py": "",
        "_sglang/check.py": ("import json\nif __name__ != '__main__':\n    from %s._common import secrets\n"
                             "from %s._common import failure\n\ndef check():\n    import sglang\n" % (PREFIX, PREFIX)),
    })
    found = sorted(str(v) for v in check_imports(root)[0])
    assert found == [
        "_common/third.py:1: _common imports only the standard library (and ansible.module_utils.basic); "
        "it imports yaml",
        "_hub/side.py:1: _hub may import only _common; it imports _fetch (%s._fetch.errors)" % PREFIX,
        "_newpkg/__init__.py:1: package _newpkg is not in the import table (ALLOWED in %s and docs/architecture.md): "
        "add it with what it may import" % __file__,
        "_sglang/check.py:4: _sglang/check.py runs as a script in SGLang's venv: at module level it imports only the "
        "standard library, outside an `if __name__` block (got %s._common)" % PREFIX,
        "_sglang/rel.py:1: _sglang may import only _common; it imports _bench (%s._bench.chat)" % PREFIX,
        "_sglang/up.py:2: _sglang may import only _common; it imports _bench (%s._bench)" % PREFIX,
    ]


def test_a_package_loop_is_caught():
    assert cycles({("_fetch", "_hub"), ("_hub", "_modeltree"), ("_modeltree", "_fetch")}) == [
        ["_fetch", "_hub", "_modeltree", "_fetch"]]
    assert cycles({("_fetch", "_hub"), ("_verify", "_hub")}) == []


def test_a_long_file_and_a_long_function_are_caught(tmp_path):
    body = "\n".join("    x = %d" % i for i in range(MAX_FUNCTION_LINES))
    root = _tree(tmp_path, {
        "_common/long.py": "def f():\n%s\n" % body + "\n" * MAX_FILE_LINES,
        "_common/short.py": "def g():\n%s\n" % "\n".join("    x = %d" % i for i in range(MAX_FUNCTION_LINES - 1)),
        "_sglang/check.py": "\n" * (MAX_FILE_LINES + 1),
    })
    assert [key for key, _why in long_rooms(root)] == ["_common/long.py: file", "_common/long.py: f"]


def test_a_stale_module_utils_name_in_a_plugin_is_caught():
    assert _resolve(PREFIX + "._bench.chat", "chat_body") == "no module %s._bench.chat" % PREFIX  # moved to _sglang
    assert _resolve(PREFIX + "._sglang.chat", "no_such_name") == "%s._sglang.chat defines no no_such_name" % PREFIX
    assert _resolve(PREFIX + "._sglang.chat", "chat_body") is None
    assert _resolve(PREFIX + "._sglang", "chat") is None and _resolve(PREFIX, "_gpu") is None
