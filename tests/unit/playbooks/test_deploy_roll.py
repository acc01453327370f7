# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/stage.yml + deploy.yml as they ship (issue 12 items 1 and 4), run by a real
ansible-playbook over local hosts with the roles' includes stood in by tasks that succeed or fail on
the hosts a test names (the lab's sglang_role_ranks target, scenario_batches.sh, runs the real roles).

What must hold: one stage play for every host; a server whose stage failed on any rank is left out
of the roll with its other ranks; a failed server halts every later batch before it changes
anything; the summary on localhost runs even when every host of a batch failed, names what moved
and what stayed and why, and fails the run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

pytestmark = pytest.mark.playbook  # runs a real ansible-playbook (tests/unit/conftest.py)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

pytestmark = pytest.mark.playbook  # runs a real ansible-playbook (tests/unit/conftest.py)

# A stdout callback that records every result as {plays: [{play: {name}, tasks: [{task: {name}, hosts:
# {host: result}}]}]} (the shape of ansible.posix.json, which ansible-core alone does not ship).
RECORDER = """
import json
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'stdout'
    CALLBACK_NAME = 'recorder'

    def __init__(self):
        super().__init__()
        self.plays = []

    def v2_playbook_on_play_start(self, play):
        self.plays.append({'play': {'name': play.get_name()}, 'tasks': []})

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.plays[-1]['tasks'].append({'task': {'name': task.get_name()}, 'hosts': {}})

    def _record(self, result, **extra):
        data = dict(result._result)
        data.update(extra)
        self.plays[-1]['tasks'][-1]['hosts'][result._host.get_name()] = json.loads(json.dumps(data, default=str))

    def v2_runner_on_ok(self, result):
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, failed=True)

    def v2_runner_on_skipped(self, result):
        self._record(result, skipped=True)

    def v2_playbook_on_stats(self, stats):
        self._display.display(json.dumps({'plays': self.plays}))
"""


def _stand_in(task: dict) -> list:
    """The roles' includes replaced: a stage that fails on stage_fail, a server that fails on roll_fail."""
    include = task.get("ansible.builtin.include_role")
    if not include:
        return [task]
    entry = include.get("tasks_from", "main")
    if entry == "stage.yml":
        return [{"name": "Stand in for the stage", "ansible.builtin.fail": {"msg": "stage failed"},
                 "when": "inventory_hostname in stage_fail"}]
    if entry == "pin.yml":
        # the pin's resolve runs once for the fleet: its failure fails every host of the play
        return [{"name": "Stand in for the pin", "ansible.builtin.fail": {"msg": "pin failed"},
                 "run_once": True, "when": "pin_fail | default(false)"}]
    if entry == "ranks.yml":
        # the tags the include applies to the file's tasks (it must run whatever --tags selects)
        return [{"name": "Stand in for the ranks check", "ansible.builtin.assert": {"that": [
            "(groups[sglang_multinode_group] if sglang_multinode_group | default('') else [])"
            " | reject('in', ansible_play_hosts_all) | list | length == 0"]},
            "tags": include.get("apply", {}).get("tags", [])}]
    if entry == "switch.yml":
        return [{"name": "Stand in for the switch", "ansible.builtin.set_fact": {"model_commits": {"kimi": "c" * 40}}}]
    if include["name"] == "gpufleet.llm.sglang" and entry == "main":
        return [{"name": "Stand in for the server", "ansible.builtin.set_fact": {"_sglang_previous_url": "http://x"},
                 "when": "inventory_hostname in roll_fail"},
                {"name": "Stand in for the probe", "ansible.builtin.fail": {"msg": "ROLLED BACK: stand-in"},
                 "when": "inventory_hostname in roll_fail"},
                {"name": "Stand in for the restart", "ansible.builtin.set_fact": {"itest_restarted": True}}]
    return [{"name": "Stand in for %s" % entry, "ansible.builtin.debug": {"msg": "stand-in"}}]


def _playbooks(tmp_path) -> None:
    for book in ("stage.yml", "deploy.yml"):
        with open(os.path.join(ROOT, "playbooks", book)) as handle:
            plays = yaml.safe_load(handle)
        for play in plays:
            if "tasks" in play:
                play["tasks"] = [t for task in play["tasks"] for t in _stand_in(task)]
        (tmp_path / book).write_text(json.dumps(plays))


def _run(tmp_path, *, serial: int, stage_fail=(), roll_fail=(), multinode=(), limit=None, extra_vars=None, args=(),
         pattern_mismatch="warning"):
    hosts = ["gpu1", "gpu2", "gpu3"]
    lines = ["[gpu_nodes]"] + ["%s ansible_connection=local ansible_python_interpreter=%s" % (h, sys.executable) for h in hosts]
    if multinode:
        lines += ["[mn]"] + list(multinode) + ["[mn:vars]", "sglang_multinode_group=mn"]
    (tmp_path / "inventory.ini").write_text("\n".join(lines) + "\n")
    _playbooks(tmp_path)
    (tmp_path / "callbacks").mkdir()
    (tmp_path / "callbacks" / "recorder.py").write_text(RECORDER)
    collections = os.path.dirname(os.path.dirname(os.path.dirname(ROOT)))
    # Ansible's default host_pattern_mismatch (warning) unless a test asks for error (ansible-test sets it): a
    # limit naming gpufleet_markers (added by the run) and a pattern matching no host are cases run on purpose
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_COLLECTIONS_PATH=collections,
               ANSIBLE_STDOUT_CALLBACK="recorder", ANSIBLE_CALLBACK_PLUGINS=str(tmp_path / "callbacks"),
               ANSIBLE_RETRY_FILES_ENABLED="False", ANSIBLE_HOST_PATTERN_MISMATCH=pattern_mismatch)
    extra = {"gpufleet_serial": serial, "stage_fail": list(stage_fail), "roll_fail": list(roll_fail)}
    extra.update(extra_vars or {})
    argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", str(tmp_path / "inventory.ini"),
            "-e", json.dumps(extra), str(tmp_path / "deploy.yml")] + (["--limit", limit] if limit else []) + list(args)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("no JSON from ansible-playbook:\n%s\n%s" % (proc.stdout[-3000:], proc.stderr[-3000:]))
    return proc.returncode, out


def _task_results(out: dict, play_name: str, task_name: str) -> list:
    """Every (host, result) of a task, over every play (every batch) of that name."""
    found = []
    for play in out["plays"]:
        if play["play"]["name"] != play_name:
            continue
        for task in play["tasks"]:
            if task["task"]["name"] == task_name:
                found += list(task["hosts"].items())
    return found


def _summary(out: dict) -> list:
    results = _task_results(out, "Summary of the roll", "Say which servers moved and which stayed on the old revision")
    assert len(results) == 1, [p["play"]["name"] for p in out["plays"]]
    return results[0][1]["msg"]


def _ran(out: dict, task_name: str) -> list:
    return sorted(h for h, r in _task_results(out, "Roll out, batch by batch", task_name) if not r.get("skipped"))


def test_a_failure_in_batch_1_halts_the_later_batches_and_the_summary_says_so(tmp_path):
    rc, out = _run(tmp_path, serial=1, roll_fail=["gpu1"])
    assert rc != 0
    names = [p["play"]["name"] for p in out["plays"]]
    assert names.count("Stage every model on every host") == 1
    assert names.count("Roll out, batch by batch") == 3
    # gpu1 failed in batch 1: gpu2 and gpu3 never reach the server (nor the switch)
    assert _ran(out, "Stand in for the restart") == []
    assert _ran(out, "Stand in for the switch") == ["gpu1"]
    halted = dict(_task_results(out, "Roll out, batch by batch", "Say why this batch does not start"))
    assert "batch 2 halted: gpu1 of an earlier batch did not finish its roll" in halted["gpu2"]["msg"]
    assert "batch 3 halted: gpu1, gpu2 of an earlier batch" in halted["gpu3"]["msg"]
    assert _summary(out) == [
        "stayed on the old revision: gpu1 (its batch failed on gpu1 (rolled back to the previous config on gpu1))",
        "stayed on the old revision: gpu2 (halted after an earlier failure (its batch did not start))",
        "stayed on the old revision: gpu3 (halted after an earlier failure (its batch did not start))",
    ]
    fail = _task_results(out, "Summary of the roll", "Fail the run when a server did not move")
    assert "3 of 3 servers stayed on the old revision: gpu1, gpu2, gpu3" in fail[0][1]["msg"]


def test_a_rank_whose_stage_failed_keeps_its_server_out_and_the_rest_rolls(tmp_path):
    rc, out = _run(tmp_path, serial=1, stage_fail=["gpu3"], multinode=["gpu2", "gpu3"])
    assert rc != 0
    left_out = _task_results(out, "Plan the roll from what staged", "Name the servers that are not rolled")
    assert "gpu2, gpu3: not staged on gpu3" in left_out[0][1]["msg"][0]
    assert "gpu2 left out of the roll with it" in left_out[0][1]["msg"][0]
    assert _ran(out, "Stand in for the restart") == ["gpu1"]
    assert _summary(out) == [
        "moved: gpu1 -> kimi@cccccccccccc",
        "stayed on the old revision: gpu2, gpu3 (stage failed on gpu3)",
    ]


def test_a_good_roll_moves_every_server_in_batches(tmp_path):
    rc, out = _run(tmp_path, serial=2)
    assert rc == 0
    assert [p["play"]["name"] for p in out["plays"]].count("Roll out, batch by batch") == 2
    assert _ran(out, "Stand in for the restart") == ["gpu1", "gpu2", "gpu3"]
    assert _summary(out) == ["moved: %s -> kimi@cccccccccccc" % h for h in ("gpu1", "gpu2", "gpu3")]


def test_a_limit_that_leaves_the_markers_out_still_rolls_every_host_in_its_own_batch(tmp_path):
    # --limit filters the hosts add_host adds too: the markers are not in the plays, and the batch
    # sizes must not count them (they did: batches took a host of the next batch, and the halt check
    # saw it still rolling, so a healthy roll halted itself)
    rc, out = _run(tmp_path, serial=1, limit="gpu1,gpu2,gpu3,localhost", extra_vars={"model_stage_batch": 1})
    names = [p["play"]["name"] for p in out["plays"]]
    assert names.count("Stage every model on every host") == 3
    assert names.count("Roll out, batch by batch") == 3
    assert _ran(out, "Say why this batch does not start") == []
    assert _ran(out, "Stand in for the restart") == ["gpu1", "gpu2", "gpu3"]
    assert _summary(out) == ["moved: %s -> kimi@cccccccccccc" % h for h in ("gpu1", "gpu2", "gpu3")]
    assert rc == 0


def test_a_limit_that_names_the_markers_keeps_them(tmp_path):
    # the markers in the limit (the group gpufleet_markers): a batch in which every server fails does
    # not end the run, so the halt and the summary still come
    rc, out = _run(tmp_path, serial=1, roll_fail=["gpu1", "gpu2"], limit="gpu1,gpu2,localhost,gpufleet_markers")
    assert rc != 0
    assert [p["play"]["name"] for p in out["plays"]].count("Roll out, batch by batch") == 2
    assert _ran(out, "Stand in for the switch") == ["gpu1"]
    assert _summary(out) == [
        "stayed on the old revision: gpu1 (its batch failed on gpu1 (rolled back to the previous config on gpu1))",
        "stayed on the old revision: gpu2 (halted after an earlier failure (its batch did not start))",
    ]


@pytest.mark.parametrize("args", [(), ("--tags", "sglang_configure")])
def test_a_limit_on_one_rank_of_a_multinode_server_is_refused_before_the_switch(tmp_path, args):
    # the planner keeps the ranks in the play; the roll refuses the server (the sglang role's ranks.yml)
    # before switch.yml moves `current` or prunes anything on the rank that is there, whatever --tags
    rc, out = _run(tmp_path, serial=1, multinode=["gpu2", "gpu3"], limit="gpu1,gpu2,localhost", args=args)
    assert rc != 0
    refused = dict(_task_results(out, "Roll out, batch by batch", "Stand in for the ranks check"))
    assert refused["gpu2"].get("failed") and not refused["gpu1"].get("failed")
    if not args:  # (the stand-ins below carry no tags: --tags skips them here, not so the roles' tasks)
        assert _ran(out, "Stand in for the switch") == ["gpu1"]
        assert _ran(out, "Stand in for the restart") == ["gpu1"]


def test_a_failed_pin_ends_the_run_before_anything_is_staged_and_before_the_summary(tmp_path):
    # what deploy.yml's summary comment and docs/rollout.md say: a failed pin fails every host, and
    # Ansible ends the run there with its own error (no batch marker keeps the pin play alive)
    rc, out = _run(tmp_path, serial=1, extra_vars={"pin_fail": True})
    assert rc != 0
    names = [p["play"]["name"] for p in out["plays"]]
    assert names == ["Prepare every host and pin one commit per model for the fleet"]
    failed = _task_results(out, "Prepare every host and pin one commit per model for the fleet", "Stand in for the pin")
    assert [h for h, r in failed if r.get("failed")] == ["gpu1"]


def test_a_host_pattern_that_matches_no_host_says_so_in_the_summary(tmp_path):
    rc, out = _run(tmp_path, serial=1, extra_vars={"gpufleet_hosts": "nosuchgroup"})
    assert rc == 0
    assert _summary(out) == ["no host matched gpufleet_hosts (nosuchgroup) and the --limit: nothing was staged or rolled"]


def test_gpufleet_hosts_as_a_comma_list_rolls_every_host_it_names(tmp_path):
    # a host pattern may be a comma list; "gpu1,gpu2:!gpufleet_markers" would cut its last item
    # (gpu2:!gpufleet_markers matches nothing): gpu2 was staged but never planned into the roll
    rc, out = _run(tmp_path, serial=1, extra_vars={"gpufleet_hosts": "gpu1,gpu2"})
    assert rc == 0, _summary(out)
    assert _ran(out, "Stand in for the restart") == ["gpu1", "gpu2"]
    assert _summary(out) == ["moved: %s -> kimi@cccccccccccc" % h for h in ("gpu1", "gpu2")]


@pytest.mark.parametrize("stage_fail, multinode", [
    (("gpu1", "gpu2", "gpu3"), ()),          # every host failed its stage: the planner play has no host left
    (("gpu1", "gpu3"), ("gpu2", "gpu3")),    # gpu2 staged, but its server did not: nothing to roll
])
def test_no_server_staged_still_gives_the_summary_under_host_pattern_mismatch_error(tmp_path, stage_fail, multinode):
    # issue 21 item 5(a): with host_pattern_mismatch=error (ansible-test's setting) an empty roll group
    # (no batch) made Ansible end the run before the summary: the planner always lines up the first
    # marker, and a roll of the marker alone does nothing
    rc, out = _run(tmp_path, serial=1, stage_fail=stage_fail, multinode=multinode, pattern_mismatch="error")
    assert rc == 2, out  # the summary's own failure (servers stayed), not Ansible's pattern error (rc 1)
    assert _ran(out, "Stand in for the switch") == []
    assert _ran(out, "Stand in for the restart") == []
    stayed = _summary(out)
    assert len(stayed) == (3 if not multinode else 2)
    assert all(line.startswith("stayed on the old revision: ") and "stage failed on" in line for line in stayed)
    fail = _task_results(out, "Summary of the roll", "Fail the run when a server did not move")
    assert fail[0][1]["msg"].startswith("%d of %d servers stayed on the old revision" % (len(stayed), len(stayed)))
