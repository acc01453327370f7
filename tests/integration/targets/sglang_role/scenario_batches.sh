# shellcheck shell=bash
# Sourced by runme.sh right after the first deploy (the sglang_role_ranks target: SGLANG_ROLE_PART=ranks;
# or SGLANG_ROLE_ONLY=batches).
# Issue 12 items 1 and 4: deploy.yml stages every host in ONE play, then rolls batch by batch; a server
# that fails in batch 1 stops the roll. Here a config whose server never gets ready (as step 8) fails
# gpu1's probe in batch 1 (gpufleet_serial=1): gpu1 is rolled back, batch 2 is halted before it
# changes anything on gpu2 (same MainPID, start time, restart count, files, `current`), and the
# summary play (localhost) names gpu1 failed and rolled back, gpu2 halted, both on the old revision.
echo "== batches. a bad config in batch 1 stops the roll: batch 2 untouched, the summary says why"
# shellcheck disable=SC2016  # expanded on the host
BA_LINKS='readlink /srv/itest-sglang/models/kimi/current /srv/itest-sglang/models/kimi-dflash/current; ls /srv/itest-sglang/models/kimi /srv/itest-sglang/models/kimi-dflash'
BA_BEFORE=$(state)
BA_LINKS_BEFORE=$(on gpu2 "$BA_LINKS")
must_fail "$OUT" gpufleet.llm.deploy "${CUR[@]}" -e gpufleet_serial=1 -e itest_ready_timeout=6 \
    -e '{"itest_env": {"GPUFLEET_STANDIN_NEVER_READY": "1"}}'
[ "$(grep -c 'PLAY \[Stage every model on every host\]' "$OUT")" -eq 1 ] \
    || { grep 'PLAY \[' "$OUT"; echo "expected one stage play for both hosts" >&2; exit 1; }
[ "$(grep -c 'PLAY \[Roll out, batch by batch\]' "$OUT")" -eq 2 ] \
    || { grep 'PLAY \[' "$OUT"; echo "expected 2 roll batches of 1 host" >&2; exit 1; }
expect_in "$OUT" 'gpu1.*ROLLED BACK'
expect_in "$OUT" 'batch 2 halted: gpu1 of an earlier batch did not finish its roll; gpu2 is left as it was'
expect_in "$OUT" 'stayed on the old revision: gpu1 \(its batch failed on gpu1 \(rolled back to the previous config on gpu1\)\)'
expect_in "$OUT" 'stayed on the old revision: gpu2 \(halted after an earlier failure'
expect_in "$OUT" '2 of 2 servers stayed on the old revision: gpu1, gpu2'
BA_AFTER=$(state); echo "$BA_AFTER"
[ "$(grep '^gpu2 ' <<<"$BA_AFTER")" = "$(grep '^gpu2 ' <<<"$BA_BEFORE")" ] \
    || { echo "gpu2 changed although its batch was halted:"; echo "$BA_BEFORE"; echo "$BA_AFTER"; exit 1; } >&2
[ "$(on gpu2 "$BA_LINKS")" = "$BA_LINKS_BEFORE" ] || { echo "gpu2's model tree changed although its batch was halted" >&2; exit 1; }
[ "$(field gpu1 5 <<<"$BA_AFTER")" = "$(field gpu1 5 <<<"$BA_BEFORE")" ] || { echo "gpu1: files not restored" >&2; exit 1; }
ansible-playbook "${PLAY_ARGS[@]}" probe.yml -e itest_serving=current >/dev/null
play 0 gpufleet.llm.deploy "${CUR[@]}"
