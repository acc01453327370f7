# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's two request shapes: raw text to ``/generate`` and chat to ``/v1/chat/completions``.

sglang_bench measures with them and sglang_probe's accept-length sample sends them (load.py).

Private to the collection: not a public API, may change without notice.

Standard library only. A chat model answers what it was trained on, messages rendered by its chat
template; raw text skips the template, so its outputs (and with them the drafter's accept length)
are not what users of the served model see. "Chat model" is decided as SGLang's own tokenizer
loading does: the model directory has a ``chat_template`` in ``tokenizer_config.json`` or a
``chat_template.jinja`` file (``chat_template_source()``).

Per chunk, ``generate_progress()`` and ``chat_progress()`` fold what the stream says into one
state (tokens so far, verify steps, finish reason), read as SGLang 0.5.23 sends them:
``/generate``: ``meta_info.completion_tokens`` / ``spec_verify_ct`` on every chunk; chat:
``choices[0].delta`` content, a ``usage`` chunk (``stream_options.include_usage``) and an
``sglext.spec_tokens_details`` chunk (asked for with ``return_spec_tokens_details``).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import time
from typing import Any, Iterator
from urllib import error as _urlerror

from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import client as _sglang_http

APIS = ("auto", "generate", "chat")
# The Kimi K2.6 model card: "Unless otherwise specified, all Kimi K2.6 experiments were conducted
# with temperature = 1.0, top-p = 1.0". Greedy decoding (0) would inflate the accept length: the
# drafter guesses the argmax far more often than a sampled token.
DEFAULT_TEMPERATURE = 1.0
CHAT_PATH = "/v1/chat/completions"


def chat_template_source(model_dir: str | None) -> tuple[str | None, str]:
    """(where the chat template is, or None; why) for the model directory ``model_dir``."""
    if not model_dir or not os.path.isdir(model_dir):
        return None, "the model directory %r is not readable on this host" % (model_dir,)
    jinja = os.path.join(model_dir, "chat_template.jinja")
    if os.path.isfile(jinja):
        return jinja, "%s exists" % jinja
    config = os.path.join(model_dir, "tokenizer_config.json")
    try:
        with open(config, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError, ValueError):
        return None, "%s has no chat_template.jinja and no readable tokenizer_config.json" % model_dir
    if isinstance(data, dict) and data.get("chat_template"):
        return config, "%s has a chat_template" % config
    return None, "%s has no chat_template" % config


def resolve_api(api: str, server: dict[str, Any]) -> tuple[str, str]:
    """(``generate`` or ``chat``, the reason) for ``api`` against the server's model."""
    if api in ("generate", "chat"):
        return api, "api=%s was asked for" % api
    model_dir = server.get("tokenizer_path") or server.get("model_path")
    source, why = chat_template_source(model_dir)
    if source:
        return "chat", "chat model: " + why
    return "generate", "no chat template: " + why


def generate_body(request: dict[str, Any], temperature: float) -> dict[str, Any]:
    return {"text": request["prompt"],
            "sampling_params": {"max_new_tokens": request["max_new_tokens"], "temperature": temperature,
                                "ignore_eos": True}}


def chat_body(request: dict[str, Any], temperature: float) -> dict[str, Any]:
    # ignore_eos: every request generates its full max_tokens, as with /generate, so both arms and
    # both APIs do the same work; the spec details are SGLang's per-request verify counts.
    return {"messages": [{"role": "user", "content": request["prompt"]}], "max_tokens": request["max_new_tokens"],
            "temperature": temperature, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}, "return_spec_tokens_details": True}


def generate_progress(chunk: dict[str, Any], state: dict[str, Any]) -> None:
    meta = chunk.get("meta_info") or {}
    tokens = meta.get("completion_tokens") or 0
    state["completion_tokens"] = tokens
    state["first_token"] = state.get("first_token") or tokens >= 1 or bool(chunk.get("text"))
    state["prompt_tokens"] = meta.get("prompt_tokens")
    state["spec_verify_ct"] = meta.get("spec_verify_ct")
    finish = meta.get("finish_reason")
    state["finish_reason"] = finish.get("type") if isinstance(finish, dict) else finish


def chat_progress(chunk: dict[str, Any], state: dict[str, Any]) -> None:
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content"):
            state["first_token"] = True
        if choice.get("finish_reason"):
            state["finish_reason"] = choice["finish_reason"]
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        state["completion_tokens"] = usage.get("completion_tokens") or 0
        state["prompt_tokens"] = usage.get("prompt_tokens")
    details = (chunk.get("sglext") or {}).get("spec_tokens_details")
    if isinstance(details, list):
        details = details[0] if details else None
    if isinstance(details, dict):
        state["spec_verify_ct"] = details.get("spec_verify_ct")


def stream_chat(base_url: str, body: dict[str, Any], *, api_key: str | None = None, timeout: float = 600.0,
                validate_certs: bool = True, ca_path: str | None = None) -> Iterator[tuple[float, Any]]:
    """``POST /v1/chat/completions`` streaming, as _sglang_http.stream_generate reads ``/generate``."""
    base_url = _sglang_http.validate_base_url(base_url)
    req = _sglang_http._request(base_url, CHAT_PATH, "POST", body, api_key, stream=True)
    try:
        resp = _sglang_http._opener(base_url, validate_certs, ca_path).open(req, timeout=timeout)
    except _urlerror.HTTPError as exc:
        try:
            data = _sglang_http._decode_error_body(exc.read())
        except (OSError, socket.timeout):
            data = None
        finally:
            exc.close()
        detail = _sglang_http.error_text(data)
        raise _sglang_http.SGLangHTTPError(_secrets.mask("POST %s%s answered %d%s" % (
            base_url, CHAT_PATH, exc.code, ": " + detail if detail else ""), api_key), exc.code, CHAT_PATH)
    except (_urlerror.URLError, OSError, socket.timeout, ssl.SSLError, http.client.HTTPException) as exc:
        raise _sglang_http.SGLangHTTPError("POST %s%s: %s" % (base_url, CHAT_PATH, _sglang_http._reason(exc)),
                                           None, CHAT_PATH)
    with resp:
        for when, chunk in _events(resp, base_url, timeout):
            yield when, chunk


def _events(resp: Any, base_url: str, timeout: float) -> Iterator[tuple[float, Any]]:
    while True:
        try:
            line = resp.readline()
        except (OSError, socket.timeout, http.client.HTTPException) as exc:
            raise _sglang_http.SGLangHTTPError("POST %s%s stream: %s (read timeout %ss)"
                                               % (base_url, CHAT_PATH, _sglang_http._reason(exc), timeout),
                                               resp.status, CHAT_PATH)
        now = time.monotonic()
        if not line:
            raise _sglang_http.SGLangHTTPError("POST %s%s: the stream ended without 'data: [DONE]' (server stopped or "
                                               "restarted mid-request?)" % (base_url, CHAT_PATH), resp.status, CHAT_PATH)
        line = line.strip()
        if not line.startswith(b"data:"):
            continue  # blank separators, "event: sglext_ids" names, comments
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return
        try:
            chunk = json.loads(payload.decode("utf-8"))
        except ValueError:
            raise _sglang_http.SGLangHTTPError("POST %s%s stream: an event that is not JSON: %r"
                                               % (base_url, CHAT_PATH, payload[:300]), resp.status, CHAT_PATH)
        if isinstance(chunk, dict) and "error" in chunk and "choices" not in chunk:
            raise _sglang_http.SGLangHTTPError("POST %s%s stream: the server reported an error: %s"
                                               % (base_url, CHAT_PATH, _sglang_http.error_text(chunk)[:300]),
                                               resp.status, CHAT_PATH)
        yield now, chunk
