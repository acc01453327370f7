"""A fetch through the model role that outlasts MIN_POLLS polls of its progress loop, driven by bytes
and events rather than by the clock.

usage: long_follow.py HUB MIN_POLLS ansible-playbook ARGS...

The Hub is capped (rate_total) so low that the fetch cannot end before the lines are counted (25 MB
at 32 KiB/s is ~13 minutes; the 300 polls take about 30 s; runme.sh bounds the play at 25
minutes). The play's output is read as it comes; once it printed more than
MIN_POLLS progress lines (one per poll), the cap is lifted and the fetch ends at full speed. The play
must then complete (verify, `current` switched: role.yml asserts it, and that the action's own poll
count exceeds 300). A progress loop that dies after a few hundred polls (the old self-including
task file: RecursionError at ~245) fails the play before the cap is ever lifted.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request

# bytes/s over every connection of the Hub. Not lower: a shared bucket this slow already spaces each
# of aria2's connections' 16 KiB chunks by seconds, and aria2 gives up on a silent one after --timeout.
CAP = 32 * 1024
PROGRESS = re.compile(r"^\[(\S+)\] (gpufleet-lab/Kimi-K2\.6-mini: .*)$")
BYTES = re.compile(r"[\d.]+ [KMGT]?i?B / [\d.]+ [KMGT]?i?B \(\d+%\), .*/s, ETA")


def hub(base: str, path: str, body: dict) -> None:
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:  # nosec B310 - the lab Hub on the bridge
        resp.read()


def main() -> int:
    base, min_polls, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    hub(base, "/_lab/config", {"rate_total": CAP})
    lines: list[str] = []
    output: list[str] = []
    released = False
    try:
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            for raw in proc.stdout:
                output.append(raw)
                match = PROGRESS.match(raw.rstrip("\n"))
                if match:
                    lines.append(match.group(2))
                    # lifted only once bytes have shown too: idle lines alone (a slow listing) prove less
                    if not released and len(lines) > min_polls and sum(bool(BYTES.search(x)) for x in lines) >= 2:
                        hub(base, "/_lab/config", {"rate_total": 0})
                        released = True
            rc = proc.wait()
    finally:
        hub(base, "/_lab/reset", {})
    with_bytes = [line for line in lines if BYTES.search(line)]
    print("%d progress lines (cap lifted after %d); first with bytes: %s" % (
        len(lines), min_polls + 1, with_bytes[:3]))
    problems = []
    if rc != 0:
        problems.append("the play failed (rc=%d)" % rc)
    if not released:
        problems.append("the play ended after %d progress lines, before %d" % (len(lines), min_polls + 1))
    if len(with_bytes) < 2:
        problems.append("expected progress lines with bytes, rate and ETA, got %d" % len(with_bytes))
    odd = [line for line in lines if not BYTES.search(line) and not line.endswith(": listing and checking files")]
    if odd:
        problems.append("progress lines that are neither bytes nor the idle line: %s" % odd[:3])
    if problems:
        sys.stdout.write("".join(output[-200:]))
        print("\n".join(problems))
        return 1
    sys.stdout.write("".join(line for line in output if "PLAY RECAP" in line or re.match(r"^\S+\s+: ok=", line)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
