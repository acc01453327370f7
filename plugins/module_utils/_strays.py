# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stray files in a model directory: one table of what counts as a downloader's partial.

Private to the collection: not a public API, may change without notice.

hf_snapshot (which reports strays and, with ``prune_partials``, removes the partials) and
model_verify (which fails on a partial and says hf_snapshot's ``prune_partials`` removes it) read
the same table, so what one tool promises the other does.
"""

from __future__ import annotations

# huggingface_hub's .incomplete, aria2's .aria2 control files, browsers' .crdownload, and the
# generic .part / .partial / .download / .tmp of curl, wget and hand-typed scripts
# (".tmp.download" ends in ".download").
PARTIAL_SUFFIXES = (".incomplete", ".aria2", ".part", ".partial", ".crdownload", ".download", ".tmp")


def is_partial(name: str) -> bool:
    """True when ``name`` (a file name or a relative path) is a downloader's leftover."""
    return name.endswith(PARTIAL_SUFFIXES)
