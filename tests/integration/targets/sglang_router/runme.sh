#!/usr/bin/env bash
# The sglang_router role (gpufleet.llm.sglang_router) on the lab, with the real sglang-router 0.3.2 from the
# lab's "router" wheelhouse (the hosts have no internet): a router on the first of two lab hosts, a worker on
# each (the lab's SGLang STAND-IN, not SGLang: no GPU here; started by workers.yml as a transient unit),
# registered by the role through gpufleet.llm.sglang_router_worker.
#   0. stand-in workers up;
#   1. check mode on a host without a router: changes reported, nothing written;
#   2. install, start, register: both workers healthy, requests routed, the key on no command line;
#   3. a re-run is changed=0 and the router keeps its MainPID; 4. so is a check-mode run;
#   5. a worker removed behind the role's back is registered again, without a restart;
#   6. a changed setting restarts the router (handler) and registers every worker again;
#   7. a load-based policy is refused before anything changes.
# Two lab hosts, about 6 minutes (341 s measured on the 2-core machine, other lanes running).
# shellcheck source=../setup_lab/lab.sh
. "$(dirname "$0")/../setup_lab/lab.sh"
ROUTER_KEY=itest-router-key-NOT-a-secret          # vars.yml; test values
WORKER_KEY=itest-router-worker-key-NOT-a-secret
forbid_in_output "$ROUTER_KEY"
UNIT=sglang-router-itest.service
# The router wheel set sits beside the tools set the lab hands the targets.
ROUTER_WHEELHOUSE=${GPUFLEET_LAB_ROUTER_WHEELHOUSE:-$(dirname "$WHEELHOUSE")/router}
[ -f "$ROUTER_WHEELHOUSE/.stamp.json" ] || { echo "no router wheelhouse at $ROUTER_WHEELHOUSE: python tests/lab/wheelhouse.py build" >&2; exit 1; }

# The first two hosts of the lab inventory's gpu_nodes (natural order): the router on the first, a worker on each.
read -r H1 H2 < <(ansible-inventory -i "$INVENTORY" --list | python3 -c '
import json, re, sys
hosts = json.load(sys.stdin)["gpu_nodes"]["hosts"]
hosts.sort(key=lambda h: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", h)])
assert len(hosts) >= 2, "the sglang_router target needs two lab hosts, the inventory has %s" % hosts
print(hosts[0], hosts[1])')
printf '[itest_routers]\n%s\n\n[itest_router_workers]\n%s\n%s\n' "$H1" "$H1" "$H2" > "$LAB_TMP/groups.ini"
PLAY_ARGS+=(-i "$LAB_TMP/groups.ini" -e "@vars.yml" -e "sglang_router_wheelhouse=$ROUTER_WHEELHOUSE")
at_exit cleanup_play

on_router() {  # on_router CMD: its stdout on the router host
    ansible "$H1" -i "$INVENTORY" -o -m ansible.builtin.shell -a "$1" 2>/dev/null | sed -n 's/.*(stdout) //p'
}
main_pid() { on_router "systemctl show -p MainPID --value $UNIT"; }
checks() { ansible-playbook "${PLAY_ARGS[@]}" checks.yml > "$LAB_TMP/checks" 2>&1 || { cat "$LAB_TMP/checks"; exit 1; }; }
no_worker_key() { if grep -qF -- "$WORKER_KEY" "$1"; then echo "the worker key leaked into the output" >&2; exit 1; fi; }

ansible-playbook "${PLAY_ARGS[@]}" cleanup.yml >/dev/null
echo "== 0. stand-in workers on $H1 and $H2"
ansible-playbook "${PLAY_ARGS[@]}" workers.yml > "$LAB_TMP/workers" 2>&1 || { cat "$LAB_TMP/workers"; exit 1; }

echo "== 1. check mode on a host without a router: changes reported, nothing written"
play some router.yml --check
[ "$(on_router "test -e /etc/systemd/system/$UNIT || test -d /opt/sglang-router && echo written || echo clean")" = clean ] \
    || { echo "check mode wrote the unit or the venv" >&2; exit 1; }

echo "== 2. install, start, register"
ansible-playbook "${PLAY_ARGS[@]}" router.yml > "$LAB_TMP/out" 2>&1 || { cat "$LAB_TMP/out"; exit 1; }
sed -n '/PLAY RECAP/,$p' "$LAB_TMP/out"
no_worker_key "$LAB_TMP/out"
grep -qF -- "$ROUTER_KEY" "$LAB_TMP/out" && { echo "the router key leaked into the output" >&2; exit 1; }
grep -q "changed: \[$H1\] => (item=$H2)" "$LAB_TMP/out" || { echo "expected $H2 to be registered" >&2; exit 1; }
checks
PID=$(main_pid)
if [ -z "$PID" ] || [ "$PID" = 0 ]; then echo "the router does not run" >&2; exit 1; fi
[ "$(on_router "journalctl -u $UNIT --no-pager | grep -cF -- $ROUTER_KEY || true")" = 0 ] || { echo "the router key is in the journal" >&2; exit 1; }

echo "== 3. re-run: changed=0, the router keeps its MainPID $PID"
play 0 router.yml
[ "$(main_pid)" = "$PID" ] || { echo "a re-run restarted the router" >&2; exit 1; }

echo "== 4. check mode again: changed=0"
play 0 router.yml --check
[ "$(main_pid)" = "$PID" ] || { echo "check mode restarted the router" >&2; exit 1; }

echo "== 5. a worker taken out by hand is registered again, without a restart"
W2_URL=$(ansible-inventory -i "$INVENTORY" --host "$H2" | python3 -c 'import json, sys; print("http://%s:30701" % json.load(sys.stdin)["ansible_host"])')
R_URL=$(ansible-inventory -i "$INVENTORY" --host "$H1" | python3 -c 'import json, sys; print("http://%s:30780" % json.load(sys.stdin)["ansible_host"])')
ansible "$H1" -i "$INVENTORY" -m gpufleet.llm.sglang_router_worker \
    -a "routers=$R_URL url=$W2_URL state=absent min_healthy=1 router_api_key=$ROUTER_KEY" > "$LAB_TMP/adhoc" 2>&1 \
    || { cat "$LAB_TMP/adhoc"; exit 1; }
if ! grep -q '"changed": true' "$LAB_TMP/adhoc"; then cat "$LAB_TMP/adhoc"; echo "the ad-hoc removal changed nothing" >&2; exit 1; fi
play some router.yml
checks
[ "$(main_pid)" = "$PID" ] || { echo "re-registering restarted the router" >&2; exit 1; }

echo "== 6. a changed setting restarts the router and registers every worker again"
play some router.yml -e sglang_router_policy=round_robin
NEW_PID=$(main_pid)
[ "$NEW_PID" != "$PID" ] || { echo "a changed unit did not restart the router" >&2; exit 1; }
PLAY_ARGS+=(-e sglang_router_policy=round_robin)
checks
play 0 router.yml

echo "== 7. a load-based policy is refused before anything changes"
if ansible-playbook "${PLAY_ARGS[@]}" router.yml -e sglang_router_policy=power_of_two > "$LAB_TMP/refused" 2>&1; then
    cat "$LAB_TMP/refused"; echo "power_of_two was accepted" >&2; exit 1
fi
grep -q "routes on the workers' load (/get_load), which SGLang 0.5.23 does not serve" "$LAB_TMP/refused" \
    || { sed -n '/fatal/,$p' "$LAB_TMP/refused"; exit 1; }
[ "$(main_pid)" = "$NEW_PID" ] || { echo "the refused run touched the router" >&2; exit 1; }
[ "$(on_router "grep -c -- '--policy round_robin' /etc/systemd/system/$UNIT")" = 1 ] || { echo "the unit changed" >&2; exit 1; }
echo "== sglang_router: ok"
