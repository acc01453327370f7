# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/deploy.yml's roll: which servers roll in which batch, and what became of each.

Private to the collection: not a public API, may change without notice.

The playbook gathers per host what Ansible knows (its multi-node ranks, whether the stage verified
every model on it, whether its roll started, finished or was halted) and the filters
``gpufleet.llm.rollout_plan`` and ``gpufleet.llm.rollout_summary`` decide here, so the rules are
unit-tested without a lab. A server is its ranks: it rolls only when every rank staged, and all its
ranks share one batch.
"""
from __future__ import annotations

from typing import Any


class RolloutError(ValueError):
    """Input the playbook should never build; the message names the field."""


def _servers(hosts: list[dict[str, Any]]) -> list[list[str]]:
    """Group hosts into servers (their sorted ``ranks``), first seen first, each host once."""
    seen: set[str] = set()
    servers = []
    for host in hosts:
        if not isinstance(host, dict) or not host.get("name"):
            raise RolloutError("each host needs a name; got %r" % (host,))
        ranks = sorted(host.get("ranks") or [host["name"]])
        if host["name"] not in ranks:
            raise RolloutError("host %s is not among its own ranks %s" % (host["name"], ranks))
        if ranks[0] in seen:
            continue
        seen.update(ranks)
        servers.append(ranks)
    return servers


def plan(hosts: list[dict[str, Any]], *, per_batch: int) -> dict[str, Any]:
    """Batches of ``per_batch`` servers out of those whose every rank staged.

    ``hosts``: ``[{name, ranks, staged}]`` in the order to roll (ranks: every rank of its server in
    this play, or empty for a single-node server). Returns ``servers`` (every server, with
    ``staged`` and ``not_staged``: its ranks whose stage failed), ``batches`` (lists of hosts),
    ``left_out`` (one message per server that does not roll).
    """
    try:
        per_batch = max(int(per_batch), 1)
    except (TypeError, ValueError):
        raise RolloutError("gpufleet_serial must be a whole number of servers per batch; got %r" % (per_batch,))
    staged = {h["name"]: bool(h.get("staged")) for h in hosts if isinstance(h, dict) and h.get("name")}
    servers, rolling, left_out = [], [], []
    for ranks in _servers(hosts):
        missing = [r for r in ranks if not staged.get(r, False)]
        servers.append({"ranks": ranks, "staged": not missing, "not_staged": missing})
        if not missing:
            rolling.append(ranks)
            continue
        others = [r for r in ranks if r not in missing]
        left_out.append(
            "%s: not staged on %s (its stage failed: see that host's error above); the server is not rolled and keeps "
            "serving its old revision%s" % (
                ", ".join(ranks), ", ".join(missing),
                ("; %s left out of the roll with it (a multi-node server rolls with every rank or not at all)"
                 % ", ".join(others)) if others else ""))
    batches = [[h for ranks in rolling[i:i + per_batch] for h in ranks] for i in range(0, len(rolling), per_batch)]
    return {"servers": servers, "batches": batches, "left_out": left_out}


def _server_state(ranks: list[str], hosts: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """(moved|stayed, why) of one server from its ranks' flags."""
    flags = {r: hosts.get(r) or {} for r in ranks}
    not_staged = [r for r in ranks if not flags[r].get("staged")]
    if not_staged:
        return "stayed", "stage failed on %s" % ", ".join(not_staged)
    if all(flags[r].get("rolled") for r in ranks):
        return "moved", ""
    if any(flags[r].get("halted") for r in ranks):
        return "stayed", "halted after an earlier failure (its batch did not start)"
    started = [r for r in ranks if flags[r].get("started")]
    if started:
        failed = [r for r in started if not flags[r].get("rolled")] or started
        rolled_back = [r for r in ranks if flags[r].get("rolled_back")]
        return "stayed", "its batch failed on %s%s" % (
            ", ".join(failed),
            (" (rolled back to the previous config on %s)" % ", ".join(rolled_back)) if rolled_back else "")
    return "stayed", "not rolled: the run ended before its batch"


def summary(servers: list[list[str]], hosts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What became of each server of the roll.

    ``servers``: each server's ranks. ``hosts``: per host ``staged``, ``started``, ``rolled``,
    ``halted``, ``rolled_back`` (booleans) and ``commits`` (model name -> commit, after the roll).
    Returns ``moved`` and ``stayed`` (``[{server, ranks, why}]``; moved rows carry ``commits``),
    ``lines`` (one per server, for the play output) and ``ok`` (every server moved).
    """
    if not isinstance(servers, list) or not isinstance(hosts, dict):
        raise RolloutError("rollout_summary needs the servers (a list of rank lists) and the hosts' flags (a dict)")
    moved, stayed, lines = [], [], []
    for ranks in servers:
        ranks = list(ranks)
        state, why = _server_state(ranks, hosts)
        row = {"server": ranks[0], "ranks": ranks}
        if state == "moved":
            row["commits"] = dict((hosts.get(ranks[0]) or {}).get("commits") or {})
            moved.append(row)
            lines.append("moved: %s -> %s" % (", ".join(ranks), ", ".join(
                "%s@%s" % (name, commit[:12]) for name, commit in sorted(row["commits"].items())) or "new revision"))
        else:
            row["why"] = why
            stayed.append(row)
            lines.append("stayed on the old revision: %s (%s)" % (", ".join(ranks), why))
    return {"moved": moved, "stayed": stayed, "lines": lines, "ok": not stayed}
