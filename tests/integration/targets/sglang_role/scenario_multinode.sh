# shellcheck shell=bash
# Sourced by runme.sh (the sglang_role_ranks target: SGLANG_ROLE_PART=ranks) after the batches
# scenario, or after the first deploy with SGLANG_ROLE_ONLY=multinode. Issue 12 item 3: one multi-node
# server (gpu1 rank 0, gpu2 rank 1) is never split. 9. the two hosts become one server: one batch,
# both ranks restarted; (a) rank 0 fails its preflight: neither rank changes; (b) a change on one
# rank restarts both, once each; (c) a --limit holding one rank is refused, nothing changes (on a
# revision change: `current` does not move, the served commit is not pruned); (d) a
# rank systemd brought back alone (Restart=on-failure) makes the next deploy restart the whole server
# and probe rank 0; the deploy after that changes nothing.
echo "== 9. two hosts as one multi-node server: ranks, dist-init-addr, one batch, restarted together"
MN_SINGLE=$(state)
{ cat "$INVENTORY"; printf '\n[itest_mn]\ngpu1\ngpu2\n'; } > "$MN_INV"
ansible-playbook -i "$MN_INV" -e "@vars.yml" -e "model_tools_wheelhouse=$WHEELHOUSE" gpufleet.llm.deploy "${CUR[@]}" \
    -e sglang_multinode_group=itest_mn -e gpufleet_serial=1 > "$OUT" 2>&1 || { cat "$OUT"; exit 1; }
[ "$(grep -c 'PLAY \[Roll out, batch by batch\]' "$OUT")" -eq 1 ] || { echo "the ranks were split across batches" >&2; exit 1; }
expect_in "$OUT" 'skipping: \[gpu2\]'
ansible-playbook -i "$MN_INV" multinode-checks.yml >/dev/null
MN_JOINED=$(state); echo "$MN_JOINED"
for h in gpu1 gpu2; do
    [ "$(field $h 2 <<<"$MN_JOINED")" != "$(field $h 2 <<<"$MN_SINGLE")" ] || { echo "$h: not restarted with its rank" >&2; exit 1; }
done

echo "== multinode. the ranks of one server: a shared barrier, restarted together, never limited to one"
MN_SAVED_ARGS=("${PLAY_ARGS[@]}")
MN_HV_INV=$LAB_TMP/multinode-hostvar.ini
# (b)'s change on one rank only: an inventory host var of gpu2 (vars.yml holds extra vars, which host
# vars cannot override; sglang_protect_home is not among them), changing gpu2's unit only.
{ cat "$INVENTORY"; printf '\n[itest_mn]\ngpu1\ngpu2 sglang_protect_home=false\n'; } > "$MN_HV_INV"
PLAY_ARGS=(-i "$MN_INV" -e "@vars.yml" -e "model_tools_wheelhouse=$WHEELHOUSE" -e sglang_multinode_group=itest_mn)
MN0=$(state); echo "$MN0"

echo "   (a) rank 0 fails its preflight (a corrupted shard on gpu1): neither rank changes, gpu2 names gpu1"
ansible-playbook "${PLAY_ARGS[@]}" corrupt.yml -e itest_host=gpu1 >/dev/null
must_fail "$OUT" serve.yml -e '{"itest_args": {"chunked_prefill_size": 1024}}'
expect_in "$OUT" 'gpu1.*not starting SGLang on a model that failed verification'
expect_in "$OUT" 'gpu2 \(rank 1 of sglang-itest.service on gpu1, gpu2\): gpu1 \(rank 0\) failed its preflight.*nothing was changed on any rank'
[ "$(state)" = "$MN0" ] || { state; echo "a rank changed although rank 0 failed its preflight" >&2; exit 1; }

echo "   (b) a change on gpu2 only (and gpu1's shard repaired by the fetch): both ranks restart, once each"
PLAY_ARGS=(-i "$MN_HV_INV" "${PLAY_ARGS[@]:2}")
ansible-playbook "${PLAY_ARGS[@]}" gpufleet.llm.deploy "${CUR[@]}" > "$OUT" 2>&1 || { cat "$OUT"; exit 1; }
expect_in "$OUT" 'sglang-itest.service is restarted on every rank \(gpu1, gpu2\): gpu2: its config, environment or unit changed'
MN1=$(state); echo "$MN1"
[ "$(field gpu1 5 <<<"$MN1")" = "$(field gpu1 5 <<<"$MN0")" ] || { echo "gpu1's files changed: the change was meant for gpu2 only" >&2; exit 1; }
[ "$(field gpu2 5 <<<"$MN1")" != "$(field gpu2 5 <<<"$MN0")" ] || { echo "gpu2's unit did not change" >&2; exit 1; }
for h in gpu1 gpu2; do
    [ "$(field $h 2 <<<"$MN1")" != "$(field $h 2 <<<"$MN0")" ] || { echo "$h: not restarted with its server" >&2; exit 1; }
    [ "$(field $h 4 <<<"$MN1")" = 0 ] || { echo "$h: systemd restarted it on failure" >&2; exit 1; }
    since=$(field $h 3 <<<"$MN0")
    stops=$(on "$h" "journalctl -u sglang-itest.service --since @$(( ${since#@} + 1 )) --no-pager | grep -c 'standin: stopped' || true" | field "$h" 2)
    [ "$stops" = 1 ] || { echo "$h: $stops stops since the previous start (expected exactly 1)" >&2; exit 1; }
done

echo "   (c) --limit gpu2 (one rank of the server), on a revision change: refused before anything is written, current included"
# the other fixture revision than the one deployed (CUR names none: v1.0 is deployed; main if it names main)
if [[ " ${CUR[*]} " == *" itest_revision=main "* ]]; then MN_OTHER_REV=v1.0; else MN_OTHER_REV=main; fi
# shellcheck disable=SC2016  # expanded on the host
MN_LINKS='for m in kimi kimi-dflash; do l=/srv/itest-sglang/models/$m/current; readlink "$l"; test -d "$(readlink -f "$l")" && echo present; done'
MN_LINKS_BEFORE=$(on gpu2 "$MN_LINKS")
must_fail "$OUT" gpufleet.llm.deploy "${CUR[@]}" -e "itest_revision=$MN_OTHER_REV" --limit gpu2 \
    -e '{"itest_args": {"chunked_prefill_size": 1024}}'
expect_in "$OUT" 'this play does not include gpu1.*Nothing was changed: limit the play to the whole group \(--limit itest_mn\)'
[ "$(state)" = "$MN1" ] || { state; echo "a --limit on one rank changed the server" >&2; exit 1; }
# the roll refuses before switch.yml: `current` still points at the served commit, which was not pruned
[ "$(on gpu2 "$MN_LINKS")" = "$MN_LINKS_BEFORE" ] \
    || { echo "$MN_LINKS_BEFORE"; on gpu2 "$MN_LINKS"; echo "a --limit on one rank moved current or pruned the served commit" >&2; exit 1; }

echo "   (d) rank 1 killed, brought back alone by systemd: the next deploy restarts the whole server"
MN_PID=$(field gpu2 2 <<<"$MN1")
on gpu2 "kill -KILL $MN_PID" >/dev/null
# The event, not a delay: systemd has restarted it (NRestarts 1) and it runs again (RestartSec=10).
# shellcheck disable=SC2016  # expanded on the host
MN_BACK=$(on gpu2 'for i in $(seq 600); do [ "$(systemctl show -p NRestarts --value sglang-itest.service)" -ge 1 ] && [ "$(systemctl show -p ActiveState --value sglang-itest.service)" = active ] && { echo back; break; }; sleep 0.1; done')
[ "$(field gpu2 2 <<<"$MN_BACK")" = back ] || { echo "systemd did not bring rank 1 back: $MN_BACK" >&2; exit 1; }
MN2=$(state); echo "$MN2"
if [ "$(field gpu2 4 <<<"$MN2")" != 1 ] || [ "$(field gpu1 2 <<<"$MN2")" != "$(field gpu1 2 <<<"$MN1")" ]; then
    echo "expected rank 1 alone restarted by systemd" >&2; exit 1
fi
ansible-playbook "${PLAY_ARGS[@]}" gpufleet.llm.deploy "${CUR[@]}" > "$OUT" 2>&1 || { cat "$OUT"; exit 1; }
expect_in "$OUT" 'restarted on every rank \(gpu1, gpu2\): gpu2: systemd restarted it alone 1 time'
expect_in "$OUT" 'sglang-itest.service: serves /srv/itest-sglang/models/kimi/'
MN3=$(state); echo "$MN3"
for h in gpu1 gpu2; do
    [ "$(field $h 2 <<<"$MN3")" != "$(field $h 2 <<<"$MN2")" ] || { echo "$h: not restarted with its server" >&2; exit 1; }
    [ "$(field $h 4 <<<"$MN3")" = 0 ] || { echo "$h: NRestarts not reset by the coordinated restart" >&2; exit 1; }
    [ "$(field $h 5 <<<"$MN3")" = "$(field $h 5 <<<"$MN2")" ] || { echo "$h: files changed" >&2; exit 1; }
done
echo "   the deploy again: changed=0"
play 0 gpufleet.llm.deploy "${CUR[@]}"
[ "$(state)" = "$MN3" ] || { echo "the server changed on a no-op deploy" >&2; exit 1; }
PLAY_ARGS=("${MN_SAVED_ARGS[@]}")
