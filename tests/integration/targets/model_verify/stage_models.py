# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stage the lab's fixture target and drafter for model_verify's integration test (controller side).

Checks out the fixture repos' commits from the fixture store's bare git repos (what the lab Hub
serves) into OUT/target and OUT/drafter and writes each tree's .gpufleet/manifest.json in the
format hf_snapshot writes (_manifest.py: files {path: {size, sha256, hub_id, lfs, stat}}), so that
full and auto modes have expected hashes before hf_snapshot exists to place trees itself.

Usage: stage_models.py FIXTURE_STORE OUT
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time

TREES = {"target": "gpufleet-lab/Kimi-K2.6-mini", "drafter": "gpufleet-lab/Kimi-K2.6-mini-DFlash"}


def stage(store, repo_id, out):
    summary = json.load(open(os.path.join(store, "fixtures.json")))
    repo = summary["repos"][repo_id]
    commit = repo["refs"]["main"]
    listing = json.load(open(os.path.join(store, "store", repo_id, "repo.json")))["commits"][commit]["files"]
    archive = subprocess.run(["git", "--git-dir", repo["git_dir"], "archive", "--format=tar", commit],
                             check=True, capture_output=True).stdout
    os.makedirs(out)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    files = {}
    for entry in listing:
        path = os.path.join(out, entry["path"])
        with open(path, "rb") as handle:
            data = handle.read()
        if len(data) != entry["size"]:
            raise SystemExit("%s: %d bytes in git, the store says %d" % (entry["path"], len(data), entry["size"]))
        files[entry["path"]] = {"size": entry["size"], "sha256": hashlib.sha256(data).hexdigest(),
                                "hub_id": entry["blob_id"], "lfs": bool(entry["lfs"]), "stat": None}
    manifest = {"format": 1, "repo_id": repo_id, "repo_type": "model", "revision": "main", "commit": commit,
                "endpoint": "http://10.231.0.2:8000", "files": files,
                "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    os.makedirs(os.path.join(out, ".gpufleet"))
    with open(os.path.join(out, ".gpufleet", "manifest.json"), "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
    return commit


def main(argv):
    store, out = argv[1], argv[2]
    for name, repo_id in TREES.items():
        print("%s: %s@%s" % (name, repo_id, stage(store, repo_id, os.path.join(out, name))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
