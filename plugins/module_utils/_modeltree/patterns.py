# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which files of a model directory the allow/ignore patterns select: what hf_snapshot fetches and
model_verify checks against the Hub are the same files.

Private to the collection: not a public API, may change without notice. Standard library only.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence


def matches_patterns(path: str, allow: str | Sequence[str] | None, ignore: str | Sequence[str] | None) -> bool:
    """huggingface_hub's allow/ignore semantics (fnmatch; a trailing '/' means the folder)."""

    def norm(patterns):
        if not patterns:
            return None
        if isinstance(patterns, str):
            patterns = [patterns]
        return [p + "*" if p.endswith("/") else p for p in patterns]

    allow, ignore = norm(allow), norm(ignore)
    if allow is not None and not any(fnmatch.fnmatch(path, p) for p in allow):
        return False
    if ignore is not None and any(fnmatch.fnmatch(path, p) for p in ignore):
        return False
    return True
