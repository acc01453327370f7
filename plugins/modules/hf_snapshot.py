#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hf_snapshot
short_description: Fetch a Hugging Face Hub repo at a pinned revision with aria2, resumable and checked
version_added: 0.1.0
description:
  - Lists a Hub repository at a revision (branch, tag or commit) with C(huggingface_hub), resolves
    the revision to a commit and fetches every selected file into O(dest) with C(aria2c), with many
    connections per file and several files at once, resumable.
  - Bytes land in a staging area under C(dest/.gpufleet/staging/); a file is renamed to its final
    path only once its hash matched the Hub's (LFS files sha256, other files their git blob id).
    A file at its final path is therefore always whole and verified; existing files are never
    written in place, so files hard-linked from an earlier revision stay intact.
  - The token is sent only to the endpoint (listing, and a C(HEAD) per file that yields the signed
    CDN URL); aria2 gets the signed URLs in a mode 0600 input file that is removed afterwards, never
    anything on its command line, and never the token. A file the endpoint serves itself to a token
    holder (no redirect, e.g. small files of a gated repo) is fetched by the module itself without
    following redirects, so the token cannot reach another host (aria2 resends its headers to wherever
    a redirect points and cannot refuse one). Up to O(parallel_files) such files download at once,
    while aria2 fetches the rest of the batch, with progress. Public repos are fetched without a token.
  - Writes C(dest/.gpufleet/manifest.json) atomically under an exclusive lock on O(dest), with the
    commit and every file's path, size, sha256, the Hub's id for it and a stat record for cheap re-checks.
  - A stat record is (size, mtime, ctime, inode), taken after the module's own last change to the file (its rename
    into place, a hard link it made), so that change does not count. ctime moves on every write, even one whose
    mtime was put back, so such a file is hashed again. The device number is not compared, so a remount does not
    force a re-hash. Linking a file from O(link_from) moves the ctime of the source revision's file too, so
    that revision's own records of the files it shares with the new one go stale. Fetching it again (a
    rollback) with O(link_from) the newer revision hashes nothing for them (the newer revision's record of the
    same inode holds); without it, or in M(gpufleet.llm.model_verify) auto mode, they are hashed once more.
    A manifest written before ctime was recorded makes the next run hash every file once.
  - A re-run with everything in place is C(changed=false) and transfers no file bytes; a pinned
    commit whose manifest matches needs no network at all. A file whose stat no longer matches the
    manifest is hashed again and re-fetched when it differs.
  - While it runs, C(dest/.gpufleet/progress.json) holds bytes done, rate and ETA (use the task
    with C(async)/C(poll) and read that file to show progress, as the gpufleet.llm.model role does).
  - Fails before fetching when the filesystem lacks the bytes still needed plus O(min_free_bytes),
    naming needed and free bytes. Files hard-linked from O(link_from) on the same filesystem need no
    space; a O(link_from) on another filesystem cannot be hard-linked, so its files count as needed.
  - In check mode a run that would fail for lack of space or of C(aria2c) is reported, not failed -
    a warning, RV(blocked) and the figures in RV(disk).
  - Every id and path in the endpoint's answers is checked as it arrives - the commit (40 hex digits),
    each file's git blob id (40 hex), LFS sha256 (64 hex), size, and its path (relative, normalized, no
    C(..), NUL or backslash, each name at most 255 bytes, no path twice or both a file and a folder).
    Anything else fails at once, before O(dest) is created or touched, with a message naming the repo
    and the file and saying the endpoint (or something between it and the host) is broken or untrusted;
    such an answer is never retried. Staging file names are checked to stay inside O(dest) too.
  - Bad options fail at once, before any request, naming the option and the fix (see each option's range).
author:
  - gpufleet.llm contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.llm.attributes
attributes:
  check_mode:
    support: full
    details:
      - Lists the revision and reports what would be fetched or linked and how many bytes; writes nothing.
      - What would make a real run fail before fetching (disk space, no C(aria2c)) is a warning and
        RV(blocked), with the figures in RV(disk), not a failure.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A second run with everything present is C(changed=false) and fetches no file bytes.
options:
  repo_id:
    description:
      - Hub repository id, for example C(moonshotai/Kimi-K2.6). Checked with C(huggingface_hub)'s own
        rule (C(validate_repo_id)) - C(name) or C(namespace/name), no second slash, no C(--) or C(..).
    type: str
    required: true
  revision:
    description: Branch, tag or full commit sha. The result always reports the commit.
    type: str
    default: main
  dest:
    description:
      - Absolute directory to fetch into; created when missing. Nothing outside it is written.
      - C(dest/.gpufleet) (and its C(staging) directory) must not be a symlink; the module refuses to
        write its manifest, lock and staging files through one.
    type: path
    required: true
  repo_type:
    description: Kind of repository.
    type: str
    choices: [model, dataset, space]
    default: model
  allow_patterns:
    description: Only files matching one of these glob patterns (C(huggingface_hub) semantics).
    type: list
    elements: str
  ignore_patterns:
    description: Skip files matching one of these glob patterns.
    type: list
    elements: str
  token:
    description:
      - Hub token. Default is the host's token as C(huggingface_hub) finds it (C(HF_TOKEN), the
        token file). It is used only when the repo needs it and only towards O(endpoint)'s origin (scheme,
        host and port); a listing page or redirect on another origin is refused. See docs/hf_snapshot.md,
        "Where the token goes".
      - Surrounding whitespace is removed (a trailing newline of a YAML block scalar). A token that still
        holds a space, a control character or a non-ASCII character is refused before any request.
    type: str
  endpoint:
    description:
      - Hub endpoint (a mirror). Default C(HF_ENDPOINT) on the host, else the public Hub.
      - An V(http://) or V(https://) URL of the form scheme://host[:port][/path], without user info, query or fragment
        (checked at once, as C(HF_ENDPOINT) is when it is the endpoint in effect).
    type: str
  connections:
    description: aria2 connections per file (C(--max-connection-per-server), 1-16).
    type: int
    default: 16
  splits:
    description: aria2 C(--split), pieces per file fetched in parallel.
    type: int
    default: 16
  parallel_files:
    description:
      - Files fetched at once (aria2 C(--max-concurrent-downloads)); also the most files the endpoint
        serves itself to a token holder (fetched by the module, see above) downloaded at once.
      - Connections in flight are about O(parallel_files) times O(connections) (capped by
        O(splits) and by the file size over O(min_split_size)); they must exceed the link rate
        divided by the per-connection rate of the CDN (160 MiB/s at 10 MiB/s per connection needs
        16). The default 6 (with 16 connections each) is what reached 574 MiB/s against the public
        Hub's CDN for a 64-shard repo; files are hashed as they finish, while the rest transfer.
      - From the Hub, files are fetched in batches of O(parallel_files) files over 64 MiB (smaller
        files ride along), each batch resolved to signed URLs just before it starts, so a URL never
        ages in a queue until it expires. A batch ends when its last file does.
      - With O(peers), files run in lanes instead. Up to O(parallel_files) files over 64 MiB download at
        once, and as soon as one completes the next is chosen (from who holds what now) and started in
        an aria2c of its own, while the others go on; no file waits for another to end.
    type: int
    default: 6
  min_split_size:
    description:
      - aria2 C(--min-split-size), for example C(1M) or C(8M). aria2 halves a file's ranges down
        to this size, so a file gets all O(splits) connections only from O(splits) times this size
        up (16 x 8M = 128 MiB).
      - C(1M) to C(1024M), aria2's range (bytes, C(K) or C(M)).
    type: str
    default: 8M
  max_tries:
    description:
      - Rounds the module makes over files that failed (each round re-resolves their URLs, honours
        Retry-After and backs off); the module fails after the last one, naming each file and its error.
      - With O(peers), a try that failed because of a peer that is then dropped (or that switched the file to
        one peer at a time) uses none of them; such tries are bounded by the number of peers, so even V(1)
        reaches the other peers and the Hub last. Waiting for a file's owner uses none either.
    type: int
    default: 5
  retry_wait:
    description: Base of the exponential backoff between rounds, seconds (also aria2's own retry wait), 0-600.
    type: int
    default: 2
  timeout:
    description: Network timeout in seconds for Hub requests and aria2 connections, 1-600 (aria2's range).
    type: int
    default: 60
  link_from:
    description:
      - Directories of earlier verified revisions (fetched by this module, with a manifest). A file
        whose content matches is hard-linked from there instead of fetched.
    type: list
    elements: path
  prune_partials:
    description:
      - Remove partial files of any downloader inside O(dest) (C(*.incomplete), C(*.aria2), C(*.part),
        C(*.partial), C(*.crdownload), C(*.download), C(*.tmp), stale staging files), the same table
        M(gpufleet.llm.model_verify) fails on. Default reports them in RV(stray) only. Nothing else is ever removed.
    type: bool
    default: false
  min_free_bytes:
    description: Free space that must remain on the filesystem after the fetch.
    type: int
    default: 1073741824
  proxy:
    description:
      - HTTP proxy URL (C(http://[user:password@]host[:port]), what aria2 and the listing both support) for every
        request to the Hub - the listing (C(huggingface_hub)'s own HTTP client, set for this run only), the resolves
        and aria2 (in its input file, not on argv). Other schemes (C(socks5://), C(https://)) are refused at once.
      - Default the host's proxy environment variables, if any.
    type: str
  validate_certs:
    description: Verify TLS certificates (the listing, the resolves and aria2).
    type: bool
    default: true
  ca_path:
    description:
      - CA bundle to verify TLS certificates with (the listing, the resolves and aria2), e.g. the
        private CA of a mirror. A certificate it does not vouch for fails the listing with a
        message naming O(ca_path).
      - Must be a readable file of PEM certificates; a missing, unreadable or non-PEM file fails
        before any request.
    type: path
  aria2c:
    description: Path of the aria2c binary. Default the one on C(PATH).
    type: path
  lock_timeout:
    description:
      - Seconds to wait for another run holding the lock on O(dest) before failing.
      - When several hosts share one models_root (NFS, CephFS), that run may be on another host; the failure
        says so and names the lock file.
    type: int
    default: 600
  hash_workers:
    description: Threads hashing existing files, at least 1. Default one per CPU.
    type: int
  resolve_only:
    description:
      - Only resolve O(revision) to a commit and list the selected files (RV(commit), RV(files) with
        action C(listed)). O(dest) is neither read nor created, nothing is planned, hashed or
        fetched, and there is no disk preflight, so it answers on a host whose disk could not hold
        the whole revision (the gpufleet.llm.model role resolves its commit this way).
    type: bool
    default: false
  listing:
    description:
      - The files of the commit (the RV(files) of a O(resolve_only) run, each C(path), C(size), C(sha256), C(blob_id)),
        used instead of listing the Hub. O(revision) must then be that 40-hex commit.
      - O(allow_patterns) and O(ignore_patterns) still apply; every entry gets the same checks as the Hub's own answer
        (ids, size, path safety), and a bad one fails before O(dest) is touched.
      - With O(hub=true) the list is not taken on trust - this host lists the commit itself over its own Hub
        connection (one listing, no file bytes) and fails, before anything is fetched or written, naming
        O(listing_from) and every file where the two differ (path, size, C(blob_id), C(sha256)); it then fetches by its
        own list. Only a host with O(hub=false) uses O(listing) as given; see the Peers section of docs/fleet.md for
        which list such a host may be given.
    type: list
    elements: dict
  listing_from:
    description:
      - Where O(listing) came from (for example the inventory name of the host that resolved it), named in the
        failure when O(listing) differs from this host's own listing of the Hub.
    type: str
  peers:
    description:
      - Other hosts that hold, or are fetching, this very commit (see the Peers section of docs/hf_snapshot.md).
        Each is a dict with C(name), C(url) (the base URL of that peer's copy of this commit directory, ending
        in C(/), e.g. C(http://10.0.0.12:8370/kimi/<commit>/), as M(gpufleet.llm.peer_serve) serves it) and
        C(share) (the paths that peer fetches from the Hub; may be empty), and optionally C(hub) (whether that peer
        has Hub access; default whether its C(share) is not empty; with O(hub=false) this host waits for such a
        peer to take a file whose owner failed from the Hub).
      - A file is fetched from every live peer that holds it, several peers per file as aria2 mirrors, in this host's
        own order (the peers it asked least first, ties shuffled with a seed from its host name); its bytes get the same
        staging, hash and rename as from the Hub. Who holds what comes from the peers' status files (C(held), read with
        O(peer_token); at most 16 reads per look, a rotation past 16 peers), or from a C(HEAD) per file for a peer
        whose status lists nothing (200 with the listing's size). A peer that refuses connections, refuses O(peer_token) (401/403), answers another error or
        serves bytes that fail the hash is dropped for the rest of the run (RV(peers_dropped)); a hash mismatch from
        several peers at once is retried one peer at a time. A passing fault (5xx, 429, a timeout, a reset
        connection) is asked again with a backoff from O(retry_wait), up to 3 more times, before the peer is
        dropped, and uses no try; a status read or C(HEAD) that times out (10 s, or O(timeout) if shorter) drops
        the peer at once, and its queued requests are not sent. Partial bytes are resumed only from the peers (or the Hub) that wrote them; a
        dropped peer's are discarded. The Hub is the last resort.
      - A file not in O(hub_share) is waited for while its owner (the peer whose C(share) lists it) is alive and its
        peer status says it is still fetching; waiting is not a failed try. It comes from the Hub once no live peer
        has it and the owner is gone (connection refused or reset, or its status says C(done) or C(failed) without
        the file), or after O(peer_wait_timeout).
    type: list
    elements: dict
  peer_token:
    description:
      - The secret the peers' servers require, sent as C(Authorization) Bearer to peer URLs only (in aria2's mode
        0600 input file, never on its command line, never to the Hub or its CDN). Never in results or logs.
      - Required with O(peers).
    type: str
  hub_share:
    description:
      - This host's own share of the Hub's bytes (paths); they come from the Hub at once unless a live peer already
        holds them. Default all paths when O(peers) is empty, none otherwise.
    type: list
    elements: str
  hub:
    description:
      - V(false) - never contact the Hub (needs O(listing)), for a host with only the cluster network. When a
        file's owner failed or was dropped, the host waits while any live peer with Hub access (its C(hub)) is
        still fetching or has not started, since that peer takes the file from the Hub and publishes
        it; once none is (or O(peer_wait_timeout) passed), the file fails, saying the host has no Hub access and
        no peer holds it.
    type: bool
    default: true
  peer_wait_timeout:
    description:
      - Seconds a file not in O(hub_share) is waited for while its owner is still fetching (with O(hub=false),
        while a peer with Hub access is); after that it comes from the Hub (the last resort; with O(hub=false) it
        fails). The wait normally ends by events (the file is published, the owner's server goes away, its
        peer-status says C(done) or C(failed)), not by this timeout.
    type: int
    default: 3600
  peer_private:
    description:
      - Allow O(peers) for a repo that needs the token (private or gated). Its files then travel between the hosts
        over the peer exchange, which is plain HTTP on the cluster network guarded by the per-run O(peer_token),
        so anyone on that network who sees a request can read them until the peer servers stop.
      - V(false) - with O(peers), a repo whose listing needed the token (this run's own listing, or
        O(listing_token_required)) fails before anything is fetched, and so does a run whose Hub answers a file
        only with the token.
    type: bool
    default: false
  listing_token_required:
    description:
      - With O(listing) - whether the O(resolve_only) run that made it needed the token (its RV(token_required)),
        which O(peer_private) then has to allow.
    type: bool
    default: false
  peer_run:
    description:
      - The id of this run's peer exchange (the model role's run id; 1 to 64 letters, digits, C(_) or C(-)). Every
        peer status this run writes carries it as C(run).
      - With O(peers), a peer whose server answers no peer status, or one of another run, counts as gone at once
        (dropped; its share comes from another peer or the Hub) instead of being waited for up to
        O(peer_wait_timeout). So every host of the run must claim its status (O(peer_claim)) before any of them
        fetches, as the gpufleet.llm.model role does; without O(peer_run) no status yet means "not started yet".
    type: str
  peer_name:
    description:
      - This host's name among the peers' names (the gpufleet.llm.model role passes C(inventory_hostname)). With
        O(peers), it seeds this host's own order of the peers (the status reads' rotation, the mirrors' tie-break)
        and of the files it fetches from them, so every run of this host uses the same order and the hosts of a
        fleet use different ones. Every host computes from the names alike who takes a file first while few hold
        it, which host fetches a gone owner's file from the Hub, and when each large file of a host's own share
        has its turn at the Hub (a few dozen at a time across the fleet, so the first copies spread while the
        Hub sends the rest). Default the host's own host name.
    type: str
  peer_claim:
    description:
      - Only claim C(dest/.gpufleet/peer-status.json) for run O(peer_run) - C(state) C(started) - and return;
        nothing is listed or fetched (the other options are checked as for the fetch). Run before the fetch so
        that the peers tell "about to fetch" (wait) from "never started" (gone).
      - Written only while holding O(dest)'s lock, taken without waiting - another run holding it fails this
        call, naming the lock, and that run's status stays - and never through a symlinked C(.gpufleet).
      - A fetch with O(peer_run) that then fails before it holds the lock turns this claim into C(failed) (only
        this run's C(started), a compare-and-swap on the run id), so the peers stop waiting for its share.
    type: bool
    default: false
requirements:
  - huggingface_hub >= 1.0 (the gpufleet.llm.model role installs it into its tools venv)
  - aria2c on the host
notes:
  - Ansible forbids C(async) in check mode; check mode runs synchronously and writes nothing.
  - With O(peers) given (even empty), C(dest/.gpufleet/peer-status.json) says this run's state to the peers
    (C(state) C(fetching), C(done) or C(failed), and C(failed), the paths that failed; C(held), the paths and sizes
    of the files in place and verified, which the peer server serves; C(run), O(peer_run), when given; C(started)
    from O(peer_claim)), written atomically at the start, each time a file is placed, the end and on a failure;
    M(gpufleet.llm.peer_serve) exposes only that file of C(.gpufleet).
  - Check mode with O(peers) reports each file's planned RV(files[].source) without asking any peer.
seealso:
  - name: gpufleet.llm.model role
    description: Fetches every model listed, revisions side by side, with progress and an atomic C(current) switch.
    link: https://github.com/gpufleet/llm/blob/main/docs/hf_snapshot.md
"""

EXAMPLES = r"""
- name: Fetch the target model at a pinned commit
  gpufleet.llm.hf_snapshot:
    repo_id: moonshotai/Kimi-K2.6
    revision: 3f0c1a2b4d5e6f708192a3b4c5d6e7f8091a2b3c
    dest: /srv/models/kimi-k2.6/3f0c1a2b4d5e6f708192a3b4c5d6e7f8091a2b3c
    link_from:
      - /srv/models/kimi-k2.6/current
  async: 7200
  poll: 30

- name: Only the safetensors and the config, through a mirror
  gpufleet.llm.hf_snapshot:
    repo_id: org/model
    dest: /srv/models/model/main
    endpoint: http://hf-mirror.internal:8000
    allow_patterns: ["*.safetensors", "*.json"]
    token: "{{ vault_hf_token }}"

- name: Fetch this host's share from the Hub and the rest from its peers (the listing from a resolve_only run)
  gpufleet.llm.hf_snapshot:
    repo_id: moonshotai/Kimi-K2.6
    revision: "{{ pinned.commit }}"
    dest: /srv/models/kimi-k2.6/{{ pinned.commit }}
    listing: "{{ pinned.files }}"
    hub_share: "{{ shares[inventory_hostname] }}"
    peers:
      - name: gpu2
        url: http://10.0.0.12:8370/kimi-k2.6/{{ pinned.commit }}/
        share: "{{ shares['gpu2'] }}"
    peer_token: "{{ peer_secret }}"
  no_log: true

- name: Report foreign partials left by other downloaders, and remove them
  gpufleet.llm.hf_snapshot:
    repo_id: org/model
    dest: /srv/models/model/main
    prune_partials: true
"""

RETURN = r"""
commit:
  description: The commit sha the revision resolved to (what was fetched).
  returned: success
  type: str
  sample: 9a0e962393e4de9175c7df68f4731837f10a644a
files:
  description:
    - Every selected file with its action. C(present) was already there and verified, C(fetched),
      C(resumed) (finished from an earlier partial), C(linked) (hard link from O(link_from)).
    - In check mode the action is C(present), C(fetch) or C(link); with O(resolve_only) C(listed).
  returned: success
  type: list
  elements: dict
  sample: [{"path": "config.json", "size": 3282, "action": "fetched", "source": "hub"}]
  contains:
    source:
      description:
        - Where the bytes came from - C(hub), C(peer:<name>) (the first peer of a multi-peer download), C(link)
          (O(link_from)) or C(present). In check mode the planned source. Not with O(resolve_only).
      type: str
    sha256:
      description: With O(resolve_only) - the LFS sha256 (null for a non-LFS file), for O(listing).
      type: str
    blob_id:
      description: With O(resolve_only) - the git blob id, for O(listing).
      type: str
bytes_from_hub:
  description: Bytes of the files this run placed from the Hub.
  returned: success
  type: int
bytes_from_peers:
  description: Bytes of the files this run placed from peers.
  returned: success
  type: int
from_peers:
  description:
    - Bytes per peer name, of verified files only. A file downloaded from several peers at once counts for the
      first of them that served it to its end, never for one aria2 gave up on.
  returned: success
  type: dict
peers_dropped:
  description: Peers dropped during the run, each C({name, reason}).
  returned: success
  type: list
  elements: dict
claimed:
  description: With O(peer_claim), the run id the peer status now says C(started) for.
  returned: when O(peer_claim) is true
  type: str
  sample: k3v9x0qa
bytes_fetched:
  description: File bytes fetched by this run.
  returned: success
  type: int
bytes_total:
  description: Size of all selected files.
  returned: success
  type: int
bytes_to_fetch:
  description: Bytes check mode would fetch.
  returned: check mode
  type: int
duration:
  description: Wall time of the whole call in seconds (listing and hashing included).
  returned: success
  type: float
throughput_mib_s:
  description: RV(bytes_fetched) over RV(duration), MiB/s.
  returned: success
  type: float
timings:
  description:
    - Where RV(duration) went, seconds per phase (only the phases that ran) - C(list) (listing the
      revision), C(plan) (including hashing files whose stat changed), C(resolve) (the parallel
      HEADs), C(aria2) (aria2c's run, the transfer), C(hash_after_aria2) (hashing still left when
      aria2 exited; files that finished earlier were hashed during the transfer), C(manifest).
  returned: success
  type: dict
  sample: {"list": 0.11, "resolve": 0.03, "aria2": 6.55, "hash_after_aria2": 0.41, "manifest": 0.002}
stray:
  description:
    - Files in O(dest) that are not part of the revision. C(kind=partial) for downloaders' partials
      (C(.incomplete), orphan C(.aria2), C(.part), C(.partial), C(.crdownload), C(.download), C(.tmp),
      stale staging files), C(kind=extra) for anything else.
  returned: success
  type: list
  elements: dict
  sample: [{"path": ".cache/huggingface/download/x.incomplete", "kind": "partial", "bytes": 1048576}]
pruned:
  description: Paths (relative to O(dest)) removed because O(prune_partials) was set.
  returned: success
  type: list
  elements: str
manifest:
  description: Path of the manifest written.
  returned: success
  type: str
disk:
  description:
    - The disk preflight figures - C(needed_bytes) (to fetch, less what staging already holds),
      C(linked_bytes) (what hard links from O(link_from) supply without using space), C(free_bytes),
      C(min_free_bytes), C(short_bytes) (how much is missing; C(0) when the fetch fits) and
      C(filesystem) (the directory measured).
  returned: when the revision was planned (not with O(resolve_only))
  type: dict
  sample: {"needed_bytes": 3282, "linked_bytes": 632007321600, "free_bytes": 411000000000,
           "min_free_bytes": 10737418240, "short_bytes": 0, "filesystem": "/srv/models"}
listing_differences:
  description:
    - When O(listing) differs from this host's own listing of the Hub (the run fails) - every difference, each
      C(path), C(field) (C(presence), C(size), C(blob_id) or C(sha256)), C(given) (the value in O(listing)) and
      C(hub) (the Hub's).
  returned: failure, when O(listing) differs from the Hub's listing
  type: list
  elements: dict
  sample: [{"path": "modeling_kimi_k25.py", "field": "blob_id", "given": "0c1f0a6d", "hub": "9e4b27c1"}]
blocked:
  description: Check mode - why a real run would fail before fetching (disk space, C(aria2c)); empty when it would not.
  returned: check mode
  type: list
  elements: str
resolve_only:
  description: True when O(resolve_only) was set (the result holds the listing only).
  returned: when O(resolve_only) was set
  type: bool
token_required:
  description:
    - With O(resolve_only) - whether the Hub listed the repo only with the token (private or gated). Pass it on
      as O(listing_token_required) with the listing.
  returned: when O(resolve_only) was set
  type: bool
offline:
  description: True when a pinned commit with a matching manifest was checked without any network access.
  returned: success
  type: bool
failed:
  description: Files that could not be fetched, with the last error of each.
  returned: failure
  type: dict
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    import huggingface_hub  # noqa: F401  pylint: disable=unused-import
except ImportError:
    HAS_HF = False
    HF_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_HF = True
    HF_IMPORT_ERROR = None

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot


def main():
    module = AnsibleModule(argument_spec=_snapshot.argument_spec(), supports_check_mode=True)
    if not HAS_HF:
        module.fail_json(msg=missing_required_lib("huggingface_hub"), exception=HF_IMPORT_ERROR)
    try:
        result = _snapshot.snapshot(module.params, check_mode=module.check_mode, log=module.log, warn=module.warn)
    except _snapshot.SnapshotError as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
