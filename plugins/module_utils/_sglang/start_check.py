# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_preflight's start-time rules: part of what SGLang refuses at START although its parser accepts it.

Private to the collection: not a public API, may change without notice.

Like ``_sglang_check`` this file has two lives. Imported by the module it builds the gate's one run
and reads both answers (``run()``, ``gate_source()``, ``gate_command()``, ``RESULT_MARKER``); run by
the interpreter that has SGLang (inside ``gate_source``'s bundle on stdin, as the module
``GATE_NAME``, after ``_sglang_check``'s parser check passed in the same process; tests also feed it
alone to ``<python> - <config>``), with the unit's environment applied to that process, ``check()``
runs SGLang 0.5.23's own code on the parsed config. What it judges, and only that:

* ``handle_speculative_decoding`` (``srt/arg_groups/speculative_hook.py``), SGLang's whole
  speculative-decoding step, through SGLang's ``run_hook`` as ``run_resolution_pipeline`` runs it on
  the ``ServerArgs`` record ``ServerArgs.from_cli_args`` builds. DFLASH reaches ``_handle_dflash``
  only through it; its own rules (sink/window sizes, SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION)
  run for every algorithm. Where it cannot be imported or fails on something other than a
  refusal, ``_handle_dflash`` alone is the fallback (``path``), with a notice saying why;
* ``parse_dflash_draft_config`` and ``require_num_layers`` (``speculative/dflash_utils.py``) on the
  drafter's config.json, which the DFlash worker runs at start;
* ``get_context_length`` (``utils/hf_transformers/common.py``) on the target's and the drafter's
  config.json with json-model-override-args applied as ``get_config`` applies it, and
  ``envs.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` from the environment.

The rest of SGLang's start (the other steps of its hook pipeline, the model and tokenizer load)
is not run. Stood in, each a named notice in the result: the device (``device-stand-in``: cuda, as
a GPU host resolves it); transformers' ``get_config`` where transformers is missing
(``get-config-stand-in``: the config.json with the overrides applied); ``dflash_utils`` where its
GPU kernels are missing (``dflash-utils-from-source``: its functions compiled from SGLang's own file
by ``_from_source``). DFLASH rules of other hooks and of the draft worker that need the GPU, the
loaded model or the tokenizer are ``not-evaluated`` notices (``NOT_EVALUATED``), never silence.

What is mirrored is pinned to the 0.5.23 source it was read from by
tests/unit/plugins/module_utils/_sglang/test_sglang_start_check.py (``PINS``):

* ``ModelConfig._derive_context_length`` (a method of a class whose module needs transformers):
  a context length above the model's derived one raises unless the variable is true, and the
  drafter is built with the target's context length (``draft_worker_common.py``);
* the text-config choice of ``get_hf_text_config`` (thinker_config > llm_config >
  language_config > text_config) and ``get_config``'s override loop (``apply_overrides``);
* on the fallback path, the DFlash block size when neither num-draft-tokens nor
  dflash-block-size is set (``_handle_dflash`` reads it from the drafter through ``get_config``).

tests/unit/plugins/module_utils/_sglang/test_sglang_preflight_table.py holds it against SGLang's own
verdict, config by config (docs/sglang_preflight.md).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import json
import logging
import os
import sys
import types
from typing import Any

# The module name the gate's one run (gate_source) gives this file's source.
GATE_NAME = "_gpufleet_sglang_gate_start_check"

if __name__ not in ("__main__", GATE_NAME):
    from typing import Callable

    from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import check as _sglang_check
    from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import config as _sglang_config
    from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure

RESULT_MARKER = "GPUFLEET-SGLANG-START-RESULT "
ALLOW_LONGER = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
# (rule, the options it is about, a substring of SGLang 0.5.23's message, the fix)
DFLASH_RULES = (
    ("dflash-device", "device", "speculative decoding is not supported by",
     "run DFLASH on a CUDA host (device cuda)"),
    ("dflash-dp-attention", "attn-dp-size, enable-dp-lm-head, attn-cp-size", "DFLASH with dp attention",
     "with DP attention set enable-dp-lm-head, attn-cp-size 1 and SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION=0"),
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
# The same for handle_speculative_decoding, which runs before _handle_dflash (and for every algorithm).
# Before DFLASH_RULES when matching: the sink message also names --speculative-draft-window-size.
SPEC_RULES = (
    ("spec-draft-sink", "speculative-draft-sink-size, speculative-draft-window-size",
     "--speculative-draft-sink-size requires --speculative-draft-window-size",
     "set speculative-draft-window-size too (at least the block size), or remove speculative-draft-sink-size"),
    ("spec-draft-sink", "speculative-draft-sink-size", "--speculative-draft-sink-size must be non-negative",
     "set speculative-draft-sink-size to 0 or more"),
    ("spec-draft-window", "speculative-draft-window-size", "--speculative-draft-window-size must be positive",
     "set speculative-draft-window-size to a positive number, or remove it"),
    ("spec-dp-prefill-coordination", "environment SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION",
     "DP spec/prefill coordination requires",
     "remove SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION from sglang_environment (or set it to 0): it needs "
     "single-layer EAGLE, EAGLE3 or DSPARK"),
    ("spec-block-verification", "speculative-use-block-verification", "--speculative-use-block-verification",
     "remove speculative-use-block-verification or use an algorithm and device SGLang names"),
)
# Raised by the drafter's config readers (speculative/dflash_utils.py) when SGLang's hooks read it.
DRAFT_RULES = (
    ("dflash-draft-config", "speculative-draft-model-path", "DFLASH config.",
     "use a DFlash drafter whose config.json SGLang reads (see its message)"),
)
# SGLang's start-time refusals for DFLASH outside handle_speculative_decoding, which the preflight
# cannot evaluate without the GPU, the loaded model or the tokenizer: each is a named notice.
NOT_EVALUATED = (
    ("dflash-nvfp4-kv-sm100", "kv_cache_hook: SM100 native NVFP4 KV refuses DFLASH; needs the GPU's compute capability"),
    ("dflash-unified-memory", "kv_cache_hook.handle_unified_memory_pool: DFLASH's verify backends under "
                              "enable-unified-memory; needs the resolved attention backends"),
    ("dflash-cp-tp-group-sharing", "cp_tp_group_sharing_hook: needs the target's architecture from its loaded config"),
    ("dflash-lora", "lora_hook: LoRA with speculative decoding; needs the resolved LoRA and verify settings"),
    ("dflash-mask-token", "the DFlash draft worker's mask_token_id against the target's vocab and tokenizer; "
                          "needs the loaded model and tokenizer"),
    ("dflash-target-attention-backend", "the target's attention backend is resolved from the GPU at start; "
                                        "the draft attention backend here is resolved without it"),
)
SOURCES = dict(
    dflash="srt/speculative/dflash_utils.py",
    context="srt/utils/hf_transformers/common.py",
)
TEXT_CONFIG_KEYS = ("thinker_config", "llm_config", "language_config", "text_config")
# Keys transformers loads as sub-config objects: a dict override merges into them (get_config).
SUB_CONFIG_KEYS = TEXT_CONFIG_KEYS + ("vision_config", "audio_config")
ROPE_KEYS = ("rope_scaling", "rope_parameters")
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
    # The hook pipeline: handle_speculative_decoding is where DFLASH reaches _handle_dflash.
    ("srt/arg_groups/pipeline.py", "run_hook(handle_speculative_decoding, server_args)"),
    ("srt/arg_groups/speculative_hook.py", "            algo.handle_server_args(server_args)"),
    # json-model-override-args: ModelConfig passes it to get_config for the target and the drafter,
    # which sets each key on the config (a dict on a sub-config merges into it, rope_scaling merges).
    ("srt/configs/model_config.py", "model_override_args=cfg.json_model_override_args,"),
    ("srt/utils/hf_transformers/config.py", "if isinstance(value, dict) and isinstance(current, PretrainedConfig):"),
    ("srt/utils/hf_transformers/config.py", 'key in ("rope_scaling", "rope_parameters")'),
    ("srt/utils/hf_transformers/config.py", "setattr(config, key, {**current, **value})"),
)


# --- the module's half ---------------------------------------------------------------------------

def script_source() -> bytes:
    """This file's bytes, to feed to ``<python> -`` (the start-time rules alone, as the tests run them)."""
    return _sglang_check.file_source(globals().get("__loader__"), __file__)


def command(python: str, config: str, names: Any = ()) -> list[str]:
    """argv of the start-rule run alone: the script comes on stdin, the environment in the process's own.

    ``names``: the environment option's variables; the script drops every other inherited SGLANG_*.
    """
    return [python, "-", config] + sorted(names)


# The gate's one run: both files' sources, then this bootstrap (argv: gate_command's).
_GATE_BOOTSTRAP = b"""
import sys
import types


def _load(name, source):
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, "<%s>" % name, "exec"), module.__dict__)
    return module


raise SystemExit(_load(START_NAME, START).gate_main(sys.argv[1:], _load(CHECK_NAME, CHECK)))
"""


def gate_source() -> bytes:
    """What sglang_preflight feeds to ``<python> -``: the parser check and the start-time rules in one
    interpreter, so SGLang (and torch, which it imports) is imported once per gate, not twice.

    Both files' own bytes, each run as a module of its own (``GATE_NAME``), then ``gate_main``."""
    return (b"# gpufleet.llm sglang_preflight: SGLang's parser check, then its start-time rules\n"
            + b"CHECK_NAME = '%s'\nCHECK = %r\n" % (_sglang_check.GATE_NAME.encode(), _sglang_check.script_source())
            + b"START_NAME = '%s'\nSTART = %r\n" % (GATE_NAME.encode(), script_source())
            + _GATE_BOOTSTRAP)


def gate_command(python: str, config: str, expect_version: str | None, names: Any = ()) -> list[str]:
    """argv of the gate's one run: ``_sglang_check.command``'s, then ``--keep`` and the environment
    option's variable names (the run drops every other inherited SGLANG_* before SGLang is imported)."""
    return _sglang_check.command(python, config, expect_version) + ["--keep"] + sorted(names)


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
    """sglang_preflight: the parser check (``_sglang_check``), then SGLang's start-time rules, in one run
    of ``params["python"]`` (``gate_source``) with the unit's environment.

    Raises ModuleFailure when either refuses the config; a start-rule run that cannot complete
    (another SGLang version) is a warning, not a pass in silence.
    """
    variables = environment(params)
    base = _sglang_check.preconditions(params)
    python, config = params["python"], params["config"]
    # cwd /: `python -` puts the working directory first on sys.path, and a stray sglang/ or yaml.py
    # there must not stand in for the installed ones.
    rc, out, err = run_command(gate_command(python, config, params["expect_version"], variables), data=gate_source(),
                               binary_data=True, cwd="/", environ_update=variables)
    result = _sglang_check.judge(rc, out, err, base, warn)
    try:
        start = _sglang_check.read_result(rc, out, err, python, marker=RESULT_MARKER)
    except _sglang_check.CheckerError as exc:
        start = dict(problems=[], checked=[], skipped=[], resolved={}, error=str(exc))
    if start.get("error"):
        notice = "SGLang %s's start-time rules were not checked (%s)" % (result.get("version"), start["error"])
        result["notices"].append(notice)
        warn(notice)
    # What was stood in, what SGLang warned, which rules could not be evaluated here: named, never silent.
    for notice in start.get("notices") or []:
        result["notices"].append(notice)
        warn(notice)
    result["start"] = dict((k, start.get(k)) for k in ("path", "checked", "skipped", "resolved", "notices", "error"))
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


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Mirror of get_config's json-model-override-args loop on a config.json read as a dict.

    Each key is set on the TOP-LEVEL config (a drafter's max_position_embeddings, but not a
    multimodal target's text_config one unless given as {"text_config": {...}}); a dict on a
    sub-config or on rope_scaling/rope_parameters merges into it. Pinned (PINS).
    """
    data = copy.deepcopy(data)
    for key, value in overrides.items():
        current = data.get(key)
        if isinstance(value, dict) and isinstance(current, dict) and (key in SUB_CONFIG_KEYS or key in ROPE_KEYS):
            current.update(value)
        else:
            data[key] = value
    return data


def _as_hf(data: dict[str, Any]) -> Any:
    """A config.json dict as the object the get_config stand-in returns (sub-configs as objects)."""
    values = dict((k, _as_hf(v) if k in SUB_CONFIG_KEYS and isinstance(v, dict) else v) for k, v in data.items())
    values.setdefault("architectures", None)
    return types.SimpleNamespace(**values)


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
        self.notices = result["notices"]
        self.source = {}
        self.overrides: dict[str, Any] = {}

    def notice(self, name: str, text: str) -> None:
        self.notices.append("%s: %s" % (name, text))

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
        data = apply_overrides(data, self.overrides)
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
            self.device(server_args, cfg)
            if cfg.speculative_num_draft_tokens is None and cfg.speculative_dflash_block_size is None:
                declare_resolution(server_args, "gpufleet.preflight",
                                   speculative_num_draft_tokens=int(block or DFLASH_DEFAULT_BLOCK))
            _handle_dflash(server_args)
        except ValueError as exc:
            self.refused(exc)
            return
        finally:
            server_args._input_frozen = False
        self.checked.extend(dict.fromkeys(rule[0] for rule in DFLASH_RULES))
        self.resolve(cfg)

    def refused(self, exc: ValueError) -> None:
        """SGLang's refusal, named by the rule its message belongs to."""
        rule = next((r for r in SPEC_RULES + DFLASH_RULES + DRAFT_RULES if r[2] in str(exc)), None)
        if rule is None:
            rule = ("speculative", "speculative-algorithm", "", "change the options SGLang names")
        self.refuse(rule[0], rule[1], str(exc).rstrip("."), rule[3])

    def resolve(self, cfg: Any) -> None:
        for dest in ("speculative_num_draft_tokens", "max_running_requests", "speculative_draft_attention_backend"):
            self.resolved[dest.replace("_", "-")] = getattr(cfg, dest)

    def device(self, server_args: Any, cfg: Any) -> None:
        """The one thing stood in on every host: the device SGLang resolves from the GPU later in its pipeline."""
        from sglang.srt.arg_groups.overrides import declare_resolution

        if cfg.device is None:
            declare_resolution(server_args, "gpufleet.preflight", device="cuda")
            self.notice("device-stand-in", "device is unset and resolved from the GPU at start; evaluated as cuda "
                        "(DFLASH refuses any other device)")

    def standins(self) -> None:
        """Stand-ins for what this python cannot import (a CPU-only SGLang has no transformers and no GPU
        kernels): each is a named notice. Where the real modules import (a GPU host), they are used."""
        try:
            import sglang.srt.utils.hf_transformers_utils  # noqa: F401 pylint: disable=unused-import
        except Exception as exc:  # pylint: disable=broad-except
            module = types.ModuleType("sglang.srt.utils.hf_transformers_utils")
            module.get_config = _standin_get_config
            sys.modules[module.__name__] = module
            self.notice("get-config-stand-in", "transformers' get_config cannot be imported here (%s: %s): config.json "
                        "files are read as JSON with json-model-override-args applied as get_config applies them "
                        "(what transformers would add, such as a model type's defaults, is not known)"
                        % (type(exc).__name__, exc))
        try:
            import sglang.srt.speculative.dflash_utils  # noqa: F401 pylint: disable=unused-import
        except Exception as exc:  # pylint: disable=broad-except
            module = types.ModuleType("sglang.srt.speculative.dflash_utils")
            compiled = _from_source(self.sglang_dir, SOURCES["dflash"], (
                "parse_dflash_draft_config", "get_dflash_layer_types", "get_dflash_attention_sliding_window_size"))
            module.__dict__.update((k, v) for k, v in compiled.items() if not k.startswith("__"))
            sys.modules["sglang.srt.speculative.dflash_utils"] = module
            self.notice("dflash-utils-from-source", "sglang.srt.speculative.dflash_utils imports GPU kernels (%s: %s): "
                        "its config readers are compiled from SGLang's own file without them"
                        % (type(exc).__name__, exc))

    def speculative(self, server_args: Any) -> bool:
        """SGLang's own handle_speculative_decoding, as run_resolution_pipeline runs it (run_hook).

        It reaches _handle_dflash (and every other algorithm's handler) through the algorithm's
        handle_server_args. False when it cannot run here (the caller falls back to _handle_dflash alone).
        """
        try:
            from sglang.srt.arg_groups.overrides import resolving_view
            from sglang.srt.arg_groups.resolution_hooks import run_hook
            from sglang.srt.arg_groups.speculative_hook import handle_speculative_decoding
        except Exception as exc:  # pylint: disable=broad-except
            self.notice("start-path-fallback", "SGLang's handle_speculative_decoding cannot be imported (%s: %s); "
                        "only _handle_dflash was evaluated" % (type(exc).__name__, exc))
            return False
        cfg = resolving_view(server_args)
        server_args._input_frozen = True
        try:
            self.device(server_args, cfg)
            with _sglang_warnings(self.notices):
                run_hook(handle_speculative_decoding, server_args)
        except ValueError as exc:
            self.refused(exc)
            return True
        except Exception as exc:  # pylint: disable=broad-except
            self.notice("start-path-fallback", "SGLang's handle_speculative_decoding could not run here (%s: %s); "
                        "only _handle_dflash was evaluated" % (type(exc).__name__, exc))
            return False
        finally:
            server_args._input_frozen = False
        self.checked.append("speculative-decoding")
        self.checked.extend(dict.fromkeys(rule[0] for rule in SPEC_RULES))
        if str(cfg.speculative_algorithm or "").upper() == "DFLASH":
            self.checked.extend(dict.fromkeys(rule[0] for rule in DFLASH_RULES))
            self.resolve(cfg)
        return True

    def derived(self, path: str, what: str) -> int | None:
        """SGLang's get_context_length of the model at ``path``; None (with the reason) when unknown."""
        data = _read_json(path) if path else None
        if data is None:
            self.skipped.append("%s: %s has no readable config.json on this host" % (what, path))
            return None
        text = _text_config(apply_overrides(data, self.overrides))
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


def _standin_get_config(model: str, trust_remote_code: bool = False, revision: Any = None,
                        model_override_args: Any = None, **kwargs: Any) -> Any:
    """get_config where transformers is missing: the config.json with the overrides applied."""
    data = _read_json(model) if model else None
    if data is None:
        raise OSError("%s has no readable config.json on this host" % model)
    return _as_hf(apply_overrides(data, model_override_args or {}))


@contextlib.contextmanager
def _sglang_warnings(notices: list[str]) -> Any:
    """SGLang's own warnings while its code runs (a fallback it makes, a value it overrides), as notices."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("sglang")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        notices.extend("sglang-warning: %s" % r.getMessage() for r in records)


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
    result = {"problems": [], "checked": [], "skipped": [], "resolved": {}, "notices": [], "error": None, "path": None}
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
        try:
            overrides = json.loads(cfg.json_model_override_args or "{}")
        except ValueError as exc:
            start.refuse("json-model-override-args", "json-model-override-args", "not JSON: %s" % exc,
                         "give json-model-override-args as a JSON object")
            return result
        start.overrides = overrides if isinstance(overrides, dict) else {}
        block = start.draft_block(cfg) if is_dflash and cfg.speculative_draft_model_path else None
        start.standins()
        result["path"] = "handle_speculative_decoding"
        if not start.speculative(server_args):
            result["path"] = "_handle_dflash" if is_dflash else None
            # The failed run may have left declarations on the record: SGLang's own rule is a new one.
            server_args = _server_args(config)
            cfg = resolving_view(server_args)
            if is_dflash:
                start.dflash(server_args, block)
        if is_dflash:
            for name, text in NOT_EVALUATED:
                start.notice("not-evaluated", "%s (%s)" % (name, text))
        start.context(cfg, draft=is_dflash and bool(cfg.speculative_draft_model_path))
    except Exception as exc:  # pylint: disable=broad-except
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
    result["notices"] = list(dict.fromkeys(result["notices"]))
    return result


def _drop_inherited(keep: list[str]) -> None:
    """Unset the SGLANG_* variables the unit would not have: the run inherits the SSH session's
    environment, the unit gets only its EnvironmentFile (an inherited
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 would pass a config the unit refuses)."""
    for name in [n for n in os.environ if n.startswith("SGLANG_") and n not in keep]:
        del os.environ[name]


def _answer(result: dict[str, Any]) -> None:
    sys.stdout.write("\n" + RESULT_MARKER + json.dumps(result, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def gate_main(argv: list[str], parser_check: Any) -> int:
    """The gate's one run (``gate_source``): ``CONFIG [--expect-version V] --keep [KEPT_VARIABLE...]``.

    ``parser_check``: _sglang_check's script half. Its answer comes first; the start-time rules run,
    in the same interpreter, only when the parser accepted the config (as two runs did before).
    """
    at = argv.index("--keep") if "--keep" in argv else None
    parsed = None if at is None else parser_check.parse_argv(argv[:at])
    if parsed is None:
        sys.stderr.write("usage: <python> - CONFIG.yaml [--expect-version V] --keep [KEPT_VARIABLE...]\n")
        return 2
    # Before anything imports sglang, whose envs read the variables: the parser check runs with the
    # unit's environment too.
    _drop_inherited(argv[at + 1:])
    result = parser_check.check(*parsed)
    parser_check.answer(result)
    if result.get("ok") and not result.get("import_error"):
        _answer(check(parsed[0]))
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python _sglang_start_check.py CONFIG.yaml [KEPT_VARIABLE...]\n")
        return 2
    # Before anything imports sglang, whose envs read the variables.
    _drop_inherited(argv[1:])
    _answer(check(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
