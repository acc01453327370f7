# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Start a private lab Hub (tests/lab/hub/server.py) on the controller's bridge address.

This target resets, throttles and faults the Hub and asserts on its request log; all of that is
global to a Hub, and the shared lab Hub (10.231.0.2) serves other tests and benchmarks at the
same time. This one serves the same fixture
store on free ports of the controller's bridge address (reachable from the lab hosts), runs in
its own session, and is stopped by runme.sh (SIGTERM to the pid written to PIDFILE).

server.py is taken next to this target in the source tree, else from the running lab Hub's
command line (ansible-test runs targets from a copy that holds only tests/integration).

Usage: private_hub.py LAB_JSON STORE PIDFILE   (prints the API URL)
"""
from __future__ import annotations

import json
import os
import sys


def find_server(lab):
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "lab", "hub", "server.py")
    if os.path.exists(here):
        return here
    with open("/proc/%d/cmdline" % lab["hub"]["pid"], "rb") as handle:
        argv = handle.read().decode().split("\0")
    for arg in argv:
        if arg.endswith("/hub/server.py") and os.path.exists(arg):
            return arg
    raise SystemExit("private_hub: cannot find tests/lab/hub/server.py")


def main(argv):
    lab_json, store, pidfile = argv[1:4]
    with open(lab_json) as handle:
        lab = json.load(handle)
    host = lab["controller"]
    server = find_server(lab)
    cmd = [sys.executable, server, "--store", store, "--api", host + ":0", "--cdn", host + ":0",
           "--tokens", os.path.join(store, "tokens.json")]
    # tests/lab/ready.py beside the server: start, then wait for the ready file it writes once it listens.
    sys.path.insert(0, os.path.dirname(os.path.dirname(server)))
    import ready  # pylint: disable=import-outside-toplevel,import-error

    ready_file = pidfile + ".ready.json"
    proc = ready.spawn(cmd, ready_file=ready_file, start_new_session=True)
    with open(pidfile, "w") as handle:
        handle.write(str(proc.pid))
    try:
        info = ready.wait(proc, ready_file, what="the private lab Hub", timeout=30, log=ready.default_log(ready_file))
    except ready.NotReady as exc:
        proc.kill()
        raise SystemExit("private_hub: the Hub did not start: %s" % exc)
    print(info["api"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
