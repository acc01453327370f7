# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Config YAML files for the sglang_preflight tests: a valid DFlash config as the sglang role renders
it (dash keys, the role's DFlash defaults) and one broken variant per problem."""
from __future__ import annotations

import os

API_KEY = "sk-gpufleet-test-NOT-A-SECRET-4242"  # fake; must never appear in any output

GOOD = """\
model-path: /srv/models/Kimi-K2.6/3f2a9c0000000000000000000000000000000000
speculative-algorithm: DFLASH
speculative-draft-model-path: /srv/models/Kimi-K2.6-DFlash/9b1e000000000000000000000000000000000000
speculative-num-draft-tokens: 16
trust-remote-code: true
tp-size: 8
mem-fraction-static: 0.88
context-length: 262144
host: 127.0.0.1
port: 30000
enable-metrics: false
api-key: %s
""" % API_KEY

BAD = {
    "underscore": GOOD.replace("tp-size: 8", "tp_size: 8"),
    "unknown": GOOD + "speculative-algorythm: DFLASH\n",
    "dflashx": GOOD.replace("speculative-algorithm: DFLASH", "speculative-algorithm: DFLASHX"),
    "choice": GOOD + "attention-backend: nope\n",
    "value": GOOD.replace("port: 30000", "port: thirty"),
    "null": GOOD + "served-model-name:\n",
    "secret_underscore": GOOD.replace("api-key:", "api_key:"),
    "no_model": "\n".join(line for line in GOOD.splitlines() if not line.startswith("model-path")) + "\n",
}

# Everything wrong at once: each must be named, not only the first argparse meets.
ALL_AT_ONCE = GOOD.replace("tp-size: 8", "tp_size: 8").replace("speculative-algorithm: DFLASH",
                                                               "speculative-algorithm: DFLASHX") + \
    "speculative-algorythm: DFLASH\nattention-backend: nope\n"


def write(directory, name, text, suffix=".yaml"):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name + suffix)
    with open(path, "w") as handle:
        handle.write(text)
    return path
