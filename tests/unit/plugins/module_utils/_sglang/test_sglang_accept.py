# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The accept-length sample (_sglang_accept): pooling, its interval and when it is judged.
Pure arithmetic on per-request meta_info figures; the probe against the stand-in is in
tests/unit/plugins/modules/test_sglang_probe.py."""
from __future__ import annotations

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import accept
from ansible_collections.gpufleet.llm.plugins.module_utils._bench import bench
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import load


def _s(tokens, steps):
    return dict(completion_tokens=tokens, spec_verify_ct=steps)


def test_pooled_not_averaged():
    # one long request at 4.0 and one short at 1.0: the pooled ratio weighs tokens, not requests
    out = accept.summarize([_s(400, 100), _s(10, 10)], max_new_tokens=400, min_tokens=100)
    assert out["accept_length"] == pytest.approx(410 / 110.0, abs=1e-4)
    assert out["per_request"] == [4.0, 1.0]
    assert out["judged"] is True and out["reporting"] == 2


def test_identical_requests_have_a_zero_width_interval():
    out = accept.summarize([_s(256, 64)] * 8, max_new_tokens=256, min_tokens=1024)
    assert out["accept_length"] == 4.0 and out["ci95"] == [4.0, 4.0]


def test_interval_is_the_ratio_estimators():
    pairs = [(256, 80), (256, 100), (256, 64), (256, 120)]
    out = accept.summarize([_s(t, v) for t, v in pairs], max_new_tokens=256, min_tokens=0)
    ratio = 1024 / 364.0
    mean_v = 364 / 4.0
    se = (sum((t - ratio * v) ** 2 for t, v in pairs) / 3 / 4) ** 0.5 / mean_v
    assert out["ci95"] == pytest.approx([ratio - 3.182 * se, ratio + 3.182 * se], abs=1e-3)
    assert out["ci95"][0] < out["accept_length"] < out["ci95"][1]


@pytest.mark.parametrize("samples,judged", [
    ([_s(256, 64)] * 4, True),                          # 1024 tokens, 4 requests
    ([_s(255, 64)] * 4, False),                         # 1020 < 1024 tokens (requests stopped early)
    ([_s(2048, 512)], False),                           # one request reporting: no spread to judge by
    ([_s(256, None)] * 8, False),                       # no spec_verify_ct at all
    ([_s(256, 64)] * 3 + [_s(None, None)] * 5, False),  # 768 tokens from the requests that report
])
def test_when_the_sample_is_judged(samples, judged):
    out = accept.summarize(samples, max_new_tokens=256, min_tokens=1024)
    assert out["judged"] is judged


def test_sample_requests_are_the_benchmarks_cycling_distinct_prompts():
    requests = accept.sample_requests(10, 32)
    assert [r["index"] for r in requests] == list(range(10))
    assert len({r["prompt"] for r in requests}) == len(accept.PROMPTS)
    assert all(r["max_new_tokens"] == 32 and r["category"] in bench.CATEGORIES for r in requests)
    # the benchmark's own request form (sglang_bench's build_requests)
    assert requests == load.build_requests([dict(prompt=t, category=c) for c, t in accept.PROMPTS], 10, 32)


@pytest.mark.parametrize("api,path,template", [("chat", "/v1/chat/completions", True), ("generate", "/generate", False)])
def test_request_shape_is_read_from_the_benchmarks_body(api, path, template):
    # issue 24 item 3: the sample is sent as the benchmark sends (its temperature, ignore_eos, streamed),
    # never greedy raw text
    shape = accept.request_shape(api, 1.0, 256)
    assert shape == dict(api=api, path=path, chat_template=template, temperature=1.0, ignore_eos=True, stream=True,
                         max_new_tokens=256)
