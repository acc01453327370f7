#!/usr/bin/env bash
# model_verify on the lab hosts over SSH: the model role installs the tools venv, the fixture target
# and drafter are copied to /srv/itest-model_verify with manifests, then clean trees (every mode, in
# check mode and for real, twice: changed=0 each time) and broken copies (each caught, file named).
set -euo pipefail
# ansible-test passes only a few environment variables through; `make integration` writes the lab's
# paths next to the targets instead (tests/integration/lab.env, never committed).
LAB_ENV=$(dirname "$0")/../../lab.env
# shellcheck source=/dev/null
[ -f "$LAB_ENV" ] && . "$LAB_ENV"
INVENTORY=${GPUFLEET_LAB_INVENTORY:-$HOME/.cache/gpufleet-lab/run/inventory.ini}
WHEELHOUSE=${GPUFLEET_LAB_WHEELHOUSE:-$HOME/.cache/gpufleet-lab/wheelhouse/tools}
CACHE=$(cd "$WHEELHOUSE/../.." && pwd)
if [ ! -f "$INVENTORY" ]; then
    echo "lab inventory $INVENTORY not found: run 'make lab-up' first" >&2
    exit 1
fi
if [ ! -f "$CACHE/fixtures/fixtures.json" ]; then
    echo "fixture store $CACHE/fixtures not found: run 'tests/stages.sh setup' first" >&2
    exit 1
fi
export ANSIBLE_HOST_KEY_CHECKING=False
ROOT=/srv/itest-model_verify
STAGE=$(mktemp -d)
COMMON=(-i "$INVENTORY" -e "itest_root=$ROOT")
cleanup() {
    ansible-playbook "${COMMON[@]}" cleanup.yml >/dev/null || true
    rm -rf "$STAGE"
}
trap cleanup EXIT

python "$(dirname "$0")/stage_models.py" "$CACHE/fixtures" "$STAGE"
ansible-playbook "${COMMON[@]}" setup.yml -e "stage=$STAGE" \
    -e "model_tools_wheelhouse=$WHEELHOUSE"

# play EXPECT PLAYBOOK ARGS...: run it, then check each host's recap: changed "0" or "some", no failure.
play() {
    local expect=$1 book=$2; shift 2
    local out
    out=$(ansible-playbook "${COMMON[@]}" "$book" "$@") || { echo "$out"; exit 1; }
    echo "$out" | sed -n '/PLAY RECAP/,$p'
    printf '%s' "$out" | python -c '
import re, sys
expect, label = sys.argv[1], sys.argv[2]
recap = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", sys.stdin.read(), re.M)
assert recap, "no play recap: no host ran"
for host, changed, unreachable, failed in recap:
    changed = int(changed)
    good = changed == 0 if expect == "0" else changed > 0
    print("%s: %s changed=%d (expected %s)" % (label, host, changed, expect))
    assert good and unreachable == "0" and failed == "0", "%s: changed=%d unreachable=%s failed=%s" % (host, changed, unreachable, failed)
' "$expect" "$book ${*}"
}

play 0 clean.yml --check
play 0 clean.yml
play 0 clean.yml
play some corrupt.yml
