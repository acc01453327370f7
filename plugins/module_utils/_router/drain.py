# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Wait until a worker the routers no longer send to has finished what it holds (``/v1/loads`` at 0).

Private to the collection: not a public API, may change without notice. Standard library only.

Removing a worker from sglang-router does not drain it: requests already sent run on, nothing new
arrives. SGLang's ``/v1/loads`` counts the requests its schedulers hold (running and waiting), read
from a snapshot they publish as they step; a request still in the HTTP and tokenizer layer, or a
finished one whose last chunk is still being written, is not in it. So one reading of 0 is not
enough: the load must read 0 on ``SETTLE`` polls in a row, ``interval`` seconds apart.
"""
from __future__ import annotations

import time

from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.module_utils._router import api as _api

SETTLE = 2


def _summary(last, polls, waited, reachable=True):
    out = dict(last or {"running": None, "waiting": None, "dp_ranks": None})
    out.update(polls=polls, waited=round(waited, 3), reachable=reachable)
    return out


def wait_drained(client, base, *, timeout, interval, clock=time.monotonic, sleep=time.sleep, warn=None):
    """Poll ``base``/v1/loads until running + waiting is 0 on SETTLE polls in a row: returns the summary.

    A server that refuses the connection holds no request (it is not running): drained, with a warning.
    A timed-out or failing poll is retried until ``timeout``; then ModuleFailure with the last figures.
    """
    start = clock()
    polls = streak = 0
    last = last_error = None
    while True:
        polls += 1
        try:
            last = _api.read_loads(client, base)
        except _api.Unreachable as exc:
            if exc.refused:
                if warn:
                    warn("drain: nothing answers at %s (connection refused): a server that is not running holds no "
                         "request, so there is nothing to drain; if that is not the server, fix drain_url" % base)
                return _summary(None, polls, clock() - start, reachable=False)
            last_error, streak = exc.msg, 0
        else:
            last_error = None
            streak = streak + 1 if last["running"] + last["waiting"] == 0 else 0
            if streak >= SETTLE:
                return _summary(last, polls, clock() - start)
        elapsed = clock() - start
        if elapsed >= timeout:
            now = ("last error: %s" % last_error if last_error else
                   "%d running and %d waiting" % (last["running"], last["waiting"]) if last else "no answer")
            raise ModuleFailure(
                "drain: %s/v1/loads did not reach 0 requests within %ss (%s); the worker is out of every router and "
                "holds its requests until they finish: raise drain_timeout (sglang_drain_timeout) to at least the "
                "longest generation you allow, or look at what runs there" % (base, fmt(timeout), now),
                loads=_summary(last, polls, elapsed), drained=False)
        sleep(max(0.0, min(interval, timeout - elapsed)))


def fmt(seconds):
    return ("%.1f" % seconds).rstrip("0").rstrip(".")
