# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A stand-in for nvidia-smi: there is no GPU on this machine.

The outputs below are NOT recordings from real hosts. They are written in the exact format of
``nvidia-smi --query-gpu=index,name,memory.total,memory.used,compute_cap,driver_version,uuid
--format=csv,noheader,nounits`` (MiB, ", " separated), with NVIDIA's published figures: 8x B300
(288 GB HBM3e per GPU in NVIDIA's B300 specification, here 275040 MiB; compute capability 10.3,
i.e. sm_103, in NVIDIA's CUDA GPU table at developer.nvidia.com/cuda-gpus; an R580 driver, the
CUDA 13 branch), H200 141 GB -> 143771 MiB, H100 80 GB -> 81559 MiB as nvidia-smi shows them.
``write_fake`` puts an executable script on disk that prints one of them, and fails like the real
tool when asked anything else.
"""
from __future__ import annotations

import os
import stat

from ansible_collections.gpufleet.llm.plugins.module_utils import _gpu

GB = 1000 ** 3
KIMI_BYTES = 589 * GB           # Kimi K2.6: its 64 safetensors shards on the Hub (moonshotai/Kimi-K2.6)
DFLASH_BYTES = int(6.5 * GB)    # its DFlash drafter


def rows(count, name, total_mib, cap, driver, used_mib=0, uuid_stem="0000"):
    return "".join("%d, %s, %d, %d, %s, %s, GPU-%s-%04d-4a4a-8b8b-%012d\n"
                   % (i, name, total_mib, used_mib, cap, driver, uuid_stem, i, i) for i in range(count))


B300_X8 = rows(8, "NVIDIA B300 SXM6 AC", 275040, "10.3", "580.95.05", used_mib=0, uuid_stem="b300")
H200_X8 = rows(8, "NVIDIA H200", 143771, "9.0", "570.172.08", used_mib=4, uuid_stem="h200")
H200_X1 = rows(1, "NVIDIA H200", 143771, "9.0", "570.172.08", uuid_stem="h201")
H100_X8 = rows(8, "NVIDIA H100 80GB HBM3", 81559, "9.0", "550.163.01", used_mib=71250, uuid_stem="h100")
# A smaller workstation-class host: two 24 GB cards, one busy, an old driver without compute_cap.
SMALL_X2 = ("0, NVIDIA L4, 23034, 0, 8.9, 535.230.02, GPU-l4000000-0000-4a4a-8b8b-000000000000\n"
            "1, NVIDIA L4, 23034, 20480, [N/A], 535.230.02, GPU-l4000000-0001-4a4a-8b8b-000000000001\n")
NO_DRIVER = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. " \
            "Make sure that the latest NVIDIA driver is installed and running.\n"


def write_fake(directory, stdout="", rc=0, stderr="", name="nvidia-smi"):
    """An executable stand-in nvidia-smi in ``directory`` (its path returned).

    It checks that it was asked exactly gpu_info's query, so a changed query cannot pass silently
    against an output recorded for another one.
    """
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    out = os.path.join(directory, name + ".stdout")
    err = os.path.join(directory, name + ".stderr")
    with open(out, "w") as handle:
        handle.write(stdout)
    with open(err, "w") as handle:
        handle.write(stderr)
    expected = " ".join(_gpu.QUERY_ARGS)
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\n"
                     "# Stand-in for nvidia-smi (no GPU here): prints a canned answer.\n"
                     "if [ \"$*\" != '%s' ]; then echo \"stand-in nvidia-smi: unexpected arguments: $*\" >&2; exit 2; fi\n"
                     "cat '%s'\ncat '%s' >&2\nexit %d\n" % (expected, out, err, rc))
    os.chmod(path, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    return path


def make_model(directory, total_size=None, shard_sizes=()):
    """A model directory: an index with ``total_size`` and/or sparse shards of the given sizes."""
    os.makedirs(directory, exist_ok=True)
    if total_size is not None:
        with open(os.path.join(directory, _gpu.INDEX), "w") as handle:
            handle.write('{"metadata": {"total_size": %d}, "weight_map": {"w": "model-00001-of-000001.safetensors"}}'
                         % total_size)
    for i, size in enumerate(shard_sizes, 1):
        with open(os.path.join(directory, "model-%05d-of-%06d.safetensors" % (i, len(shard_sizes))), "wb") as handle:
            handle.truncate(size)  # sparse: apparent size only
    return directory
