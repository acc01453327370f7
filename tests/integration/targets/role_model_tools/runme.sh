#!/usr/bin/env bash
# The model role's install stage against the lab hosts (make lab-up), community.docker's pattern:
# check mode, for real, both again; the play recap's changed counts are asserted each time.
set -euo pipefail
INVENTORY=${GPUFLEET_LAB_INVENTORY:-$HOME/.cache/gpufleet-lab/run/inventory.ini}
WHEELHOUSE=${GPUFLEET_LAB_WHEELHOUSE:-$HOME/.cache/gpufleet-lab/wheelhouse/tools}
if [ ! -f "$INVENTORY" ]; then
    echo "lab inventory $INVENTORY not found: run 'make lab-up' first" >&2
    exit 1
fi
export ANSIBLE_HOST_KEY_CHECKING=False
VENV=/opt/gpufleet/tools-itest

# play EXPECT ARGS...: run apply.yml, then check every host's changed count: "0" or "some".
play() {
    local expect=$1; shift
    local out
    out=$(ANSIBLE_STDOUT_CALLBACK=ansible.builtin.json ansible-playbook -i "$INVENTORY" apply.yml \
        -e "model_tools_wheelhouse=$WHEELHOUSE" -e "model_tools_venv=$VENV" "$@") || { echo "$out"; exit 1; }
    printf '%s' "$out" | python3 -c '
import json, sys
expect, label = sys.argv[1], sys.argv[2]
stats = json.load(sys.stdin)["stats"]
assert stats, "no hosts ran"
for host, s in sorted(stats.items()):
    good = s["changed"] == 0 if expect == "0" else s["changed"] > 0
    print("%s: %s changed=%d (expected %s)" % (label, host, s["changed"], expect))
    assert good and s["failures"] == 0 and s["unreachable"] == 0, "%s: %r" % (host, s)
' "$expect" "${*:-apply}"
}

ansible-playbook -i "$INVENTORY" cleanup.yml -e "venv=$VENV"
play some --check
ansible-playbook -i "$INVENTORY" verify.yml -e "venv=$VENV" -e expect_installed=false
play some
play 0
play 0 --check
ansible-playbook -i "$INVENTORY" verify.yml -e "venv=$VENV" -e expect_installed=true
ansible-playbook -i "$INVENTORY" cleanup.yml -e "venv=$VENV"
