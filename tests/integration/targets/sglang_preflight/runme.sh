#!/usr/bin/env bash
# sglang_preflight on the lab hosts over SSH, with the real SGLang 0.5.23 the lab image carries
# (/opt/sglang/0.5.23/bin/python, CPU-only): the DFlash config passes in check mode and for real,
# changed=0 each time; every broken copy fails naming its option; a missing interpreter fails
# naming it. The module itself needs only the standard library (Ansible's /usr/bin/python3).
set -euo pipefail
# ansible-test passes only a few environment variables through; `make integration` writes the lab's
# paths next to the targets instead (tests/integration/lab.env, never committed).
LAB_ENV=$(dirname "$0")/../../lab.env
# shellcheck source=/dev/null
[ -f "$LAB_ENV" ] && . "$LAB_ENV"
INVENTORY=${GPUFLEET_LAB_INVENTORY:-$HOME/.cache/gpufleet-lab/run/inventory.ini}
if [ ! -f "$INVENTORY" ]; then
    echo "lab inventory $INVENTORY not found: run 'make lab-up' first" >&2
    exit 1
fi
export ANSIBLE_HOST_KEY_CHECKING=False
COMMON=(-i "$INVENTORY" -e "itest_root=/srv/itest-sglang_preflight")
cleanup() { ansible-playbook "${COMMON[@]}" cleanup.yml >/dev/null || true; }
trap cleanup EXIT

ansible-playbook "${COMMON[@]}" setup.yml >/dev/null

# play EXPECT PLAYBOOK ARGS...: run it, then check each host's recap: changed "0" or "some", no failure.
play() {
    local expect=$1 book=$2; shift 2
    local out
    out=$(ansible-playbook "${COMMON[@]}" "$book" "$@") || { echo "$out"; exit 1; }
    echo "$out" | sed -n '/PLAY RECAP/,$p'
    if printf '%s' "$out" | grep -q 'sk-itest-NOT-A-SECRET'; then echo "the API key leaked into the output" >&2; exit 1; fi
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

play 0 good.yml --check
play 0 good.yml
play 0 good.yml
play 0 bad.yml --check
play 0 bad.yml
