#!/usr/bin/env bash
# hf_snapshot and the model role's fetch stage on the lab hosts against the lab Hub (make lab-up):
# module scenarios (check mode, real, idempotent with zero body bytes, update with hard links, gated,
# strays, traversal guard, disk preflight), then the role (target + drafter, verified with
# model_verify) on v1.0, a main that fails verification (current stays at v1.0), the entry-order
# check, main, main again and in check mode (changed=0), and a capped fetch that outlasts 300 polls
# of the role's progress loop and must show progress lines.
# shellcheck source=../setup_lab/lab.sh
. "$(dirname "$0")/../setup_lab/lab.sh"
# one tree per run: two runs of this target (parallel build dirs) must not share or remove each other's
ROOT=/srv/itest-hf_snapshot-$$
STORE=$LAB_CACHE/fixtures

# This target resets, throttles and faults the Hub and asserts on its request log, so it runs
# against a private instance of the lab Hub (tests/lab/hub/server.py, the same fixture store) on
# the controller's bridge address: the shared lab Hub (10.231.0.2) serves other tests and
# benchmarks at the same time, and its config, fault rules and log are global to it.
HUB_PIDFILE=$LAB_TMP/hub.pid
stop_private_hub() { if [ -s "$HUB_PIDFILE" ]; then kill "$(cat "$HUB_PIDFILE")" 2>/dev/null || true; fi; }
at_exit stop_private_hub
HUB=$(python3 private_hub.py "$(dirname "$INVENTORY")/lab.json" "$STORE" "$HUB_PIDFILE")
echo "private lab Hub: $HUB"
PLAY_ARGS+=(-e "itest_root=$ROOT" -e "fixture_store=$STORE" -e "lab_hub_endpoint=$HUB")
at_exit cleanup_play

# The modules run with the tools venv's Python: make sure it is there (idempotent, from the wheelhouse).
ansible-playbook "${PLAY_ARGS[@]}" tools.yml -e "model_tools_wheelhouse=$WHEELHOUSE"
ansible-playbook "${PLAY_ARGS[@]}" cleanup.yml
ansible-playbook "${PLAY_ARGS[@]}" module.yml

# role: v1.0, then main (only the changed files travel, current switches), then main again (no change)
role() {
    local expect=$1; shift
    play "$expect" role.yml "$@"
}
# check mode with a headroom no disk has: the fetch reports the shortfall (role.yml asserts the
# figures), the resolve only lists; neither fails
role some --check -e revision=v1.0 -e phase=check -e model_min_free_bytes=1000000000000000000
role some -e revision=v1.0 -e phase=v1
# current switches only after verify: main fetched but failing verification leaves current at v1.0
ansible-playbook "${PLAY_ARGS[@]}" gate.yml -e gate_case=expect
ansible-playbook "${PLAY_ARGS[@]}" gate.yml -e gate_case=stray
# a drafter listed before its target fails before anything is fetched
ansible-playbook "${PLAY_ARGS[@]}" order.yml
role some -e revision=main -e phase=main
role 0 -e revision=main -e phase=again
role 0 --check -e revision=main -e phase=again

# a fetch through the role that outlasts 300 polls (issue 10: the old self-including progress loop
# died with RecursionError at ~245): a capped Hub, a 0.05 s poll interval, and the cap lifted only
# once the play printed more than 300 progress lines (bytes and events, not the clock); one host
# (bounded: the play at 25 min, the fetch job at 20 min, never the measure of the test)
python3 long_follow.py "$HUB" 300 timeout 1500 ansible-playbook "${PLAY_ARGS[@]}" role.yml --limit 'gpu_nodes[0]' \
    -e revision=main -e phase=longpoll -e models_dir=longpoll -e model_progress_interval=0.05 -e model_fetch_timeout=1200

# faults: every 10th resolve and CDN request fails (5xx, 429 + Retry-After, resets, truncated bodies)
# and signed URLs expire mid-fetch -> complete and exact
ansible-playbook "${PLAY_ARGS[@]}" faults.yml
