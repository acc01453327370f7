#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_verify
short_description: Integrity and config gate for a safetensors model directory (and its DFlash drafter)
version_added: 0.1.0
description:
  - Checks one model directory on the remote host before a server loads it, and never modifies the model files.
  - "C(config.json) parses and every O(expect) holds; the weights index (C(model.safetensors.index.json)) or the
    single C(model.safetensors) parses, its C(weight_map) is non-empty, every shard it names exists as a regular
    file inside O(path) (a symlink leading out of the tree is a problem; in a huggingface_hub cache snapshot, out of
    its repo folder); no C(.safetensors) file the index does not
    reference and no partial downloads (C(.aria2), C(.incomplete), C(.part), ...). Unreferenced weights SGLang never
    loads are notices: C(consolidated*.safetensors) beside the index, C(consolidated.safetensors) beside a lone
    C(model.safetensors), and any C(.safetensors) file in a subdirectory such as C(original/)."
  - "Every shard's header parses with the safetensors library and the file size is exactly 8 + header length +
    data length (truncated files and trailing bytes both fail; zero-byte files fail); every tensor of the
    C(weight_map) is in the header of the shard it maps to and every header tensor is in the C(weight_map);
    C(metadata.total_size) is compared with the sum of tensor bytes (a difference is a notice: no loader reads it)."
  - "File sizes and sha256 against the manifest C(hf_snapshot) wrote, or against the Hub listing of O(repo_id) at
    O(revision) for a tree placed by another tool (non-LFS files by their git blob id). Small files (every file
    that is not LFS: config, tokenizer config, C(dflash.py) and other custom code run with C(trust_remote_code))
    are hashed in every mode; LFS files (the weights, and large files such as C(tiktoken.model)) as O(mode) says.
    Where the manifest does not say whether a file is LFS, a file ending in C(.safetensors), C(.bin), C(.pt),
    C(.pth), C(.gguf), C(.h5), C(.msgpack), C(.onnx), C(.ckpt) or C(.model) counts as one."
  - "With O(target), checks that O(path) is a DFlash drafter config that fits the target model (hidden size,
    vocabulary size, target layer ids, number of target layers). The drafter is read as SGLang 0.5.23's
    C(parse_dflash_draft_config) reads it: C(block_size), C(num_target_layers), C(target_layer_ids) and
    C(mask_token_id) from C(dflash_config) first, then the top level; C(target_layer_ids) and C(mask_token_id)
    are optional (SGLang then picks the layers and the mask token); C(block_size) >= 1 when set. The first of its
    C(architectures) must be a DFlash class SGLang registers (C(DFlashDraftModel), C(DFlash2DraftModel), ...).
    Values SGLang accepts only by coercion (V(true) or V(\"16\") where an integer belongs) are problems too."
  - "Hostile or broken input is a problem line, never a crash: C(config.json) and the index must be regular files
    (symlinks are followed; a FIFO or a device is refused without being opened for a blocking read) of at most
    64 MiB (a Kimi K2-class index of ~200,000 tensors is ~10-20 MB) nested at most 64 levels; header offsets
    such as V(1e400), an O(expect) expression that raises on this config and C(architectures) that is not a
    list of class names each become one problem naming the file and the fix."
  - The result lists every check with its status, and the failure message lists every problem with its fix, not
    only the first one. The module never reports a change.
author:
  - gpufleet.llm maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.llm.attributes
attributes:
  check_mode:
    support: full
    details: Runs every check; the stat cache is not written in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Never changes the model; only O(mode=full) and O(mode=auto) record hash results in the stat cache.
options:
  path:
    description: The model directory (for example the commit directory C(hf_snapshot) fetched into).
    type: path
    required: true
  mode:
    description:
      - V(quick) reads config, index and shard headers and hashes only the small files; its cost does not grow with
        the size of the weights. LFS files (the weights, C(tiktoken.model)) get a size check only.
      - V(full) hashes every file.
      - V(auto) hashes the small files and every weight file whose stat record (size, mtime, ctime, inode)
        changed since it last matched its sha256, and records the results in C(<path>/.gpufleet/statcache.json)
        (atomically; not in check mode). Before it has a record of its own, hf_snapshot's manifest record
        vouches for a file; a record without ctime (an older manifest) vouches for nothing. The device number is
        not compared, so a remount alone causes no re-hash.
    type: str
    choices: [quick, full, auto]
    default: auto
  expect:
    description:
      - "Expectations over C(config.json), JMESPath expression -> expected value, for example
        C(model_type: kimi_k25) or C(text_config.num_hidden_layers: 61)."
      - Values compare by JSON meaning (V(61) equals V(61.0) but not V("61"); V(true) is not V(1)).
      - An expression that does not parse is a parameter error.
      - An expression that parses but raises on this config (for example C(length(missing))) is a problem.
    type: dict
  target:
    description:
      - Path of the target model when O(path) is a DFlash drafter; its C(config.json) is read (C(text_config) where
        the target nests its language model's numbers). The target itself is not verified by this call.
    type: path
  require_files:
    description:
      - Globs relative to O(path) that must each match at least one file, for example C(tokenizer_config.json) or
        C(*.tiktoken).
    type: list
    elements: str
  manifest:
    description: The manifest with the expected sizes and hashes. Default C(<path>/.gpufleet/manifest.json).
    type: path
  repo_id:
    description:
      - Take the expected sizes and hashes from this Hub repository instead of a manifest, for a tree placed by
        another tool. Needs C(huggingface_hub) on the host.
    type: str
  revision:
    description: Branch, tag or commit of O(repo_id). Default V(main).
    type: str
  endpoint:
    description:
      - Hub endpoint for O(repo_id). Default C(HF_ENDPOINT) or the public Hub.
      - An V(http://) or V(https://) URL of the form scheme://host[:port][/path], without user info, query or fragment
        (checked at once).
    type: str
  token:
    description:
      - Hub token for O(repo_id). Default the host's token (C(HF_TOKEN) or the token file).
      - Sent only after the Hub asks for it (a private or gated repo), as C(hf_snapshot) does, and only to
        O(endpoint)'s origin; a listing page or redirect on another origin is refused. See docs/model_verify.md,
        "Where the token goes".
      - Surrounding whitespace is removed; a token that still holds a space, a control character or a
        non-ASCII character is refused before any request.
    type: str
  proxy:
    description:
      - HTTP proxy URL (V(http://[user:password@]host[:port])) for every request of the O(repo_id) listing, as
        C(hf_snapshot)'s option of this name. Default the host's proxy environment variables, if any.
      - It may carry credentials; it is never shown in the module's output.
      - Only with O(repo_id).
    type: str
  validate_certs:
    description:
      - Check the endpoint's TLS certificate during the O(repo_id) listing. Set V(false) only for a test endpoint.
      - V(false) only applies with O(repo_id).
    type: bool
    default: true
  ca_path:
    description:
      - PEM bundle of the CA that signs the endpoint's certificate (a private mirror), for the O(repo_id) listing.
        Default the system's CAs.
      - Only with O(repo_id).
    type: path
  timeout:
    description:
      - Seconds a request of the O(repo_id) listing may stay silent before the listing gives up (the hashes check
        then reports that it could not list). At least V(1).
    type: int
    default: 60
  allow_patterns:
    description:
      - With O(repo_id), only the Hub's files that match one of these globs are expected (the same semantics as
        C(hf_snapshot)'s option of this name and huggingface_hub's; a trailing C(/) means the folder). Give the
        patterns the tree was fetched with, so files it left out on purpose are not reported missing.
      - Only with O(repo_id); a manifest already lists just what C(hf_snapshot) fetched.
    type: list
    elements: str
  ignore_patterns:
    description:
      - With O(repo_id), the Hub's files that match one of these globs are not expected (as C(hf_snapshot)'s
        option of this name).
      - Only with O(repo_id).
    type: list
    elements: str
  hash_workers:
    description: Files hashed in parallel. Default the number of cores available to the process.
    type: int
  allow_stray:
    description:
      - Report complete C(.safetensors) files the index does not reference as warnings instead of problems.
      - Partial downloads (C(.aria2), C(.incomplete) and the other partial suffixes) stay problems, since each stands
        for a file whose download did not finish.
    type: bool
    default: false
  fail_on_problem:
    description: Fail when a problem is found. V(false) reports only (for audits); check RV(ok) then.
    type: bool
    default: true
requirements:
  - safetensors and numpy (safetensors needs a framework to open a file even when it reads only the header)
  - jmespath (with O(expect))
  - huggingface_hub (with O(repo_id))
seealso:
  - name: model_verify documentation
    description: Checks, modes and the stat cache in detail.
    link: https://github.com/gpufleet/gpufleet.llm/blob/main/docs/model_verify.md
notes:
  - Run it with the tools venv's Python (C(ansible_python_interpreter=/opt/gpufleet/tools/bin/python)) that the
    C(gpufleet.llm.model) role installs.
  - A C(<path>/.gpufleet) that is a symlink, or a C(manifest.json), C(statcache.json) or C(lock) in it that is one, is
    refused before anything there is read or written (the module fails naming the link); remove the link.
"""

EXAMPLES = r"""
- name: Verify the target before a server loads it (hashes only what changed since the last run)
  gpufleet.llm.model_verify:
    path: /srv/models/Kimi-K2.6/3f2a9c...
    expect:
      model_type: kimi_k25
      text_config.num_hidden_layers: 61
      text_config.n_routed_experts: 384
    require_files:
      - tokenizer_config.json
      - tiktoken.model

- name: Verify the DFlash drafter against its target
  gpufleet.llm.model_verify:
    path: /srv/models/Kimi-K2.6-DFlash/9b1e...
    target: /srv/models/Kimi-K2.6/3f2a9c...
    mode: full

- name: Audit a tree placed by another tool against the Hub, report only
  gpufleet.llm.model_verify:
    path: /data/hf/Kimi-K2.6
    repo_id: moonshotai/Kimi-K2.6
    revision: main
    token: "{{ hf_token }}"
    fail_on_problem: false
  register: audit

- name: Audit a huggingface_hub cache snapshot fetched without the original weights and the README
  gpufleet.llm.model_verify:
    path: /data/hf-cache/models--moonshotai--Kimi-K2.6/snapshots/3f2a9c...
    repo_id: moonshotai/Kimi-K2.6
    revision: 3f2a9c...
    ignore_patterns: ["original/*", "*.md"]

- name: Show what is wrong
  ansible.builtin.debug:
    var: audit.problems
  when: not audit.ok
"""

RETURN = r"""
ok:
  description: True when no check found a problem.
  returned: always
  type: bool
verified_path:
  description: The O(path) that was verified.
  returned: always
  type: str
mode:
  description: The O(mode) that ran.
  returned: always
  type: str
checks:
  description: Every check that ran, in order, with its status (V(ok), V(failed), V(warn), V(skipped)) and detail.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "headers", "status": "ok", "detail": "4 shard header(s) parse, sizes = 8 + header + data"}]
problems:
  description: One line per problem, naming the file and the fix.
  returned: always
  type: list
  elements: str
  sample: ["model-00002-of-000004.safetensors: truncated: 1000 bytes, its header needs 1024 ...; re-fetch it"]
notices:
  description: Findings that do not fail the run (also shown as Ansible warnings) (stray files with O(allow_stray), no manifest in quick mode).
  returned: always
  type: list
  elements: str
shards:
  description: Number of weight files (shards) the index names (1 for a single-file model).
  returned: always
  type: int
tensors:
  description: Number of tensors in the weight_map (or in the single file).
  returned: always
  type: int
total_size:
  description: Sum of the tensor bytes of all shards (null when a shard does not parse).
  returned: always
  type: int
bytes_hashed:
  description: Bytes read and hashed by this run.
  returned: always
  type: int
hashed:
  description: Relative paths of the files hashed by this run.
  returned: always
  type: list
  elements: str
cached:
  description: Weight files not hashed because the stat cache (or the manifest's stat record) vouched for them.
  returned: always
  type: int
files_checked:
  description: Files listed by the manifest or the Hub whose size (and hash, as the mode says) were checked.
  returned: always
  type: int
expected_from:
  description: Where the expected hashes came from, V(manifest), V(hub) or null.
  returned: always
  type: str
commit:
  description: The commit the expected hashes describe.
  returned: when known
  type: str
duration:
  description: Seconds the checks took on the host (the module's own work, without Ansible's start-up).
  returned: always
  type: float
config:
  description: Facts from config.json (C(text_config) where nested).
  returned: always
  type: dict
  contains:
    model_type:
      description: Top-level model_type.
      type: str
    architectures:
      description: Architectures.
      type: list
    layers:
      description: Number of hidden layers.
      type: int
    experts:
      description: Routed experts (n_routed_experts, num_experts or num_local_experts).
      type: int
    hidden_size:
      description: Hidden size.
      type: int
    vocab_size:
      description: Vocabulary size.
      type: int
    dflash:
      description: The drafter's DFlash facts (block_size, target_layer_ids, mask_token_id, ...) for a drafter.
      type: dict
  sample: {"model_type": "kimi_k25", "layers": 61, "experts": 384, "hidden_size": 7168, "vocab_size": 163840}
expect:
  description: Each expectation with expected and actual value.
  returned: when O(expect) is set and config.json parses
  type: list
  elements: dict
target_config:
  description: Facts from the target's config.json.
  returned: when O(target) is set and its config parses
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.llm.plugins.module_utils._verify import verify as _verify


def main() -> None:
    module = AnsibleModule(argument_spec=_verify.argument_spec(), supports_check_mode=True)
    try:
        result = _verify.run_module(module.params, check_mode=module.check_mode)
    except _verify.VerifyError as exc:
        module.fail_json(**exc.fail_kwargs())
    for notice in result["notices"]:
        module.warn(notice)
    if result["problems"] and module.params["fail_on_problem"]:
        module.fail_json(msg=_verify.failure_message(result), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
