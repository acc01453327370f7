# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""model_verify's structural steps and the report they write into.

Private to the collection: not a public API, may change without notice.

``_verify.verify`` runs them in this order: config (and ``expect``), required files, layout (the
index or the single file), strays, headers, tensors (and ``total_size``), then the hashes
(``_verify_hashes``) and the drafter. Each step adds its check(s) to the Report and returns only what
a later step or the result needs, so a step can be run and tested on its own.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from ansible_collections.gpufleet.llm.plugins.module_utils._verify import dflash as _dflash
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import expect as _expect
from ansible_collections.gpufleet.llm.plugins.module_utils._common import jsonfile as _jsonfile
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import safetensors as _st
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree.strays import is_partial

CONFIG = "config.json"
MAX_LISTED = 5


class Report(object):
    """Checks in order, problems (fail the run) and warnings (reported only)."""

    def __init__(self) -> None:
        self.checks: list = []
        self.problems: list = []
        self.warnings: list = []

    def add(self, name: str, problems=(), detail: str = "", *, warnings=(), skipped: bool = False,
            context: str = "") -> None:
        """``detail`` describes the passing check; ``context`` (for example where expected hashes came
        from) is kept in front of problems and warnings too."""
        problems = list(problems)
        warnings = list(warnings)
        self.problems.extend(problems)
        self.warnings.extend(warnings)
        lead = context + "; " if context else ""
        if problems:
            status = "failed"
            detail = lead + " | ".join(problems[:MAX_LISTED])
            if len(problems) > MAX_LISTED:
                detail += " | ... and %d more" % (len(problems) - MAX_LISTED)
        elif skipped:
            status = "skipped"
        elif warnings:
            status = "warn"
            detail = lead + " | ".join(warnings[:MAX_LISTED])
        else:
            status = "ok"
            detail = context if context and not detail else detail
        self.checks.append({"name": name, "status": status, "detail": detail})


def listed(items, limit: int = MAX_LISTED) -> str:
    """The first ``limit`` items joined, and how many more there are."""
    items = list(items)
    text = ", ".join(items[:limit])
    return text + (" and %d more" % (len(items) - limit) if len(items) > limit else "")


def read_config(root: str, name: str = CONFIG) -> tuple:
    """(dict, None) or (None, problem line); a hostile file (FIFO, device, huge, too deep) is a problem too."""
    path = os.path.join(root, name)
    label = os.path.join(os.path.basename(os.path.normpath(root)), name) if name != CONFIG else name
    try:
        data = _jsonfile.read_json_file(path)
    except _jsonfile.JsonFileError as exc:
        if exc.missing:
            return None, "%s is missing in %s; re-fetch it (hf_snapshot)" % (label, root)
        return None, "%s %s; replace it with the real file: re-fetch it (hf_snapshot)" % (label, exc)
    if not isinstance(data, dict):
        return None, "%s is not a JSON object; re-fetch it (hf_snapshot)" % label
    return data, None


def check_config(report: Report, root: str, expectations) -> tuple:
    """Step 1: config.json parses and every compiled expectation holds.

    Returns (config dict or None, result fields: ``config`` facts and ``expect`` details).
    """
    config, problem = read_config(root)
    problems = [problem] if problem else []
    archs = config.get("architectures") if config is not None else None
    if archs is not None and (not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)):
        # Servers pick the model class from this list; anything else is a broken or hostile config.
        problems.append("config.json: architectures is %s, not a list of class names; re-fetch it (hf_snapshot)"
                        % _dflash.short_repr(archs))
    report.add("config", problems, "" if problems else "config.json parses")
    fields: dict = {}
    if config is not None:
        fields["config"] = _dflash.facts(config)
        if _dflash.is_drafter(config):
            fields["config"]["dflash"] = _dflash.drafter_facts(config)
    if expectations:
        if config is None:
            report.add("expect", detail="config.json unusable", skipped=True)
        else:
            details, problems = _expect.evaluate(expectations, config)
            report.add("expect", problems, "%d expectation(s) hold" % len(details) if not problems else "")
            fields["expect"] = details
    return config, fields


def check_required_files(report: Report, root: str, path: str, patterns) -> None:
    """Step 2: every ``require_files`` glob matches at least one regular file (no check without globs)."""
    if not patterns:
        return
    problems = []
    for pattern in patterns:
        hits = [h for h in glob.glob(os.path.join(glob.escape(root), pattern), recursive=True) if os.path.isfile(h)]
        if not hits:
            problems.append("no file matches require_files pattern %r in %s; fetch the files (allow_patterns "
                            "of hf_snapshot) or fix require_files" % (pattern, path))
    report.add("require_files", problems, "%d pattern(s) matched" % len(patterns) if not problems else "")


@dataclass(frozen=True)
class Layout:
    """How the tree lays out its weights, as the layout step found it."""

    kind: str | None  # "index", "single" or None (no weights found)
    weight_map: dict | None  # None unless the index parsed
    total_size: int | None  # the index's metadata.total_size, when it has one
    shard_rels: list  # the shards the index names (or the single file), sorted
    # Where the tree's symlinks may lead (realpath): the cache repo folder for a huggingface_hub cache
    # snapshot (cache_repo_dir), None for any other tree (links must stay inside it).
    within: str | None = None

    @property
    def index_unusable(self) -> bool:
        """An index that did not parse names no shards, so no .safetensors file can be judged a stray."""
        return self.kind == "index" and self.weight_map is None


# huggingface_hub's cache (file_download.repo_folder_name, snapshot_download): <cache>/<type>s--<org>--<name>/
# holds blobs/<hash> (the bytes) and snapshots/<commit>/<path>, a relative symlink into ../../blobs/.
CACHE_REPO_PREFIXES = ("models--", "datasets--", "spaces--")


def cache_repo_dir(root: str) -> str | None:
    """The cache repo folder (realpath) when ``root`` is a huggingface_hub cache snapshot, else None.

    Its snapshot's files are symlinks into the folder's ``blobs/``, so links of that tree may resolve
    anywhere inside that folder, and nowhere else.
    """
    snapshots = os.path.dirname(os.path.realpath(root))
    repo = os.path.dirname(snapshots)
    if os.path.basename(snapshots) == "snapshots" and os.path.basename(repo).startswith(CACHE_REPO_PREFIXES) \
            and os.path.isdir(os.path.join(repo, "blobs")):
        return repo
    return None


def check_layout(report: Report, root: str, path: str) -> Layout:
    """Step 3: the index (or the single model.safetensors) is there and parses."""
    within = cache_repo_dir(root)
    where = " (huggingface_hub cache snapshot: links may resolve inside %s)" % within if within else ""
    kind, _name = _st.find_weights(root)
    weight_map, total_size, shard_rels = None, None, []
    if kind is None:
        report.add("index", ["no %s or %s in %s: not a safetensors model, or the fetch did not finish; re-fetch it"
                             % (_st.INDEX, _st.SINGLE, path)])
    elif kind == "single":
        shard_rels = [_st.SINGLE]
        report.add("index", detail="single-file model (%s)%s" % (_st.SINGLE, where))
    else:
        try:
            weight_map, total_size = _st.load_index(root)
        except _st.IndexError_ as exc:
            report.add("index", [str(exc)])
        else:
            shard_rels = sorted(set(weight_map.values()))
            report.add("index", detail="%s: %d tensors in %d shards%s"
                       % (_st.INDEX, len(weight_map), len(shard_rels), where))
    return Layout(kind=kind, weight_map=weight_map, total_size=total_size, shard_rels=shard_rels, within=within)


def _partial_line(rel: str) -> str:
    base = rel.rsplit(".", 1)[0]
    if rel.endswith(".aria2"):
        return ("%s: stale aria2 control file: the download of %s did not finish (or was abandoned); "
                "re-fetch %s, then remove %s" % (rel, base, base, rel))
    if rel.endswith(".incomplete"):
        return ("%s: partial download left by huggingface_hub; remove it (hf_snapshot prune) and "
                "re-fetch what it was" % rel)
    return "%s: partial download left by a downloader; remove it and re-fetch what it was" % rel


# Which unreferenced .safetensors files SGLang 0.5.23 never loads, so they are notices, not strays:
# DefaultModelLoader._prepare_weights (sglang/srt/model_loader/loader.py) globs "*.safetensors" in
# the model directory itself, never below it (so original/ and any other subdirectory are never
# read), and weight_utils.filter_duplicate_safetensors_files keeps only what the index's weight_map
# names; without an index it drops consolidated.safetensors only when it and model.safetensors are
# the only two files (Mistral's repos ship both formats of the same weights).
CONSOLIDATED = "consolidated"


def _ignored_by_sglang(rel: str, layout: Layout, files: list) -> str | None:
    """Why SGLang does not load the unreferenced .safetensors file ``rel``, or None when it would."""
    if "/" in rel:
        return "in a subdirectory, and SGLang loads weights only from the model directory itself"
    if layout.kind == "index" and rel.startswith(CONSOLIDATED):
        return "SGLang loads only the files %s names" % _st.INDEX
    top = sorted(f for f in files if f.endswith(".safetensors") and "/" not in f)
    if layout.kind == "single" and top == [CONSOLIDATED + ".safetensors", _st.SINGLE]:
        return "SGLang skips it when it and %s are the only weight files" % _st.SINGLE
    return None


def _unreferenced_line(rel: str, layout: Layout) -> str:
    return ("%s: a .safetensors file that %s does not reference (a leftover of another revision or download?); "
            "remove it, or set allow_stray if it belongs there"
            % (rel, _st.INDEX if layout.kind == "index" else "this single-file model"))


def check_strays(report: Report, layout: Layout, files: list, *, allow_stray: bool) -> None:
    """Step 4: no partial download and no .safetensors file the layout does not reference among ``files``.

    A partial is a problem even with ``allow_stray``: it stands for a file whose download did not
    finish, so the tree is not the revision. ``allow_stray`` tolerates complete extra shards only.
    Unreferenced shards SGLang never loads (``_ignored_by_sglang``) are notices.
    """
    problems, tolerated, notices = [], [], []
    judge_shards = layout.kind is not None and not layout.index_unusable
    for rel in files:
        if is_partial(rel):
            problems.append(_partial_line(rel) + ("; allow_stray does not cover partial downloads"
                                                  if allow_stray else ""))
        elif judge_shards and rel.endswith(".safetensors") and rel not in layout.shard_rels:
            why = _ignored_by_sglang(rel, layout, files)
            if why:
                notices.append("%s: not referenced by the weights (%s); left as it is" % (rel, why))
            else:
                (tolerated if allow_stray else problems).append(_unreferenced_line(rel, layout))
    detail = "%d files in the tree, no partials or unreferenced shards" % len(files)
    report.add("stray", problems, detail, warnings=tolerated + notices, context="allow_stray" if tolerated else "")


def check_headers(report: Report, root: str, layout: Layout) -> tuple:
    """Step 5: every shard resolves inside the tree, its header parses and its size adds up.

    Returns ({rel: _safetensors.Shard} of the shards that parse, set of the shards already reported).
    """
    parsed = {}
    flagged = set()
    problems = []
    for rel in layout.shard_rels:
        try:
            shard_path = _st.resolve_shard(root, rel, within=layout.within)
            parsed[rel] = _st.inspect_shard(shard_path, rel)
        except _st.ShardError as exc:
            problems.append(str(exc))
            flagged.add(rel)
    if layout.shard_rels:
        report.add("headers", problems, "%d shard header(s) parse, sizes = 8 + header + data" % len(parsed))
    else:
        report.add("headers", detail="no shards", skipped=True)
    return parsed, flagged


def check_tensors(report: Report, layout: Layout, parsed: dict) -> dict:
    """Step 6: the weight_map against the parsed headers, and metadata.total_size against their data.

    Returns the result fields it knows: ``tensors`` (when there is a weight_map or a single file) and
    ``total_size`` (when every shard parsed).
    """
    fields: dict = {}
    data_bytes = sum(s.data_len for s in parsed.values())
    if layout.weight_map is not None:
        fields["tensors"] = len(layout.weight_map)
        problems = _st.cross_check(layout.weight_map, {rel: s.tensors for rel, s in parsed.items()})
        report.add("tensors", problems, "every tensor of the weight_map is in its shard's header and vice versa")
        _check_total_size(report, layout, all_parsed=len(parsed) == len(layout.shard_rels), data_bytes=data_bytes)
    elif layout.kind == "single":
        fields["tensors"] = sum(len(s.tensors) for s in parsed.values())
        report.add("tensors", detail="single-file model: %d tensors" % fields["tensors"])
    if len(parsed) == len(layout.shard_rels) and layout.shard_rels:
        fields["total_size"] = data_bytes
    return fields


# metadata.total_size is advisory, so a mismatch is a notice: no loader reads it (safetensors never
# opens the index; huggingface_hub 2.4's _load_sharded_checkpoint and SGLang 0.5.23's
# filter_duplicate_safetensors_files read weight_map only), and writers legitimately disagree with
# the tensor bytes: huggingface_hub's split_state_dict_into_shards_factory sums
# untyped_storage().nbytes() (a view's whole storage), older transformers' dtype_byte_size counted a
# bool element as 1/8 byte (fractional sizes). What ties the index to its shards is the tensors
# check (every weight_map entry in its shard's header and back) and the hashes.
def _check_total_size(report: Report, layout: Layout, *, all_parsed: bool, data_bytes: int) -> None:
    total_size = layout.total_size
    if not all_parsed:
        report.add("total_size", detail="not all shards parse", skipped=True)
    elif total_size is None:
        report.add("total_size", warnings=["%s has no metadata.total_size: the sum of tensor bytes cannot be "
                                           "cross-checked" % _st.INDEX])
    elif isinstance(total_size, bool) or not isinstance(total_size, (int, float)):
        report.add("total_size", warnings=["%s: metadata.total_size is %s, not a number; no loader reads it"
                                           % (_st.INDEX, _dflash.short_repr(total_size))])
    elif total_size != data_bytes:
        # short_repr, not %g: an integer of hundreds of digits does not fit a float (%g would raise).
        diff = total_size - data_bytes
        off = ("+" if diff > 0 else "") + _dflash.short_repr(diff)
        report.add("total_size", warnings=["%s: metadata.total_size is %s but the shards' tensors sum to %d bytes "
                                           "(off by %s); no loader reads it and the weight_map matched the headers "
                                           "(tensors check), so this is a notice: older converters count storage "
                                           "or bool elements differently" % (_st.INDEX, _dflash.short_repr(total_size),
                                                                             data_bytes, off)])
    else:
        report.add("total_size", detail="metadata.total_size = %d = sum of tensor bytes" % total_size)


def check_drafter(report: Report, config: dict | None, target: str) -> dict:
    """Last step, with ``target``: the drafter's config fits the target model's.

    Returns the result fields it knows: ``target_config`` when the target's config parses.
    """
    troot = os.path.abspath(target)
    if not os.path.isdir(troot):
        report.add("dflash", ["target %s does not exist or is not a directory; point target at the target model's "
                              "directory" % target])
        return {}
    if config is None:
        report.add("dflash", detail="drafter config.json unusable", skipped=True)
        return {}
    tconfig, problem = read_config(troot)
    if tconfig is None:
        report.add("dflash", ["target %s: %s" % (target, problem)])
        return {}
    problems = _dflash.check_drafter(config, tconfig, target_name="target %s/config.json" % target)
    t_layers = _dflash.text_value(tconfig, "num_hidden_layers")
    report.add("dflash", problems, "drafter fits target %s (%s layers, hidden %s, vocab %s)"
               % (target, t_layers, _dflash.text_value(tconfig, "hidden_size"),
                  _dflash.text_value(tconfig, "vocab_size")))
    return {"target_config": _dflash.facts(tconfig)}
