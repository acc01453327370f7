# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_preflight's checker: validate a ``--config`` YAML with the host's own SGLang.

Private to the collection: not a public API, may change without notice.

This file has two lives:

* imported by the module (under Ansible's interpreter, which need not have SGLang): ``preconditions()``,
  ``judge()`` and ``read_result()`` read the checker's answer (``run()``, with ``command()`` and
  ``script_source()``, runs this check alone);
* run as a script by the interpreter that has SGLang (the module feeds this very file's bytes,
  inside ``start_check.gate_source``'s bundle, to ``<python> -`` on stdin, where it runs as the
  module ``GATE_NAME``; tests also run it alone, on stdin or by path): ``check()`` builds SGLang's
  own server argument parser, merges the YAML with SGLang's own ``ConfigArgumentMerger`` exactly as
  ``sglang.srt.server_args.prepare_server_args`` does, parses, and checks the speculative algorithm
  against ``SpeculativeAlgorithm``. It stops there; what SGLang refuses only at start (DFlash
  rules, the drafter's config, context lengths) is ``start_check``'s, which the same run goes on
  to when this one passes. Nothing is started.

So the script half may import only the standard library at module level (SGLang and PyYAML are
imported inside ``check``; the collection's own modules only when this file is imported, not run),
and must keep working on any Python SGLang supports.

Option names change between SGLang releases: SGLang 0.5.23's own ``sglang/srt/server_args.py``
still registers ``--disable-cuda-graph`` and ``--enable-dp-attention`` only as deprecated spellings
(of ``--cuda-graph-backend-{decode,prefill}=disabled`` and ``--attn-dp-size``, the latter marked for
removal after 2026-12-31). So nothing here lists options; every answer comes from the installed parser.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
import traceback
from typing import Any, Callable

# The module name the gate's one run (start_check.gate_source) gives this file's source.
GATE_NAME = "_gpufleet_sglang_gate_check"

if __name__ in ("__main__", GATE_NAME):
    # Run as a script by SGLang's interpreter (fed on stdin, or by path, or by the gate's bootstrap),
    # where the collection is not importable: the collection's mask, spelt out. test_sglang_check pins
    # it to _secrets.MASK.
    MASK = "********"
else:
    from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
    from ansible_collections.gpufleet.llm.plugins.module_utils._common.secrets import MASK

# The checker's answer is the last stdout line starting with this; anything SGLang prints on
# import (warnings, banners) stays out of the way.
MARKER = "GPUFLEET-SGLANG-CHECK-RESULT "
# Destinations whose values are secrets: SGLang 0.5.23 has api_key, admin_api_key and
# ssl_keyfile_password. Anchored so that max_total_tokens and friends stay visible.
SECRET_DEST = re.compile(r"(api_key|password|passwd|secret|credential|(^|_)token$)")
REQUIRED_PREFIX = "the following arguments are required"
MAX_SUGGESTIONS = 1


class CheckerError(Exception):
    """The checker did not run or its answer cannot be read; the message says why."""


# --- the module's half ---------------------------------------------------------------------------

def file_source(loader: Any, path: str) -> bytes:
    """A module file's bytes, through its loader first (works from a file and from AnsiballZ's zip)."""
    if loader is not None and hasattr(loader, "get_data"):
        try:
            return loader.get_data(path)
        except (OSError, IOError):
            pass
    with open(path, "rb") as handle:
        return handle.read()


def script_source():
    """This file's bytes, to feed to ``<python> -``."""
    return file_source(globals().get("__loader__"), __file__)


def command(python: str, config: str, expect_version: str | None = None) -> list[str]:
    """argv of the checker run: the script comes on stdin, so argv holds no code and no secret."""
    argv = [python, "-", config]
    if expect_version:
        argv += ["--expect-version", expect_version]
    return argv


def read_result(rc, stdout, stderr, python, *, marker=MARKER):
    """The checker's answer (a dict) from its exit code and output; CheckerError when there is none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(marker):
            try:
                return json.loads(line[len(marker):])
            except ValueError as exc:
                raise CheckerError("the SGLang checker run by %s printed an unreadable result (%s)" % (python, exc))
    tail = "\n".join((stderr or stdout or "").strip().splitlines()[-15:])
    raise CheckerError("the SGLang checker run by %s ended (exit %s) without a result: %s"
                       % (python, rc, tail or "no output"))


def failure_message(result):
    head = "SGLang %s rejects %s" % (result.get("version") or "?", result.get("config"))
    return "%s: %d problem(s): %s" % (head, len(result["problems"]), "; ".join(result["problems"]))


def import_failure_message(result, python):
    return ("SGLang is not importable with python %s (%s); set python to the interpreter SGLang is installed in, "
            "for example /opt/sglang/<version>/bin/python" % (python, result.get("import_error")))


def argument_spec() -> dict[str, dict[str, Any]]:
    """sglang_preflight's options, the one place their types and defaults are written."""
    return dict(
        config=dict(type="path", required=True),
        python=dict(type="path", default="/usr/bin/python3"),
        expect_version=dict(type="str"),
        # Not no_log: Ansible would then mask every occurrence of short values such as "1" in the
        # whole result. The module keeps all values out of its output and invocation instead, and
        # masks the values of secret-looking names anywhere (sglang_preflight.main).
        environment=dict(type="dict", default={}),
    )


def preconditions(params: dict[str, Any]) -> dict[str, Any]:
    """The failure fields of a run, once ``python`` and ``config`` are there; ModuleFailure when not."""
    config, python = params["config"], params["python"]
    base = dict(changed=False, ok=False, config=config, python=python, problems=[], notices=[])
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise ModuleFailure("python %s is not an executable file on this host; set python to the interpreter SGLang "
                            "is installed in, for example /opt/sglang/<version>/bin/python" % python, **base)
    if not os.path.isfile(config):
        raise ModuleFailure("config %s does not exist on this host; stage the rendered YAML first" % config, **base)
    return base


def judge(rc: int, out: str, err: str, base: dict[str, Any], warn: Callable[[str], None]) -> dict[str, Any]:
    """The checker's answer read from a run's output, as the module returns it.

    Raises ModuleFailure when there is no answer, SGLang cannot be imported or it rejects the config.
    """
    config, python = base["config"], base["python"]
    try:
        result = read_result(rc, out, err, python)
    except CheckerError as exc:
        raise ModuleFailure(str(exc), **base)
    if result.get("import_error"):
        raise ModuleFailure(import_failure_message(result, python), import_error=result["import_error"], **base)
    result.pop("import_error", None)
    result.update(changed=False, python=python, config=config)
    for notice in result["notices"]:
        warn(notice)
    if not result["ok"]:
        raise ModuleFailure(failure_message(result), **result)
    return result


def run(params: dict[str, Any], *, run_command: Callable[..., tuple], warn: Callable[[str], None]) -> dict[str, Any]:
    """The parser check alone, in its own run of ``params["python"]``: its answer.

    ``run_command`` is AnsibleModule.run_command's signature (argv, data=, binary_data=, cwd=).
    Raises ModuleFailure when the checker cannot run or SGLang rejects the config. (sglang_preflight
    runs this check and the start-time rules in one interpreter: ``start_check.run``.)
    """
    base = preconditions(params)
    # cwd /: `python -` puts the working directory first on sys.path, and a stray sglang/ or yaml.py
    # there must not stand in for the installed ones.
    # The unit's environment (SGLang reads some of its defaults from it), only when one is given.
    extra = dict(environ_update=params["environment"]) if params.get("environment") else {}
    rc, out, err = run_command(command(params["python"], params["config"], params["expect_version"]),
                               data=script_source(), binary_data=True, cwd="/", **extra)
    return judge(rc, out, err, base, warn)


# --- the script's half: runs under the interpreter that has SGLang -------------------------------

class _ParseError(Exception):
    pass


def _parser(server_args_cls, required=True):
    class _Parser(argparse.ArgumentParser):
        # argparse reports every parse error through error() and then exits; the checker needs
        # the message, not a SystemExit.
        def error(self, message):
            raise _ParseError(message)

        def exit(self, status=0, message=None):
            raise _ParseError((message or "").strip() or "argparse exited (%s)" % status)

    # The same construction as prepare_server_args (prog only shows in messages).
    parser = _Parser(prog="sglang serve")
    server_args_cls.add_cli_args(parser)
    if not required:
        # For one key at a time: a missing --model-path must not hide that key's own error.
        for action in parser._actions:
            action.required = False
    return parser


def _is_secret(key):
    return bool(SECRET_DEST.search(str(key).replace("-", "_").lower()))


def _masker(data):
    secrets = sorted((str(v) for k, v in data.items() if _is_secret(k) and v not in (None, "", True, False)),
                     key=len, reverse=True)

    def mask(text):
        text = str(text)
        for secret in secrets:
            text = text.replace(secret, MASK)
        return text
    return mask


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return dict((str(k), _jsonable(v)) for k, v in value.items())
    return str(value)


def _close(name, long_names):
    return difflib.get_close_matches(name, long_names, n=MAX_SUGGESTIONS, cutoff=0.75)


def _import_sglang(result):
    """(sglang, ServerArgs, ConfigArgumentMerger), or None with result["import_error"] set."""
    try:
        import sglang
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
    except Exception as exc:  # pylint: disable=broad-except
        # ImportError, but also whatever a half-installed dependency raises at import time.
        result["import_error"] = "%s: %s" % (type(exc).__name__, exc)
        result["import_traceback"] = traceback.format_exc()[-4000:]
        return None
    return sglang, ServerArgs, ConfigArgumentMerger


def _read_config(merger, config):
    """The file as a dict, read the way this SGLang does (its suffix rule, existence, top-level mapping).

    Raises what SGLang raises: ValueError for a wrong suffix, a missing file or a non-mapping;
    yaml.YAMLError for syntax.
    """
    if hasattr(merger, "_parse_yaml_config"):
        return merger._parse_yaml_config(config)
    return None


def _load_yaml(config):
    import yaml
    with open(config) as handle:
        return yaml.safe_load(handle) or {}


class _Check(object):
    """One file against one SGLang: its parsers, and the problems, notices and options found so far."""

    def __init__(self, server_args_cls, merger_cls, version, problems, notices):
        self.parser = _parser(server_args_cls)
        self.key_parser = _parser(server_args_cls, required=False)
        self.merger = merger_cls(self.parser)
        self.flags = self.parser._option_string_actions
        self.long_names = sorted(o[2:] for o in self.flags if o.startswith("--"))
        self.version = version
        self.problems = problems
        self.notices = notices
        self.mask = str
        self.defaults = {}
        # dest -> value of every option the file sets
        self.touched = {}

    def key(self, key, value):
        """One key alone, so that every bad key is named (argparse stops at its first error)."""
        name = str(key)
        flag = "--" + name
        if flag not in self.flags and "_" in name and "--" + name.replace("_", "-") in self.flags:
            self.problems.append("%s: underscore key: SGLang %s passes it on as %s, which its parser rejects; write it "
                                 "as '%s'" % (name, self.version, flag, name.replace("_", "-")))
            return
        if value is None:
            self.problems.append("%s: empty value (YAML null): SGLang %s passes the string 'None' on; give a value "
                                 "or remove the key to keep the default" % (name, self.version))
            return
        try:
            chunk = self.merger._convert_config_to_args({key: value})
        except ValueError as exc:
            self.problems.append("%s: %s" % (name, self.mask(exc)))
            return
        if not chunk:
            return  # a false store_true flag or an empty list: SGLang drops the key
        try:
            namespace, extras = self.key_parser.parse_known_args(chunk)
        except _ParseError as exc:
            self.problems.append("%s: %s" % (name, self.mask(exc)))
            return
        if extras and extras[0] == flag:
            hint = _close(name.replace("_", "-"), self.long_names)
            self.problems.append("%s: unknown option %s in SGLang %s%s" % (
                name, flag, self.version, "; did you mean '%s'?" % hint[0] if hint else ""))
            return
        if extras:
            # Only option names are shown: values could be secrets.
            self.problems.append("%s: SGLang %s's merger turns it into %s plus %d value(s) the option does not take "
                                 "(a list for a single-value option, or false for an on/off flag)"
                                 % (name, self.version, flag, len([x for x in extras if not x.startswith("--")])))
            return
        if flag not in self.flags:
            matches = sorted(set(a.option_strings[0] for o, a in self.flags.items() if o.startswith(flag)))
            self.notices.append("%s: accepted only as an abbreviation of %s; write the full name (a new option with "
                                "the same prefix would make it ambiguous)" % (name, " / ".join(matches)))
        changed = [d for d, v in vars(namespace).items() if v != self.defaults.get(d)]
        action = self.flags.get(flag)
        for dest in set(changed) | (set([action.dest]) if action is not None else set()):
            self.touched[dest] = getattr(namespace, dest)

    def whole_file(self, config, per_key):
        """The whole file as SGLang reads it: config args first, then parse (command line would win)."""
        namespace = None
        try:
            argv = self.merger.merge_config_with_args(["--config", config])
            namespace = self.parser.parse_args(argv)
        except (_ParseError, ValueError) as exc:
            if not self.problems:
                self.problems.append("%s: %s" % (config, self.mask(exc)))
        if namespace is None:
            return
        for dest in list(self.touched):
            self.touched[dest] = getattr(namespace, dest, self.touched[dest])
        if not per_key:
            self.touched = dict((d, v) for d, v in vars(namespace).items() if v != self.defaults.get(d))

    def algorithm(self):
        """The parser accepts any string as speculative-algorithm; SpeculativeAlgorithm does not."""
        algorithm = self.touched.get("speculative_algorithm")
        if algorithm is None:
            return
        try:
            from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
        except Exception as exc:  # pylint: disable=broad-except
            self.problems.append("speculative-algorithm: cannot import SGLang's SpeculativeAlgorithm to check %r "
                                 "(%s: %s)" % (algorithm, type(exc).__name__, exc))
            return
        try:
            SpeculativeAlgorithm.from_string(algorithm)
        except ValueError:
            known = ", ".join(m.name for m in SpeculativeAlgorithm if m.name != "NONE")
            self.problems.append("speculative-algorithm: %r is not an algorithm SGLang %s knows (its parser accepts "
                                 "any string, SpeculativeAlgorithm does not); use one of %s"
                                 % (self.mask(algorithm), self.version, known))


def check(config, expect_version=None):
    """Validate ``config`` with the running interpreter's SGLang; the answer as a dict (never raises)."""
    result = {"ok": False, "config": config, "python": sys.executable, "version": None, "options": {},
              "problems": [], "notices": [], "import_error": None}
    problems, notices = result["problems"], result["notices"]
    imported = _import_sglang(result)
    if imported is None:
        return result
    sglang, server_args_cls, merger_cls = imported
    result["version"] = version = getattr(sglang, "__version__", None)
    result["sglang_path"] = getattr(sglang, "__file__", None)
    if expect_version and version != expect_version:
        problems.append("SGLang %s is installed for %s, expected %s; point python at the %s install"
                        % (version, sys.executable, expect_version, expect_version))
    checker = _Check(server_args_cls, merger_cls, version, problems, notices)
    try:
        data = _read_config(checker.merger, config)
    except Exception as exc:  # pylint: disable=broad-except
        problems.append("%s: %s" % (config, exc))
        return result
    if data is None:
        data = _load_yaml(config)
    checker.mask = mask = _masker(data)
    checker.defaults = vars(checker.key_parser.parse_known_args([])[0])
    per_key = hasattr(checker.merger, "_convert_config_to_args")
    if not per_key:
        notices.append("SGLang %s has no ConfigArgumentMerger._convert_config_to_args: only the first problem "
                       "of the whole file is reported" % version)
    for key, value in (data.items() if per_key else ()):
        checker.key(key, value)
    checker.whole_file(config, per_key)
    checker.algorithm()
    result["options"] = dict(
        (dest.replace("_", "-"), MASK if _is_secret(dest) and value is not None else _jsonable(value))
        for dest, value in sorted(checker.touched.items()))
    result["problems"] = [mask(p) for p in problems]
    result["notices"] = [mask(n) for n in notices]
    result["ok"] = not problems
    return result


def parse_argv(argv):
    """(config, expect_version) from the script's arguments, or None when they are not that."""
    args = list(argv)
    expect_version = None
    if "--expect-version" in args:
        i = args.index("--expect-version")
        expect_version = args[i + 1] if i + 1 < len(args) else None
        del args[i:i + 2]
    if len(args) != 1:
        return None
    return args[0], expect_version


def answer(result, marker=MARKER):
    """Print the answer line the module reads (read_result)."""
    sys.stdout.write("\n" + marker + json.dumps(result, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def main(argv):
    parsed = parse_argv(argv)
    if parsed is None:
        sys.stderr.write("usage: python _sglang_check.py CONFIG.yaml [--expect-version V]\n")
        return 2
    answer(check(*parsed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
