# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What _router/api.py relies on, held against the REAL sglang-router 0.3.2 on loopback (fixtures/router_env.py)
with the lab's SGLang STAND-IN as worker (not SGLang: no GPU here; it answers /health, /model_info and
/server_info as the router's registration reads them). If a router release changes one of these, this fails
before the module misbehaves on a fleet."""
from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.module_utils._router import api
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.router_env import (  # noqa: F401 pylint: disable=unused-import
    until, ADMIN_KEY, ROUTER_KEY, USER_KEY, WORKER_KEY, fake_worker_factory, router_factory, router_python)
from ansible_collections.gpufleet.llm.tests.unit.plugins.standin import standin_factory  # noqa: F401 pylint: disable=unused-import


def test_add_list_remove_as_the_module_expects(router_factory, standin_factory, golden):
    router = router_factory()
    server = standin_factory(os.path.join(golden, "target"), api_key=WORKER_KEY, wait="ready")
    client = api.Client(router_api_key=ROUTER_KEY, api_key=WORKER_KEY)
    assert api.list_workers(client, router.url) == []
    status, headers, data = client.call(router.url, "/workers", method="POST", body={"url": server.url, "api_key": WORKER_KEY},
                                        token=ROUTER_KEY)
    assert status == 202 and data["status"] == "accepted"
    assert headers["Location"] == "/workers/%s" % data["worker_id"] == data["location"]
    listed = until(lambda: [w for w in api.list_workers(client, router.url) if w["is_healthy"]], "healthy worker")
    assert [(w["id"], w["url"]) for w in listed] == [(data["worker_id"], server.url)]
    assert WORKER_KEY not in str(listed)  # the router never shows a worker's key
    # the same URL posted again is refused in the background ("already exists"): still one worker
    again = api.add_worker(client, router.url, server.url)
    assert again == data["worker_id"]
    assert len(api.list_workers(client, router.url)) == 1
    # DELETE answers 202 (the removal is queued: the worker leaves the listing when the router's job ran,
    # usually by the next listing, not always: seen under load); once it is gone a second DELETE is a 404
    assert api.remove_worker(client, router.url, data["worker_id"]) is True
    until(lambda: api.list_workers(client, router.url) == [], "removal")
    assert api.remove_worker(client, router.url, data["worker_id"]) is False
    # a new add is a new id: ids are never kept
    new_id = api.add_worker(client, router.url, server.url)
    assert new_id != data["worker_id"]
    until(lambda: api.list_workers(client, router.url), "re-added worker")
    assert WORKER_KEY not in router.log() and ROUTER_KEY not in router.log()


def test_a_trailing_slash_is_another_worker_to_the_router(router_factory, standin_factory, golden):
    router = router_factory()
    server = standin_factory(os.path.join(golden, "target"), wait="ready")
    client = api.Client(router_api_key=ROUTER_KEY)
    api.add_worker(client, router.url, server.url)
    api.add_worker(client, router.url, server.url + "/")
    listed = until(lambda: len(api.list_workers(client, router.url)) == 2 and api.list_workers(client, router.url),
                   "two spellings listed")
    assert sorted(w["url"] for w in listed) == [server.url, server.url + "/"]


def test_a_never_healthy_worker_is_not_listed_but_has_a_job_status(router_factory, standin_factory, golden):
    # a long --worker-startup-timeout-secs, so the registration is still running however slow this machine is
    router = router_factory(startup_timeout=300)
    server = standin_factory(os.path.join(golden, "target"), env={"GPUFLEET_STANDIN_NEVER_READY": "1"}, wait="answering")
    client = api.Client(router_api_key=ROUTER_KEY)
    worker_id = api.add_worker(client, router.url, server.url)
    # the job is "pending" until the router's job queue takes it up (seen once in CI, under load), then
    # "processing" for as long as its health check keeps failing
    job = api.job_status(client, router.url, worker_id)
    assert job["job_type"] == "AddWorker" and job["status"] in ("pending", "processing")

    def taken_up():
        got = api.job_status(client, router.url, worker_id)
        return got if got and got.get("status") != "pending" else None

    job = until(taken_up, "registration taken up")
    assert job["job_type"] == "AddWorker" and job["status"] == "processing"
    assert api.list_workers(client, router.url) == []


def test_a_worker_that_stops_answering_stays_listed_unhealthy(router_factory, fake_worker_factory):
    router = router_factory()
    fake = fake_worker_factory()
    client = api.Client(router_api_key=ROUTER_KEY)
    api.add_worker(client, router.url, fake.url)
    until(lambda: [w for w in api.list_workers(client, router.url) if w["is_healthy"]], "healthy fake")
    fake.stop()
    listed = until(lambda: [w for w in api.list_workers(client, router.url) if not w["is_healthy"]], "unhealthy listing")
    assert [w["url"] for w in listed] == [fake.url]


@pytest.mark.parametrize("key, status, words", [
    (None, 401, ["set router_api_key to the router's --api-key"]),
    ("sk-wrong-key-000", 401, ["router_api_key is not a key this router accepts"]),
])
def test_workers_api_needs_the_router_key(router_factory, key, status, words):
    router = router_factory()
    with pytest.raises(ModuleFailure) as exc:
        api.list_workers(api.Client(router_api_key=key), router.url)
    assert "answered %d to GET /workers" % status in exc.value.msg
    for word in words:
        assert word in exc.value.msg
    assert "sk-wrong-key-000" not in exc.value.msg


def test_control_plane_keys_take_over_the_workers_api(router_factory):
    router = router_factory(extra=["--control-plane-api-keys", "k1:ops:admin:%s" % ADMIN_KEY, "k2:ro:user:%s" % USER_KEY])
    with pytest.raises(ModuleFailure) as exc:
        api.list_workers(api.Client(router_api_key=ROUTER_KEY), router.url)
    assert "answered 401" in exc.value.msg
    with pytest.raises(ModuleFailure) as exc:
        api.list_workers(api.Client(router_api_key=USER_KEY), router.url)
    assert "answered 403" in exc.value.msg and "admin" in exc.value.msg
    assert api.list_workers(api.Client(router_api_key=ADMIN_KEY), router.url) == []


def test_read_loads_in_sglang_0523_shape(fake_worker_factory):
    fake = fake_worker_factory(loads=[(3, 2)], api_key=WORKER_KEY)
    assert api.read_loads(api.Client(api_key=WORKER_KEY), fake.url) == {"running": 3, "waiting": 2, "dp_ranks": 1}
    assert fake.requests[-1] == ("/v1/loads?include=core", "Bearer %s" % WORKER_KEY)
    with pytest.raises(ModuleFailure) as exc:
        api.read_loads(api.Client(), fake.url)
    assert "answered 401" in exc.value.msg and "set api_key" in exc.value.msg
    missing = fake_worker_factory(loads_status=404)
    with pytest.raises(ModuleFailure) as exc:
        api.read_loads(api.Client(), missing.url)
    assert "404" in exc.value.msg and "drain=false" in exc.value.msg
