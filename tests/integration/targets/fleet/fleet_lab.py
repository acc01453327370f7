# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller-side helpers of the fleet target (and tests/lab/bench_fleet.py).

  hub-start LAB_JSON STORE PIDFILE ADDR   start a private lab Hub (tests/lab/hub/server.py) on ADDR
                                          (an address runme.sh added to the lab bridge); prints its API URL
  hub-config API JSON                     POST /_lab/config (caps)
  hub-seq API                             the request log's last seq (a marker for hub-bytes)
  hub-bytes API SINCE                     file bytes the Hub sent after SINCE (resolve + CDN bodies), by
                                          client address, as JSON {"total": n, "by_client": {ip: n}}
  host LAB_JSON INVENTORY HOST KEY        netns | dir (the host's root seen from the controller) | address
  stop-when LAB_JSON INVENTORY ROOT_REL MIN_BYTES PEER SHA256... -- watch the staging directories under
                                          ROOT_REL of every host but PEER; once one holds a staging file of
                                          one of the SHA256s with >= MIN_BYTES, stop PEER's peer server (its
                                          nginx unit) and print what was seen. Driven by bytes, never by time.

The private Hub's request log is the independent measure of what the Hub sent (the modules' own
reports are not trusted for it).
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def _lab(lab_json: str) -> dict:
    with open(lab_json) as handle:
        return json.load(handle)


def find_server(lab: dict) -> str:
    """tests/lab/hub/server.py beside the targets in a checkout, else the running lab Hub's own."""
    here = os.path.join(HERE, "..", "..", "..", "lab", "hub", "server.py")
    if os.path.exists(here):
        return os.path.abspath(here)
    with open("/proc/%d/cmdline" % lab["hub"]["pid"], "rb") as handle:
        for arg in handle.read().decode().split("\0"):
            if arg.endswith("/hub/server.py") and os.path.exists(arg):
                return arg
    raise SystemExit("fleet_lab: cannot find tests/lab/hub/server.py")


def hub_start(lab_json: str, store: str, pidfile: str, addr: str) -> str:
    server = find_server(_lab(lab_json))
    cmd = [sys.executable, server, "--store", store, "--api", addr + ":0", "--cdn", addr + ":0",
           "--tokens", os.path.join(store, "tokens.json")]
    sys.path.insert(0, os.path.dirname(os.path.dirname(server)))
    import ready  # pylint: disable=import-outside-toplevel,import-error

    ready_file = pidfile + ".ready.json"
    proc = ready.spawn(cmd, ready_file=ready_file, start_new_session=True)
    with open(pidfile, "w") as handle:
        handle.write(str(proc.pid))
    try:
        info = ready.wait(proc, ready_file, what="the fleet's private lab Hub", timeout=30, log=ready.default_log(ready_file))
    except ready.NotReady as exc:
        proc.kill()
        raise SystemExit("fleet_lab: the Hub did not start: %s" % exc)
    return info["api"]


def _call(api: str, path: str, body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(api.rstrip("/") + path, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def hub_seq(api: str) -> int:
    log = _call(api, "/_lab/log")
    return max([e["seq"] for e in log] or [0])


def hub_bytes(api: str, since: int) -> dict:
    """Body bytes of file downloads only (API resolves and CDN), not the listing's JSON."""
    total, by_client, requests = 0, {}, {}
    for e in _call(api, "/_lab/log?since=%d" % since):
        ip = e["client"].rsplit(":", 1)[0]
        requests[ip] = requests.get(ip, 0) + 1
        if e["server"] == "cdn" or "/resolve/" in e["path"]:
            total += e["bytes_sent"]
            by_client[ip] = by_client.get(ip, 0) + e["bytes_sent"]
    return {"total": total, "by_client": by_client, "requests_by_client": requests}


def host_info(lab_json: str, inventory: str, host: str) -> dict:
    """The lab.json entry of an inventory host (subset inventories rename hosts: match by address)."""
    address = None
    with open(inventory) as handle:
        for line in handle:
            parts = line.split()
            if parts and parts[0] == host:
                for part in parts[1:]:
                    if part.startswith("ansible_host="):
                        address = part.split("=", 1)[1]
    for entry in _lab(lab_json)["hosts"].values():
        if entry["address"] == address:
            return dict(entry, dir=os.path.join(entry["dir"], "merged"))
    raise SystemExit("fleet_lab: %s (address %s) is not a host of %s" % (host, address, lab_json))


def _hosts(inventory: str) -> list[str]:
    with open(inventory) as handle:
        return [line.split()[0] for line in handle if line.strip() and "ansible_host=" in line]


def stop_when(lab_json: str, inventory: str, *, root_rel: str, min_bytes: int, peer: str, keys: list[str]) -> str:
    """Wait until another host's staging file of one of `keys` holds >= min_bytes, then stop `peer`'s server."""
    watched = [host_info(lab_json, inventory, h)["dir"] for h in _hosts(inventory) if h != peer]
    patterns = [os.path.join(d, root_rel.lstrip("/"), "*", "*", ".gpufleet", "staging", k) for d in watched for k in keys]
    while True:
        for pattern in patterns:
            for path in glob.glob(pattern):
                try:
                    # allocated blocks, not st_size: aria2 writes segments at their offsets (a sparse file)
                    size = os.stat(path).st_blocks * 512
                except OSError:
                    continue
                if size >= min_bytes:
                    ns = host_info(lab_json, inventory, peer)["dir"]
                    subprocess.run(["ssh", "-i", _lab(lab_json)["ssh_key"], "-o", "StrictHostKeyChecking=no",
                                    "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                                    "root@" + host_info(lab_json, inventory, peer)["address"],
                                    "systemctl stop 'gpufleet-peer-*.service'"], check=True)
                    return "stopped %s's peer server when %s held %d bytes (%s)" % (peer, path[len(ns):], size, path)
        # a poll step, not a clock the test depends on: the trigger is the byte count
        time.sleep(0.02)


def main(argv: list[str]) -> int:
    cmd, args = argv[1], argv[2:]
    if cmd == "hub-start":
        print(hub_start(*args[:4]))
    elif cmd == "hub-config":
        print(json.dumps(_call(args[0], "/_lab/config", json.loads(args[1]))))
    elif cmd == "hub-seq":
        print(hub_seq(args[0]))
    elif cmd == "hub-bytes":
        print(json.dumps(hub_bytes(args[0], int(args[1]))))
    elif cmd == "host":
        print(host_info(args[0], args[1], args[2])[args[3]])
    elif cmd == "stop-when":
        print(stop_when(args[0], args[1], root_rel=args[2], min_bytes=int(args[3]), peer=args[4], keys=args[5:]), flush=True)
    else:
        raise SystemExit("fleet_lab: unknown command %s" % cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
