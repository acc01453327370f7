# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The failure a Hub call reports (hf_snapshot's SnapshotError), and the backoff between tries.

Private to the collection: not a public API, may change without notice.

SnapshotError is hf_snapshot's failure; it lives here because the Hub's listing and resolve raise it
too, and model_verify lists the Hub with the same code. _fetch/errors.py gives it to hf_snapshot's
code under its old name.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure

# No wait between two tries grows past this, however many tries came before.
MAX_BACKOFF = 120.0

# The keys of a partial result (a run that failed after it fetched some files) that the module's
# failure shows: enough to see what landed, not the whole result.
_PARTIAL_RESULT_KEYS = ("commit", "files", "bytes_fetched", "stray", "bytes_from_hub", "bytes_from_peers", "from_peers",
                        "peers_dropped")


def backoff(retry_wait: float, attempt: int) -> float:
    """Seconds to wait after failed try number ``attempt`` (1-based): exponential, capped."""
    return min(MAX_BACKOFF, retry_wait * 2 ** (attempt - 1))


class SnapshotError(ModuleFailure):
    """A failure to report to the operator: ``msg`` names the problem and what to do.

    Its fields (``details``) may hold ``failed`` ({path: last error}), ``disk`` (the preflight
    figures), ``result`` (the partial result of a run that landed some files), ``unsafe`` and
    ``status``; ``fail_kwargs`` reports only some of them (see there).
    """

    @property
    def details(self) -> dict[str, Any]:
        """The fields, by the name hf_snapshot's callers read them."""
        return self.fields

    def mask(self, secret: str | None) -> None:
        """Replace ``secret`` wherever this error would show it (the message, per-file errors)."""
        if not secret:
            return
        self.msg = _secrets.mask(self.msg, secret)
        self.args = (self.msg,)
        if isinstance(self.details.get("exception"), str):
            self.details["exception"] = _secrets.mask(self.details["exception"], secret)
        failed = self.details.get("failed")
        if failed:
            self.details["failed"] = {path: _secrets.mask(error, secret) for path, error in failed.items()}

    def fail_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``module.fail_json``: unlike ModuleFailure's, not every field.

        ``unsafe`` and ``status`` stay on the exception for a Python caller (the message names
        what they hold); of a partial ``result``, only the keys that show what landed; ``exception``
        (a traceback, shown with -vvv) when the failure came from one.
        """
        kwargs: dict[str, Any] = {"msg": self.msg}
        for key in ("failed", "disk", "exception", "listing_differences"):
            if key in self.details:
                kwargs[key] = self.details[key]
        partial = self.details.get("result")
        if partial:
            kwargs.update({key: partial[key] for key in _PARTIAL_RESULT_KEYS if key in partial})
        return kwargs
