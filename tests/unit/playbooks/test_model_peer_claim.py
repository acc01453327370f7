# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The model role's "started" claim (issue 21 item 5c), as it ships: peers_start.yml and model.yml's claim
task (with the Fetch block's module_defaults) run by a real ansible-playbook over three local hosts, each
with its own models root; the real hf_snapshot module writes the claims. Then a real fetch with the
arguments the play gave gpu1, the other hosts' trees behind loopback peer servers.

gpu2's ``.gpufleet`` is a symlink and gpu3's lock is held by another run: both fail at the claim, before
any host fetches, and gpu1's fetch counts them gone at once although ``peer_wait_timeout`` is huge (a
fetch that waited for them would never return). The fetch runs as a host without Hub access (``hub:
false``), so no Hub is needed: it fails at once, each of their files saying its owner's stage never
started (with Hub access the Hub would serve them: test_snapshot_peer_run.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.tests.unit.playbooks.test_model_peers_start import COMMIT, LISTING, ROOT, _shipped_tasks
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import peer_server

pytestmark = pytest.mark.playbook  # runs a real ansible-playbook (tests/unit/conftest.py)

MODEL_YML = os.path.join(ROOT, "roles", "model", "tasks", "model.yml")
CLAIM = "Tell the peers this host's fetch starts, {{ _model_item.name }}"
HOSTS = ("gpu1", "gpu2", "gpu3")


def _claim_tasks():
    """model.yml's Fetch block holding only its claim task: the same module_defaults as the fetch."""
    with open(MODEL_YML) as handle:
        stage = yaml.safe_load(handle)[0]
    fetch = [t for t in stage["block"] if t["name"] == "Fetch"][0]
    claim = [t for t in fetch["block"] if t["name"] == CLAIM]
    assert len(claim) == 1
    names = [t["name"] for t in fetch["block"]]
    assert names.index(CLAIM) == names.index("Start fetching {{ _model_item.name }}") - 1
    return [dict(fetch, block=claim)]


def _status_of(dest):
    with open(os.path.join(str(dest), ".gpufleet", "peer-status.json")) as handle:
        return json.load(handle)


def _play(tmp_path, commit, listing):
    inventory = "\n".join(
        "%s ansible_connection=local ansible_host=10.9.0.%d model_peer_hub_access=true ansible_python_interpreter=%s "
        "model_models_root=%s" % (h, i + 1, sys.executable, tmp_path / h) for i, h in enumerate(HOSTS))
    (tmp_path / "inventory.ini").write_text(inventory + "\n")
    with open(os.path.join(ROOT, "roles", "model", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    with open(os.path.join(ROOT, "roles", "model", "vars", "main.yml")) as handle:
        role_vars = yaml.safe_load(handle)
    play_vars = {k: v for k, v in defaults.items() if k not in ("model_peer_hub_access", "model_models_root")}
    play_vars.update({k: v for k, v in role_vars.items() if k.startswith("_model_hf_snapshot")})
    item = {"name": "kimi", "repo_id": "lab/kimi"}
    play_vars.update({
        "model_fetch_timeout": 86400,
        "model_peer_wait_timeout": 10 ** 6,
        "model_models": [item],
        "model_pinned_commits": {"kimi": commit},
        "model_pinned_resolvers": {"kimi": "gpu1"},
        "model_pinned_listings": {"kimi": listing},
        "model_pinned_token_required": {"kimi": False},
        "model_distribution": "peers",
        "model_tools_venv": sys.prefix,
        "_model_item": item,
        "_model_commit": commit,
        "_model_link_from": [],
        "_model_commit_dir": "{{ model_models_root }}/kimi/%s" % commit,
        "out_dir": str(tmp_path),
    })
    stand_in = {"name": "Stand in for the peer server's result",
                "ansible.builtin.set_fact": {"__model_peer_serve": {
                    "url": "http://{{ model_peer_address }}:{{ model_peer_port }}/", "unit": "gpufleet-peer-models.service"}}}
    write = {"name": "Write what the host got", "no_log": True, "ansible.builtin.copy": {
        "content": "{{ {'args': _model_peer_args, 'run': _model_peer_run} | to_json }}",
        "dest": "{{ out_dir }}/{{ inventory_hostname }}.json", "mode": "0600"}}
    playbook = [{"hosts": "all", "gather_facts": False, "vars": play_vars,
                 "tasks": [stand_in] + _shipped_tasks() + [write] + _claim_tasks()}]
    (tmp_path / "play.yml").write_text(json.dumps(playbook))
    collections = os.path.dirname(os.path.dirname(os.path.dirname(ROOT)))
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_COLLECTIONS_PATH=collections)
    argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", str(tmp_path / "inventory.ini"), str(tmp_path / "play.yml")]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


def test_hosts_that_fail_their_claim_are_gone_for_the_others_at_once(tmp_path):
    commit, listing = COMMIT, LISTING
    dests = {h: tmp_path / h / "kimi" / commit for h in HOSTS}
    # gpu2: a symlinked .gpufleet (nothing may be written through it)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dests["gpu2"].mkdir(parents=True)
    os.symlink(str(elsewhere), str(dests["gpu2"] / ".gpufleet"))
    # gpu3: another run holds its lock for the whole play
    dests["gpu3"].mkdir(parents=True)
    with _manifest.DirLock(str(dests["gpu3"])):
        proc = _play(tmp_path, commit, listing)
    out = proc.stdout + proc.stderr
    got = {h: json.loads((tmp_path / (h + ".json")).read_text()) for h in HOSTS}
    runs = {g["run"] for g in got.values()}
    assert len(runs) == 1, out
    run_id = runs.pop()
    # every host's fetch carries the run id
    assert {g["args"]["kimi"]["peer_run"] for g in got.values()} == {run_id}
    # gpu1 claimed; gpu2 and gpu3 failed their claim, naming why, and wrote nothing
    assert _status_of(dests["gpu1"]) == {"state": "started", "failed": [], "run": run_id}, out
    assert "is a symlink" in out and "locked by another run" in out and "its status stays that run's" in out, out
    assert "gpu1" in out and proc.returncode != 0
    assert os.listdir(str(elsewhere)) == [] and not (dests["gpu3"] / ".gpufleet" / "peer-status.json").exists()
    # gpu1 fetches with what the play gave it, the other hosts' trees behind loopback peer servers; as a
    # host without Hub access, only their shares
    args = dict(got["gpu1"]["args"]["kimi"])
    theirs = {p["name"]: set(p["share"]) for p in args["peers"]}
    assert theirs["gpu2"] and theirs["gpu3"]  # each has a share gpu1 would otherwise wait for
    servers = {h: peer_server.PeerServer(dests[h], args["peer_token"], host="127.0.0.%d" % (i + 3))
               for i, h in enumerate(("gpu2", "gpu3"))}
    try:
        args["peers"] = [dict(p, url=servers[p["name"]].url) for p in args["peers"]]
        args.update(hub=False, hub_share=[], listing=[e for e in listing if e["path"] in theirs["gpu2"] | theirs["gpu3"]])
        assert args["peer_wait_timeout"] == 10 ** 6
        with pytest.raises(_snapshot.SnapshotError) as err:
            _snapshot.snapshot(dict(args, repo_id="lab/kimi", revision=commit, dest=str(dests["gpu1"]), min_free_bytes=0,
                                    retry_wait=0))
    finally:
        for server in servers.values():
            server.stop()
    failed = err.value.details.get("failed") or {}
    assert sorted(failed) == sorted(theirs["gpu2"] | theirs["gpu3"]), err.value.msg
    for owner in ("gpu2", "gpu3"):
        for path in theirs[owner]:
            assert "its owner %s is its stage of this run never started (no peer-status of run %s)" % (owner, run_id) \
                in failed[path], failed[path]
    # one status read each: gone at once, never waited for
    for server in servers.values():
        assert [e["status"] for e in server.log if e["path"].endswith("peer-status.json")] == [404]
    assert _status_of(dests["gpu1"])["run"] == run_id
