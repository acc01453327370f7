# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang 0.5.23's OWN verdict on a config, for the preflight's acceptance table.

Run by the lab venv's python (``python sglang_reference.py CONFIG.yaml``), with the environment
the server would have; prints one JSON line: {"refused": [SGLang's messages], "error": ...}.

It shares no code with the preflight (plugins/module_utils/_sglang/start_check.py). It runs SGLang's
own start-time code, in the order and with the inputs SGLang's start gives it:

* ``prepare_server_args(["--config", CONFIG])``: SGLang's own CLI entry;
* ``ModelConfig._derive_context_length`` (configs/model_config.py) for the target, then for the
  drafter with the target's context length (draft_worker_common.py), on the config
  ``get_config`` (utils/hf_transformers/config.py) returns with json-model-override-args applied
  and ``get_hf_text_config`` picks: those functions are compiled from SGLang's files as written;
* ``run_hook(handle_speculative_decoding, server_args)`` (arg_groups/pipeline.py's step), which
  reaches ``_handle_dflash`` through the algorithm's ``handle_server_args``.

What the lab's CPU-only SGLang cannot import is stood in, and only that: the module
``hf_transformers_utils`` (transformers) by SGLang's own ``get_config`` compiled with a config.json
reader as its parser and a small ``PretrainedConfig`` (attributes, ``update``, sub-configs as
objects); ``dflash_utils`` (GPU kernels) by its own functions compiled from its file; the device
(cuda, what a GPU host resolves). Everything that decides is SGLang's code.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import types


class PretrainedConfig(object):
    """Stand-in for transformers' PretrainedConfig: attributes, update(), sub-configs as objects."""

    SUB_CONFIGS = ("text_config", "llm_config", "language_config", "thinker_config", "vision_config")

    def __init__(self, **values):
        self.architectures = None
        for key, value in values.items():
            setattr(self, key, PretrainedConfig(**value) if key in self.SUB_CONFIGS and isinstance(value, dict) else value)

    def update(self, values):
        for key, value in values.items():
            setattr(self, key, value)


class _JsonParser(object):
    """get_model_config_parser(...)'s parse(): the model directory's config.json."""

    @staticmethod
    def parse(model, trust_remote_code=False, revision=None, **kwargs):
        with open(os.path.join(str(model), "config.json")) as handle:
            return PretrainedConfig(**json.load(handle))


def compiled(sglang_dir, relpath, names, namespace, method_of=None):
    """``names`` from SGLang's file with the top-level definitions they use; imports come from ``namespace``.

    ``method_of``: take the names from that class's body (a method compiled as a function).
    """
    path = os.path.join(sglang_dir, relpath)
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    top = dict((n.name, n) for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)))
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    top[target.id] = node
    pick = top if method_of is None else dict((n.name, n) for n in top[method_of].body if isinstance(n, ast.FunctionDef))
    todo, seen, body = [pick[name] for name in names], set(), []
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        body.insert(0, node)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in top and sub.id not in namespace and id(top[sub.id]) not in seen:
                todo.append(top[sub.id])
    for node in body:
        if isinstance(node, ast.FunctionDef):
            node.decorator_list = []
    module = ast.Module(body=[ast.ImportFrom(module="__future__", names=[ast.alias(name="annotations")], level=0)] + body,
                        type_ignores=[])
    exec(compile(ast.fix_missing_locations(module), path, "exec"), namespace)
    return namespace


def setup():
    """SGLang's functions and the stand-ins, once per process; returns verdict(config)."""
    import logging

    import sglang
    from sglang.srt.environ import envs
    from sglang.srt.server_args import prepare_server_args
    from sglang.utils import is_in_ci

    sglang_dir = os.path.dirname(sglang.__file__)
    logger = logging.getLogger("sglang.reference")
    patches = compiled(sglang_dir, "srt/utils/hf_transformers_patches.py", ["normalize_rope_scaling_compat"], {})
    common = compiled(sglang_dir, "srt/utils/hf_transformers/common.py",
                      ["get_hf_text_config", "get_context_length", "CONTEXT_LENGTH_KEYS"],
                      dict(PretrainedConfig=PretrainedConfig, normalize_rope_scaling_compat=patches["normalize_rope_scaling_compat"]))
    get_config = compiled(sglang_dir, "srt/utils/hf_transformers/config.py", ["get_config"], dict(
        Path=__import__("pathlib").Path, copy=__import__("copy"), PretrainedConfig=PretrainedConfig,
        DeepseekV41Config=type("DeepseekV41Config", (), {}), check_gguf_file=lambda model: False,
        resolve_runai_obj_uri=lambda model: model, is_remote_url=lambda model: False,
        is_mistral_model=lambda model: False, get_model_config_parser=lambda name: _JsonParser))["get_config"]
    derive = compiled(sglang_dir, "srt/configs/model_config.py", ["_derive_context_length"],
                      dict(get_context_length=common["get_context_length"], envs=envs, is_in_ci=is_in_ci, logger=logger),
                      method_of="ModelConfig")["_derive_context_length"]

    hf_utils = types.ModuleType("sglang.srt.utils.hf_transformers_utils")
    hf_utils.get_config = get_config
    sys.modules[hf_utils.__name__] = hf_utils
    try:
        import sglang.srt.speculative.dflash_utils  # noqa: F401 pylint: disable=unused-import
    except Exception:  # pylint: disable=broad-except
        dflash = types.ModuleType("sglang.srt.speculative.dflash_utils")
        import dataclasses
        import logging as logging_mod
        from collections.abc import Sequence
        from numbers import Integral
        from typing import Any, List, Optional, Tuple
        # Registered first: a dataclass looks its module up in sys.modules.
        sys.modules[dflash.__name__] = dflash
        dflash.__dict__.update(dataclass=dataclasses.dataclass, logging=logging_mod, Sequence=Sequence, Integral=Integral,
                               Any=Any, List=List, Optional=Optional, Tuple=Tuple)
        compiled(sglang_dir, "srt/speculative/dflash_utils.py",
                 ["parse_dflash_draft_config", "get_dflash_layer_types", "get_dflash_attention_sliding_window_size"],
                 dflash.__dict__)

    from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view
    from sglang.srt.arg_groups.resolution_hooks import run_hook
    from sglang.srt.arg_groups.speculative_hook import handle_speculative_decoding

    def verdict(config):
        refused = []
        server_args = prepare_server_args(["--config", config])
        cfg = resolving_view(server_args)

        def model_config(path, is_draft, context_length):
            hf_config = get_config(path, trust_remote_code=cfg.trust_remote_code,
                                   model_override_args=json.loads(cfg.json_model_override_args))
            model = types.SimpleNamespace(is_draft_model=is_draft, hf_config=hf_config,
                                          hf_text_config=common["get_hf_text_config"](hf_config))
            # The method, on the attributes it reads (self.is_draft_model, self.hf_text_config, ...).
            derive(model, context_length)
            return model

        try:
            target = model_config(cfg.model_path, False, cfg.context_length)
            if str(cfg.speculative_algorithm or "").upper() == "DFLASH" and cfg.speculative_draft_model_path:
                model_config(cfg.speculative_draft_model_path, True, target.context_len)
        except ValueError as exc:
            refused.append(str(exc))
        server_args._input_frozen = True
        try:
            if cfg.device is None:
                declare_resolution(server_args, "reference", device="cuda")
            run_hook(handle_speculative_decoding, server_args)
        except ValueError as exc:
            refused.append(str(exc))
        return dict(refused=refused, error=None)

    return verdict


def main(argv):
    """CONFIG.yaml: its verdict in this environment. --batch FILE: [{"config", "env"}, ...], each with
    only its own SGLANG_* variables (SGLang reads them when its code runs, not at import)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("config", nargs="?")
    parser.add_argument("--batch")
    args = parser.parse_args(argv)
    if args.batch:
        with open(args.batch) as handle:
            items = json.load(handle)
    else:
        items = [dict(config=args.config, env=None)]
    verdict = setup()
    results = []
    for item in items:
        if item["env"] is not None:
            for name in [n for n in os.environ if n.startswith("SGLANG_")]:
                del os.environ[name]
            os.environ.update(item["env"])
        try:
            results.append(verdict(item["config"]))
        except Exception as exc:  # pylint: disable=broad-except
            results.append(dict(refused=[], error="%s: %s" % (type(exc).__name__, exc)))
    sys.stdout.write("\nREFERENCE " + json.dumps(results if args.batch else results[0]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
