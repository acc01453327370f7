# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_router_worker: one worker present in (or absent from) every router, the roll's step around a restart.

Private to the collection: not a public API, may change without notice. Standard library only.

present: POST the worker to each router that does not list it, then wait until every router lists it
with ``is_healthy: true``. absent: refuse when a router would keep fewer than ``min_healthy`` other
healthy workers (before anything is removed), DELETE it from each router that lists it, wait until none
does, then (``drain``) wait until the worker's own ``/v1/loads`` reads 0. The worker is found by its URL
on every call (api.py: its id changes on every add).
"""
from __future__ import annotations

import time

from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.module_utils._router import api as _api
from ansible_collections.gpufleet.llm.plugins.module_utils._router import drain as _drain
from ansible_collections.gpufleet.llm.plugins.module_utils._router import urls as _urls

# Seconds between two looks at the routers (or at /v1/loads): every look is one small GET.
INTERVAL = 1.0
ROUTER_EXAMPLE = "http://10.0.4.10:30080"


def argument_spec():
    return dict(
        routers=dict(type="list", elements="str", required=True),
        router_api_key=dict(type="str", no_log=True),
        url=dict(type="str", required=True),
        api_key=dict(type="str", no_log=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        wait=dict(type="bool", default=True),
        timeout=dict(type="float", default=600),
        min_healthy=dict(type="int", default=1),
        drain=dict(type="bool", default=False),
        drain_url=dict(type="str"),
        drain_timeout=dict(type="float", default=600),
        validate_certs=dict(type="bool", default=True),
        ca_path=dict(type="path"),
    )


def _options(params):
    routers = [_urls.clean(r, "routers[%d]" % i, ROUTER_EXAMPLE) for i, r in enumerate(params.get("routers") or [])]
    if not routers:
        raise ModuleFailure("routers is empty: give the base URL of every router, for example [%s] (the role builds it "
                            "from the hosts of sglang_router_group)" % ROUTER_EXAMPLE)
    dupes = sorted(set(r for r in routers if sum(_urls.same_worker(r, o) for o in routers) > 1))
    if dupes:
        raise ModuleFailure("routers lists %s more than once; give each router once" % ", ".join(dupes))
    url = _urls.clean(params.get("url"), "url")
    drain_url = _urls.clean(params.get("drain_url"), "drain_url") if params.get("drain_url") else url
    for name in ("timeout", "drain_timeout", "min_healthy"):
        if params.get(name) is not None and params[name] < 0:
            raise ModuleFailure("%s must be 0 or more (got %s)" % (name, params[name]))
    return dict(params, routers=routers, url=url, drain_url=drain_url)


def _merged(*parts):
    """One dict of ``parts``, later ones winning (a failure's fields over the partial result)."""
    out = {}
    for part in parts:
        out.update(part)
    return out


def _mine(entries, url):
    return [w for w in entries if _urls.same_worker(w.get("url"), url)]


def _healthy(entries):
    return [w for w in entries if w.get("is_healthy") is True]


def _row(router, entries, url):
    mine = _mine(entries, url)
    return dict(url=router, worker_id=mine[0].get("id") if mine else None, listed=bool(mine),
                is_healthy=bool(_healthy(mine)), healthy_workers=len(_healthy(entries)))


def _rows(opts, listings):
    return [_row(r, listings[r], opts["url"]) for r in opts["routers"]]


def _list_all(client, routers):
    return dict((r, _api.list_workers(client, r)) for r in routers)


def _wait_for(client, opts, done, clock, sleep):
    """Re-list every router until ``done(entries)`` holds for each, or ``opts['timeout']``: after 0.1 s, then
    twice as long each time up to INTERVAL (a removal usually shows at once, a registration within a second or so).

    Returns (listings, waited, ok)."""
    start = clock()
    pause = INTERVAL / 10
    while True:
        listings = _list_all(client, opts["routers"])
        elapsed = clock() - start
        if all(done(listings[r]) for r in opts["routers"]) or elapsed >= opts["timeout"]:
            return listings, round(elapsed, 3), all(done(listings[r]) for r in opts["routers"])
        sleep(max(0.0, min(pause, opts["timeout"] - elapsed)))
        pause = min(INTERVAL, pause * 2)


def _present(client, opts, listings, check_mode, clock, sleep):
    url = opts["url"]
    missing = [r for r in opts["routers"] if not _mine(listings[r], url)]
    result = dict(changed=bool(missing), added_to=missing, removed_from=[], waited=0.0, drained=False, loads=None)
    if check_mode:
        return dict(result, routers=_rows(opts, listings))
    queued = {}
    for router in missing:
        try:
            queued[router] = _api.add_worker(client, router, url)
        except ModuleFailure as exc:
            raise ModuleFailure(exc.msg, **_merged(result, dict(changed=bool(queued), added_to=list(queued),
                                                                routers=_rows(opts, listings)), exc.fields))
    if not opts["wait"]:
        return dict(result, routers=_rows(opts, _list_all(client, opts["routers"])))
    listings, waited, ok = _wait_for(client, opts, lambda entries: bool(_healthy(_mine(entries, url))), clock, sleep)
    result.update(waited=waited, routers=_rows(opts, listings))
    if not ok:
        raise ModuleFailure(_not_healthy_msg(client, opts, listings, queued), **result)
    return result


def _not_healthy_msg(client, opts, listings, queued):
    url, parts = opts["url"], []
    for router in opts["routers"]:
        mine = _mine(listings[router], url)
        if _healthy(mine):
            continue
        if mine:
            parts.append("%s lists it with is_healthy false" % router)
            continue
        job = _api.job_status(client, router, queued[router]) if queued.get(router) else None
        state = ("registration %s%s" % (job.get("status"), ": %s" % job["message"] if job.get("message") else "")
                 if job else "no registration under way")
        parts.append("%s does not list it (%s)" % (router, state))
    return client.mask(
        "worker %s is not healthy in every router within %ss: %s. A router registers a worker only once the worker's "
        "/health answers 2xx at url as the router's host reaches it (with api_key when the server has an api-key): check "
        "that the server runs and is healthy, that url is its address as seen from the router host, and the router's "
        "journal (journalctl -u sglang-router); a queued registration goes on in the router until its "
        "--worker-startup-timeout-secs, raise timeout to wait longer" % (url, _drain.fmt(opts["timeout"]), "; ".join(parts)))


def _refusals(opts, listings):
    """Why removing url would leave a router below min_healthy (nothing removed yet), one text per router."""
    out = []
    for router in opts["routers"]:
        entries = listings[router]
        if not _mine(entries, opts["url"]):
            continue
        others = [w for w in _healthy(entries) if not _urls.same_worker(w.get("url"), opts["url"])]
        if len(others) < opts["min_healthy"]:
            out.append("router %s would keep %d other healthy worker(s) (%s), fewer than min_healthy=%d"
                       % (router, len(others), ", ".join(str(w.get("url")) for w in others) or "none", opts["min_healthy"]))
    return out


def _absent(client, opts, listings, check_mode, clock, sleep, warn):
    url = opts["url"]
    holding = [r for r in opts["routers"] if _mine(listings[r], url)]
    result = dict(changed=bool(holding), added_to=[], removed_from=holding, waited=0.0, drained=False, loads=None,
                  routers=_rows(opts, listings))
    refusals = _refusals(opts, listings)
    if refusals:
        raise ModuleFailure(
            "refusing to take %s out of the routers, nothing was changed: %s. Bring another worker up (or wait until the "
            "others are healthy), or lower min_healthy (the role's sglang_router_min_healthy; 0 allows removing the last "
            "healthy worker, and the routers then answer 503 until it is back)" % (url, "; ".join(refusals)),
            **_merged(result, dict(changed=False, removed_from=[])))
    missing = [r for r in opts["routers"] if r not in holding]
    if missing and opts["drain"] and warn:
        # the roll's call before a restart: a router that does not list the running server routes nothing
        # to it, so the restart is safe there, but something other than the roll took it out (or never added it)
        warn("%s is not listed by %s: nothing to take out of %s (the router dropped it, or it was never added); "
             "the roll adds it back after its restart. See the router's journal (journalctl -u sglang-router)"
             % (url, ", ".join(missing), "it" if len(missing) == 1 else "them"))
    if check_mode:
        return result
    done = []
    for router in holding:
        try:
            for entry in _mine(listings[router], url):
                _api.remove_worker(client, router, entry.get("id"))
        except ModuleFailure as exc:
            raise ModuleFailure(exc.msg, **_merged(result, dict(changed=bool(done), removed_from=done), exc.fields))
        done.append(router)
    if opts["wait"]:
        listings, waited, ok = _wait_for(client, opts, lambda entries: not _mine(entries, url), clock, sleep)
        result.update(waited=waited, routers=_rows(opts, listings))
        if not ok:
            still = [r for r in opts["routers"] if _mine(listings[r], url)]
            raise ModuleFailure("worker %s is still listed by %s %ss after its removal; see the router's journal "
                                "(journalctl -u sglang-router)" % (url, ", ".join(still), _drain.fmt(opts["timeout"])), **result)
    else:
        result["routers"] = _rows(opts, _list_all(client, opts["routers"]))
    if opts["drain"]:
        try:
            result["loads"] = _drain.wait_drained(client, opts["drain_url"], timeout=opts["drain_timeout"],
                                                  interval=INTERVAL, clock=clock, sleep=sleep, warn=warn)
        except ModuleFailure as exc:
            raise ModuleFailure(exc.msg, **_merged(result, exc.fields))
        result["drained"] = True
    return result


def run(params, *, check_mode=False, warn=None, clock=time.monotonic, sleep=time.sleep):
    """The module's result (see its RETURN); ModuleFailure with the partial result on every failure."""
    opts = _options(params)
    client = _api.Client(router_api_key=params.get("router_api_key"), api_key=params.get("api_key"),
                         validate_certs=params.get("validate_certs", True), ca_path=params.get("ca_path"))
    if opts["drain"] and opts["state"] == "present" and warn:
        warn("drain applies to state=absent only (it waits for the worker to finish its requests after its removal); "
             "ignored for state=present")
    try:
        listings = _list_all(client, opts["routers"])
        if opts["state"] == "present":
            result = _present(client, opts, listings, check_mode, clock, sleep)
        else:
            result = _absent(client, opts, listings, check_mode, clock, sleep, warn)
    except ModuleFailure as exc:
        raise ModuleFailure(client.mask(exc.msg), **_merged(dict(changed=False, url=opts["url"]), exc.fields))
    result.update(url=opts["url"], state=opts["state"])
    return result
