#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench_report
short_description: Write a benchmark report (JSON, markdown table, PNG plots) from sglang_bench results
version_added: 0.1.0
description:
  - "Meant to run on the controller (C(delegate_to: localhost)) with the registered results of
    M(gpufleet.llm.sglang_bench) for one host: the speculative run and, when it ran, the baseline run."
  - "Writes into O(dest): C(benchmark-<host>-<timestamp>.json) (the report document, C(schema_version) 2, see
    docs/benchmark.md), C(benchmark-<host>-<timestamp>.md) (a markdown table, one row per run and concurrency
    level, with the speedup per level and its 95% confidence interval over the repeats when a baseline ran) and
    two PNG plots of 800x500 pixels: output throughput vs concurrency (spec vs baseline) and a histogram of the
    per-request accept lengths. Each arm's admission (C(max_running_requests) from its C(/server_info)) is recorded,
    and a note says when the arms differ."
  - The plots are made with matplotlib (Agg backend, no display needed).
  - A report of the lab's SGLang stand-in says in every file that its figures say nothing about GPU performance.
author:
  - gpufleet.llm maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.llm.attributes
attributes:
  check_mode:
    support: full
    details: Builds and checks the report and returns the file names and the markdown; writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Each run writes a new set of files named after O(timestamp) (default now).
options:
  dest:
    description: Directory on the controller for the report files; must exist.
    type: path
    required: true
  host:
    description: The benchmarked host's name (inventory hostname), used in the file names and titles.
    type: str
    required: true
  spec:
    description: The registered result of M(gpufleet.llm.sglang_bench) with O(gpufleet.llm.sglang_bench#module:label=spec).
    type: dict
    required: true
  baseline:
    description: The registered result of the baseline run (O(gpufleet.llm.sglang_bench#module:label=baseline)), if one ran.
    type: dict
  baseline_note:
    description: Why there is no baseline (shown in the report when O(baseline) is not given).
    type: str
  timestamp:
    description: The timestamp part of the file names. Default the current UTC time as C(YYYYmmddTHHMMSSZ).
    type: str
  plots:
    description: Write the PNG plots (needs matplotlib).
    type: bool
    default: true
requirements:
  - matplotlib (for O(plots=true)), in the controller's Python (C(requirements/controller.txt) pins it)
seealso:
  - module: gpufleet.llm.sglang_bench
"""

EXAMPLES = r"""
- name: Report (on the controller)
  gpufleet.llm.sglang_bench_report:
    dest: "{{ playbook_dir }}/benchmark-reports"
    host: "{{ inventory_hostname }}"
    spec: "{{ bench_spec }}"
    baseline: "{{ bench_baseline if bench_baseline is not skipped else omit }}"
    baseline_note: set sglang_bench_baseline=true to run the baseline
  delegate_to: localhost
  become: false
"""

RETURN = r"""
files:
  description: Absolute paths of the files written (or that would be written in check mode).
  returned: always
  type: dict
  sample: {"json": "/home/ops/benchmark-reports/benchmark-gpu1-20260101T120000Z.json",
           "markdown": "/home/ops/benchmark-reports/benchmark-gpu1-20260101T120000Z.md",
           "throughput_png": "/home/ops/benchmark-reports/benchmark-gpu1-20260101T120000Z-throughput.png",
           "accept_length_png": "/home/ops/benchmark-reports/benchmark-gpu1-20260101T120000Z-accept-length.png"}
speedup:
  description:
    - "Per concurrency level in both runs, spec and baseline output throughput and their ratio, with the ratio's
      confidence interval over the repeats (C(speedup_ci_low), C(speedup_ci_high); null with fewer than 2 repeats
      in a run): a Welch t interval on the difference of the mean log throughputs (C(ci_method)
      V(welch-t-log-ratio)), as the two runs are separate server starts and their repeats are not paired."
  returned: always
  type: list
  elements: dict
  sample: [{"concurrency": 8, "spec_output_throughput": 910.2, "baseline_output_throughput": 312.5,
            "speedup": 2.91, "latency_p50_ratio": 2.88, "speedup_ci_low": 2.74, "speedup_ci_high": 3.09,
            "ci_confidence": 0.95, "ci_method": "welch-t-log-ratio", "repeats_spec": 3, "repeats_baseline": 3}]
markdown:
  description: The markdown report text.
  returned: always
  type: str
standin:
  description: True when the benchmarked server was the lab's stand-in.
  returned: always
  type: bool
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpufleet.llm.plugins.module_utils._bench import report as _sglang_report
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure

try:
    import matplotlib  # noqa: F401  pylint: disable=unused-import
except ImportError:
    MATPLOTLIB_ERROR = traceback.format_exc()
else:
    MATPLOTLIB_ERROR = None


def main() -> None:
    module = AnsibleModule(argument_spec=_sglang_report.argument_spec(), supports_check_mode=True)
    if module.params["plots"] and MATPLOTLIB_ERROR:
        module.fail_json(msg=missing_required_lib("matplotlib", reason="to draw the benchmark plots (or set plots=false)"),
                         exception=MATPLOTLIB_ERROR)
    try:
        result = _sglang_report.run(module.params, check_mode=module.check_mode)
    except ModuleFailure as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
