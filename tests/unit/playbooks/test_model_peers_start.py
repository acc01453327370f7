# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""roles/model/tasks/peers_start.yml as it ships (issue 12 item 2): its checks and set_fact tasks run
by a real ansible-playbook over three local hosts, with the peer server's result (peer_serve needs a
lab host; the fleet integration target runs it for real) stood in by a fact of the same name.

What every host must get in _model_peer_args: the other hosts as peers with their URLs and shares,
its own Hub share, the pinned listing, its Hub access, one token shared by all, never printed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

import pytest

from ansible_collections.gpufleet.llm.tests.unit.fixtures import localplay

pytestmark = pytest.mark.playbook  # runs a real ansible-playbook (tests/unit/conftest.py)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PEERS_START = os.path.join(ROOT, "roles", "model", "tasks", "peers_start.yml")
COMMIT = "9a0e962393e4de9175c7df68f4731837f10a644a"
LISTING = [
    {"path": "config.json", "size": 3282, "sha256": None, "blob_id": "0" * 40},
    {"path": "model-00001-of-000002.safetensors", "size": 6000, "sha256": "a" * 64, "blob_id": "1" * 40},
    {"path": "model-00002-of-000002.safetensors", "size": 5000, "sha256": "b" * 64, "blob_id": "2" * 40},
]


def _shipped_tasks():
    """Every task of peers_start.yml except the peer server's start (it needs nginx on a lab host)."""
    with open(PEERS_START) as handle:
        tasks = yaml.safe_load(handle)
    names = [t["name"] for t in tasks]
    assert "Start the peer server" in names
    return [t for t in tasks if "gpufleet.llm.peer_serve" not in t]


def _run(tmp_path, hub_access: dict, *, listings: dict | None = None, extra: dict | None = None):
    inventory = "\n".join(
        "%s ansible_connection=local ansible_host=10.9.0.%d model_peer_hub_access=%s ansible_python_interpreter=%s"
        % (h, i + 1, str(ok).lower(), sys.executable) for i, (h, ok) in enumerate(hub_access.items()))
    (tmp_path / "inventory.ini").write_text(inventory + "\n")
    defaults = yaml.safe_load(open(os.path.join(ROOT, "roles", "model", "defaults", "main.yml")))
    play_vars = {k: v for k, v in defaults.items() if k.startswith("model_peer_") and k != "model_peer_hub_access"}
    play_vars.update({
        "model_fetch_timeout": 86400,
        "model_models": [{"name": "kimi", "repo_id": "lab/kimi"}],
        "model_pinned_commits": {"kimi": COMMIT},
        "model_pinned_resolvers": {"kimi": next(iter(hub_access))},
        "model_pinned_listings": {"kimi": LISTING} if listings is None else listings,
        "out_dir": str(tmp_path),
        "model_models_root": str(tmp_path / "models"),
    })
    play_vars.update(extra or {})
    stand_in = {"name": "Stand in for the peer server's result",
                "ansible.builtin.set_fact": {"__model_peer_serve": {
                    "url": "http://{{ model_peer_address }}:{{ model_peer_port }}/", "unit": "gpufleet-peer-models.service"}}}
    write = {"name": "Write what the host got", "no_log": True, "ansible.builtin.copy": {
        "content": "{{ {'args': _model_peer_args, 'token': _model_peer_token, 'run': _model_peer_run, "
                   "'lifetime': _model_peer_lifetime | int} | to_json }}",
        "dest": "{{ out_dir }}/{{ inventory_hostname }}.json", "mode": "0600"}}
    playbook = [{"hosts": "all", "gather_facts": False, "vars": play_vars,
                 "tasks": [stand_in] + _shipped_tasks() + [write]}]
    (tmp_path / "play.yml").write_text(json.dumps(playbook))
    collections = os.path.dirname(os.path.dirname(os.path.dirname(ROOT)))
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_COLLECTIONS_PATH=collections)
    argv = [sys.executable, "-m", "ansible.cli.playbook", "-v", "-i", str(tmp_path / "inventory.ini"), str(tmp_path / "play.yml")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    got = {h: json.loads((tmp_path / (h + ".json")).read_text()) for h in hub_access if (tmp_path / (h + ".json")).exists()}
    return proc, got


def test_every_host_gets_its_peers_share_and_one_token(tmp_path):
    proc, got = _run(tmp_path, {"gpu1": True, "gpu2": True, "gpu3": False})
    assert sorted(got) == ["gpu1", "gpu2", "gpu3"], proc.stdout[-3000:] + proc.stderr[-3000:]
    tokens = {g["token"] for g in got.values()}
    assert len(tokens) == 1
    token = tokens.pop()
    assert len(token) == 48 and token.isalnum()
    # the secret never reaches the play's output, even with -v
    assert token not in proc.stdout and token not in proc.stderr
    kimi = {h: g["args"]["kimi"] for h, g in got.items()}
    # gpu3 has no Hub access: no share, hub false; the two shards go one to each Hub host
    assert kimi["gpu1"]["hub_share"] == ["model-00001-of-000002.safetensors"]
    assert kimi["gpu2"]["hub_share"] == ["model-00002-of-000002.safetensors", "config.json"]
    assert kimi["gpu3"]["hub_share"] == [] and kimi["gpu3"]["hub"] is False
    assert kimi["gpu1"]["hub"] is True and kimi["gpu2"]["hub"] is True
    for host, args in kimi.items():
        assert args["listing"] == LISTING and args["listing_from"] == "gpu1"
        assert args["peer_token"] == token
        assert args["peer_wait_timeout"] == 3600
        assert [p["name"] for p in args["peers"]] == [h for h in ("gpu1", "gpu2", "gpu3") if h != host]
    # each peer says whether it has Hub access (hf_snapshot with hub=false waits for such a peer)
    assert kimi["gpu3"]["peers"] == [
        {"name": "gpu1", "url": "http://10.9.0.1:8370/kimi/%s/" % COMMIT, "share": ["model-00001-of-000002.safetensors"],
         "hub": True},
        {"name": "gpu2", "url": "http://10.9.0.2:8370/kimi/%s/" % COMMIT,
         "share": ["model-00002-of-000002.safetensors", "config.json"], "hub": True},
    ]
    assert kimi["gpu1"]["peers"][1] == {"name": "gpu3", "url": "http://10.9.0.3:8370/kimi/%s/" % COMMIT, "share": [],
                                        "hub": False}


def test_one_run_id_per_play_and_a_lifetime_that_covers_the_fetches(tmp_path):
    """Issue 20 item 8: the unit carries the run (one id for every host of the play, a new one per play), and
    the server lives at least as long as the fetches it serves (default: model_fetch_timeout per model + 1 h)."""
    proc, got = _run(tmp_path, {"gpu1": True, "gpu2": True})
    assert sorted(got) == ["gpu1", "gpu2"], proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = {g["run"] for g in got.values()}
    assert len(runs) == 1 and len(runs.copy().pop()) == 8 and runs.copy().pop().isalnum()
    assert {g["lifetime"] for g in got.values()} == {86400 + 3600}
    again = tmp_path / "again"
    again.mkdir()
    assert {g["run"] for g in _run(again, {"gpu1": True})[1].values()} != runs
    # the start uses both
    start = [t for t in yaml.safe_load(open(PEERS_START)) if t["name"] == "Start the peer server"][0]
    assert start["gpufleet.llm.peer_serve"]["run"] == "{{ _model_peer_run }}"
    assert start["gpufleet.llm.peer_serve"]["runtime_max_sec"] == "{{ _model_peer_lifetime }}"


def test_a_lifetime_shorter_than_a_fetch_is_refused(tmp_path):
    proc, got = _run(tmp_path, {"gpu1": True}, extra={"model_peer_runtime_max_sec": 21600})
    assert got == {}
    assert "model_peer_runtime_max_sec 21600 is shorter than model_fetch_timeout" in proc.stdout
    ok = tmp_path / "ok"
    ok.mkdir()
    assert {g["lifetime"] for g in _run(ok, {"gpu1": True}, extra={"model_peer_runtime_max_sec": 90000})[1].values()} == {90000}


def test_earlier_runs_are_cleaned_before_the_status_files_go_and_the_server_starts():
    tasks = yaml.safe_load(open(PEERS_START))
    names = [t["name"] for t in tasks]
    clean = names.index("Stop what earlier runs left (peer servers, their configs, orphaned fetch jobs)")
    assert names.index("Make the id of this run's peer servers") < clean
    assert clean < names.index("Remove the peer-status files of earlier runs") < names.index("Start the peer server")
    args = tasks[clean]["gpufleet.llm.peer_serve"]
    assert args == {"state": "cleaned", "name": "models", "run": "{{ _model_peer_run }}", "root": "{{ model_models_root }}"}
    # changed only when something was stopped: no changed_when that hides it, nothing that forces it
    assert "changed_when" not in tasks[clean]
    stop = _load("peers_stop.yml")[0]["block"][0]["gpufleet.llm.peer_serve"]
    assert stop["run"] == "{{ _model_peer_run | default(omit) }}"


def test_no_host_with_hub_access_is_refused_with_the_fix(tmp_path):
    proc, got = _run(tmp_path, {"gpu1": False, "gpu2": False})
    assert got == {}
    assert "no host of this play has model_peer_hub_access true" in proc.stdout


def test_a_model_without_its_pinned_listing_is_refused(tmp_path):
    proc, got = _run(tmp_path, {"gpu1": True}, listings={})
    assert got == {}
    assert "kimi has no pinned commit and listing" in proc.stdout
    assert "run the role's pin.yml on every host of the play" in proc.stdout


def test_stale_peer_status_files_are_removed_before_any_server_starts(tmp_path):
    """Review finding 2: a "failed" status of an earlier stage, read before this run writes "fetching",
    sent every waiter to the Hub for this host's whole share. Each host removes its own before the
    peer servers start; the rest of .gpufleet (the manifest) stays."""
    meta = tmp_path / "models" / "kimi" / COMMIT / ".gpufleet"
    meta.mkdir(parents=True)
    (meta / "peer-status.json").write_text('{"state": "failed", "failed": []}')
    (meta / "manifest.json").write_text("{}")
    with open(PEERS_START) as handle:
        names = [t["name"] for t in yaml.safe_load(handle)]
    assert names.index("Remove the peer-status files of earlier runs") < names.index("Start the peer server")
    proc, got = _run(tmp_path, {"gpu1": True})
    assert sorted(got) == ["gpu1"], proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (meta / "peer-status.json").exists() and (meta / "manifest.json").exists()
    # bookkeeping, not a change: a re-run stays changed=0
    assert "changed: [gpu1] => (item=kimi)" not in proc.stdout and "ok: [gpu1] => (item=kimi)" in proc.stdout


TASKS = os.path.join(ROOT, "roles", "model", "tasks")


def _load(name):
    with open(os.path.join(TASKS, name)) as handle:
        return yaml.safe_load(handle)


def test_a_host_failing_one_model_stops_its_peer_server_before_the_next_model(tmp_path):
    """Review finding 1: stage.yml and model.yml as they ship, two models, gpu2 fails model a. Its peer
    server stops in model a's rescue, before any host stages model b (not in the stage's `always:`,
    after every model); the `always:` does not stop it twice (the bytes it reported stay)."""
    (tmp_path / "stage.yml").write_text(json.dumps(_load("stage.yml")))
    # model.yml: its own rescue around stand-ins for resolve, fetch and verify
    model = _load("model.yml")
    assert len(model) == 1 and "rescue" in model[0], "model.yml: one block whose rescue stops the peer server"
    model[0]["block"] = [
        {"name": "Fetch or verify fails on gpu2", "ansible.builtin.fail": {"msg": "verify failed"},
         "when": "inventory_hostname == 'gpu2' and _model_item.name == 'a'"},
        {"name": "Staged {{ _model_item.name }}", "ansible.builtin.debug": {"msg": "staged"}},
    ]
    (tmp_path / "model.yml").write_text(json.dumps(model))
    start = [t for t in _load("peers_start.yml") if t["name"] == "Note this host's Hub access for the plan"]
    start.append({"name": "Stand in for the peer server's start",
                  "ansible.builtin.set_fact": {"__model_peer_serve": {"url": "http://x/", "bytes_sent": 0}}})
    (tmp_path / "peers_start.yml").write_text(json.dumps(start))
    stop = _load("peers_stop.yml")
    inner = stop[0]["block"]
    assert "gpufleet.llm.peer_serve" in inner[0]
    # the real stop's answer: the bytes sent, then 0 for a server that is no longer running
    inner[0] = {"name": "Stop the peer server", "ansible.builtin.set_fact": {
        "__model_peer_stopped": {"bytes_sent": "{{ 0 if _stand_in_stopped | default(false) else 123 }}", "unit": "u"},
        "_stand_in_stopped": True}}
    (tmp_path / "peers_stop.yml").write_text(json.dumps(stop))
    (tmp_path / "inventory.ini").write_text("".join(
        "%s ansible_connection=local ansible_python_interpreter=%s model_peer_hub_access=true\n" % (h, sys.executable)
        for h in ("gpu1", "gpu2")))
    playbook = [
        {"hosts": "all", "gather_facts": False,
         "vars": {"model_distribution": "peers",
                  "model_models": [{"name": "a", "repo_id": "lab/a"}, {"name": "b", "repo_id": "lab/b"}]},
         "tasks": [{"name": "Stage", "ansible.builtin.include_tasks": "stage.yml"}]},
        {"hosts": "localhost", "gather_facts": False, "tasks": [{"ansible.builtin.copy": {
            "content": "{{ {'gpu1': hostvars.gpu1.model_peer_bytes_served | default(None),"
                       " 'gpu2': hostvars.gpu2.model_peer_bytes_served | default(None)} | to_json }}",
            "dest": str(tmp_path / "served.json")}}]},
    ]
    (tmp_path / "play.yml").write_text(json.dumps(playbook))
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               ANSIBLE_COLLECTIONS_PATH=os.path.dirname(os.path.dirname(os.path.dirname(ROOT))))
    argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", str(tmp_path / "inventory.ini"), str(tmp_path / "play.yml")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    out = proc.stdout
    assert "TASK [Staged b]" in out, out[-4000:] + proc.stderr[-3000:]
    stopped = out.index("TASK [Stop the peer exchange of this failed host]")
    assert stopped < out.index("TASK [Staged b]")
    assert "a: Fetch or verify fails on gpu2 failed: verify failed" in out
    recap = out[out.index("PLAY RECAP"):]
    assert "failed=1" in recap.split("gpu2", 1)[1].split("\n", 1)[0]
    assert "failed=0" in recap.split("gpu1", 1)[1].split("\n", 1)[0]
    assert json.loads((tmp_path / "served.json").read_text()) == {"gpu1": 123, "gpu2": 123}


# ----------------------------------------------------------------------------- issue 20 item 14c
def test_every_host_passes_on_whether_the_repo_needs_the_token_and_the_opt_in(tmp_path):
    proc, got = _run(tmp_path, {"gpu1": True, "gpu2": False},
                     extra={"model_pinned_token_required": {"kimi": True}, "model_peer_private_repos": True})
    assert sorted(got) == ["gpu1", "gpu2"], proc.stdout[-3000:] + proc.stderr[-3000:]
    for args in got.values():
        assert args["args"]["kimi"]["listing_token_required"] is True and args["args"]["kimi"]["peer_private"] is True
    proc, got = _run(tmp_path, {"gpu1": True}, extra={"model_pinned_token_required": {"kimi": False}})
    assert got["gpu1"]["args"]["kimi"]["listing_token_required"] is False
    assert got["gpu1"]["args"]["kimi"]["peer_private"] is False  # the role's default


def _stage_check(tmp_path, **play_vars):
    """stage.yml's private-repo check as it ships, on localhost; (ansible-playbook's stdout, passed)."""
    wanted = "Check that every model that needs the token may use the peer exchange"
    task = next(t for t in _load("stage.yml") if t["name"] == wanted)
    passed = {"name": "Passed", "ansible.builtin.copy": {"content": "ok", "dest": str(tmp_path / "passed")}}
    defaults = yaml.safe_load(open(os.path.join(ROOT, "roles", "model", "defaults", "main.yml")))
    play = dict({"model_peer_private_repos": defaults["model_peer_private_repos"]}, **play_vars)
    (tmp_path / "stage-check.yml").write_text(json.dumps(
        [{"hosts": "localhost", "gather_facts": False, "vars": play, "tasks": [task, passed]}]))
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               ANSIBLE_COLLECTIONS_PATH=os.path.dirname(os.path.dirname(os.path.dirname(ROOT))))
    argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable, str(tmp_path / "stage-check.yml")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    passed = (tmp_path / "passed").exists()
    if passed:
        (tmp_path / "passed").unlink()
    return proc.stdout + proc.stderr, passed


def test_peers_for_a_repo_that_needs_the_token_fail_the_stage_unless_the_operator_opts_in(tmp_path):
    models = [{"name": "kimi", "repo_id": "lab/kimi"}, {"name": "secret", "repo_id": "org/private"}]
    needs = {"kimi": False, "secret": True}
    out, passed = _stage_check(tmp_path, model_distribution="peers", model_models=models, model_pinned_token_required=needs)
    assert not passed and "secret needs the Hub token" in out and "model_peer_private_repos=true" in out
    assert "kimi" not in out.split("model_distribution=peers:", 1)[1].split("need", 1)[0]
    assert _stage_check(tmp_path, model_distribution="peers", model_models=models, model_pinned_token_required=needs,
                        model_peer_private_repos=True)[1]
    assert _stage_check(tmp_path, model_distribution="hub", model_models=models, model_pinned_token_required=needs)[1]
    assert _stage_check(tmp_path, model_distribution="peers", model_models=models,
                        model_pinned_token_required={"kimi": False, "secret": False})[1]


def test_the_pin_keeps_whether_each_repo_needs_the_token(tmp_path):
    """resolve.yml's pin as it ships: hf_snapshot's resolve_only answer (stood in) gives token_required;
    an answer without it counts as needing the token (the safe side)."""
    pin = next(t for t in _load("resolve.yml") if t["name"].startswith("Pin the commit"))
    tasks = []
    for name, answer in (("kimi", {"commit": COMMIT, "files": LISTING, "token_required": False}),
                         ("secret", {"commit": COMMIT, "files": LISTING, "token_required": True}),
                         ("old", {"commit": COMMIT, "files": LISTING})):
        tasks.append({"name": "Stand in for the resolve of %s" % name,
                      "ansible.builtin.set_fact": {"__model_resolved": answer, "_model_item": {"name": name},
                                                   "_model_resolver": "localhost"}})
        tasks.append(pin)
    tasks.append({"name": "Write", "ansible.builtin.copy": {"content": "{{ model_pinned_token_required | to_json }}",
                                                            "dest": str(tmp_path / "out.json")}})
    assert localplay.run_play(tmp_path, tasks) == {"kimi": False, "secret": True, "old": True}
