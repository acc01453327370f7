# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_router_worker module end to end, in-process, against the REAL sglang-router 0.3.2 on loopback
(fixtures/router_env.py: short health settings, so registrations and failures happen within seconds) with
workers that are the lab's SGLang STAND-IN (not SGLang: no GPU here) or, where a worker's behaviour must be
forced (its /v1/loads), router_env's FakeWorker."""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpufleet.llm.plugins.modules import sglang_router_worker
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.router_env import (  # noqa: F401 pylint: disable=unused-import
    until, ROUTER_KEY, WORKER_KEY, fake_worker_factory, router_factory, router_python)
from ansible_collections.gpufleet.llm.tests.unit.plugins.modules.module_runner import run_module
from ansible_collections.gpufleet.llm.tests.unit.plugins.standin import free_port, standin_factory  # noqa: F401 pylint: disable=unused-import


def run(capsys, args, check_mode=False):
    """The result; neither key is ever printed (results, messages, warnings, invocation)."""
    res = run_module(sglang_router_worker.main, capsys, args, check_mode=check_mode, forbidden=ROUTER_KEY)
    assert WORKER_KEY not in json.dumps(res)
    return res


def _args(routers, url, **kw):
    args = dict(routers=[r.url for r in routers], router_api_key=ROUTER_KEY, url=url, api_key=WORKER_KEY, timeout=30)
    args.update(kw)
    return args


@pytest.fixture
def server(standin_factory, golden):
    return standin_factory(os.path.join(golden, "target"), api_key=WORKER_KEY, wait="ready")


def test_add_then_idempotent(capsys, router_factory, server):
    router = router_factory()
    res = run(capsys, _args([router], server.url + "/"))
    assert res["_rc"] == 0, res.get("msg")
    assert res["changed"] is True and res["added_to"] == [router.url] and res["url"] == server.url
    row, = res["routers"]
    assert row["url"] == router.url and row["listed"] is True and row["is_healthy"] is True
    assert row["healthy_workers"] == 1 and row["worker_id"] == router.workers()[0]["id"]
    assert [w["url"] for w in router.workers()] == [server.url]  # posted without the trailing slash
    again = run(capsys, _args([router], server.url))
    assert again["_rc"] == 0 and again["changed"] is False and again["added_to"] == []
    assert again["routers"][0]["worker_id"] == row["worker_id"]
    assert len(router.workers()) == 1


def test_two_routers_only_the_missing_one_is_changed(capsys, router_factory, server):
    first, second = router_factory(), router_factory()
    assert run(capsys, _args([first, second], server.url))["changed"] is True
    assert [len(first.workers()), len(second.workers())] == [1, 1]
    status, _data = second.call("DELETE", "/workers/%s" % second.workers()[0]["id"])
    assert status == 202
    # the removal is queued (202): the worker leaves the listing when the router's job ran, not always at once
    until(lambda: second.workers() == [], "the removal from the second router")
    res = run(capsys, _args([first, second], server.url))
    assert res["changed"] is True and res["added_to"] == [second.url]
    assert [r["is_healthy"] for r in res["routers"]] == [True, True]


def test_remove_waits_until_gone_then_idempotent(capsys, router_factory, server, standin_factory, golden):
    router = router_factory()
    other = standin_factory(os.path.join(golden, "target"), api_key=WORKER_KEY, wait="ready")
    assert run(capsys, _args([router], other.url))["changed"] is True
    assert run(capsys, _args([router], server.url))["changed"] is True
    res = run(capsys, _args([router], server.url, state="absent"))
    assert res["_rc"] == 0, res.get("msg")
    assert res["changed"] is True and res["removed_from"] == [router.url]
    assert res["routers"][0]["listed"] is False and res["routers"][0]["healthy_workers"] == 1
    assert [w["url"] for w in router.workers()] == [other.url]
    assert res["drained"] is False and res["loads"] is None
    again = run(capsys, _args([router], server.url, state="absent"))
    assert again["changed"] is False and again["removed_from"] == []


def test_min_healthy_refuses_and_changes_nothing(capsys, router_factory, server, standin_factory, golden):
    router = router_factory()
    other = standin_factory(os.path.join(golden, "target"), api_key=WORKER_KEY, wait="ready")
    for url in (server.url, other.url):
        assert run(capsys, _args([router], url))["_rc"] == 0
    res = run(capsys, _args([router], server.url, state="absent", min_healthy=2))
    assert res["_rc"] == 1 and res["changed"] is False and res["removed_from"] == []
    msg = res["msg"]
    assert "refusing to take %s out" % server.url in msg and "nothing was changed" in msg
    assert "router %s would keep 1 other healthy worker(s) (%s)" % (router.url, other.url) in msg
    assert "min_healthy=2" in msg and "sglang_router_min_healthy" in msg
    assert sorted(w["url"] for w in router.workers()) == sorted([server.url, other.url])
    # the last healthy worker: refused by the default, allowed with 0
    assert run(capsys, _args([router], other.url, state="absent"))["changed"] is True
    res = run(capsys, _args([router], server.url, state="absent"))
    assert res["_rc"] == 1 and "would keep 0 other healthy worker(s) (none), fewer than min_healthy=1" in res["msg"]
    assert run(capsys, _args([router], server.url, state="absent", min_healthy=0))["changed"] is True
    assert router.workers() == []


def test_check_mode_reports_and_changes_nothing(capsys, router_factory, server):
    router = router_factory()
    res = run(capsys, _args([router], server.url), check_mode=True)
    assert res["_rc"] == 0 and res["changed"] is True and res["added_to"] == [router.url] and res["waited"] == 0
    assert router.workers() == []
    run(capsys, _args([router], server.url))
    res = run(capsys, _args([router], server.url, state="absent", min_healthy=0, drain=True), check_mode=True)
    assert res["changed"] is True and res["removed_from"] == [router.url] and res["drained"] is False
    assert len(router.workers()) == 1
    res = run(capsys, _args([router], server.url, state="absent"), check_mode=True)  # the refusal applies in check mode
    assert res["_rc"] == 1 and "min_healthy=1" in res["msg"]


def test_a_worker_that_never_gets_healthy_times_out(capsys, router_factory, standin_factory, golden):
    # the router's own registration outlives the module's 2 s wait however slow this machine is
    router = router_factory(startup_timeout=300)
    sick = standin_factory(os.path.join(golden, "target"), env={"GPUFLEET_STANDIN_NEVER_READY": "1"}, wait="answering")
    res = run(capsys, _args([router], sick.url, timeout=2))
    assert res["_rc"] == 1 and res["changed"] is True and res["waited"] >= 2
    msg = res["msg"]
    assert "worker %s is not healthy in every router within 2s" % sick.url in msg
    # the router's word for a registration it still runs: "processing", or "pending" while its job queue has not
    # taken the job up yet (seen right after an add on a loaded machine)
    assert ("%s does not list it (registration processing)" % router.url in msg
            or "%s does not list it (registration pending)" % router.url in msg), msg
    assert "/health answers 2xx" in msg and "journalctl -u sglang-router" in msg and "raise timeout" in msg


def test_no_wait_returns_once_queued(capsys, router_factory, server):
    router = router_factory()
    res = run(capsys, _args([router], server.url, wait=False))
    assert res["_rc"] == 0 and res["changed"] is True and res["waited"] == 0


def test_drain_waits_for_loads_after_the_removal(capsys, router_factory, fake_worker_factory):
    router = router_factory()
    seen = []
    fake = fake_worker_factory(loads=[(2, 1), (1, 0), (0, 0), (1, 0), (0, 0), (0, 0)], api_key=WORKER_KEY,
                               on_loads=lambda: seen.append([w["url"] for w in router.workers()]))
    assert run(capsys, _args([router], fake.url))["changed"] is True
    res = run(capsys, _args([router], fake.url, state="absent", min_healthy=0, drain=True, drain_url=fake.url + "/"))
    assert res["_rc"] == 0, res.get("msg")
    assert res["changed"] is True and res["drained"] is True
    # 0 must hold on two polls in a row: the lone 0 at poll 3 does not count
    assert res["loads"]["polls"] == 6 and fake.loads_polls() == 6
    assert res["loads"]["running"] == 0 and res["loads"]["waiting"] == 0 and res["loads"]["dp_ranks"] == 1
    assert res["loads"]["reachable"] is True
    assert seen and all(urls == [] for urls in seen)  # every /v1/loads poll came after the router let go of it
    loads_auth = set(auth for path, auth in fake.requests if path.startswith("/v1/loads"))
    assert loads_auth == {"Bearer %s" % WORKER_KEY}
    assert not any(ROUTER_KEY in (auth or "") for _path, auth in fake.requests)  # the router's key stays with the routers


def test_drain_timeout_names_what_still_runs(capsys, router_factory, fake_worker_factory):
    router = router_factory()
    fake = fake_worker_factory(loads=[(1, 3)])
    run(capsys, _args([router], fake.url, api_key=None))
    res = run(capsys, _args([router], fake.url, api_key=None, state="absent", min_healthy=0, drain=True, drain_timeout=2))
    assert res["_rc"] == 1 and res["changed"] is True and res["drained"] is False
    assert res["removed_from"] == [router.url] and router.workers() == []
    assert "did not reach 0 requests within 2s (1 running and 3 waiting)" in res["msg"]
    assert "sglang_drain_timeout" in res["msg"]
    assert res["loads"]["running"] == 1 and res["loads"]["polls"] >= 2


def test_drain_of_a_server_that_is_not_running(capsys, router_factory, fake_worker_factory):
    router = router_factory()
    fake = fake_worker_factory()
    run(capsys, _args([router], fake.url))
    gone = "http://127.0.0.1:%d" % free_port()
    res = run(capsys, _args([router], fake.url, state="absent", min_healthy=0, drain=True, drain_url=gone))
    assert res["_rc"] == 0 and res["drained"] is True and res["loads"]["reachable"] is False
    assert "nothing to drain" in json.dumps(res["warnings"])


def test_a_router_that_does_not_list_the_server_is_named_before_its_restart(capsys, router_factory, fake_worker_factory):
    """The roll's call (drain) on a server one router lists and the other does not: it leaves the first,
    and the warning names the second (which routes nothing to it, so the restart goes on)."""
    listing, other = router_factory(), router_factory()
    fake = fake_worker_factory()
    assert run(capsys, _args([listing], fake.url))["changed"] is True
    res = run(capsys, _args([listing, other], fake.url, state="absent", min_healthy=0, drain=True))
    assert res["_rc"] == 0, res.get("msg")
    assert res["removed_from"] == [listing.url] and res["drained"] is True
    warnings = json.dumps(res.get("warnings", []))
    assert "%s is not listed by %s: nothing to take out of it" % (fake.url, other.url) in warnings
    assert "journalctl -u sglang-router" in warnings and listing.url not in warnings
    # without drain (a plain removal, e.g. a re-run of state=absent) not being listed is the goal: no warning
    again = run(capsys, _args([listing, other], fake.url, state="absent", min_healthy=0))
    assert again["changed"] is False and "is not listed by" not in json.dumps(again.get("warnings", []))


def test_drain_without_v1_loads_fails_with_the_fix(capsys, router_factory, fake_worker_factory):
    router = router_factory()
    fake = fake_worker_factory(loads_status=404)
    run(capsys, _args([router], fake.url))
    res = run(capsys, _args([router], fake.url, state="absent", min_healthy=0, drain=True))
    assert res["_rc"] == 1 and res["changed"] is True and "drain=false (sglang_router_drain)" in res["msg"]


@pytest.mark.parametrize("change, words", [
    (dict(routers=[]), ["routers is empty"]),
    (dict(url="10.0.4.11:30000"), ["url '10.0.4.11:30000': the scheme must be http or https"]),
    (dict(url="http://user:%s@10.0.4.11:30000" % WORKER_KEY), ["url must not contain credentials"]),
    (dict(routers=["http://10.0.4.10:30080", "http://10.0.4.10:30080/"]), ["more than once"]),
    (dict(timeout=-1), ["timeout must be 0 or more"]),
    (dict(drain_url="ftp://x"), ["drain_url 'ftp://x'"]),
])
def test_bad_input_is_named(capsys, change, words):
    args = dict(routers=["http://127.0.0.1:%d" % free_port()], url="http://127.0.0.1:30000", router_api_key=ROUTER_KEY)
    args.update(change)
    res = run(capsys, args)
    assert res["_rc"] == 1
    for word in words:
        assert word in res["msg"]


def test_unreachable_router_and_wrong_key(capsys, router_factory, server):
    router = router_factory()
    port = free_port()
    res = run(capsys, dict(_args([router], server.url), routers=["http://127.0.0.1:%d" % port]))
    assert res["_rc"] == 1 and "connection refused" in res["msg"] and str(port) in res["msg"]
    res = run(capsys, _args([router], server.url, router_api_key="sk-not-the-router-key"))
    assert res["_rc"] == 1 and "answered 401 to GET /workers" in res["msg"] and res["changed"] is False
    assert "sk-not-the-router-key" not in json.dumps(res)
