#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_info
short_description: NVIDIA GPU facts from nvidia-smi, and whether a model (plus drafter) fits them
version_added: 0.1.0
description:
  - "Runs C(nvidia-smi --query-gpu=index,name,memory.total,memory.used,compute_cap,driver_version,uuid
    --format=csv,noheader,nounits) on the host and returns every GPU: index, name, UUID, memory total, used and
    free (MiB), compute capability (also as C(sm_XY)) and driver version."
  - "With O(model_paths), decides whether the weights fit per GPU when the server runs O(tp_size) ranks over
    O(nnodes) hosts: C(weights / tp_size + drafter + total x headroom_fraction <= total x mem_fraction_static)
    on each of the first C(tp_size / nnodes) GPUs, and fails naming each GPU with the needed and available
    bytes when not."
  - A model's size is the larger of C(model.safetensors.index.json) C(metadata.total_size) and the sizes of the
    C(*.safetensors) files on disk, so an index that understates its weights (model_verify treats total_size as
    advisory) cannot make a model fit.
  - The fit uses each GPU's total memory, not its free memory, because a server already running on the GPUs
    holds most of it and the restart being gated frees it first.
  - Reads only; never reports a change.
author:
  - gpufleet.llm maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.llm.attributes
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same query and fit check in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  nvidia_smi:
    description: Path of C(nvidia-smi). Default the one on the host's PATH.
    type: path
  require_gpu:
    description:
      - Fail when C(nvidia-smi) is missing or finds no GPU.
      - V(false) returns RV(gpu_count=0) instead (for inventories that mix GPU and CPU hosts); a fit check with
        O(model_paths) still fails then, as nothing fits on no GPU.
    type: bool
    default: true
  model_paths:
    description:
      - Model directories whose weights are sharded over the O(tp_size) ranks, normally the target's verified
        commit directory. Their sizes add up.
    type: list
    elements: path
  drafter_paths:
    description:
      - Model directories counted whole on every GPU, such as a DFlash drafter. Only used with O(model_paths).
    type: list
    elements: path
  tp_size:
    description: Tensor parallel size of the server (SGLang's C(tp-size)), over all nodes.
    type: int
    default: 1
  nnodes:
    description: Number of hosts one server spans (SGLang's C(nnodes)); this host runs C(tp_size / nnodes) ranks.
    type: int
    default: 1
  mem_fraction_static:
    description:
      - Share of each GPU's memory the server takes for weights and KV cache (SGLang's C(mem-fraction-static)).
        Give the value the server is configured with.
    type: float
    default: 0.9
  headroom_fraction:
    description:
      - Share of each GPU's total memory that must be left inside the static pool for the KV cache after the
        weights are loaded. V(0) checks the weights alone.
    type: float
    default: 0.1
  fail_on_problem:
    description: Fail when the model does not fit. V(false) only reports (check C(fits) in RV(fit) then).
    type: bool
    default: true
seealso:
  - name: gpu_info documentation
    description: The memory model and worked numbers for Kimi K2.6 with a DFlash drafter.
    link: https://github.com/gpufleet/gpufleet.llm/blob/main/docs/gpu_info.md
notes:
  - Needs only the Python standard library on the host.
"""

EXAMPLES = r"""
- name: GPU facts
  gpufleet.llm.gpu_info:
  register: gpus

- name: Does Kimi K2.6 plus its DFlash drafter fit 8 GPUs of this host?
  gpufleet.llm.gpu_info:
    model_paths: [/srv/models/Kimi-K2.6/3f2a9c...]
    drafter_paths: [/srv/models/Kimi-K2.6-DFlash/9b1e...]
    tp_size: 8
    mem_fraction_static: 0.88

- name: Two 8-GPU hosts serving one model at tp 16
  gpufleet.llm.gpu_info:
    model_paths: [/srv/models/Kimi-K2.6/3f2a9c...]
    tp_size: 16
    nnodes: 2

- name: Facts on a mixed fleet, without failing CPU-only hosts
  gpufleet.llm.gpu_info:
    require_gpu: false
"""

RETURN = r"""
gpus:
  description: Every GPU nvidia-smi lists, by index.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: GPU index.
      type: int
    name:
      description: Product name.
      type: str
    uuid:
      description: GPU UUID.
      type: str
    memory_total_mib:
      description: Total memory in MiB.
      type: int
    memory_used_mib:
      description: Memory in use in MiB.
      type: int
    memory_free_mib:
      description: Total minus used, in MiB.
      type: int
    compute_cap:
      description: Compute capability, for example C(10.3).
      type: str
    sm:
      description: The same as C(sm_XY), for example C(sm_103).
      type: str
    driver_version:
      description: Driver version.
      type: str
  sample: [{"index": 0, "name": "NVIDIA B300 SXM6 AC", "memory_total_mib": 275040, "compute_cap": "10.3",
            "sm": "sm_103", "driver_version": "580.95.05"}]
gpu_count:
  description: Number of GPUs.
  returned: always
  type: int
names:
  description: The distinct GPU names.
  returned: always
  type: list
  elements: str
compute_caps:
  description: The distinct compute capabilities.
  returned: always
  type: list
  elements: str
driver_version:
  description: The driver version (null without GPUs).
  returned: always
  type: str
memory_total_mib:
  description: The smallest GPU's total memory in MiB (null without GPUs).
  returned: always
  type: int
nvidia_smi:
  description: The nvidia-smi that ran (null when none was found and O(require_gpu=false)).
  returned: always
  type: str
models:
  description: Each model and drafter directory with its weight bytes and where the size came from.
  returned: when O(model_paths) is set
  type: list
  elements: dict
  sample: [{"path": "/srv/models/Kimi-K2.6/3f2a", "role": "model", "bytes": 589000000000, "source": "index total_size"}]
fit:
  description: The memory-fit verdict; C(problems) names each GPU that falls short with needed and available bytes.
  returned: when O(model_paths) is set
  type: dict
  sample: {"fits": true, "tp_size": 8, "nnodes": 1, "gpus_needed": 8, "gpus_present": 8,
           "needed_per_gpu_bytes": 110000000000, "available_per_gpu_bytes": 259000000000, "problems": []}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.llm.plugins.module_utils import _gpu
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure


def main() -> None:
    module = AnsibleModule(argument_spec=_gpu.argument_spec(), supports_check_mode=True)
    try:
        result = _gpu.run(module.params, warn=module.warn)
    except ModuleFailure as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
