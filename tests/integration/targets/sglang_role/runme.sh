#!/usr/bin/env bash
# The gated sglang role on the lab hosts over SSH, through the collection's own playbooks
# (gpufleet.llm.deploy / gpufleet.llm.verify). The server is the lab's SGLang STAND-IN (no GPU
# here) started by the real unit the role writes, under its real sandbox; nvidia-smi is a stand-in
# too (canned 8x H200 output). Everything else is real: systemd, the fixture models from the lab Hub,
# model_verify, SGLang 0.5.23's own argument parser in the preflight.
# shellcheck source=../setup_lab/lab.sh
. "$(dirname "$0")/../setup_lab/lab.sh"
KEY=itest-sglang-key-5c1e0d7a      # vars.yml; a test value
PLAY_ARGS+=(-e "@vars.yml" -e "model_tools_wheelhouse=$WHEELHOUSE")
forbid_in_output "$KEY"
MN_INV=$LAB_TMP/multinode.ini
at_exit cleanup_play

# state: "host pid start-epoch restarts sha(config+env+unit)" per host, sorted.
# shellcheck disable=SC2016  # expanded on the host, not here
STATE_CMD='for p in MainPID ExecMainStartTimestamp NRestarts; do v=$(systemctl show --timestamp=unix -p $p --value sglang-itest.service); echo ${v:--}; done; cat /etc/sglang/itest.yaml /etc/sglang/itest.env /etc/systemd/system/sglang-itest.service 2>/dev/null | sha256sum | cut -c1-16'
# on HOSTS CMD: "host stdout-words" per host, from the ad-hoc output ("host | CHANGED | rc=0 >>" + stdout).
on() {
    ansible "$1" -i "$INVENTORY" -m ansible.builtin.shell -a "$2" 2>/dev/null | python3 -c '
import re, sys
out, host = {}, None
for line in sys.stdin:
    m = re.match(r"^(\S+) \| \S+ \| rc=\d+ >>$", line.rstrip("\n"))
    if m:
        host = m.group(1)
        out[host] = []
    elif host:
        out[host].append(line.strip())
for host in sorted(out):
    print(host, " ".join(" ".join(out[host]).split()) or "-")'
}
state() { on gpu_nodes "$STATE_CMD"; }
field() { awk -v h="$1" -v f="$2" '$1 == h { print $f }'; }   # field HOST N < state
# must_fail OUT_FILE BOOK ARGS...: the play must fail; its output is kept for greps.
must_fail() {
    local out=$1; shift
    if ansible-playbook "${PLAY_ARGS[@]}" "$@" > "$out" 2>&1; then cat "$out"; echo "expected $* to fail" >&2; exit 1; fi
    if grep -qF -- "$KEY" "$out"; then echo "the API key leaked into the output of $*" >&2; exit 1; fi
}
expect_in() { grep -qE -- "$2" "$1" || { sed -n '/fatal\|FAILED\|msg/p' "$1" | tail -20; echo "expected /$2/ in the output" >&2; exit 1; }; }
OUT=$LAB_TMP/out
# hub_api [SINCE]: with SINCE, the lab Hub API requests this target's hosts made after log entry SINCE,
# one "METHOD PATH" a line (query dropped); without, the last entry's seq. The Hub is shared by the
# lanes of make test, so requests are told apart by client address (the lab's own log: tests/lab/hub).
hub_api() {
    python3 - "$INVENTORY" "${1:-}" <<'PY'
import json, re, sys, urllib.request
text = open(sys.argv[1]).read()
hosts = set(re.findall(r"ansible_host=(\S+)", text))
hub = re.search(r"lab_hub_endpoint=(\S+)", text).group(1)
since = int(sys.argv[2] or 0)
with urllib.request.urlopen("%s/_lab/log?since=%d&server=api" % (hub, since), timeout=60) as answer:
    log = json.load(answer)
if not sys.argv[2]:
    print(max([e["seq"] for e in log] + [0]))
for entry in log if sys.argv[2] else ():
    if entry["client"].rsplit(":", 1)[0] in hosts:
        print(entry["method"], entry["path"])
PY
}

# scenario NAME: the scenario in scenario_NAME.sh, sourced here (it sees every variable and function
# above and the state S* so far). SGLANG_ROLE_ONLY="a b" runs the fresh deploy (1.) and then only
# scenarios a and b, for working on one scenario without the whole target (~15 min).
scenario() {
    if [ -n "${SGLANG_ROLE_ONLY:-}" ] && [[ " $SGLANG_ROLE_ONLY " != *" $1 "* ]]; then return 0; fi
    # shellcheck source=/dev/null
    . "$TARGET_DIR/scenario_$1.sh"
}
only_mode() { [ -n "${SGLANG_ROLE_ONLY:-}" ]; }
# The target's scenarios come in three parts, each after its own fresh deploy (1.), that make test
# runs at once on their own lab hosts (tests/stages.sh, do_integration); together they run every
# scenario exactly once:
#   (no SGLANG_ROLE_PART, this target)  0., first_check, 2.-6., override: one server per host, one commit;
#   SGLANG_ROLE_PART=rollback (the sglang_role_rollback target)  5. again as the starting point, then
#       stale, 7. (a second commit, a corrupted shard), 8. (rollback) and crashloop;
#   SGLANG_ROLE_PART=ranks (the sglang_role_ranks target)  batches, multinode, 10.: more than one server.
ranks_part() { [ "${SGLANG_ROLE_PART:-}" = ranks ]; }
rollback_part() { [ "${SGLANG_ROLE_PART:-}" = rollback ]; }

ansible-playbook "${PLAY_ARGS[@]}" cleanup.yml >/dev/null
ansible-playbook -i "$INVENTORY" "$LAB_DIR/prepare-hosts.yml" >/dev/null

if ! ranks_part && ! rollback_part; then
    echo "== 0. fetch only, then a check-mode deploy on hosts that never ran SGLang: a diff, nothing written"
    play some gpufleet.llm.deploy -e gpufleet_serve=false
    scenario first_check
fi

echo "== 1. full deploy of v1.0 (model role, then the sglang role), one server per batch"
ansible-playbook "${PLAY_ARGS[@]}" gpufleet.llm.deploy -e gpufleet_serial=1 > "$OUT" 2>&1 || { cat "$OUT"; exit 1; }
sed -n '/PLAY RECAP/,$p' "$OUT"
if [ "$(grep -c 'PLAY \[Roll out, batch by batch\]' "$OUT")" -ne 2 ] || [ "$(grep -c 'PLAY \[Stage every model on every host\]' "$OUT")" -ne 1 ]; then echo "expected one stage play, then 2 batches of 1 host"; exit 1; fi
ansible-playbook "${PLAY_ARGS[@]}" checks.yml >/dev/null
S1=$(state); echo "$S1"
# CUR: the deploy arguments of what is deployed now; a scenario that changes the server puts this
# back (play 0 gpufleet.llm.deploy "${CUR[@]}" must then be a no-op) and re-takes the state it changed.
# shellcheck disable=SC2034  # read by the scenario_*.sh files
CUR=()
if only_mode; then
    for name in $SGLANG_ROLE_ONLY; do [ "$name" = first_check ] || scenario "$name"; done
    echo "sglang_role: scenarios $SGLANG_ROLE_ONLY passed"
    exit 0
fi

if ranks_part; then
    scenario batches
    scenario multinode    # 9., two hosts as one multi-node server, then its scenarios

    echo "== 10. verify.yml on a corrupted shard: fails naming the host and the file"
    ansible-playbook "${PLAY_ARGS[@]}" corrupt.yml -e itest_host=gpu1 >/dev/null
    must_fail "$OUT" gpufleet.llm.verify "${CUR[@]}" -e sglang_multinode_group=itest_mn -i "$MN_INV"
    expect_in "$OUT" 'gpu1'
    expect_in "$OUT" 'model-00003-of-000004.safetensors'
    echo "sglang_role (ranks): all scenarios passed"
    exit 0
fi

if ! rollback_part; then
    echo "== 2. the same deploy again: changed=0, same MainPID and start time"
    SEQ=$(hub_api)
    play 0 gpufleet.llm.deploy
    # The pin asks the Hub once per model for the revision's commit; the stage uses that commit
    # (before, it asked the Hub for it a second time).
    hub_api "$SEQ" > "$LAB_TMP/hub-api"
    for repo in gpufleet-lab/Kimi-K2.6-mini gpufleet-lab/Kimi-K2.6-mini-DFlash; do
        n=$(grep -c "^GET /api/models/$repo/revision/" "$LAB_TMP/hub-api" || true)
        [ "$n" = 1 ] || { sort "$LAB_TMP/hub-api" | uniq -c; echo "$repo: $n revision lookups in a no-op deploy (expected 1)" >&2; exit 1; }
    done
    S2=$(state)
    [ "$S1" = "$S2" ] || { echo "the server changed on a no-op deploy:"; echo "$S1"; echo "$S2"; exit 1; }

    echo "== 3. verify.yml on the healthy fleet: changed=0"
    play 0 gpufleet.llm.verify

    echo "== 4. check mode with a changed option: a diff with the API key masked, nothing changed"
    ansible-playbook "${PLAY_ARGS[@]}" gpufleet.llm.deploy --check --diff -e '{"itest_args": {"chunked_prefill_size": 4096}}' > "$OUT" 2>&1 \
        || { cat "$OUT"; exit 1; }
    expect_in "$OUT" '^\+chunked-prefill-size: 4096'
    expect_in "$OUT" 'api-key: "\*\*\*\*\*\*\*\*"'
    ! grep -qF -- "$KEY" "$OUT" || { echo "API key in the check-mode diff" >&2; exit 1; }
    [ "$(state)" = "$S2" ] || { echo "check mode changed the server" >&2; exit 1; }

    echo "== 5. change one option for real: exactly one restart per host"
    play some gpufleet.llm.deploy -e '{"itest_args": {"chunked_prefill_size": 4096}}'
    S3=$(state); echo "$S3"
    for h in gpu1 gpu2; do
        [ "$(field $h 2 <<<"$S3")" != "$(field $h 2 <<<"$S2")" ] || { echo "$h: not restarted" >&2; exit 1; }
        [ "$(field $h 4 <<<"$S3")" = 0 ] || { echo "$h: systemd restarted it on failure" >&2; exit 1; }
        since=$(field $h 3 <<<"$S2")
        stops=$(on "$h" "journalctl -u sglang-itest.service --since @$(( ${since#@} + 1 )) --no-pager | grep -c 'standin: stopped' || true" | field "$h" 2)
        [ "$stops" = 1 ] || { echo "$h: $stops stops since the previous start (expected exactly 1)" >&2; exit 1; }
    done
    ARGS='{"itest_args": {"chunked_prefill_size": 4096}}'
    CUR=(-e "$ARGS")

    echo "== 6. a misspelt option: the preflight fails naming it, nothing is written"
    must_fail "$OUT" gpufleet.llm.deploy -e '{"itest_args": {"chunked_prefill_size": 4096, "speculativ_num_steps": 3}}'
    expect_in "$OUT" 'speculativ-num-steps'
    [ "$(state)" = "$S3" ] || { echo "a failed preflight changed the server" >&2; exit 1; }

    echo "   tags cannot go around the gate: with the preflight skipped, neither configure nor service acts"
    for phase in sglang_configure sglang_service; do
        must_fail "$OUT" gpufleet.llm.deploy --tags "model_verify,$phase" --skip-tags sglang_preflight \
            -e '{"itest_args": {"chunked_prefill_size": 2048}}'
        expect_in "$OUT" 'the preflight \(sglang_preflight tag\) did not run'
        [ "$(state)" = "$S3" ] || { echo "--skip-tags sglang_preflight let $phase change the server" >&2; exit 1; }
    done
    scenario override
    echo "sglang_role: all scenarios of one server on one commit passed (sglang_role_rollback and sglang_role_ranks run the others)"
    exit 0
fi

# SGLANG_ROLE_PART=rollback: from the state step 5 leaves (one option changed for real; its own
# assertions are the sglang_role target's), the scenarios that restart, roll back or move commits.
echo "== 5. (again, as the starting point) one option changed for real"
ARGS='{"itest_args": {"chunked_prefill_size": 4096}}'
play some gpufleet.llm.deploy -e "$ARGS"
CUR=(-e "$ARGS")
scenario stale
S3=$(state)

echo "== 7. the second commit, one shard corrupted on gpu2: gpu2 fails before any write, keeps serving v1.0"
play some gpufleet.llm.deploy -e "$ARGS" -e itest_revision=main -e gpufleet_serve=false
ansible-playbook "${PLAY_ARGS[@]}" corrupt.yml -e itest_host=gpu2 >/dev/null
must_fail "$OUT" serve.yml -e "$ARGS"
expect_in "$OUT" 'gpu2.*not starting SGLang on a model that failed verification'
expect_in "$OUT" 'model-00003-of-000004.safetensors'
S4=$(state); echo "$S4"
[ "$(field gpu2 2 <<<"$S4") $(field gpu2 5 <<<"$S4")" = "$(field gpu2 2 <<<"$S3") $(field gpu2 5 <<<"$S3")" ] \
    || { echo "gpu2's server or config changed after a failed verification" >&2; exit 1; }
[ "$(field gpu1 2 <<<"$S4")" != "$(field gpu1 2 <<<"$S3")" ] || { echo "gpu1 did not move to the new commit" >&2; exit 1; }
ansible-playbook "${PLAY_ARGS[@]}" probe.yml -e itest_host=gpu2 -e itest_serving=old >/dev/null
ansible-playbook "${PLAY_ARGS[@]}" probe.yml -e itest_host=gpu1 -e itest_serving=current >/dev/null
echo "   the deploy repairs gpu2 (hf_snapshot re-fetches the damaged shard) and moves it to the new commit"
ansible-playbook "${PLAY_ARGS[@]}" gpufleet.llm.deploy -e "$ARGS" -e itest_revision=main > "$OUT" 2>&1 || { cat "$OUT"; exit 1; }
ansible-playbook "${PLAY_ARGS[@]}" probe.yml -e itest_serving=current >/dev/null
S5=$(state)
# shellcheck disable=SC2034  # read by scenario_crashloop.sh
CUR=(-e "$ARGS" -e itest_revision=main)

echo "== 8. a probe that fails after the restart: rollback to the previous config, old server answers"
must_fail "$OUT" gpufleet.llm.deploy -e "$ARGS" -e itest_revision=main -e itest_ready_timeout=6 \
    -e '{"itest_env": {"GPUFLEET_STANDIN_NEVER_READY": "1"}}'
expect_in "$OUT" 'ROLLED BACK'
expect_in "$OUT" 'the previous server answers for /srv/itest-sglang/models/kimi/'
S6=$(state); echo "$S6"
for h in gpu1 gpu2; do
    [ "$(field $h 5 <<<"$S6")" = "$(field $h 5 <<<"$S5")" ] || { echo "$h: files not restored" >&2; exit 1; }
done
ansible-playbook "${PLAY_ARGS[@]}" probe.yml -e itest_serving=current >/dev/null
play 0 gpufleet.llm.deploy -e "$ARGS" -e itest_revision=main
scenario crashloop
echo "sglang_role (rollback): all scenarios passed"
