# shellcheck shell=bash
# Sourced first thing by every integration target that drives the lab hosts (make lab-up) from the
# controller; what each runme.sh would otherwise repeat lives here:
#   - strict mode (set -euo pipefail) and the working directory: the target's own (TARGET_DIR);
#   - the lab's paths: INVENTORY, WHEELHOUSE, LAB_CACHE, LAB_DIR (tests/lab), and a fail-fast when the
#     lab is not there; ANSIBLE_HOST_KEY_CHECKING=False, ANSIBLE_PIPELINING=True, ANSIBLE_FORCE_HANDLERS=true (as ansible-test);
#   - LAB_TMP: a private temp directory, removed at exit;
#   - at_exit CMD ARGS...: cleanups run at exit, last registered first, whatever the exit status
#     (`at_exit cleanup_play` runs the target's cleanup.yml with PLAY_ARGS as they are then);
#   - PLAY_ARGS (-i INVENTORY, then the target's own -e ...), play EXPECT BOOK ARGS... (recap
#     asserted, the string given to forbid_in_output never in the output) and assert_recap.
#
# ansible-test passes only a few environment variables through; `make integration` writes the lab's
# paths next to the targets instead (tests/integration/lab.env, never committed).
set -euo pipefail
# Both directories absolute before the cd: a relative $0 or BASH_SOURCE would not survive it.
SETUP_LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TARGET_DIR=$(cd "$(dirname "$0")" && pwd)
cd "$TARGET_DIR"
LAB_ENV=$SETUP_LAB_DIR/../../lab.env
# Under ansible-test a target runs from a copy inside the collection's tests/output, without lab.env:
# the collection's own is found from JUNIT_OUTPUT_DIR (<collection>/tests/output/junit), which
# ansible-test sets. Each integration lane of make test has its own collection copy and lab.env.
if [ ! -f "$LAB_ENV" ] && [ -n "${JUNIT_OUTPUT_DIR:-}" ]; then
    LAB_ENV=${JUNIT_OUTPUT_DIR%/tests/output/junit}/tests/integration/lab.env
fi
# shellcheck source=/dev/null
[ -f "$LAB_ENV" ] && . "$LAB_ENV"
INVENTORY=${GPUFLEET_LAB_INVENTORY:-$HOME/.cache/gpufleet-lab/run/inventory.ini}
WHEELHOUSE=${GPUFLEET_LAB_WHEELHOUSE:-$HOME/.cache/gpufleet-lab/wheelhouse/tools.tar}
# The lab cache: inventory is <cache>/run/inventory.ini.
LAB_CACHE=$(cd "$(dirname "$INVENTORY")/.." 2>/dev/null && pwd || echo "$HOME/.cache/gpufleet-lab")
# The lab's own files (tests/lab: prepare-hosts.yml, the stand-in nvidia-smi, demo vars): beside
# the targets in a checkout; under ansible-test (a copy without tests/lab, and no lab.env) through
# the link `make integration` leaves in the cache.
LAB_DIR=${GPUFLEET_LAB_DIR:-$(cd "$SETUP_LAB_DIR/../../../lab" 2>/dev/null && pwd || echo "")}
if [ ! -f "$LAB_DIR/prepare-hosts.yml" ] && [ -f "$LAB_CACHE/run/lab-dir/prepare-hosts.yml" ]; then
    LAB_DIR=$(cd "$LAB_CACHE/run/lab-dir" && pwd -P)
fi
if [ ! -f "$LAB_DIR/prepare-hosts.yml" ]; then
    echo "the lab's files (tests/lab) were not found: run the targets through 'make integration'" >&2
    exit 1
fi
if [ ! -f "$INVENTORY" ]; then
    echo "lab inventory $INVENTORY not found: run 'make lab-up' first" >&2
    exit 1
fi
# The targets' Ansible configuration (tests/integration/integration.cfg): ansible-test sets ANSIBLE_CONFIG
# to its copy of it; a target run by hand gets the checkout's.
export ANSIBLE_CONFIG=${ANSIBLE_CONFIG:-$SETUP_LAB_DIR/../../integration.cfg}
export ANSIBLE_HOST_KEY_CHECKING=False
# The lab logs in as root over ssh without requiretty: pipelining saves a round trip per task.
export ANSIBLE_PIPELINING=True
# What ansible-test sets for every target (ansible_test/_internal/ansible_util.py), so that a target run
# by hand behaves as in make test: the notified handlers of a host that failed still run. Sites set it
# too; the roles must never (re)start a server because of it (roles/sglang/handlers/main.yml).
export ANSIBLE_FORCE_HANDLERS=true
export INVENTORY WHEELHOUSE LAB_CACHE LAB_DIR TARGET_DIR

# Common ansible-playbook arguments of a target (it adds its own -e ... after sourcing).
PLAY_ARGS=(-i "$INVENTORY")
# A string that must never appear in any play's output (a test secret), if the target sets one
# with forbid_in_output SECRET.
PLAY_FORBIDDEN=${PLAY_FORBIDDEN:-}
forbid_in_output() { PLAY_FORBIDDEN=$1; }

# at_exit CMD ARGS...: run CMD ARGS at exit (last registered first); a failing cleanup is reported
# by its own output and never changes the target's exit status.
LAB_AT_EXIT=()
at_exit() { LAB_AT_EXIT+=("$(printf '%q ' "$@")"); }
lab_run_at_exit() {
    local i
    for ((i = ${#LAB_AT_EXIT[@]} - 1; i >= 0; i--)); do
        eval "${LAB_AT_EXIT[i]}" || true
    done
}
trap lab_run_at_exit EXIT
# Registered first, so it runs last: each target's wall time in the integration log (make test's
# budget is watched per target; the integration stage of tests/stages.sh lists them).
# (GPUFLEET_TARGET_NAME: a target that runs another target's scripts, e.g. sglang_role_ranks)
LAB_TARGET_NAME=${GPUFLEET_TARGET_NAME:-$(basename "$TARGET_DIR")}
lab_took() { echo "== target $LAB_TARGET_NAME took ${SECONDS} s"; }
at_exit lab_took

LAB_TMP=$(mktemp -d)
at_exit rm -rf "$LAB_TMP"
# GPUFLEET_LAB_KEEP=DIR: a copy of the target's temp directory (play outputs, load records) is kept in
# DIR/<target> when it ends, for a look after a failure.
lab_keep_tmp() {
    local keep=$GPUFLEET_LAB_KEEP/$LAB_TARGET_NAME
    rm -rf "$keep" && mkdir -p "$keep" && cp -a "$LAB_TMP/." "$keep/" && echo "== kept $LAB_TMP in $keep"
}
[ -z "${GPUFLEET_LAB_KEEP:-}" ] || at_exit lab_keep_tmp

# cleanup_play [ARGS...]: the target's cleanup.yml with the current PLAY_ARGS, quietly; never fails.
cleanup_play() { ansible-playbook "${PLAY_ARGS[@]}" cleanup.yml "$@" >/dev/null || true; }

# assert_recap EXPECT LABEL < output: every lab host's recap shows changed "0" or "some", no failure.
assert_recap() {
    python3 -c '
import re, sys
expect, label = sys.argv[1], sys.argv[2]
recap = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", sys.stdin.read(), re.M)
recap = [r for r in recap if r[0] != "localhost"]
# the batch markers of stage.yml and deploy.yml (add_host, no connection) only carry the plan and change nothing
markers = [r for r in recap if re.match(r"gpufleet-(stage|roll)-batch-[0-9]+$", r[0])]
for host, changed, unreachable, failed in markers:
    assert changed == unreachable == failed == "0", "%s (a batch marker): changed=%s unreachable=%s failed=%s" % (
        host, changed, unreachable, failed)
recap = [r for r in recap if r not in markers]
assert recap, "no play recap: no lab host ran"
for host, changed, unreachable, failed in recap:
    changed = int(changed)
    good = changed == 0 if expect == "0" else changed > 0
    print("%s: %s changed=%d (expected %s)" % (label, host, changed, expect))
    assert good and unreachable == "0" and failed == "0", "%s: changed=%d unreachable=%s failed=%s" % (host, changed, unreachable, failed)
' "$1" "$2"
}

# play EXPECT PLAYBOOK ARGS...: run it with PLAY_ARGS, show the recap, assert it (see assert_recap).
play() {
    local expect=$1 book=$2; shift 2
    local out
    out=$(ansible-playbook "${PLAY_ARGS[@]}" "$book" "$@") || { echo "$out"; exit 1; }
    echo "$out" | sed -n '/PLAY RECAP/,$p'
    if [ -n "$PLAY_FORBIDDEN" ] && printf '%s' "$out" | grep -qF -- "$PLAY_FORBIDDEN"; then
        echo "a test secret leaked into the output of $book" >&2
        exit 1
    fi
    printf '%s' "$out" | assert_recap "$expect" "$book ${*}"
}
