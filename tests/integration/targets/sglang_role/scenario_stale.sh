# shellcheck shell=bash
# Sourced by runme.sh in the sglang_role_rollback part (SGLANG_ROLE_PART=rollback), after step 5's option
# change (or after the first deploy with SGLANG_ROLE_ONLY=stale). Issue 11
# item 4: a deploy whose controller dies between writing the files and its restart handler (here on
# purpose: a callback ends ansible-playbook as the first task after configure starts) leaves the old
# server running on the new files. Check mode then says it would restart it; the next deploy restarts
# it exactly once, through the handler, and the one after that changes nothing.
# Each step runs serve.yml (the sglang role alone, on the commits `current` points at): the lost
# handler, the stale check and the restart are all the sglang role's; a full gpufleet.llm.deploy would
# add only the model role (pin, fetch check, verify: about a minute a run here), which the models do
# not need (they do not change in this scenario). serve.yml runs both hosts in one batch, as the
# deploy with gpufleet_serial=2 did.
echo "== stale. a restart handler lost with its controller; the next deploy restarts the stale server once"
ST_ENV='{"itest_env": {"GPUFLEET_ITEST_STALE": "1"}}'
ST_CB=$LAB_TMP/stale-callback
mkdir -p "$ST_CB"
cat > "$ST_CB/itest_die_after_configure.py" <<'EOF'
# The controller dies (as on a lost connection or a killed terminal) when the first task after
# configure.yml starts: the files are written, the restart handler is notified and never runs.
from __future__ import annotations

import os
import sys

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "itest_die_after_configure"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_task_start(self, task, is_conditional):
        if task.get_name().endswith("Was the running server started before its config, environment or unit last changed?"):
            sys.stdout.write("\nitest: the controller dies before the restart handler\n")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(3)
EOF
ST0=$(state)
if ANSIBLE_CALLBACK_PLUGINS="$ST_CB" ANSIBLE_CALLBACKS_ENABLED="${ANSIBLE_CALLBACKS_ENABLED:+$ANSIBLE_CALLBACKS_ENABLED,}itest_die_after_configure" \
    ansible-playbook "${PLAY_ARGS[@]}" serve.yml "${CUR[@]}" -e "$ST_ENV" > "$OUT" 2>&1; then
    cat "$OUT"; echo "expected the controller to die after configure" >&2; exit 1
fi
expect_in "$OUT" 'itest: the controller dies before the restart handler'
ST1=$(state); echo "$ST1"
for h in gpu1 gpu2; do
    [ "$(field $h 2 <<<"$ST1")" = "$(field $h 2 <<<"$ST0")" ] || { echo "$h: restarted although the handler was lost" >&2; exit 1; }
    [ "$(field $h 5 <<<"$ST1")" != "$(field $h 5 <<<"$ST0")" ] || { echo "$h: the environment file was not written" >&2; exit 1; }
done

echo "   check mode says it would restart the stale server, and does not"
ansible-playbook "${PLAY_ARGS[@]}" serve.yml --check "${CUR[@]}" -e "$ST_ENV" > "$OUT" 2>&1 || { cat "$OUT"; exit 1; }
[ "$(grep -c 'sglang-itest.service would be restarted (stale): started at .*, before: /etc/sglang/itest.env changed at' "$OUT")" = 2 ] \
    || { grep -n 'stale' "$OUT"; echo "expected check mode to report both servers stale" >&2; exit 1; }
[ "$(state)" = "$ST1" ] || { echo "check mode changed the server" >&2; exit 1; }

echo "   the deploy with the same options restarts each server once"
ansible-playbook "${PLAY_ARGS[@]}" serve.yml "${CUR[@]}" -e "$ST_ENV" > "$OUT" 2>&1 || { cat "$OUT"; exit 1; }
[ "$(grep -c 'sglang-itest.service is restarted (stale): ' "$OUT")" = 2 ] \
    || { grep -n 'stale' "$OUT"; echo "expected the deploy to restart both stale servers" >&2; exit 1; }
ST2=$(state); echo "$ST2"
for h in gpu1 gpu2; do
    [ "$(field $h 2 <<<"$ST2")" != "$(field $h 2 <<<"$ST1")" ] || { echo "$h: the stale server was not restarted" >&2; exit 1; }
    [ "$(field $h 4 <<<"$ST2")" = 0 ] || { echo "$h: systemd restarted it on failure" >&2; exit 1; }
    [ "$(field $h 5 <<<"$ST2")" = "$(field $h 5 <<<"$ST1")" ] || { echo "$h: the files changed again" >&2; exit 1; }
    since=$(field $h 3 <<<"$ST1")
    stops=$(on "$h" "journalctl -u sglang-itest.service --since @$(( ${since#@} + 1 )) --no-pager | grep -c 'standin: stopped' || true" | field "$h" 2)
    [ "$stops" = 1 ] || { echo "$h: $stops stops since the stale server's start (expected exactly 1)" >&2; exit 1; }
done
ansible-playbook "${PLAY_ARGS[@]}" probe.yml -e itest_serving=current >/dev/null

echo "   a further deploy changes nothing"
play 0 serve.yml "${CUR[@]}" -e "$ST_ENV"
[ "$(state)" = "$ST2" ] || { echo "the server changed on a no-op deploy after the stale restart" >&2; exit 1; }

echo "   back to the deployed options"
play some serve.yml "${CUR[@]}"
