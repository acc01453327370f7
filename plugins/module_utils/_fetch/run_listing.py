# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a run learns from the revision's listing: its commit, whether the token goes along, its files.

Private to the collection: not a public API, may change without notice.

``RunListing`` is the listing step of a ``snapshot.Run``: the Hub's listing (or one handed over from
another host, checked against the Hub's own where this host can ask it), the patterns, the paths that
may land in dest; and whether the repo needs the token, which decides whether it may travel over the
peer exchange.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable, Sequence
from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._common import paths as _paths
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import listcheck as _listcheck
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import listing as _listing
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _plan
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import SnapshotError, backoff
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.errors import private_over_peers_message
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.progress import Timings
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch.settings import Settings


class RunListing(object):
    """The listing of one run: ``commit`` and ``use_token`` once ``items`` listed the revision."""

    def __init__(self, settings: Settings, *, token: str | None, log: Callable[[str], None], timings: Timings) -> None:
        self.settings = settings
        self.token = token
        self.log = log
        self.timings = timings
        self.commit: str | None = None
        self.use_token = False  # the listing decides: only a repo that needs it gets the token

    def items(self, dest: str, *, whole: bool) -> list[_plan.Item]:
        """The revision's selected files as plan Items; refuses any path that would land outside dest.

        ``whole`` (resolve_only): a listing handed over must hold the Hub's whole selection, nothing left out."""
        s = self.settings
        mark = time.monotonic()
        if s.listing is not None:
            self.commit, remote_files, self.use_token = _listing.from_listing(s)
            if s.hub:
                # Another host's list is never trusted where this host can ask the Hub itself: every entry
                # must be the Hub's own (a confirmation, resolve_only: the whole selection, nothing left out).
                self.commit, own, self.use_token = _listing.list_remote(s, token=self.token, log=self.log)
                _listcheck.refuse_differences(
                    [f for f in remote_files if _listing.matches_patterns(f.path, s.allow_patterns, s.ignore_patterns)],
                    [f for f in own if _listing.matches_patterns(f.path, s.allow_patterns, s.ignore_patterns)],
                    repo_id=s.repo_id, commit=self.commit, endpoint=s.endpoint_url, listing_from=s.listing_from,
                    whole=whole)
        else:
            self.commit, remote_files, self.use_token = _listing.list_remote(s, token=self.token, log=self.log)
        self.timings.took("list", mark)
        unsafe = []
        items = []
        for remote in remote_files:
            if not _listing.matches_patterns(remote.path, s.allow_patterns, s.ignore_patterns):
                continue
            try:
                if remote.path.split("/")[0] == _manifest.META_DIR:
                    raise _paths.UnsafePathError("%r is inside %s/, which hf_snapshot keeps for itself"
                                                 % (remote.path, _manifest.META_DIR))
                items.append(_plan.Item(remote, _paths.dest_path(dest, remote.path)))
            except _paths.UnsafePathError as exc:
                unsafe.append(str(exc))
        if unsafe:
            raise SnapshotError("refusing %s@%s: %d remote path(s) would land outside %s or not fit its filesystem: %s" % (
                s.repo_id, self.commit, len(unsafe), dest, "; ".join(unsafe[:10])), unsafe=unsafe)
        if not items:
            raise SnapshotError("%s@%s has no file matching allow_patterns=%s ignore_patterns=%s"
                                % (s.repo_id, self.commit, s.allow_patterns, s.ignore_patterns))
        return items

    def refuse_private_over_peers(self, items: Sequence[_plan.Item], peers: Sequence[Any] | None) -> None:
        """A repo that needs the token (private or gated) is fetched with peers only with peer_private:
        its files then travel between hosts over the peer exchange, plain HTTP behind a per-run secret.
        Known from the listing handed over (listing_token_required), this run's own listing, or, on a
        host with Hub access, one HEAD without the token (a gated repo lists without it)."""
        s = self.settings
        if peers is None or s.peer_private:
            return
        if s.listing_token_required or self.use_token or (s.hub and self.token_required(items)):
            raise SnapshotError(private_over_peers_message(s.repo_id))

    def token_required(self, items: Sequence[_plan.Item]) -> bool:
        """Whether the repo needs the token: its listing did (private), or the Hub refuses a file without
        it (gated: the listing is public, the files are not). One HEAD of the smallest file, no token;
        an answer other than a file or a passing fault counts as needing it (the safe side)."""
        if self.use_token:
            return True
        s = self.settings
        probe = min(items, key=lambda it: (it.remote.size, it.remote.path))
        opener = _hub.url_opener(s.proxy, s.validate_certs, s.ca_path)
        last = ""
        for attempt in range(1, s.max_tries + 1):
            try:
                _hub.resolve_file(opener, s.endpoint_url, s.repo_id, self.commit, probe.remote.path, token=None,
                                  repo_type=s.repo_type, timeout=s.timeout)
                return False
            except _hub.HubHTTPError as exc:
                if exc.status < 500 and exc.status != 429:
                    return True
                last = "HTTP %s" % exc.status
            except (OSError, ValueError, http.client.HTTPException) as exc:
                last = "%s: %s" % (type(exc).__name__, exc)
            if attempt < s.max_tries:
                time.sleep(backoff(s.retry_wait, attempt))
        raise SnapshotError("could not tell whether %s needs the token: a HEAD of %s without it failed %d times, last: %s"
                            % (s.repo_id, probe.remote.path, s.max_tries, last))
