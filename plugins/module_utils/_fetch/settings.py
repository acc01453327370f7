# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hf_snapshot's options: the argument spec (the one place their types and defaults are written)
and the validated settings a run works from.

Private to the collection: not a public API, may change without notice.

The module hands ``argument_spec()`` to AnsibleModule; ``Settings.from_params`` fills what a caller
left out (or passed as None) from the same spec, so a direct call gets what a playbook gets.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError

REPO_TYPES = ("model", "dataset", "space")
# aria2's per-server connection limit (--max-connection-per-server).
MAX_CONNECTIONS = 16
# aria2's ranges for --timeout / --retry-wait (seconds) and --min-split-size (bytes).
ARIA2_MAX_TIMEOUT = 600
MIN_SPLIT_LOW = 1024 * 1024
MIN_SPLIT_HIGH = 1024 * 1024 * 1024


def argument_spec() -> dict[str, dict[str, Any]]:
    """hf_snapshot's AnsibleModule argument spec (documented in plugins/modules/hf_snapshot.py)."""
    return dict(
        repo_id=dict(type="str", required=True),
        revision=dict(type="str", default="main"),
        dest=dict(type="path", required=True),
        repo_type=dict(type="str", default="model", choices=list(REPO_TYPES)),
        allow_patterns=dict(type="list", elements="str"),
        ignore_patterns=dict(type="list", elements="str"),
        token=dict(type="str", no_log=True),
        endpoint=dict(type="str"),
        connections=dict(type="int", default=16),
        splits=dict(type="int", default=16),
        # 6 files with 16 connections each reached 574 MiB/s against the public Hub's CDN for a
        # 64-shard repo (docs/hf_snapshot.md, "Throughput").
        parallel_files=dict(type="int", default=6),
        # 8M: a file of 128 MiB or more still gets all 16 connections (aria2 halves ranges down to
        # min_split_size), and idle connections can still take over halves of a slow tail.
        min_split_size=dict(type="str", default="8M"),
        max_tries=dict(type="int", default=5),
        retry_wait=dict(type="int", default=2),
        timeout=dict(type="int", default=60),
        link_from=dict(type="list", elements="path"),
        prune_partials=dict(type="bool", default=False),
        min_free_bytes=dict(type="int", default=1073741824),
        proxy=dict(type="str", no_log=True),  # may carry user:password
        validate_certs=dict(type="bool", default=True),
        ca_path=dict(type="path"),
        aria2c=dict(type="path"),
        lock_timeout=dict(type="int", default=600),
        hash_workers=dict(type="int"),
        # Peer fetching (issue 12; _peers): the listing handed back from a resolve_only run, the peers
        # that hold (or will hold) this commit, and this host's own share of the Hub's bytes.
        listing=dict(type="list", elements="dict"),
        listing_from=dict(type="str"),
        peers=dict(type="list", elements="dict"),
        peer_token=dict(type="str", no_log=True),
        hub_share=dict(type="list", elements="str"),
        hub=dict(type="bool", default=True),
        peer_wait_timeout=dict(type="int", default=3600),
        # Issue 20 item 14c: a repo that needs the token travels over the (plain HTTP) peer exchange only
        # when the operator says so; listing_token_required: the resolve_only run behind listing needed it.
        peer_private=dict(type="bool", default=False),
        listing_token_required=dict(type="bool", default=False),
        # Issue 21 item 5c: the id of this run's peer exchange, carried by every peer-status it writes
        peer_run=dict(type="str"),
        # Issue 23: this host's name among the peers' (the model role: inventory_hostname); seeds its order
        peer_name=dict(type="str"),
    )


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every option of argument_spec(), validated, plus ``endpoint_url`` (the endpoint in effect)."""

    repo_id: str
    revision: str
    dest: str
    repo_type: str
    allow_patterns: list[str] | None
    ignore_patterns: list[str] | None
    token: str | None = dataclasses.field(repr=False)
    endpoint: str | None
    connections: int
    splits: int
    parallel_files: int
    min_split_size: str
    max_tries: int
    retry_wait: int
    timeout: int
    link_from: list[str]
    prune_partials: bool
    min_free_bytes: int
    # A proxy URL may carry credentials (http://user:pass@host): kept out of the repr like the token.
    proxy: str | None = dataclasses.field(repr=False)
    validate_certs: bool
    ca_path: str | None
    aria2c: str | None
    lock_timeout: int
    hash_workers: int | None
    listing: list[dict[str, Any]] | None
    listing_from: str | None
    peers: list[dict[str, Any]] | None
    peer_token: str | None = dataclasses.field(repr=False)
    hub_share: list[str] | None
    hub: bool
    peer_wait_timeout: int
    peer_private: bool
    listing_token_required: bool
    peer_run: str | None
    peer_name: str | None
    # What the manifest records and messages name: endpoint, else HF_ENDPOINT, else the public Hub.
    endpoint_url: str

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Settings:
        """Settings from module params (or a direct caller's subset); SnapshotError names a bad one."""
        values = {}
        for key, spec in argument_spec().items():
            value = params.get(key)
            values[key] = spec.get("default") if value is None else value
        # A token from a YAML block scalar ends in a newline: stripped here, before anything sends it.
        values["token"] = _hub.clean_token(values["token"])
        _check(values)
        values["dest"] = os.path.normpath(values["dest"])
        if values["endpoint"]:
            values["endpoint"] = values["endpoint"].rstrip("/")
        values["endpoint_url"] = values["endpoint"] or os.environ.get("HF_ENDPOINT") or _hub.DEFAULT_ENDPOINT
        link_from = values["link_from"] or []
        if isinstance(link_from, str):
            link_from = [link_from]
        # Linking a directory to itself would only hash every file once more.
        values["link_from"] = [os.path.normpath(p) for p in link_from if p and os.path.normpath(p) != values["dest"]]
        return cls(**values)


def _check(values: Mapping[str, Any]) -> None:
    """The checks the argument spec cannot express, with the message an operator needs.

    Each would otherwise surface late: as a traceback, as aria2 refusing its argv after the listing,
    or as minutes of retries of a request that can never succeed.
    """
    _check_repo_id(values["repo_id"])
    if not values["dest"] or not os.path.isabs(values["dest"]):
        raise SnapshotError("dest must be an absolute path, got %r" % values["dest"])
    if values["repo_type"] not in REPO_TYPES:
        raise SnapshotError("repo_type must be model, dataset or space")
    _check_numbers(values)
    _check_split_size(values["min_split_size"])
    for problem in (values["ca_path"] and _hub.ca_path_problem(values["ca_path"]),
                    values["proxy"] and _hub.proxy_problem(values["proxy"]),
                    # hub=false never asks the Hub: only a given token is checked then
                    _hub.host_token_problem(values["token"]) if values["hub"] else _hub.token_problem(values["token"]),
                    _endpoint_problem(values["endpoint"])):
        if problem:
            raise SnapshotError(problem)
    _check_peer_options(values)


def _endpoint_problem(endpoint: str | None) -> str | None:
    """endpoint (else HF_ENDPOINT) as an http(s)://host[:port][/path] URL: a file:// URL, a missing
    scheme or user:password@ would otherwise fail only after every retry (or land in the manifest)."""
    if endpoint is not None:
        return _hub.endpoint_problem(endpoint, "endpoint")
    from_env = os.environ.get("HF_ENDPOINT")
    return _hub.endpoint_problem(from_env, "HF_ENDPOINT (the endpoint in effect, endpoint unset)") if from_env else None


def _check_peer_options(values: Mapping[str, Any]) -> None:
    """listing, peers, hub: the combinations a run could not honour, refused before any request."""
    if values["listing"] is not None and not re.match(r"^[0-9a-f]{40}$", str(values["revision"])):
        raise SnapshotError("listing needs revision to be the 40-hex commit it was made for (the resolve_only run's "
                            "commit), got revision %r" % values["revision"])
    if not values["hub"] and values["listing"] is None:
        raise SnapshotError("hub=false needs listing (the files of the commit, from a resolve_only run on a host "
                            "with Hub access): without it this host cannot know what to fetch")
    if values["peers"] and not values["peer_token"]:
        raise SnapshotError("peers needs peer_token (the secret the peers' servers require)")
    if values["peer_run"] is not None and not re.match(r"^[A-Za-z0-9_-]{1,64}$", values["peer_run"]):
        raise SnapshotError("peer_run must be 1 to 64 letters, digits, _ or - (the id of this run's peer exchange), got %r"
                            % values["peer_run"])


def _check_repo_id(repo_id: Any) -> None:
    """huggingface_hub's own rule (validate_repo_id): what it refuses would fail every request."""
    if not repo_id or not isinstance(repo_id, str):
        raise SnapshotError("repo_id %r is not a Hub repo id (like org/name)" % (repo_id,))
    try:
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:  # the module reports the missing library; a direct caller gets the basic check
        if repo_id.count("/") > 1 or not re.match(r"^[\w.-]+(/[\w.-]+)?$", repo_id):
            raise SnapshotError("repo_id %r is not a Hub repo id (like org/name)" % repo_id)
        return
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise SnapshotError("repo_id %r is not a Hub repo id (like org/name): %s" % (repo_id, exc))


# (option, lowest, highest or None, why): aria2's own ranges where aria2 gets the value.
_RANGES = (
    ("connections", 1, MAX_CONNECTIONS, "aria2's per-server limit"),
    ("splits", 1, None, None),
    ("parallel_files", 1, None, None),
    ("max_tries", 1, None, None),
    ("timeout", 1, ARIA2_MAX_TIMEOUT, "aria2's --timeout range; 0 would make every request time out at once"),
    ("retry_wait", 0, ARIA2_MAX_TIMEOUT, "aria2's --retry-wait range"),
    ("hash_workers", 1, None, "threads that hash files; leave it unset for the default"),
    ("lock_timeout", 0, None, None),
    ("min_free_bytes", 0, None, None),
    ("peer_wait_timeout", 0, None, "seconds a file not yet published by its owner is waited for"),
)


def _check_numbers(values: Mapping[str, Any]) -> None:
    for key, low, high, why in _RANGES:
        value = values[key]
        if value is None and key == "hash_workers":
            continue
        if high is not None and not low <= int(value) <= high:
            raise SnapshotError("%s must be %d-%d (%s), got %s" % (key, low, high, why, value))
        if int(value) < low:
            raise SnapshotError("%s must be at least %d%s, got %s" % (key, low, " (%s)" % why if why else "", value))


def _check_split_size(value: Any) -> None:
    match = re.match(r"^(\d+)([KM]?)$", str(value))
    if not match:
        raise SnapshotError("min_split_size must look like 1M or 20M (aria2 syntax), got %r" % value)
    size = int(match.group(1)) * {"": 1, "K": 1024, "M": 1024 * 1024}[match.group(2)]
    if not MIN_SPLIT_LOW <= size <= MIN_SPLIT_HIGH:
        raise SnapshotError("min_split_size must be 1M-1024M (aria2's range), got %r" % value)
