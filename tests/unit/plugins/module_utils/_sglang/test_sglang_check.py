# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_sglang_check: the result protocol in-process, and the checker against the REAL SGLang 0.5.23.

The checker script runs as a subprocess of the lab's SGLang venv (sglang_env.py), exactly as the
module runs it on a host: the file fed to ``python -`` on stdin. Nothing is mocked: SGLang's own
parser, ConfigArgumentMerger and SpeculativeAlgorithm give every answer.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import check as sc
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import sglang_configs as cfg
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.sglang_env import (  # noqa: F401 pylint: disable=unused-import
    SGLANG_VERSION, forked_run, sglang_python)


def run_checker(python, config, expect_version=None):
    """The parser check as the module runs it (``python -`` with the script on stdin), as a child of the
    test process's SGLang fork server (sglang_env.forked_run); test_script_runs_by_path_too runs a new interpreter."""
    rc, out, err = forked_run(sc.command(python, config, expect_version), sc.script_source(), dict(os.environ),
                              cwd="/", timeout=300)
    assert cfg.API_KEY not in out + err
    return sc.read_result(rc, out, err, python)


# --- protocol, no SGLang needed --------------------------------------------------------------

def test_read_result_takes_last_marker_line_after_noise():
    out = "WARNING: something SGLang printed\n%s{\"ok\": false}\nmore noise\n%s{\"ok\": true}\n" % (sc.MARKER, sc.MARKER)
    assert sc.read_result(0, out, "", "/py") == {"ok": True}


def test_read_result_without_marker_names_interpreter_and_stderr():
    with pytest.raises(sc.CheckerError) as exc:
        sc.read_result(1, "", "Traceback ...\nSyntaxError: invalid syntax\n", "/opt/old/bin/python")
    assert "/opt/old/bin/python" in str(exc.value) and "SyntaxError" in str(exc.value) and "exit 1" in str(exc.value)
    with pytest.raises(sc.CheckerError):
        sc.read_result(0, sc.MARKER + "{not json\n", "", "/py")


def test_script_source_is_this_file_and_argv_holds_no_code():
    with open(sc.__file__, "rb") as handle:
        assert sc.script_source() == handle.read()
    argv = sc.command("/opt/sglang/0.5.23/bin/python", "/etc/x.yaml", "0.5.23")
    assert argv == ["/opt/sglang/0.5.23/bin/python", "-", "/etc/x.yaml", "--expect-version", "0.5.23"]


def test_secret_names():
    for key in ("api-key", "api_key", "admin-api-key", "ssl-keyfile-password", "hf_token"):
        assert sc._is_secret(key), key
    for key in ("max-total-tokens", "speculative-num-draft-tokens", "ssl-keyfile", "model-path"):
        assert not sc._is_secret(key), key
    mask = sc._masker({"api-key": "s3cr3t", "port": 1})
    assert mask("unrecognized --api_key s3cr3t") == "unrecognized --api_key " + sc.MASK


def test_interpreter_without_sglang(tmp_path):
    # The units venv has no SGLang: the checker still answers, with the import error.
    config = cfg.write(str(tmp_path), "good", cfg.GOOD)
    result = run_checker(sys.executable, config)
    assert result["ok"] is False and "sglang" in result["import_error"]
    assert "not importable with python %s" % sys.executable in sc.import_failure_message(result, sys.executable)


def test_main_usage(capsys):
    assert sc.main([]) == 2


def test_mask_is_the_collections_and_the_scripts_copy_matches_it():
    # In-process the checker uses _secrets.MASK; run as a script by SGLang's interpreter it cannot
    # import the collection and spells the mask out: that copy must stay equal.
    assert sc.MASK is _secrets.MASK
    copies = [node.value.value for node in ast.walk(ast.parse(sc.script_source()))
              if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MASK" for t in node.targets)]
    assert copies == [_secrets.MASK]


def _fake_checker(answer, calls):
    """AnsibleModule.run_command's shape, answering like the checker would."""
    def run_command(argv, data=None, binary_data=False, cwd=None):
        calls.append(dict(argv=argv, data=data, binary_data=binary_data, cwd=cwd))
        return 0, "banner\n%s%s\n" % (sc.MARKER, json.dumps(answer)), ""
    return run_command


def test_run_feeds_the_script_on_stdin_and_warns_notices(tmp_path):
    config = cfg.write(str(tmp_path), "good", cfg.GOOD)
    answer = dict(ok=True, version="0.5.23", options={"tp-size": 8}, problems=[], notices=["tp: abbreviation"],
                  import_error=None, python="/ignored", config="/ignored")
    calls, warnings = [], []
    params = dict(config=config, python=sys.executable, expect_version="0.5.23")
    result = sc.run(params, run_command=_fake_checker(answer, calls), warn=warnings.append)
    assert calls == [dict(argv=sc.command(sys.executable, config, "0.5.23"), data=sc.script_source(),
                          binary_data=True, cwd="/")]
    assert warnings == ["tp: abbreviation"]
    expected = dict(answer, changed=False, python=sys.executable, config=config)
    del expected["import_error"]
    assert result == expected


def test_run_failures_carry_their_result(tmp_path):
    config = cfg.write(str(tmp_path), "good", cfg.GOOD)
    params = dict(config=config, python=sys.executable, expect_version=None)
    rejected = dict(ok=False, version="0.5.23", options={}, problems=["tp_size: underscore key"], notices=[],
                    import_error=None, config=config)
    with pytest.raises(ModuleFailure) as exc:
        sc.run(params, run_command=_fake_checker(rejected, []), warn=None)
    assert exc.value.msg == "SGLang 0.5.23 rejects %s: 1 problem(s): tp_size: underscore key" % config
    assert exc.value.fields["problems"] == ["tp_size: underscore key"] and exc.value.fields["changed"] is False
    with pytest.raises(ModuleFailure) as exc:
        sc.run(params, run_command=_fake_checker(dict(rejected, import_error="ImportError: x"), []), warn=None)
    assert exc.value.fields == dict(changed=False, ok=False, config=config, python=sys.executable, problems=[],
                                    notices=[], import_error="ImportError: x")
    with pytest.raises(ModuleFailure) as exc:
        sc.run(dict(params, python=str(tmp_path / "nope")), run_command=None, warn=None)
    assert "is not an executable file" in exc.value.msg and exc.value.fields["ok"] is False


# --- the real SGLang ------------------------------------------------------------------------

def test_good_dflash_config(sglang_python, tmp_path):
    result = run_checker(sglang_python, cfg.write(str(tmp_path), "good", cfg.GOOD), expect_version=SGLANG_VERSION)
    assert result["ok"], result["problems"]
    assert result["version"] == SGLANG_VERSION and result["problems"] == [] and result["notices"] == []
    opts = result["options"]
    assert opts["speculative-algorithm"] == "DFLASH"
    assert opts["tp-size"] == 8 and opts["port"] == 30000 and opts["mem-fraction-static"] == 0.88
    assert opts["trust-remote-code"] is True
    assert opts["speculative-num-draft-tokens"] == 16
    assert opts["model-path"].startswith("/srv/models/Kimi-K2.6/")
    assert opts["api-key"] == sc.MASK
    assert "enable-metrics" not in opts  # false: SGLang drops the flag


def test_yml_suffix_is_what_sglang_accepts(sglang_python, tmp_path):
    assert run_checker(sglang_python, cfg.write(str(tmp_path), "good", cfg.GOOD, suffix=".yml"))["ok"]


@pytest.mark.parametrize("name,fragments", [
    ("underscore", ["tp_size: underscore key", "--tp_size", "write it as 'tp-size'"]),
    ("unknown", ["speculative-algorythm: unknown option --speculative-algorythm", "did you mean 'speculative-algorithm'"]),
    ("dflashx", ["speculative-algorithm: 'DFLASHX' is not an algorithm SGLang 0.5.23 knows", "DFLASH, "]),
    ("choice", ["attention-backend: argument --attention-backend: invalid choice: 'nope'"]),
    ("value", ["port: argument --port: invalid int value: 'thirty'"]),
    ("null", ["served-model-name: empty value (YAML null)"]),
    ("secret_underscore", ["api_key: underscore key", "write it as 'api-key'"]),
    ("no_model", ["the following arguments are required: --model-path"]),
])
def test_bad_configs_named(sglang_python, tmp_path, name, fragments):
    result = run_checker(sglang_python, cfg.write(str(tmp_path), name, cfg.BAD[name]))
    assert result["ok"] is False
    text = "\n".join(result["problems"])
    for fragment in fragments:
        assert fragment in text, text
    assert len(result["problems"]) == 1, result["problems"]


def test_every_problem_at_once(sglang_python, tmp_path):
    result = run_checker(sglang_python, cfg.write(str(tmp_path), "all", cfg.ALL_AT_ONCE))
    keys = sorted(p.split(":", 1)[0] for p in result["problems"])
    assert keys == ["attention-backend", "speculative-algorithm", "speculative-algorythm", "tp_size"], result["problems"]


def test_not_yaml_and_missing_file(sglang_python, tmp_path):
    result = run_checker(sglang_python, cfg.write(str(tmp_path), "good", cfg.GOOD, suffix=".json"))
    assert result["ok"] is False and "Config file must be YAML format, got: .json" in result["problems"][0]
    missing = str(tmp_path / "missing.yaml")
    result = run_checker(sglang_python, missing)
    assert result["ok"] is False and "Config file not found" in result["problems"][0]
    result = run_checker(sglang_python, cfg.write(str(tmp_path), "list", "- a\n- b\n"))
    assert "dictionary at root level" in result["problems"][0]


def test_abbreviation_is_a_notice(sglang_python, tmp_path):
    text = cfg.GOOD.replace("tp-size: 8", "tp: 8")
    result = run_checker(sglang_python, cfg.write(str(tmp_path), "abbrev", text))
    assert result["ok"] and result["options"]["tp-size"] == 8
    assert "tp: accepted only as an abbreviation of --tp-size" in result["notices"][0]


def test_expect_version_mismatch(sglang_python, tmp_path):
    result = run_checker(sglang_python, cfg.write(str(tmp_path), "good", cfg.GOOD), expect_version="0.5.99")
    assert result["ok"] is False and "SGLang 0.5.23 is installed" in result["problems"][0]
    assert "expected 0.5.99" in result["problems"][0]


def test_script_runs_by_path_too(sglang_python, tmp_path):
    config = cfg.write(str(tmp_path), "good", cfg.GOOD)
    proc = subprocess.run([sglang_python, sc.__file__, config], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=300, check=False)
    line = [x for x in proc.stdout.decode().splitlines() if x.startswith(sc.MARKER)][-1]
    assert json.loads(line[len(sc.MARKER):])["ok"] is True
    assert os.path.isfile(sc.__file__)
