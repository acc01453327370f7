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
import selectors
import subprocess
import sys
import time


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
    cmd = [sys.executable, find_server(lab), "--store", store, "--api", host + ":0", "--cdn", host + ":0",
           "--tokens", os.path.join(store, "tokens.json")]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # pylint: disable=consider-using-with
                            start_new_session=True)
    with open(pidfile, "w") as handle:
        handle.write(str(proc.pid))
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline, buf = time.monotonic() + 30, b""
    while b"\n" not in buf and time.monotonic() < deadline and proc.poll() is None:
        if sel.select(timeout=0.5):
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
    if b"\n" not in buf:
        proc.kill()
        raise SystemExit("private_hub: the Hub did not start: %r" % buf)
    print(json.loads(buf.split(b"\n", 1)[0])["api"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
