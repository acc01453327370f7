# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_sglang_start_check: SGLang 0.5.23's start-time rules, run with the REAL SGLang of the lab's venv.

The script runs under that venv's interpreter (sglang_env.py), fed on stdin with the environment
applied, as the module runs it on a host: as a child of the test process's SGLang fork server
(sglang_forkserver.py: SGLang imported once), which test_forked_run_answers_as_a_fresh_interpreter
holds against a new interpreter per run. The models are config.json files written here:
the target in the Kimi K2.6 layout (kimi_k25, text_config with a yarn rope), the drafter a DFlash
draft (qwen3, block_size, dflash_config). The mirrored rules are pinned to the SGLang source (PINS).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import check as _sglang_check
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import start_check as st
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import sglang_configs as cfg
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.sglang_env import (  # noqa: F401 pylint: disable=unused-import
    SGLANG_VERSION, forked_run, fresh_run, sglang_python)

ALLOW = {st.ALLOW_LONGER: "1"}


def models(root, *, drafter_len=262144, target_len=262144, block=16, **drafter):
    """Target and drafter directories with a config.json each; ``drafter`` overrides draft keys (None drops)."""
    target = os.path.join(str(root), "Kimi-K2.6")
    draft = os.path.join(str(root), "Kimi-K2.6-DFlash")
    text = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "num_hidden_layers": 61,
            "num_attention_heads": 64,
            "max_position_embeddings": target_len,
            "rope_scaling": {"factor": 64.0, "original_max_position_embeddings": 4096, "type": "yarn"}}
    draft_cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": block,
                 "dflash_config": {"mask_token_id": 163838, "target_layer_ids": [1, 12, 24]},
                 "num_hidden_layers": 5, "num_target_layers": 61, "max_position_embeddings": drafter_len}
    for key, value in drafter.items():
        if value is None:
            draft_cfg.pop(key, None)
        else:
            draft_cfg[key] = value
    for path, data in ((target, {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
                                 "text_config": text}), (draft, draft_cfg)):
        os.makedirs(path)
        with open(os.path.join(path, "config.json"), "w") as handle:
            json.dump(data, handle)
    return target, draft


def config_text(target, draft, **options):
    """The sglang role's DFlash config for these models; ``options`` add (or with None drop) keys."""
    lines = dict([("model-path", target), ("speculative-algorithm", "DFLASH"), ("speculative-draft-model-path", draft),
                  ("speculative-num-draft-tokens", 16), ("tp-size", 8), ("context-length", 131072),
                  ("api-key", cfg.API_KEY)])
    for key, value in options.items():
        key = key.replace("_", "-")
        if value is None:
            lines.pop(key, None)
        else:
            lines[key] = value
    return "".join("%s: %s\n" % (k, v) for k, v in lines.items())


def run_environment(env=None, names=None):
    """(environment, names) of a run: ``names`` given, this process's SGLANG_* variables are inherited as a
    host's SSH session's are, else they are left out and ``names`` are ``env``'s."""
    environ = dict((k, v) for k, v in os.environ.items() if names is not None or not k.startswith("SGLANG_"))
    environ.update(env or {})
    return environ, (list(env or {}) if names is None else names)


def run_start(python, config, env=None, names=None, fresh=False):
    """The start-rule script as the module runs it; ``names`` given: the environment option's names,
    and this process's SGLANG_* variables are inherited as a host's SSH session's are.

    Through the test process's SGLang fork server (sglang_env.forked_run: SGLang imported once, each
    run a fresh child); ``fresh``: a new interpreter, exactly as the module starts it."""
    environ, names = run_environment(env, names)
    run = fresh_run if fresh else forked_run
    rc, out, err = run(st.command(python, config, names), st.script_source(), environ, cwd="/", timeout=300)
    assert cfg.API_KEY not in out + err
    return _sglang_check.read_result(rc, out, err, python, marker=st.RESULT_MARKER)


def start(sglang_python, tmp_path, env=None, models_kw=None, **options):
    target, draft = models(tmp_path / "models", **(models_kw or {}))
    text = config_text(target, draft, **options)
    return run_start(sglang_python, cfg.write(str(tmp_path), "kimi", text), env)


def problem(result, rule):
    """The one problem of ``rule``; every other rule passed."""
    assert result["error"] is None, result["error"]
    assert [p.split(" ", 1)[0] for p in result["problems"]] == [rule], result["problems"]
    return result["problems"][0]


# --- SGLang's own rules, by name -------------------------------------------------------------

def test_good_config_passes_every_rule(sglang_python, tmp_path):
    result = start(sglang_python, tmp_path)
    assert result["error"] is None and result["problems"] == [] and result["skipped"] == []
    assert result["path"] == "handle_speculative_decoding"
    assert sorted(result["checked"]) == sorted(["dflash-draft-config", "speculative-decoding", "spec-draft-sink",
                                                "spec-draft-window", "spec-dp-prefill-coordination",
                                                "spec-block-verification", "dflash-device", "dflash-dp-attention",
                                                "dflash-pp-size", "dflash-draft-path", "dflash-block-size",
                                                "dflash-draft-window", "context-length", "draft-context-length"])
    resolved = result["resolved"]
    # SGLang's own answers: the yarn factor is ignored when original_max_position_embeddings is set;
    # DFlash caps max-running-requests at 48 when it is unset.
    assert resolved["context-length"] == {"wanted": 131072, "model": 262144}
    assert resolved["draft-context-length"] == {"wanted": 131072, "model": 262144}
    assert resolved["max-running-requests"] == 48 and resolved["speculative-num-draft-tokens"] == 16
    assert resolved["dflash-draft-block-size"] == 16


def test_dflash_pp_size(sglang_python, tmp_path):
    text = problem(start(sglang_python, tmp_path, pp_size=2), "dflash-pp-size")
    assert "(pp-size)" in text and "only supports pp_size == 1" in text and "set pp-size to 1" in text


def test_dflash_missing_draft_path(sglang_python, tmp_path):
    result = start(sglang_python, tmp_path, speculative_draft_model_path=None)
    text = problem(result, "dflash-draft-path")
    assert "requires setting --speculative-draft-model-path" in text and "sglang_drafter_model" in text


def test_dflash_block_size_differs(sglang_python, tmp_path):
    text = problem(start(sglang_python, tmp_path, speculative_dflash_block_size=8), "dflash-block-size")
    assert "speculative_num_draft_tokens=16, speculative_dflash_block_size=8" in text
    assert "set speculative-num-draft-tokens equal to speculative-dflash-block-size" in text


def test_dflash_block_size_not_positive(sglang_python, tmp_path):
    # SGLang's message names --speculative-dflash-block-size too: the fix must not be "set them equal".
    text = problem(start(sglang_python, tmp_path, speculative_dflash_block_size=0), "dflash-block-size")
    assert "to be positive, got 0" in text and "set speculative-dflash-block-size to a positive number" in text
    assert "set speculative-num-draft-tokens equal" not in text


def test_dflash_window_smaller_than_block(sglang_python, tmp_path):
    text = problem(start(sglang_python, tmp_path, speculative_draft_window_size=8), "dflash-draft-window")
    assert "window_size=8, block_size=16" in text and "raise speculative-draft-window-size" in text


def test_block_comes_from_the_drafters_config(sglang_python, tmp_path):
    # num-draft-tokens unset: SGLang takes the block from the drafter through parse_dflash_draft_config.
    result = start(sglang_python, tmp_path, models_kw=dict(block=8), speculative_num_draft_tokens=None,
                   speculative_draft_window_size=4)
    assert "window_size=4, block_size=8" in problem(result, "dflash-draft-window")
    result = start(sglang_python, tmp_path / "b", models_kw=dict(block=8), speculative_num_draft_tokens=None)
    assert result["problems"] == [] and result["resolved"]["speculative-num-draft-tokens"] == 8


@pytest.mark.parametrize("drafter,says", [
    (dict(block_size=0), "DFLASH block_size must be positive, got 0"),
    (dict(num_hidden_layers=None), "DFLASH requires draft num_hidden_layers in config"),
    (dict(dflash_config={"target_layer_ids": "1,2"}), "target_layer_ids must be a list of ints"),
])
def test_drafter_config_read_by_sglangs_parser(sglang_python, tmp_path, drafter, says):
    text = problem(start(sglang_python, tmp_path, models_kw=drafter), "dflash-draft-config")
    assert says in text and "Kimi-K2.6-DFlash/config.json" in text


def test_drafter_shorter_than_the_context_needs_the_variable(sglang_python, tmp_path):
    kw = dict(drafter_len=4096)
    text = problem(start(sglang_python, tmp_path, models_kw=kw), "draft-context-length")
    assert "context length 131072 is above the 4096 it derives for the drafter" in text
    assert "set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in the unit's environment" in text
    assert "lower context-length to 4096" in text
    allowed = start(sglang_python, tmp_path / "b", env=ALLOW, models_kw=kw)
    assert allowed["problems"] == [] and allowed["resolved"]["draft-context-length"]["model"] == 4096
    # SGLang's own parser of the variable: 0 is false.
    refused = start(sglang_python, tmp_path / "c", env={st.ALLOW_LONGER: "0"}, models_kw=kw)
    problem(refused, "draft-context-length")


def test_without_context_length_the_target_length_is_the_drafters_bar(sglang_python, tmp_path):
    result = start(sglang_python, tmp_path, models_kw=dict(drafter_len=32768), context_length=None)
    assert "context length 262144 is above the 32768" in problem(result, "draft-context-length")


def test_context_length_above_the_target(sglang_python, tmp_path):
    result = start(sglang_python, tmp_path, models_kw=dict(drafter_len=10 ** 6), context_length=524288)
    text = problem(result, "context-length")
    assert "524288 is above the 262144 it derives for the target" in text
    assert start(sglang_python, tmp_path / "b", env=ALLOW, models_kw=dict(drafter_len=10 ** 6),
                 context_length=524288)["problems"] == []


def test_model_type_default_needs_transformers(sglang_python, tmp_path):
    # The lab's CPU-only SGLang has no transformers: the drafter's model-type default is unknown,
    # so the rule is skipped and says why (it never passes in silence).
    result = start(sglang_python, tmp_path, models_kw=dict(max_position_embeddings=None))
    assert result["problems"] == [] and "draft-context-length" not in result["checked"]
    assert any(s.startswith("draft-context-length:") and "needs transformers" in s for s in result["skipped"])


def test_inherited_sglang_variables_do_not_open_the_gate(sglang_python, tmp_path, monkeypatch):
    # The unit gets only its EnvironmentFile: a variable of the SSH session must not pass the config.
    monkeypatch.setenv(st.ALLOW_LONGER, "1")
    target, draft = models(tmp_path / "models", drafter_len=4096)
    config = cfg.write(str(tmp_path), "kimi", config_text(target, draft))
    problem(run_start(sglang_python, config, names=[]), "draft-context-length")
    assert run_start(sglang_python, config, env=ALLOW, names=[st.ALLOW_LONGER])["problems"] == []


def test_forked_run_answers_as_a_fresh_interpreter(sglang_python, tmp_path, monkeypatch):
    # The harness itself: the fork server (SGLang imported before the request's environment is set)
    # must answer what a new interpreter answers, for a pass, a refusal, a refusal that a variable of the
    # unit's environment lifts, and an inherited variable the script must drop.
    target, draft = models(tmp_path / "models", drafter_len=4096)
    config = cfg.write(str(tmp_path), "kimi", config_text(target, draft))
    good_target, good_draft = models(tmp_path / "good")
    good = cfg.write(str(tmp_path), "good", config_text(good_target, good_draft))
    monkeypatch.setenv(st.ALLOW_LONGER, "1")   # inherited: dropped unless named
    runs = [(good, None, []), (config, None, []), (config, ALLOW, [st.ALLOW_LONGER])]
    for conf, env, names in runs:
        forked = run_start(sglang_python, conf, env=env, names=names)
        fresh = run_start(sglang_python, conf, env=env, names=names, fresh=True)
        assert forked == fresh, (conf, env, forked, fresh)
    assert [p.split(" ", 1)[0] for p in run_start(sglang_python, config, names=[])["problems"]] == ["draft-context-length"]


def run_gate(python, config, env=None, names=None, fresh=False):
    """The gate's one run as sglang_preflight makes it (gate_source, gate_command), inherited SGLANG_*
    variables as in run_start: (the parser check's answer, the start rules' answer or None)."""
    environ, names = run_environment(env, names)
    run = fresh_run if fresh else forked_run
    rc, out, err = run(st.gate_command(python, config, SGLANG_VERSION, names), st.gate_source(), environ, cwd="/",
                       timeout=300)
    assert cfg.API_KEY not in out + err and rc == 0, (rc, err[-2000:])
    parsed = _sglang_check.read_result(rc, out, err, python)
    if st.RESULT_MARKER not in out:
        return parsed, None
    return parsed, _sglang_check.read_result(rc, out, err, python, marker=st.RESULT_MARKER)


def run_parser_check(python, config, env=None):
    """The parser check alone, in its own run, as _sglang_check.run makes it."""
    environ, _names = run_environment(env)
    rc, out, err = forked_run(_sglang_check.command(python, config, SGLANG_VERSION), _sglang_check.script_source(),
                              environ, cwd="/", timeout=300)
    return _sglang_check.read_result(rc, out, err, python)


def test_the_gates_one_run_answers_what_the_two_runs_answer(sglang_python, tmp_path, monkeypatch):
    # sglang_preflight runs both checks in one interpreter (SGLang imported once): each answer must be
    # what its own run answers, and the start rules must not run on a config the parser refused.
    target, draft = models(tmp_path / "models", drafter_len=4096)
    short = cfg.write(str(tmp_path), "kimi", config_text(target, draft))
    good_target, good_draft = models(tmp_path / "good")
    good = cfg.write(str(tmp_path), "good", config_text(good_target, good_draft))
    misspelt = cfg.write(str(tmp_path), "misspelt", config_text(good_target, good_draft, speculativ_num_steps=3))
    for config, env in ((good, None), (short, None), (short, ALLOW)):
        parsed, started = run_gate(sglang_python, config, env=env)
        assert parsed == run_parser_check(sglang_python, config, env) and parsed["ok"], parsed
        assert started == run_start(sglang_python, config, env=env), (config, env)
    assert [p.split(" ", 1)[0] for p in run_gate(sglang_python, short)[1]["problems"]] == ["draft-context-length"]
    parsed, started = run_gate(sglang_python, misspelt)
    assert parsed == run_parser_check(sglang_python, misspelt) and started is None
    assert not parsed["ok"] and "speculativ-num-steps" in " ".join(parsed["problems"])
    # An inherited variable of the SSH session is dropped before SGLang is imported, unless the
    # environment option names it; in a new interpreter, exactly as a host runs it.
    monkeypatch.setenv(st.ALLOW_LONGER, "1")
    assert [p.split(" ", 1)[0] for p in run_gate(sglang_python, short, names=[], fresh=True)[1]["problems"]] \
        == ["draft-context-length"]
    assert run_gate(sglang_python, short, env=ALLOW, names=[st.ALLOW_LONGER])[1]["problems"] == []


def test_gate_main_usage(capsys):
    assert st.gate_main(["/c.yaml"], _sglang_check) == 2
    assert st.gate_main(["/c.yaml", "/d.yaml", "--keep"], _sglang_check) == 2
    assert "usage" in capsys.readouterr().err


FAKE_TRANSFORMERS = '''"""A FAKE transformers written by test_sglang_start_check: AutoConfig.for_model's call shape only."""
import sys
import types

# Absent while sglang imports (its transformers patches need the real package), present once the
# start rules run (_handle_dflash's module is imported by then).
if "sglang.srt.arg_groups.speculative_hook" not in sys.modules:
    raise ImportError("the fake transformers is not there yet")


class AutoConfig(object):
    @classmethod
    def for_model(cls, model_type, *args, **kwargs):
        if model_type == "unknown_type":
            raise ValueError("Unrecognized model identifier: %s" % model_type)
        values = dict(max_position_embeddings=40960)
        values.update(kwargs)
        return types.SimpleNamespace(model_type=model_type, **values)
'''


def test_model_type_default_from_transformers_config_object(sglang_python, tmp_path):
    # A FAKE transformers (SGLang's lab venv has none) with for_model(model_type, **kwargs): the
    # call must not pass model_type twice, and the object it returns is what get_context_length reads.
    (tmp_path / "fake" / "transformers").mkdir(parents=True)
    (tmp_path / "fake" / "transformers" / "__init__.py").write_text(FAKE_TRANSFORMERS)
    env = {"PYTHONPATH": str(tmp_path / "fake")}
    result = start(sglang_python, tmp_path / "a", env=env, models_kw=dict(max_position_embeddings=None))
    assert "context length 131072 is above the 40960 it derives" in problem(result, "draft-context-length")
    result = start(sglang_python, tmp_path / "b", env=env, models_kw=dict(max_position_embeddings=None,
                                                                          model_type="unknown_type"))
    assert result["problems"] == [] and "draft-context-length" not in result["checked"]
    assert any("could not build its model type's default: ValueError: Unrecognized model identifier" in s
               for s in result["skipped"]), result["skipped"]


def test_models_not_on_this_host_are_skipped(sglang_python, tmp_path):
    result = run_start(sglang_python, cfg.write(str(tmp_path), "good", cfg.GOOD))
    assert result["problems"] == [] and result["error"] is None
    assert "dflash-pp-size" in result["checked"] and "context-length" not in result["checked"]
    assert any(s.startswith("dflash-draft-config: /srv/models/Kimi-K2.6-DFlash/") for s in result["skipped"])


def test_not_dflash_checks_only_the_context(sglang_python, tmp_path):
    result = start(sglang_python, tmp_path, speculative_algorithm=None, speculative_draft_model_path=None,
                   speculative_num_draft_tokens=None)
    assert result["problems"] == [] and result["path"] == "handle_speculative_decoding"
    assert result["checked"] == ["speculative-decoding"] + list(dict.fromkeys(r[0] for r in st.SPEC_RULES)) + ["context-length"]
    assert not any(n.startswith("not-evaluated:") for n in result["notices"])


# --- SGLang's start path: handle_speculative_decoding, not _handle_dflash alone ----------------

def test_sink_size_without_window_is_refused(sglang_python, tmp_path):
    # handle_speculative_decoding's rule, which _handle_dflash alone never runs.
    text = problem(start(sglang_python, tmp_path, speculative_draft_sink_size=4), "spec-draft-sink")
    assert "--speculative-draft-sink-size requires --speculative-draft-window-size" in text
    assert "set speculative-draft-window-size too" in text
    assert start(sglang_python, tmp_path / "b", speculative_draft_sink_size=4,
                 speculative_draft_window_size=32)["problems"] == []


def test_dp_spec_prefill_coordination_refuses_dflash(sglang_python, tmp_path):
    env = {"SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION": "1"}
    text = problem(start(sglang_python, tmp_path, env=env), "spec-dp-prefill-coordination")
    assert "DP spec/prefill coordination requires single-layer EAGLE, EAGLE3 or DSPARK" in text
    assert "remove SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION from sglang_environment" in text
    assert start(sglang_python, tmp_path / "b", env={"SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION": "0"})["problems"] == []


def test_model_override_args_apply_to_the_drafter(sglang_python, tmp_path):
    # SGLang passes json-model-override-args to get_config for the target AND the drafter.
    override = """'{"max_position_embeddings": 262144}'"""
    result = start(sglang_python, tmp_path, models_kw=dict(drafter_len=40960), context_length=None,
                   json_model_override_args=override)
    assert result["error"] is None and result["problems"] == [], result["problems"]
    assert result["resolved"]["draft-context-length"] == {"wanted": 262144, "model": 262144}
    # Set on the top-level config: a multimodal target's text_config keeps its own length.
    override = """'{"max_position_embeddings": 1048576}'"""
    result = start(sglang_python, tmp_path / "b", models_kw=dict(drafter_len=10 ** 7), context_length=524288,
                   json_model_override_args=override)
    assert "524288 is above the 262144 it derives for the target" in problem(result, "context-length")
    nested = """'{"text_config": {"max_position_embeddings": 1048576}}'"""
    result = start(sglang_python, tmp_path / "c", context_length=524288, json_model_override_args=nested,
                   speculative_algorithm=None, speculative_draft_model_path=None, speculative_num_draft_tokens=None)
    assert result["problems"] == [] and result["resolved"]["context-length"]["model"] == 1048576


def test_model_override_args_not_json(sglang_python, tmp_path):
    text = problem(start(sglang_python, tmp_path, json_model_override_args="'{not json'"), "json-model-override-args")
    assert "give json-model-override-args as a JSON object" in text


def test_trtllm_mha_draft_backend_as_sglang_resolves_it(sglang_python, tmp_path):
    # Not all sliding and not causal: SGLang falls back (its warning is a notice), it does not refuse.
    result = start(sglang_python, tmp_path, speculative_draft_attention_backend="trtllm_mha")
    assert result["error"] is None and result["problems"] == []
    assert result["resolved"]["speculative-draft-attention-backend"] == "flashinfer"
    assert any(n.startswith("sglang-warning: DFLASH only enables 'trtllm_mha'") for n in result["notices"])
    # All layers sliding: SGLang keeps it.
    result = start(sglang_python, tmp_path / "b", speculative_draft_attention_backend="trtllm_mha",
                   models_kw=dict(layer_types=["sliding_attention"] * 5, sliding_window=2048))
    assert result["problems"] == [] and result["resolved"]["speculative-draft-attention-backend"] == "trtllm_mha"
    # A layer_types SGLang cannot read: its refusal.
    result = start(sglang_python, tmp_path / "c", speculative_draft_attention_backend="trtllm_mha",
                   models_kw=dict(layer_types="sliding_attention"))
    assert "DFLASH config.layer_types must be a sequence" in problem(result, "dflash-draft-config")


def test_what_is_stood_in_or_not_evaluated_is_named(sglang_python, tmp_path):
    result = start(sglang_python, tmp_path)
    names = [n.split(":", 1)[0] for n in result["notices"]]
    # The lab's CPU-only SGLang: no transformers, no GPU kernels, no device.
    assert {"get-config-stand-in", "dflash-utils-from-source", "device-stand-in"} <= set(names)
    not_evaluated = [n.split(" ", 2)[1] for n in result["notices"] if n.startswith("not-evaluated:")]
    assert not_evaluated == [name for name, _why in st.NOT_EVALUATED]
    assert {"dflash-nvfp4-kv-sm100", "dflash-unified-memory", "dflash-cp-tp-group-sharing", "dflash-lora",
            "dflash-mask-token"} <= set(not_evaluated)


# --- the mirrors, pinned to the source they were read from -------------------------------------

def sglang_dir(python):
    out = subprocess.run([python, "-c", "import os, sglang; print(os.path.dirname(sglang.__file__))"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120, check=True, cwd="/")
    return out.stdout.decode().strip()


def read(directory, relpath):
    with open(os.path.join(directory, relpath)) as handle:
        return handle.read()


def missing_pins(directory):
    """The PINS whose text the SGLang source tree at ``directory`` no longer has."""
    return [(path, text) for path, text in st.PINS if text not in read(directory, path)]


def test_pins_hold_in_the_installed_sglang(sglang_python):
    assert SGLANG_VERSION == st.PINS_VERSION
    directory = sglang_dir(sglang_python)
    missing = missing_pins(directory)
    assert missing == [], "SGLang's source no longer has what _sglang_start_check mirrors: %s" % missing
    # The rules are named from SGLang's messages: each message text is still raised by _handle_dflash.
    hook = read(directory, "srt/arg_groups/speculative_hook.py")
    start_at = hook.index("def _handle_dflash(")
    body = hook[start_at:hook.index("\ndef ", start_at + 1)]
    assert [rule for rule, _o, text, _f in st.DFLASH_RULES if text not in body] == []
    start_at = hook.index("def handle_speculative_decoding(")
    body = hook[start_at:hook.index("\ndef ", start_at + 1)]
    assert [rule for rule, _o, text, _f in st.SPEC_RULES if text not in body] == []
    assert [t for _r, _o, t, _f in st.DRAFT_RULES if t not in read(directory, st.SOURCES["dflash"])] == []


def test_pins_fail_on_a_different_rule(sglang_python, tmp_path):
    # A copy of the installed tree with one pinned rule changed: the pin check reports that pin, only it.
    directory = sglang_dir(sglang_python)
    path, text = st.PINS[6]
    changed = tmp_path / "sglang"
    for relpath in set(p for p, _t in st.PINS):
        (changed / os.path.dirname(relpath)).mkdir(parents=True, exist_ok=True)
        (changed / relpath).write_text(read(directory, relpath))
    assert missing_pins(str(changed)) == []
    source = read(str(changed), path)
    # SGLang changing "context_length > derived" to ">=" is a different rule.
    (changed / path).write_text(source.replace(text, text.replace(" > ", " >= ")))
    assert missing_pins(str(changed)) == [(path, text)]


def test_from_source_runs_sglangs_own_function(sglang_python, tmp_path):
    # get_context_length compiled from the installed file, in SGLang's interpreter: the file run as the
    # gate's bootstrap runs it (its script half, under GATE_NAME), where the collection is not importable.
    code = ("import os, sys, types, sglang; ns = {'__name__': %r}; "
            "exec(compile(open(%r).read(), 'x', 'exec'), ns); "
            "f = ns['_from_source'](os.path.dirname(sglang.__file__), ns['SOURCES']['context'], ('get_context_length',))"
            "['get_context_length']; "
            "print(f(types.SimpleNamespace(max_position_embeddings=4096, rope_scaling={'factor': 4.0})), "
            "f(types.SimpleNamespace()))" % (st.GATE_NAME, st.__file__))
    environ = dict((k, v) for k, v in os.environ.items() if k != "PYTHONPATH")
    out = subprocess.run([sglang_python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
                         check=False, cwd="/", env=environ)
    assert out.stdout.decode().split() == ["16384", "2048"], out.stderr.decode()[-2000:]


# --- the module's half, no SGLang needed -------------------------------------------------------

def test_environment_is_validated_like_the_env_file():
    params = dict(config="/c.yaml", python="/py", environment={"NCCL_DEBUG": "WARN", "N": 1, "GONE": None})
    assert st.environment(params) == {"NCCL_DEBUG": "WARN", "N": "1"}
    with pytest.raises(ModuleFailure) as exc:
        st.environment(dict(params, environment={"1BAD": "x"}))
    assert exc.value.msg.startswith("environment: ") and "'1BAD' is not an environment variable name" in exc.value.msg
    with pytest.raises(ModuleFailure) as exc:
        st.environment(dict(params, environment={"X": ["a"]}))
    assert "must be a string or a number" in exc.value.msg


def test_secret_values():
    assert st.secret_values({"HF_TOKEN": "hf_x", "OPENAI_API_KEY": "sk-1", "NCCL_DEBUG": "WARN", "A_PASSWORD": ""}) \
        == ["hf_x", "sk-1"]


def _scripted(answers, calls):
    def run_command(argv, data=None, binary_data=False, cwd=None, environ_update=None):
        calls.append(dict(argv=argv, data=data, environ_update=environ_update, cwd=cwd))
        return 0, answers[len(calls) - 1], ""
    return run_command


def _answers(start_answer, parsed=None):
    """The gate's one run's output: the parser check's answer, then the start rules' (None: not run)."""
    parsed = parsed or dict(ok=True, version="0.5.23", options={}, problems=[], notices=[], import_error=None)
    out = "SGLang's import noise\n%s%s\n" % (_sglang_check.MARKER, json.dumps(parsed))
    if start_answer is not None:
        out += "%s%s\n" % (st.RESULT_MARKER, json.dumps(start_answer))
    return [out]


def test_run_is_one_interpreter_for_both_checks_with_the_environment(tmp_path):
    config = cfg.write(str(tmp_path), "good", cfg.GOOD)
    calls, warnings = [], []
    answer = dict(problems=[], checked=["context-length"], skipped=[], resolved={}, error=None)
    params = dict(config=config, python=sys.executable, expect_version="0.5.23", environment={st.ALLOW_LONGER: 1})
    result = st.run(params, run_command=_scripted(_answers(answer), calls), warn=warnings.append)
    assert calls == [dict(argv=[sys.executable, "-", config, "--expect-version", "0.5.23", "--keep", st.ALLOW_LONGER],
                          data=st.gate_source(), environ_update={st.ALLOW_LONGER: "1"}, cwd="/")]
    assert result["ok"] and result["start"]["checked"] == ["context-length"] and warnings == []
    assert result["environment"] == [st.ALLOW_LONGER] and result["version"] == "0.5.23"


def test_run_stops_at_the_parser_check_of_the_one_run(tmp_path):
    config = cfg.write(str(tmp_path), "good", cfg.GOOD)
    params = dict(config=config, python=sys.executable, expect_version=None, environment={})
    rejected = dict(ok=False, version="0.5.23", options={}, problems=["speculativ-num-steps: unknown"], notices=[],
                    import_error=None)
    with pytest.raises(ModuleFailure) as exc:
        st.run(params, run_command=_scripted(_answers(None, rejected), []), warn=None)
    assert "1 problem(s): speculativ-num-steps: unknown" in exc.value.msg and "start" not in exc.value.fields
    with pytest.raises(ModuleFailure) as exc:
        st.run(params, run_command=_scripted(["no answer at all\n"], []), warn=None)
    assert "ended (exit 0) without a result: no answer at all" in exc.value.msg


def test_run_refuses_on_a_start_rule_and_warns_when_it_cannot_check(tmp_path):
    config = cfg.write(str(tmp_path), "good", cfg.GOOD)
    params = dict(config=config, python=sys.executable, expect_version=None, environment={})
    refused = dict(problems=["dflash-pp-size (pp-size): ..."], checked=[], skipped=[], resolved={}, error=None)
    with pytest.raises(ModuleFailure) as exc:
        st.run(params, run_command=_scripted(_answers(refused), []), warn=None)
    assert "1 problem(s): dflash-pp-size (pp-size)" in exc.value.msg and exc.value.fields["ok"] is False
    warnings = []
    broken = dict(problems=[], checked=[], skipped=[], resolved={}, error="ImportError: no _handle_dflash")
    result = st.run(params, run_command=_scripted(_answers(broken), []), warn=warnings.append)
    assert warnings == ["SGLang 0.5.23's start-time rules were not checked (ImportError: no _handle_dflash)"]
    assert result["notices"] == warnings and result["start"]["error"]


def test_run_returns_the_start_checks_named_notices(tmp_path):
    # Stand-ins and rules not evaluated on this host are notices (and warnings), never dropped.
    config = cfg.write(str(tmp_path), "good", cfg.GOOD)
    params = dict(config=config, python=sys.executable, expect_version=None, environment={})
    notices = ["device-stand-in: device is unset ...", "not-evaluated: dflash-lora (lora_hook: ...)"]
    answer = dict(problems=[], checked=["speculative-decoding"], skipped=[], resolved={}, error=None,
                  path="handle_speculative_decoding", notices=notices)
    warnings = []
    result = st.run(params, run_command=_scripted(_answers(answer), []), warn=warnings.append)
    assert result["ok"] and result["notices"] == notices and warnings == notices
    assert result["start"]["notices"] == notices and result["start"]["path"] == "handle_speculative_decoding"
