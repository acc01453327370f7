# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What every module that asks systemd shares: the command runner's shape, unit names, ``systemctl show``.

Private to the collection: not a public API, may change without notice. Standard library only: the
commands run through the ``run_command`` a module passes (``AnsibleModule.run_command``).
"""

from __future__ import annotations

import re
from typing import Callable

RunCommand = Callable[[list], "tuple[int, str, str]"]

# systemd.unit(5) unit names; the name goes onto a command line, so nothing else is let through.
_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\@-]+$")


def check_name(unit: str) -> str | None:
    """A problem with a unit name, or None."""
    if not _UNIT_NAME.match(unit) or unit.startswith("-"):
        return "unit %r is not a systemd unit name (for example sglang-main.service)" % unit
    return None


def parse_show(text: str) -> dict[str, str]:
    """``systemctl show -p ...`` output (KEY=VALUE lines) as a dict."""
    props = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props
