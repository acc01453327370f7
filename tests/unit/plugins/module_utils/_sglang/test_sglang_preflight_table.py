# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The acceptance table: config -> preflight verdict -> SGLang 0.5.23's verdict, every row agreeing.

The preflight's verdict is the gate's one run as the module makes it (start_check.gate_source: the
parser check, then the start-time rules, in one interpreter); SGLang's comes from
sglang_reference.py, which runs SGLang's own start-time code in the lab venv and shares no code
with the preflight. The table in docs/sglang_preflight.md is this test's output: when a row
changes, the test fails and prints the table to paste there.
"""
from __future__ import annotations

import json
import os
import re
import subprocess

from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import sglang_configs as cfg
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.sglang_env import (  # noqa: F401 pylint: disable=unused-import
    ROOT, sglang_python)
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils._sglang.test_sglang_start_check import (
    config_text, models, run_gate)

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "sglang_reference.py")
DOC = os.path.join(ROOT, "docs", "sglang_preflight.md")
BEGIN, END = "<!-- preflight-table: begin -->", "<!-- preflight-table: end -->"
COORDINATION = {"SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION": "1"}
NO_SPEC = dict(speculative_algorithm=None, speculative_draft_model_path=None, speculative_num_draft_tokens=None)
OVERRIDE = """'{"max_position_embeddings": 262144}'"""

# (config, environment, drafter/target keys, options): the sglang role's DFLASH config for Kimi K2.6
# (context-length 131072, num-draft-tokens 16, tp-size 8) with one change each.
ROWS = [
    ("the sglang role's DFLASH config", {}, {}, {}),
    ("speculative-draft-sink-size 4, no window", {}, {}, dict(speculative_draft_sink_size=4)),
    ("speculative-draft-sink-size 4, window 32", {}, {}, dict(speculative_draft_sink_size=4, speculative_draft_window_size=32)),
    ("SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION=1", COORDINATION, {}, {}),
    ("no speculative decoding, SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION=1", COORDINATION, {}, NO_SPEC),
    ("drafter with 40960 positions, no context-length", {}, dict(drafter_len=40960), dict(context_length=None)),
    ("drafter with 40960 positions + json-model-override-args max_position_embeddings 262144", {},
     dict(drafter_len=40960), dict(context_length=None, json_model_override_args=OVERRIDE)),
    ("drafter with 40960 positions + SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
     {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}, dict(drafter_len=40960), {}),
    ("context-length 524288, above the target's 262144", {}, dict(drafter_len=10 ** 6), dict(context_length=524288)),
    ("draft attention backend trtllm_mha, full-attention drafter", {}, {},
     dict(speculative_draft_attention_backend="trtllm_mha")),
    ("draft attention backend trtllm_mha, all-sliding drafter", {},
     dict(layer_types=["sliding_attention"] * 5, sliding_window=2048), dict(speculative_draft_attention_backend="trtllm_mha")),
    ("draft attention backend trtllm_mha, layer_types not a list", {}, dict(layer_types="sliding_attention"),
     dict(speculative_draft_attention_backend="trtllm_mha")),
    ("pp-size 2", {}, {}, dict(pp_size=2)),
    ("speculative-dflash-block-size 8, num-draft-tokens 16", {}, {}, dict(speculative_dflash_block_size=8)),
    ("speculative-draft-window-size 8, block 16", {}, {}, dict(speculative_draft_window_size=8)),
    ("no num-draft-tokens, drafter block_size 8, window 4", {}, dict(block=8),
     dict(speculative_num_draft_tokens=None, speculative_draft_window_size=4)),
    ("no speculative-draft-model-path", {}, {}, dict(speculative_draft_model_path=None)),
]


def reference(python, items, tmp_path):
    """SGLang's own verdicts (sglang_reference.py, one process): [(config, env)] -> [refused messages]."""
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps([dict(config=c, env=e) for c, e in items]))
    environ = dict((k, v) for k, v in os.environ.items() if not k.startswith("SGLANG_"))
    proc = subprocess.run([python, REFERENCE, "--batch", str(batch)], env=environ, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, cwd="/", timeout=600, check=False)
    lines = [line for line in proc.stdout.decode().splitlines() if line.startswith("REFERENCE ")]
    assert lines, proc.stderr.decode()[-3000:]
    results = json.loads(lines[-1][len("REFERENCE "):])
    assert [r["error"] for r in results] == [None] * len(items), results
    return [r["refused"] for r in results]


def short(message):
    message = re.sub(r"Warning: ", "", message).split(". This may lead")[0]
    return message if len(message) <= 90 else message[:87] + "..."


def table(rows):
    out = ["| config | preflight verdict | SGLang 0.5.23 verdict |", "|---|---|---|"]
    for name, preflight, sglang in rows:
        out.append("| %s | %s | %s |" % (name.replace("|", "/"), preflight, sglang))
    return "\n".join(out)


def test_preflight_agrees_with_sglang(sglang_python, tmp_path):
    rows, disagree, runs = [], [], []
    for i, (name, env, models_kw, options) in enumerate(ROWS):
        root = tmp_path / str(i)
        target, draft = models(root / "models", **models_kw)
        config = cfg.write(str(root), "row", config_text(target, draft, **options))
        parsed, start = run_gate(sglang_python, config, env)
        assert parsed["ok"] and start is not None, (name, parsed["problems"])
        assert start["error"] is None, (name, start["error"])
        runs.append((name, config, env, start))
    verdicts = reference(sglang_python, [(config, env) for _n, config, env, _s in runs], tmp_path)
    for (name, _config, _env, start), refused in zip(runs, verdicts):
        rules = list(dict.fromkeys(p.split(" ", 1)[0] for p in start["problems"]))
        preflight = "refused: %s" % ", ".join(rules) if rules else "accepted"
        sglang = "refused: %s" % short(refused[0]) if refused else "accepted"
        rows.append((name, preflight, sglang))
        if bool(rules) != bool(refused):
            disagree.append(name)
        # The speculative hooks' refusals: SGLang's own message is in the preflight's problem.
        for message in refused:
            if not message.startswith("Warning:"):
                assert any(message.rstrip(".") in p for p in start["problems"]), (name, message, start["problems"])
    assert len(rows) >= 12 and disagree == [], table(rows)
    with open(DOC) as handle:
        doc = handle.read()
    generated = table(rows)
    assert BEGIN in doc and END in doc, "docs/sglang_preflight.md has no table markers; the table:\n" + generated
    assert doc.split(BEGIN, 1)[1].split(END, 1)[0].strip() == generated, \
        "docs/sglang_preflight.md's table is not this run's; paste it:\n" + generated
