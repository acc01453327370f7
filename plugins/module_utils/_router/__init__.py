# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's router (sglang-router 0.3.2): its worker API and a worker's own load, for sglang_router_worker.

Private to the collection: not a public API, may change without notice. Standard library only; imports
only ``_common``.
"""
