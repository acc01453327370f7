# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/deploy.yml's roll: which servers roll in which batch, and what became of each.

Private to the collection: not a public API, may change without notice.

The playbook gathers per host what Ansible knows (its multi-node ranks, whether the stage verified
every model on it, whether its roll started, finished or was halted) and the filters
``gpufleet.llm.rollout_plan`` and ``gpufleet.llm.rollout_summary`` decide here, so the rules are
unit-tested without a lab. A server is its ranks (``gpufleet.llm.rank_groups``): it rolls only when
every rank staged, and all its ranks share one batch. The batch markers that stage.yml and deploy.yml
line their hosts up behind (``gpufleet.llm.rollout_lineup``) and the play's ``serial:`` sizes counted
against ``--limit`` (``gpufleet.llm.rollout_serial``) are decided here too.
"""
from __future__ import annotations

from typing import Any


class RolloutError(ValueError):
    """Input the playbook should never build; the message names the field."""


def rank_groups(hosts: list[str], groups: dict[str, list[str]], multinode: Any, within: list[str] | None = None) -> list[list[str]]:
    """Group host names into servers: each server's ranks, sorted, each host in one server.

    ``multinode``: the host's multi-node group (``sglang_multinode_group``), a dict host -> group name
    or one name for every host; empty, absent or not a group of ``groups``: a single-node server.
    ``within``: when given, a server's ranks are only those in it (the hosts of the play). Servers
    come in the order of their first host in ``sorted(hosts)``.
    """
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple)):
        raise RolloutError("the hosts must be a list of host names; got %s" % type(hosts).__name__)
    if not isinstance(groups, dict):
        raise RolloutError("the groups must be the inventory groups (a dict of group -> hosts); got %s" % type(groups).__name__)
    keep = None if within is None else set(within)
    seen: set[str] = set()
    servers = []
    for host in sorted(str(h) for h in hosts):
        group = (multinode.get(host) if isinstance(multinode, dict) else multinode) or ""
        ranks = [host]
        if group and group in groups:
            ranks = sorted(r for r in groups[group] if keep is None or r in keep)
            if host not in ranks:
                raise RolloutError("host %s is not in its multi-node group %s (%s); every rank of a multi-node server must be "
                                   "in that group" % (host, group, ", ".join(ranks) or "no host"))
        if ranks[0] in seen or host in seen:
            continue
        seen.update(ranks)
        servers.append(ranks)
    return servers


def lineup(batches: list[list[str]], prefix: str) -> list[dict[str, Any]]:
    """The hosts in batches, each batch opened by its marker ``<prefix>-<n>`` (a name, never contacted).

    Returns ``[{name, marker, batch}]``. The first marker is there even with no batch at all: the play
    over this lineup then matches its marker alone (and does nothing), where an empty group would end a
    run under ``host_pattern_mismatch = error`` before the plays after it (deploy.yml's summary).
    """
    if isinstance(batches, (str, bytes)) or not isinstance(batches, (list, tuple)):
        raise RolloutError("the batches must be a list of host lists; got %s" % type(batches).__name__)
    if not prefix or not isinstance(prefix, str):
        raise RolloutError("the markers need a name prefix; got %r" % (prefix,))
    out: list[dict[str, Any]] = []
    for number, batch in enumerate(batches or [[]], start=1):
        if isinstance(batch, (str, bytes)) or not isinstance(batch, (list, tuple)):
            raise RolloutError("batch %d must be a list of hosts; got %r" % (number, batch))
        out.append({"name": "%s-%d" % (prefix, number), "marker": True, "batch": number})
        out.extend({"name": str(h), "marker": False, "batch": number} for h in batch)
    return out


def serial(hosts: list[dict[str, Any]], in_limit: list[str]) -> list[int]:
    """The play's ``serial:`` over a lineup: each batch's hosts, plus its marker when ``--limit`` admits it.

    ``in_limit``: the hosts the limit admits (``query('inventory_hostnames', ansible_limit)``). A marker
    the limit keeps out of the play must not count, or every batch would take a host of the next one.
    """
    if isinstance(in_limit, (str, bytes)) or not isinstance(in_limit, (list, tuple)):
        raise RolloutError("the hosts in the limit must be a list; got %s" % type(in_limit).__name__)
    admitted = set(in_limit)
    sizes: dict[int, int] = {}
    for row in hosts or []:
        if not isinstance(row, dict) or not row.get("name") or not isinstance(row.get("batch"), int):
            raise RolloutError("each host of the lineup needs a name and a batch number; got %r" % (row,))
        sizes.setdefault(row["batch"], 0)
        if not row.get("marker") or row["name"] in admitted:
            sizes[row["batch"]] += 1
    return [sizes[b] for b in sorted(sizes)]


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


def hosts_of(servers: list[list[str]], staged: list[str]) -> list[dict[str, Any]]:
    """``plan``'s hosts from servers (``rank_groups``) and the hosts that staged."""
    done = set(staged or [])
    rows = []
    for ranks in servers:
        if isinstance(ranks, (str, bytes)) or not isinstance(ranks, (list, tuple)):
            raise RolloutError("each server must be a list of its ranks; got %r" % (ranks,))
        rows.extend({"name": r, "ranks": list(ranks), "staged": r in done} for r in ranks)
    return rows


def plan(hosts: list[dict[str, Any]], *, per_batch: int) -> dict[str, Any]:
    """Batches of ``per_batch`` servers out of those whose every rank staged.

    ``hosts``: ``[{name, ranks, staged}]`` in the order to roll (ranks: every rank of its server in
    this play, or empty for a single-node server); ``hosts_of`` builds them from servers. Returns ``servers`` (every server, with
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
