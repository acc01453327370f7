# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Start sglang-router with its API key from the environment, never on the command line.

Installed by the gpufleet.llm sglang_router role next to the router's venv and run by its unit as
``<venv python> gpufleet-sglang-router.py <launch_router arguments>``. sglang-router 0.3.2 reads its
``--api-key`` from argv only (its argparse option has no environment default), and argv is world-readable
in /proc/<pid>/cmdline. So the unit's EnvironmentFile (0600 root) sets SGLANG_ROUTER_API_KEY, and this
script hands it to the router's own parser in-process: the key never is an argument of any process.
Everything else is the router's own entry point, ``sglang_router.launch_router``.
"""
from __future__ import annotations

import os
import sys

from sglang_router.launch_router import launch_router, parse_router_args

KEY_VARIABLE = "SGLANG_ROUTER_API_KEY"


def main() -> None:
    argv = sys.argv[1:]
    if any(arg == "--api-key" or arg.startswith("--api-key=") for arg in argv):
        sys.exit("gpufleet-sglang-router: --api-key on the command line is refused: set %s in the unit's "
                 "EnvironmentFile (the role's sglang_router_api_key)" % KEY_VARIABLE)
    key = os.environ.pop(KEY_VARIABLE, "")
    if key:
        argv += ["--api-key", key]
    launch_router(parse_router_args(argv))


if __name__ == "__main__":
    main()
