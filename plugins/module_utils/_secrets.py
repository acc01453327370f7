# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How a secret looks once it is out of sight: one mask for tokens, API keys and secret options.

Private to the collection: not a public API, may change without notice.
"""

from __future__ import annotations

MASK = "********"


def mask(text: str, *secrets: str | None) -> str:
    """``text`` with every non-empty secret in ``secrets`` replaced by MASK."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text
