# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How a secret looks once it is out of sight: one mask for tokens, API keys and secret options.

Private to the collection: not a public API, may change without notice.

A secret reaches a message in more forms than its raw text: an HTTP library's error shows a header
value as ``repr`` of its bytes (``b'Bearer hf_x\\n'``), JSON escapes it, a URL percent-encodes it.
``mask`` hides every one of them, and the secret without its surrounding whitespace too (the form
that went on the wire once the collection stripped it).
"""

from __future__ import annotations

import json
from urllib import parse as _urlparse

MASK = "********"


def forms(secret: str) -> list[str]:
    """Every way ``secret`` can be written in a message, longest first (none empty)."""
    found = set()
    for base in (secret, secret.strip()):
        if not base:
            continue
        escaped = [
            base,
            repr(base)[1:-1],  # str repr: \n, \t, \x01, \\
            repr(base.encode("utf-8", "surrogatepass"))[2:-1],  # bytes repr: b'...' as httpx/http.client show it
            json.dumps(base)[1:-1],
            json.dumps(base, ensure_ascii=False)[1:-1],
            _urlparse.quote(base, safe=""),
            _urlparse.quote(base, safe="/"),
            _urlparse.quote_plus(base, safe=""),
        ]
        # An escaped form inside another repr (an exception's repr holding the header's repr).
        escaped += [repr(text)[1:-1] for text in list(escaped)]
        found.update(text for text in escaped if text)
    return sorted(found, key=lambda text: (-len(text), text))


def mask(text: str, *secrets: str | None) -> str:
    """``text`` with every form (see ``forms``) of every non-empty secret in ``secrets`` replaced by MASK."""
    every = set()
    for secret in secrets:
        if secret and isinstance(secret, str):
            every.update(forms(secret))
    for form in sorted(every, key=lambda item: (-len(item), item)):
        text = text.replace(form, MASK)
    return text
