#!/usr/bin/env bash
# sglang_preflight on the lab hosts over SSH, with the real SGLang 0.5.23 the lab image carries
# (/opt/sglang/0.5.23/bin/python, CPU-only): the DFlash config passes in check mode and for real,
# changed=0 each time; every broken copy fails naming its option; a missing interpreter fails
# naming it; each of SGLang's start-time rules fails by name, and the Kimi K2.6 example's config passes
# with its environment. The module itself needs only the standard library (Ansible's /usr/bin/python3).
# shellcheck source=../setup_lab/lab.sh
. "$(dirname "$0")/../setup_lab/lab.sh"
forbid_in_output sk-itest-NOT-A-SECRET
PLAY_ARGS+=(-e "itest_root=/srv/itest-sglang_preflight" -e @rules.yml)
# One host carries every case: the lab hosts run one image with one SGLang, so a second host gives the
# same verdicts again, and each case is a new SGLang interpreter on the host (import sglang and torch,
# ~2-4 s of CPU). On both hosts the target used ~314 s of host CPU, the most of any target but the router
# roll (make test's lanes share 2 cores: a target's CPU is everyone's wall time).
PLAY_ARGS+=(--limit gpu1)
# The Kimi K2.6 example and the role's defaults, from the collection (beside the targets in a
# checkout; under ansible-test the target runs from a copy: the collection from JUNIT_OUTPUT_DIR).
ROOT=$(cd "$TARGET_DIR/../../../.." && pwd)
if [ ! -f "$ROOT/docs/examples/kimi-k2.6/group_vars/gpu_nodes.yml" ] && [ -n "${JUNIT_OUTPUT_DIR:-}" ]; then
    ROOT=${JUNIT_OUTPUT_DIR%/tests/output/junit}
fi
EXAMPLE=$ROOT/docs/examples/kimi-k2.6/group_vars/gpu_nodes.yml
DEFAULTS=$ROOT/roles/sglang/defaults/main.yml
if [ ! -f "$EXAMPLE" ] || [ ! -f "$DEFAULTS" ]; then
    echo "the Kimi K2.6 example ($EXAMPLE) or the sglang role's defaults were not found" >&2
    exit 1
fi
PLAY_ARGS+=(-e "itest_example_vars=$EXAMPLE" -e "itest_role_defaults=$DEFAULTS")
at_exit cleanup_play

ansible-playbook "${PLAY_ARGS[@]}" setup.yml >/dev/null

play 0 good.yml --check
play 0 good.yml
play 0 good.yml
play 0 bad.yml --check
play 0 bad.yml
# SGLang's start-time rules, each by name; the example's config with and without its environment.
play 0 start_rules.yml --check
play 0 start_rules.yml
