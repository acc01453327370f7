# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_preflight's start-time rules: what SGLang refuses at START although its parser accepts it.

Private to the collection: not a public API, may change without notice.

Like ``_sglang_check`` this file has two lives. Imported by the module it only builds the command
and reads the answer (``command()``, ``script_source()``, ``RESULT_MARKER``); fed to
``<python> - <config>`` on stdin of the interpreter that has SGLang, with the unit's environment
applied to that process, ``check()`` runs SGLang 0.5.23's own code on the parsed config:

* ``ServerArgs.from_cli_args`` (CPU-safe in 0.5.23: ``__post_init__`` resolves nothing) and
  ``sglang.srt.arg_groups.speculative_hook._handle_dflash`` itself, the DFlash rules: pp-size 1,
  a draft model path, dflash-block-size equal to num-draft-tokens, a draft window not smaller
  than the block;
* ``parse_dflash_draft_config`` and ``require_num_layers`` (``speculative/dflash_utils.py``) on the
  drafter's config.json, which the DFlash worker runs at start;
* ``get_context_length`` (``utils/hf_transformers/common.py``) on the target's and the drafter's
  config.json, and ``envs.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` from the environment.

``dflash_utils`` and ``hf_transformers/common`` import GPU kernels and transformers at module
level, which a CPU-only install lacks, so the functions named above are compiled from the
installed SGLang's own source file (``_from_source``) without that import chain.

What cannot run without a GPU is mirrored here, and each mirror is pinned to the 0.5.23 source it
was read from by tests/unit/plugins/module_utils/test_sglang_start_check.py (``PINS``):

* ``device``: a GPU host resolves ``cuda``; on a CPU-only check the device is declared ``cuda``
  when the config leaves it unset, as ``_handle_dflash`` refuses any other;
* the DFlash block size when neither num-draft-tokens nor dflash-block-size is set
  (``_handle_dflash`` reads it from the drafter through transformers' ``get_config``);
* ``ModelConfig._derive_context_length`` (a method of a class whose module needs transformers):
  a context length above the model's derived one raises unless the variable is true, and the
  drafter is built with the target's context length (``draft_worker_common.py``);
* the text-config choice of ``get_hf_text_config`` (thinker_config > llm_config >
  language_config > text_config).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import types
from typing import Any

if __name__ != "__main__":
    from typing import Callable

    from ansible_collections.gpufleet.llm.plugins.module_utils import _sglang_check, _sglang_config
    from ansible_collections.gpufleet.llm.plugins.module_utils._failure import ModuleFailure

RESULT_MARKER = "GPUFLEET-SGLANG-START-RESULT "
ALLOW_LONGER = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
# (rule, the options it is about, a substring of SGLang 0.5.23's message, the fix)
DFLASH_RULES = (
    ("dflash-pp-size", "pp-size", "pp_size == 1",
     "set pp-size to 1 (DFLASH runs without pipeline parallelism) or choose another speculative-algorithm"),
    ("dflash-draft-path", "speculative-draft-model-path", "--speculative-draft-model-path",
     "give the drafter (sglang_drafter_model or sglang_drafter_path in the sglang role)"),
    # Before the next rule: SGLang's "must be positive" message also names --speculative-dflash-block-size.
    ("dflash-block-size", "speculative-dflash-block-size", "--speculative-dflash-block-size to be positive",
     "set speculative-dflash-block-size to a positive number (the drafter's block_size), or remove it"),
    ("dflash-block-size", "speculative-dflash-block-size, speculative-num-draft-tokens", "--speculative-dflash-block-size",
     "set speculative-num-draft-tokens equal to speculative-dflash-block-size, or set only one of them"),
    ("dflash-draft-window", "speculative-draft-window-size, speculative-num-draft-tokens", "--speculative-draft-window-size",
     "raise speculative-draft-window-size to at least the block (speculative-num-draft-tokens) or remove it"),
)
SOURCES = dict(
    dflash="srt/speculative/dflash_utils.py",
    context="srt/utils/hf_transformers/common.py",
)
TEXT_CONFIG_KEYS = ("thinker_config", "llm_config", "language_config", "text_config")
# The default _handle_dflash falls back to when the drafter's config gives no block size.
DFLASH_DEFAULT_BLOCK = 16
# What the mirrors above were read from: (file under sglang/, text that must still be there).
# test_sglang_start_check fails when the installed SGLang's source no longer has one of them.
PINS_VERSION = "0.5.23"
PINS = (
    ("srt/arg_groups/speculative_hook.py", 'cfg.device.startswith("cuda") or cfg.device == "npu" or cfg.device == "xpu"'),
    ("srt/arg_groups/speculative_hook.py", "if cfg.speculative_num_draft_tokens is None:"),
    ("srt/arg_groups/speculative_hook.py", "inferred_block_size = parse_dflash_draft_config("),
    ("srt/arg_groups/speculative_hook.py", ").resolve_block_size(default=None)"),
    ("srt/arg_groups/speculative_hook.py", "inferred_block_size = %d" % DFLASH_DEFAULT_BLOCK),
    ("srt/configs/model_config.py", "derived_context_len = get_context_length(self.hf_text_config)"),
    ("srt/configs/model_config.py", "if context_length > derived_context_len:"),
    ("srt/configs/model_config.py", "envs.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN.get()"),
    ("srt/speculative/draft_worker_common.py", "context_length=target_model_config.context_len,"),
    ("srt/utils/hf_transformers/common.py", "# Priority: %s" % " > ".join(TEXT_CONFIG_KEYS)),
    ("srt/model_executor/model_runner_components/spec_aux_hidden_state.py",
     "draft_num_layers = dflash_draft_config.require_num_layers()"),
)


# --- the module's half ---------------------------------------------------------------------------

def script_source() -> bytes:
    """This file's bytes, to feed to ``<python> -``."""
    return _sglang_check.file_source(globals().get("__loader__"), __file__)


def command(python: str, config: str, names: Any = ()) -> list[str]:
    """argv of the start-rule run: the script comes on stdin, the environment in the process's own.

    ``names``: the environment option's variables; the script drops every other inherited SGLANG_*.
    """
    return [python, "-", config] + sorted(names)


def environment(params: dict[str, Any]) -> dict[str, str]:
    """The ``environment`` option as the unit's EnvironmentFile holds it: {NAME: text}.

    Validated as sglang_config validates the file's variables; ModuleFailure names the problem.
    """
    try:
        return _sglang_config.normalise_env(params.get("environment") or {})
    except _sglang_config.ConfigError as exc:
        raise ModuleFailure("environment: %s" % exc, changed=False, ok=False, config=params["config"],
                            python=params["python"], problems=[], notices=[])


def secret_values(variables: dict[str, str]) -> list[str]:
    """Values of the secret-looking variables (HF_TOKEN, *_API_KEY): kept out of every output."""
    return [v for k, v in variables.items() if v and _sglang_config.is_secret(k.replace("_", "-"))]


def run(params: dict[str, Any], *, run_command: Callable[..., tuple], warn: Callable[[str], None]) -> dict[str, Any]:
    """sglang_preflight: the parser check (``_sglang_check.run``), then SGLang's start-time rules.

    Both run with the unit's environment. Raises ModuleFailure when either refuses the config;
    a start-rule run that cannot complete (another SGLang version) is a warning, not a pass in silence.
    """
    variables = environment(params)
    params = dict(params, environment=variables)
    result = _sglang_check.run(params, run_command=run_command, warn=warn)
    python, config = params["python"], params["config"]
    rc, out, err = run_command(command(python, config, variables), data=script_source(), binary_data=True, cwd="/",
                               environ_update=variables)
    try:
        start = _sglang_check.read_result(rc, out, err, python, marker=RESULT_MARKER)
    except _sglang_check.CheckerError as exc:
        start = dict(problems=[], checked=[], skipped=[], resolved={}, error=str(exc))
    if start.get("error"):
        notice = "SGLang %s's start-time rules were not checked (%s)" % (result.get("version"), start["error"])
        result["notices"].append(notice)
        warn(notice)
    result["start"] = dict((k, start.get(k)) for k in ("checked", "skipped", "resolved", "error"))
    result["environment"] = sorted(variables)
    if start["problems"]:
        result.update(ok=False, problems=result["problems"] + start["problems"])
        raise ModuleFailure(_sglang_check.failure_message(result), **result)
    return result


# --- the script's half: runs under the interpreter that has SGLang -------------------------------

class _NameCollector(ast.NodeVisitor):
    """Names a definition uses at run time (annotations are strings under ``annotations``)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        self.names.add(node.id)

    def visit_arg(self, node: ast.arg) -> None:
        pass

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(default)
        for item in node.decorator_list + node.body:
            self.visit(item)


def _bound_names(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    if isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "module", None) != "__future__":
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    return []


def _from_source(sglang_dir: str, relpath: str, names: tuple[str, ...]) -> dict[str, Any]:
    """``names`` (and the top-level definitions and imports they use) compiled from SGLang's own file.

    The module's other imports (GPU kernels, transformers) are left out, so SGLang's code runs as
    written without them; a name it needs that is not defined there fails with NameError.
    """
    path = os.path.join(sglang_dir, relpath)
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    where = dict((name, node) for node in tree.body for name in _bound_names(node))
    wanted, todo = set(), list(names)
    while todo:
        node = where.get(todo.pop())
        if node is None or id(node) in wanted:
            continue
        wanted.add(id(node))
        collector = _NameCollector()
        if isinstance(node, ast.FunctionDef):
            collector.visit_FunctionDef(node)
        else:
            collector.visit(node)
        todo.extend(collector.names)
    body = [ast.ImportFrom(module="__future__", names=[ast.alias(name="annotations")], level=0)]
    body += [node for node in tree.body if id(node) in wanted]
    # A registered module of its own: dataclasses look their class's module up in sys.modules.
    module = types.ModuleType("gpufleet_sglang_source_" + os.path.basename(path)[:-3])
    module.__file__ = path
    sys.modules[module.__name__] = module
    exec(compile(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])), path, "exec"), module.__dict__)
    return module.__dict__


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(path, "config.json")) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Mirror of get_hf_text_config's choice for a config.json read as a dict."""
    for key in TEXT_CONFIG_KEYS:
        sub = config.get(key)
        if isinstance(sub, dict):
            return sub
    return config


def _as_config(data: dict[str, Any]) -> Any:
    """A config.json as the attribute object SGLang's helpers read (getattr, like an HF config)."""
    return types.SimpleNamespace(**data)


class _Start(object):
    """One parsed config against SGLang's start-time rules."""

    def __init__(self, sglang_dir: str, version: str, result: dict[str, Any]) -> None:
        self.sglang_dir = sglang_dir
        self.version = version
        self.problems = result["problems"]
        self.checked = result["checked"]
        self.skipped = result["skipped"]
        self.resolved = result["resolved"]
        self.source = {}

    def helper(self, which: str, name: str) -> Any:
        if which not in self.source:
            names = dict(dflash=("parse_dflash_draft_config",), context=("get_context_length", "CONTEXT_LENGTH_KEYS"))
            self.source[which] = _from_source(self.sglang_dir, SOURCES[which], names[which])
        return self.source[which][name]

    def refuse(self, rule: str, options: str, message: Any, fix: str) -> None:
        self.problems.append("%s (%s): SGLang %s refuses to start: %s; fix: %s" % (rule, options, self.version, message, fix))

    def draft_block(self, cfg: Any) -> int | None:
        """The drafter's config.json through parse_dflash_draft_config, as the DFlash worker reads it.

        Its block size (None when it sets none or cannot be read).
        """
        draft = cfg.speculative_draft_model_path
        data = _read_json(draft) if draft else None
        if data is None:
            self.skipped.append("dflash-draft-config: %s has no readable config.json on this host" % draft)
            return None
        self.checked.append("dflash-draft-config")
        try:
            parsed = self.helper("dflash", "parse_dflash_draft_config")(draft_hf_config=data)
            parsed.require_num_layers()
        except (ValueError, TypeError) as exc:
            self.refuse("dflash-draft-config", "speculative-draft-model-path", "%s/config.json: %s" % (draft, exc),
                        "use a DFlash drafter whose config.json SGLang %s reads (see its message)" % self.version)
            return None
        self.resolved["dflash-draft-block-size"] = parsed.block_size
        return parsed.resolve_block_size(default=None)

    def dflash(self, server_args: Any, block: int | None) -> None:
        """SGLang's own _handle_dflash on the record, as resolve_once runs it."""
        from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view
        from sglang.srt.arg_groups.speculative_hook import _handle_dflash

        cfg = resolving_view(server_args)
        server_args._input_frozen = True
        try:
            if cfg.device is None:
                declare_resolution(server_args, "gpufleet.preflight", device="cuda")
            if cfg.speculative_num_draft_tokens is None and cfg.speculative_dflash_block_size is None:
                declare_resolution(server_args, "gpufleet.preflight",
                                   speculative_num_draft_tokens=int(block or DFLASH_DEFAULT_BLOCK))
            _handle_dflash(server_args)
        except ValueError as exc:
            rule = next((r for r in DFLASH_RULES if r[2] in str(exc)), None)
            if rule is None:
                rule = ("dflash", "speculative-algorithm", "", "change the options SGLang names")
            self.refuse(rule[0], rule[1], str(exc).rstrip("."), rule[3])
            return
        finally:
            server_args._input_frozen = False
        self.checked.extend(dict.fromkeys(rule[0] for rule in DFLASH_RULES))
        for dest in ("speculative_num_draft_tokens", "max_running_requests", "speculative_draft_attention_backend"):
            self.resolved[dest.replace("_", "-")] = getattr(cfg, dest)

    def derived(self, path: str, what: str) -> int | None:
        """SGLang's get_context_length of the model at ``path``; None (with the reason) when unknown."""
        data = _read_json(path) if path else None
        if data is None:
            self.skipped.append("%s: %s has no readable config.json on this host" % (what, path))
            return None
        text = _text_config(data)
        # transformers' config object when it builds: it adds what the raw JSON lacks (a yarn rope's
        # original_max_position_embeddings, the model type's default length), as SGLang's own config has.
        config, why = self.model_config(text)
        if config is None:
            if not any(text.get(k) is not None for k in self.helper("context", "CONTEXT_LENGTH_KEYS")):
                self.skipped.append("%s: %s/config.json sets no context length and %s" % (what, path, why))
                return None
            config = _as_config(text)
        return int(self.helper("context", "get_context_length")(config))

    @staticmethod
    def model_config(text: dict[str, Any]) -> tuple[Any, str]:
        """transformers' config object for ``text`` (None and why when it cannot be built)."""
        try:
            from transformers import AutoConfig
        except Exception as exc:  # pylint: disable=broad-except
            return None, "its model type's default needs transformers, which python cannot import (%s)" % exc
        try:
            return AutoConfig.for_model(text["model_type"], **dict((k, v) for k, v in text.items() if k != "model_type")), ""
        except Exception as exc:  # pylint: disable=broad-except
            return None, "could not build its model type's default: %s: %s" % (type(exc).__name__, exc)

    def context(self, cfg: Any, *, draft: bool) -> None:
        """Mirror of ModelConfig._derive_context_length for the target, then the drafter."""
        from sglang.srt.environ import envs

        target = self.derived(cfg.model_path, "context-length")
        asked = cfg.context_length
        if asked is not None and target is not None:
            # SGLang stops at the target's refusal; the drafter's would repeat it.
            if not self.longer("context-length", "context-length", asked, target, "the target %s" % cfg.model_path, envs):
                return
        if not draft:
            return
        target_len = asked if asked is not None else target
        drafter = self.derived(cfg.speculative_draft_model_path, "draft-context-length")
        if target_len is not None and drafter is not None:
            self.longer("draft-context-length", "context-length, speculative-draft-model-path", target_len, drafter,
                        "the drafter %s" % cfg.speculative_draft_model_path, envs)

    def longer(self, rule: str, options: str, wanted: int, derived: int, model: str, envs: Any) -> bool:
        """Whether SGLang starts with ``wanted`` positions on a model that derives ``derived``."""
        self.checked.append(rule)
        self.resolved[rule] = dict(wanted=wanted, model=derived)
        if wanted <= derived:
            return True
        try:
            allowed = envs.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN.get() or _in_ci()
        except ValueError as exc:
            self.refuse(rule, "environment " + ALLOW_LONGER, exc, "set %s to 1 or 0" % ALLOW_LONGER)
            return False
        if not allowed:
            self.refuse(rule, options, "context length %d is above the %d it derives for %s" % (wanted, derived, model),
                        "set %s=1 in the unit's environment (sglang_environment) as the drafter's authors do, or lower "
                        "context-length to %d" % (ALLOW_LONGER, derived))
        return bool(allowed)


def _in_ci() -> bool:
    try:
        from sglang.utils import is_in_ci
    except Exception:  # pylint: disable=broad-except
        return False
    return bool(is_in_ci())


def _server_args(config: str) -> Any:
    """The ServerArgs record ``sglang serve --config`` builds (prepare_server_args, without its logging)."""
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    argv = ConfigArgumentMerger(parser).merge_config_with_args(["--config", config])
    return ServerArgs.from_cli_args(parser.parse_args(argv))


def check(config: str) -> dict[str, Any]:
    """SGLang's start-time rules on ``config`` with this process's environment; never raises."""
    result = {"problems": [], "checked": [], "skipped": [], "resolved": {}, "error": None}
    try:
        import sglang
        from sglang.srt.arg_groups.overrides import resolving_view
        server_args = _server_args(config)
    except BaseException as exc:  # pylint: disable=broad-except
        # argparse exits on a config the parser check already reported.
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
        return result
    start = _Start(os.path.dirname(sglang.__file__), getattr(sglang, "__version__", "?"), result)
    cfg = resolving_view(server_args)
    is_dflash = str(cfg.speculative_algorithm or "").upper() == "DFLASH"
    try:
        block = start.draft_block(cfg) if is_dflash and cfg.speculative_draft_model_path else None
        if is_dflash:
            start.dflash(server_args, block)
        start.context(cfg, draft=is_dflash and bool(cfg.speculative_draft_model_path))
    except Exception as exc:  # pylint: disable=broad-except
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
    return result


def _drop_inherited(keep: list[str]) -> None:
    """Unset the SGLANG_* variables the unit would not have: the run inherits the SSH session's
    environment, the unit gets only its EnvironmentFile (an inherited
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 would pass a config the unit refuses)."""
    for name in [n for n in os.environ if n.startswith("SGLANG_") and n not in keep]:
        del os.environ[name]


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python _sglang_start_check.py CONFIG.yaml [KEPT_VARIABLE...]\n")
        return 2
    # Before anything imports sglang, whose envs read the variables.
    _drop_inherited(argv[1:])
    result = check(argv[0])
    sys.stdout.write("\n" + RESULT_MARKER + json.dumps(result, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
