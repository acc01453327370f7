# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A failure that carries what its module reports: the message and the result keys shown with it.

Private to the collection: not a public API, may change without notice.

The logic raises it wherever it stops, with the partial result it has at that point, so that a
module's ``main()`` only does ``module.fail_json(**exc.fail_kwargs())`` and never picks keys itself.
"""

from __future__ import annotations

from typing import Any


class ModuleFailure(Exception):
    """``msg`` names what failed and what to do; ``fields`` are the result keys reported with it."""

    def __init__(self, msg: str, **fields: Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.fields = fields

    def __str__(self) -> str:
        return self.msg

    def fail_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``module.fail_json`` for this failure."""
        return dict(self.fields, msg=self.msg)
