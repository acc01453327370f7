#!/usr/bin/env bash
# The model role's install stage against the lab hosts (make lab-up), community.docker's pattern:
# check mode, for real, both again; the play recap's changed counts are asserted each time.
set -euo pipefail
# ansible-test passes only a few environment variables through; `make integration` writes the lab's
# paths next to the targets instead (tests/integration/lab.env, never committed).
LAB_ENV=$(dirname "$0")/../../lab.env
# shellcheck source=/dev/null
[ -f "$LAB_ENV" ] && . "$LAB_ENV"
INVENTORY=${GPUFLEET_LAB_INVENTORY:-$HOME/.cache/gpufleet-lab/run/inventory.ini}
WHEELHOUSE=${GPUFLEET_LAB_WHEELHOUSE:-$HOME/.cache/gpufleet-lab/wheelhouse/tools}
if [ ! -f "$INVENTORY" ]; then
    echo "lab inventory $INVENTORY not found: run 'make lab-up' first" >&2
    exit 1
fi
export ANSIBLE_HOST_KEY_CHECKING=False
VENV=/opt/gpufleet/tools-itest

# play EXPECT ARGS...: run apply.yml, then check each host's changed count in the recap: "0" or "some".
play() {
    local expect=$1; shift
    local out
    out=$(ansible-playbook -i "$INVENTORY" apply.yml \
        -e "model_tools_wheelhouse=$WHEELHOUSE" -e "model_tools_venv=$VENV" "$@") || { echo "$out"; exit 1; }
    echo "$out" | sed -n '/PLAY RECAP/,$p'
    printf '%s' "$out" | python3 -c '
import re, sys
expect, label = sys.argv[1], sys.argv[2]
recap = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", sys.stdin.read(), re.M)
assert recap, "no play recap: no host ran"
for host, changed, unreachable, failed in recap:
    changed = int(changed)
    good = changed == 0 if expect == "0" else changed > 0
    print("%s: %s changed=%d (expected %s)" % (label, host, changed, expect))
    assert good and unreachable == "0" and failed == "0", "%s: changed=%d unreachable=%s failed=%s" % (host, changed, unreachable, failed)
' "$expect" "apply ${*}"
}

ansible-playbook -i "$INVENTORY" cleanup.yml -e "venv=$VENV"
play some --check
ansible-playbook -i "$INVENTORY" verify.yml -e "venv=$VENV" -e expect_installed=false
play some
play 0
play 0 --check
ansible-playbook -i "$INVENTORY" verify.yml -e "venv=$VENV" -e expect_installed=true
ansible-playbook -i "$INVENTORY" cleanup.yml -e "venv=$VENV"
