# shellcheck shell=bash
# Sourced by runme.sh after step 8 (or after the first deploy with SGLANG_ROLE_ONLY=crashloop).
# Issue 11 items 3 and 5: a new server that crash-loops for real is rolled back long before
# sglang_ready_timeout, and the rollback probes the previous server where it listens.
# A blocker holds port 30112 on every lab host; serve.yml (the sglang role alone: the crash loop, the
# probe and the rollback are all the sglang role's, and the models do not change here) moves the server
# there on both hosts at once. The stand-in exits 1 on "cannot listen" (as SGLang fails on a taken
# port), systemd schedules a restart (Restart=on-failure), the probe reads the unit and fails at once,
# rollback.yml restores the config (port 30111) and probes http://127.0.0.1:30111, not the new address.
echo "== crashloop. a server that crash-loops is rolled back before sglang_ready_timeout, at the previous port"
CL_PORT=30112
CL_TIMEOUT=600
CL_BEFORE=$(state)
CL_SINCE=$(date +%s)
# shellcheck disable=SC2016  # expanded on the host
at_exit on gpu_nodes 'systemctl stop itest-blocker.service 2>/dev/null; true'
on gpu_nodes "systemd-run --unit itest-blocker --collect /usr/bin/python3 -m http.server $CL_PORT --bind 127.0.0.1" >/dev/null
# Events, not a timed race: wait until the blocker really listens before the deploy.
CL_LISTEN=$(on gpu_nodes "for i in \$(seq 200); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", $CL_PORT), 1)' 2>/dev/null && { echo listening; break; }; sleep 0.1; done")
echo "$CL_LISTEN"
[ "$(grep -c ' listening$' <<<"$CL_LISTEN")" = 2 ] || { echo "the blocker does not listen on :$CL_PORT on both hosts" >&2; exit 1; }

must_fail "$OUT" serve.yml "${CUR[@]}" -e "{\"itest_args\": {\"port\": $CL_PORT}}" -e "itest_ready_timeout=$CL_TIMEOUT"
expect_in "$OUT" 'ROLLED BACK'
# the probe stopped on the unit, with the journal line that says why
expect_in "$OUT" 'sglang-itest.service (crashed|failed|was restarted|.s main process changed)'
expect_in "$OUT" "cannot listen on 127.0.0.1:$CL_PORT"
# item 5: the previous server was probed where it listens (the restored config's port), and answers
expect_in "$OUT" 'the previous server answers for /srv/itest-sglang/models/kimi/[^ ]* at http://127.0.0.1:30111'

# The measurement: the probe's own figure (seconds it waited before it stopped) against the timeout.
CL_WAITED=$(grep -oE "stopped waiting for http://127.0.0.1:$CL_PORT/health after [0-9.]+s \(timeout [0-9.]+s\)" "$OUT" \
    | head -1 | sed -E 's/.* after ([0-9.]+)s .*/\1/')
[ -n "$CL_WAITED" ] || { grep -o 'ROLLED BACK.*' "$OUT" | head -3; echo "no probe wait reported" >&2; exit 1; }
# And from the journal: seconds from the restart into the new config to the rollback's restart.
# shellcheck disable=SC2016  # expanded on the host
CL_STARTS=$(on gpu_nodes "journalctl -u sglang-itest.service --since @$CL_SINCE -o short-unix --no-pager | awk '/Started sglang-itest.service/ { t[n++] = \$1 } END { if (n >= 2) printf \"%.1f\", t[n-1] - t[0]; else print \"-\" }'")
echo "   crash loop: the probe stopped waiting after ${CL_WAITED} s (sglang_ready_timeout ${CL_TIMEOUT} s);"\
     "restart -> rollback restart per host (journal): $(tr '\n' ' ' <<<"$CL_STARTS")s"
awk -v w="$CL_WAITED" -v t="$CL_TIMEOUT" 'BEGIN { exit !(w < t) }' \
    || { echo "the probe waited $CL_WAITED s, not less than the timeout $CL_TIMEOUT s" >&2; exit 1; }

on gpu_nodes 'systemctl stop itest-blocker.service' >/dev/null
CL_AFTER=$(state)
for h in gpu1 gpu2; do
    [ "$(field $h 5 <<<"$CL_AFTER")" = "$(field $h 5 <<<"$CL_BEFORE")" ] || { echo "$h: files not restored after the crash loop" >&2; exit 1; }
done
ansible-playbook "${PLAY_ARGS[@]}" probe.yml -e itest_serving=current >/dev/null
play 0 serve.yml "${CUR[@]}"
