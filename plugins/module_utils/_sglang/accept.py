# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_probe's accept-length sample: enough tokens and verify steps to judge a drafter.

Private to the collection: not a public API, may change without notice. No Ansible imports.

Why a sample (docs/sglang_probe.md, "Accept length", has the whole argument): the tokens one verify
step accepts vary a lot from step to step (1 to the block size, 16 for DFlash; a standard deviation
of 2 to 3 tokens at the accept lengths drafters reach), and from prompt to prompt (code drafts
better than prose). One 16-token request is 4 to 8 steps of one prompt: its ratio is off by a whole
token either way. The default sample, 8 different prompts of 256 new tokens each (2048 tokens, 800
verify steps at an accept length of 2.5), puts the standard error near 0.1 token per step.

The request shape is the benchmark's (sglang_bench), through its own load generator (load.py's
``run_level``/``one_request``, bodies from chat.py): a chat model gets
``/v1/chat/completions`` (its chat template applied by the server), any other ``/generate`` with the
raw text, both streamed, at the benchmark's temperature (1.0 by default: the Kimi K2.6 model card's)
with ``ignore_eos``. A gate judged on greedy raw text would judge a distribution the benchmark and the
users never send: at temperature 0 the drafter guesses the argmax, which it does far more often than
a sampled token.

Pooled, not averaged: the accept length is sum(completion_tokens) / sum(spec_verify_ct) over the
requests (what SGLang's own server average computes); the mean of per-request ratios would weigh a
short request like a long one. Its 95% interval is the ratio estimator's, from the spread of the
requests around the pooled ratio, so it counts both sources of variance. Real SGLang 0.5.23 returns
``spec_verify_ct`` in each finished request's ``meta_info`` (tokenizer_manager.py,
``_calculate_spec_decoding_metrics``) and no cumulative count in ``/server_info``: only per-request
figures are used here.
"""

from __future__ import annotations

import math
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import chat as _chat
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import load as _load

# Different kinds of text draft differently; the sample cycles through them (with the benchmark's
# categories, which its request records carry).
PROMPTS = (
    ("chat", "Write a detailed, step-by-step explanation of how a hash table handles collisions, with examples."),
    ("code", "def merge_sort(items):\n    \"\"\"Sort a list with merge sort and return a new list.\"\"\"\n"),
    ("chat", "Explain the causes and consequences of the French Revolution in several paragraphs."),
    ("math", "Solve step by step: a train leaves at 9:40 at 84 km/h, a second one at 10:15 at 112 km/h on the same "
             "track. When and where does the second catch up? Show every calculation."),
    ("chat", "Write a short story about a lighthouse keeper who finds a message in a bottle."),
    ("code", "List twenty practical tips for writing maintainable Python code, each with a one-line example."),
    ("chat", "Translate into French and then explain the grammar of each sentence: The weather was cold, so we "
             "stayed inside and read books by the fire."),
    ("chat", "Describe how TCP congestion control works, covering slow start, congestion avoidance and fast "
             "recovery."),
)
# Requests of the sample in flight at once (a server batches them).
MAX_CONCURRENCY = 16

# Student's t, 97.5th percentile, for 1..30 degrees of freedom (the interval of a few requests).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


class AcceptSampleError(Exception):
    """A request of the sample failed (its error, as the benchmark's client reports it)."""


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def sample_requests(count: int, max_new_tokens: int) -> list[dict[str, Any]]:
    """The sample's requests in the benchmark's form (load.py's ``build_requests``)."""
    prompts = [dict(prompt=text, category=category) for category, text in PROMPTS]
    return _load.build_requests(prompts, count, max_new_tokens)


def request_shape(api: str, temperature: float, max_new_tokens: int) -> dict[str, Any]:
    """What every request of the sample sends, read from the body the benchmark's client builds."""
    request = dict(index=0, prompt="", category="chat", max_new_tokens=max_new_tokens)
    if api == "chat":
        body = _chat.chat_body(request, temperature)
        return dict(api="chat", path=_chat.CHAT_PATH, chat_template=True, temperature=body["temperature"],
                    ignore_eos=body["ignore_eos"], stream=body["stream"], max_new_tokens=body["max_tokens"])
    body = _chat.generate_body(request, temperature)
    sampling = body["sampling_params"]
    return dict(api="generate", path="/generate", chat_template=False, temperature=sampling["temperature"],
                ignore_eos=sampling["ignore_eos"], stream=True, max_new_tokens=sampling["max_new_tokens"])


def collect(url: str, *, requests: int, max_new_tokens: int, api: str, temperature: float,
            client: dict[str, Any], request_timeout: float) -> list[dict[str, Any]]:
    """Send the sample's requests with the benchmark's load generator (``MAX_CONCURRENCY`` at a time)
    and return per request ``completion_tokens`` and ``spec_verify_ct`` (None when not reported).

    Raises AcceptSampleError with the first failed request's error.
    """
    try:
        records, _wall = _load.run_level(url, sample_requests(requests, max_new_tokens),
                                         min(requests, MAX_CONCURRENCY), api=api, temperature=temperature,
                                         request_timeout=request_timeout, **client)
    except _load.LoadError as exc:
        raise AcceptSampleError(str(exc))
    failed = [r for r in records if not r["ok"]]
    if failed:
        raise AcceptSampleError("%d of %d sample requests failed; the first: %s"
                                % (len(failed), requests, failed[0]["error"]))
    return [dict(completion_tokens=_count(r["output_tokens"]), spec_verify_ct=_count(r["spec_verify_ct"]))
            for r in records]


def _ci95(pairs: list[tuple[int, int]], ratio: float) -> list[float] | None:
    """The ratio estimator's 95% interval, from the requests' residuals around the pooled ratio."""
    k = len(pairs)
    if k < 2:
        return None
    mean_steps = sum(v for _t, v in pairs) / float(k)
    residual = sum((t - ratio * v) ** 2 for t, v in pairs) / (k - 1)
    half = (_T975[k - 2] if k - 1 <= len(_T975) else 1.96) * math.sqrt(residual / k) / mean_steps
    return [round(ratio - half, 4), round(ratio + half, 4)]


def summarize(samples: list[dict[str, Any]], *, max_new_tokens: int, min_tokens: int) -> dict[str, Any]:
    """Pool the sample: ``accept_length``, ``ci95``, and whether it is big enough to be ``judged``.

    It is judged when at least 2 requests report verify steps and they generated ``min_tokens``
    tokens or more together; otherwise the figure is reported and not gated.
    """
    pairs = [(s["completion_tokens"], s["spec_verify_ct"]) for s in samples
             if s["completion_tokens"] is not None and s["spec_verify_ct"]]
    tokens = sum(t for t, _v in pairs)
    steps = sum(v for _t, v in pairs)
    ratio = round(float(tokens) / steps, 4) if steps else None
    return dict(requests=len(samples), reporting=len(pairs), max_new_tokens=max_new_tokens,
                completion_tokens=tokens, spec_verify_ct=steps, accept_length=ratio,
                ci95=_ci95(pairs, float(tokens) / steps) if steps else None,
                per_request=[round(float(t) / v, 4) for t, v in pairs],
                min_tokens=min_tokens, judged=len(pairs) >= 2 and tokens >= min_tokens)
