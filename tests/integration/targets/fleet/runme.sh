#!/usr/bin/env bash
# Fleet staging with model_distribution=peers on 4 lab hosts (make test: its own lane on lab hosts 5-8),
# against a PRIVATE lab Hub on its own bridge address whose total rate is capped (the Hub is the
# bottleneck, as a site uplink is). Issue 12's acceptance:
#   A. 4 fresh hosts, gpu4 without a route to the Hub: every host's trees
#      sha256-identical and the Hub's own; Hub bytes from the Hub's request log <= 1.1 x one copy; no
#      request at all from gpu4.
#   A2. the same stage again: changed=0, zero file bytes from the Hub, zero bytes served by any peer.
#   B. faults, into a fresh directory: gpu1 offers a corrupted copy of a shard another host owns (a
#      forged manifest entry keeps it "present" there), and gpu2's peer server is stopped mid-transfer
#      (its egress capped, stopped once another host's staging file of a shard gpu2 owns holds 1 MiB:
#      bytes, never the clock). Every other host ends with the Hub's bytes.
#   D. gpu1, the host that resolves, hands out a forged listing (and holds forged bytes of a modeling_*.py):
#      gpu2 and gpu3 refuse it at the pin, naming gpu1 and the file; nothing starts, no tree changes.
#   C. gpu3 fails the first model (kimi): it stops its peer server in that model's rescue, before any
#      host fetches the second (kimi-dflash); the others complete both from the Hub and the rest.
# shellcheck source=../setup_lab/lab.sh
. "$(dirname "$0")/../setup_lab/lab.sh"
ROOT=/srv/itest-fleet-$$
STORE=$LAB_CACHE/fixtures
# a host-subset inventory (its own directory) lives outside the lab cache
[ -d "$STORE/store" ] || STORE=${GPUFLEET_LAB_CACHE:-$HOME/.cache/gpufleet-lab}/fixtures
LAB_JSON=$(dirname "$INVENTORY")/lab.json
HUB_ADDR=${GPUFLEET_FLEET_HUB_ADDR:-10.231.0.5}
BRIDGE=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["bridge"])' "$LAB_JSON")
# Hub cap: 4 MiB/s for the whole Hub (one copy is ~28 MB: 7 s from the Hub at best)
HUB_RATE=${GPUFLEET_FLEET_HUB_RATE:-4194304}
LAB=(python3 fleet_lab.py)

# The private Hub's address on the lab bridge (the lab hosts reach the bridge subnet only).
ip addr replace "$HUB_ADDR/32" dev "$BRIDGE"
at_exit ip addr del "$HUB_ADDR/32" dev "$BRIDGE"
HUB_PIDFILE=$LAB_TMP/hub.pid
stop_hub() { if [ -s "$HUB_PIDFILE" ]; then kill "$(cat "$HUB_PIDFILE")" 2>/dev/null || true; fi; }
at_exit stop_hub
HUB=$("${LAB[@]}" hub-start "$LAB_JSON" "$STORE" "$HUB_PIDFILE" "$HUB_ADDR")
echo "private lab Hub: $HUB (cap $HUB_RATE B/s in total)"
"${LAB[@]}" hub-config "$HUB" "{\"rate_total\": $HUB_RATE}" >/dev/null

# Host-specific variables through an inventory copy with host_vars (extra vars would win over them).
INV=$LAB_TMP/inv
mkdir -p "$INV/host_vars"
cp "$INVENTORY" "$INV/inventory.ini"
PLAY_ARGS=(-i "$INV/inventory.ini" -e "itest_root=$ROOT" -e "fixture_store=$STORE" -e "fleet_hub=$HUB"
           -e @vars.yml -e "model_tools_wheelhouse=$WHEELHOUSE")
at_exit cleanup_play

# gpu4: no route to the Hub (its network namespace), and it knows it has none.
NS4=$("${LAB[@]}" host "$LAB_JSON" "$INVENTORY" gpu4 netns)
unroute() { ip netns exec "$NS4" ip route del prohibit "$HUB_ADDR/32" 2>/dev/null || true; }
unroute
at_exit unroute
# gpu4 without a route to the Hub (FLEET_HUBLESS=0 leaves it its route, for looking at one fault alone).
if [ "${FLEET_HUBLESS:-1}" = 1 ]; then
    ip netns exec "$NS4" ip route add prohibit "$HUB_ADDR/32"
    echo "model_peer_hub_access: false" > "$INV/host_vars/gpu4.yml"
fi

# stage LABEL EXPECT ARGS...: the stage playbook, its output kept in $LAB_TMP/LABEL.log, recap asserted.
stage() {
    local label=$1 expect=$2; shift 2
    if ! ansible-playbook "${PLAY_ARGS[@]}" gpufleet.llm.stage "$@" > "$LAB_TMP/$label.log" 2>&1; then
        grep -E -A 12 '^(fatal|failed):' "$LAB_TMP/$label.log" | head -n 150
        sed -n '/PLAY RECAP/,$p' "$LAB_TMP/$label.log"
        exit 1
    fi
    sed -n '/PLAY RECAP/,$p' "$LAB_TMP/$label.log"
    assert_recap "$expect" "stage $label" < "$LAB_TMP/$label.log"
}
# hub_bytes_ok SINCE MAX_TOTAL FORBIDDEN_ADDR: file bytes the Hub sent since SINCE, from its request log
hub_bytes_check() {
    "${LAB[@]}" hub-bytes "$HUB" "$1" | python3 -c '
import json, sys
got, most, forbidden = json.load(sys.stdin), int(sys.argv[1]), sys.argv[2]
print("Hub file bytes: %d (at most %d), by client %s" % (got["total"], most, got["by_client"]))
assert got["total"] <= most, "the Hub sent %d file bytes, more than %d" % (got["total"], most)
assert forbidden not in got["requests_by_client"], "%s has no route to the Hub, yet it has requests in its log" % forbidden
' "$2" "$3"
}
COPY=$(python3 -c '
import json, sys
total = 0
for repo, ref in (("Kimi-K2.6-mini", ("branches", "main")), ("Kimi-K2.6-mini-DFlash", ("tags", "v1.0"))):
    d = json.load(open("%s/store/gpufleet-lab/%s/repo.json" % (sys.argv[1], repo)))
    total += sum(f["size"] for f in d["commits"][d["refs"][ref[0]][ref[1]]]["files"])
print(total)' "$STORE")
ADDR4=$("${LAB[@]}" host "$LAB_JSON" "$INVENTORY" gpu4 address)
[ "${FLEET_HUBLESS:-1}" = 1 ] || ADDR4=none
ansible-playbook "${PLAY_ARGS[@]}" cleanup.yml >/dev/null

# --- A: 4 fresh hosts, peers, gpu4 without the Hub ---------------------------------------------
SEQ=$("${LAB[@]}" hub-seq "$HUB")
stage a some -e models_dir=a
hub_bytes_check "$SEQ" "$((COPY * 11 / 10))" "$ADDR4"
# source_lines LOG: the role's line per host and model (the module's own accounting), "host: line"
source_lines() {
    python3 -c '
import re, sys
out = open(sys.argv[1]).read()
for host, msg in re.findall(r"^ok: \[(\S+)\] => \{\n\s+\"msg\": \"([^\"]*bytes from the Hub[^\"]*)\"", out, re.M):
    print("%s: %s" % (host, msg))' "$1"
}
source_lines "$LAB_TMP/a.log" | tee "$LAB_TMP/a.sources"
[ "$(wc -l < "$LAB_TMP/a.sources")" -eq 8 ] || { echo "expected a source line per host and model" >&2; exit 1; }
if [ "${FLEET_HUBLESS:-1}" = 1 ]; then
    for m in kimi kimi-dflash; do
        grep -qE "^gpu4: $m: 0 bytes from the Hub, [1-9][0-9]* from peers \(" "$LAB_TMP/a.sources" \
            || { echo "gpu4 (no route to the Hub) does not say it took $m from peers only" >&2; exit 1; }
    done
fi
ansible-playbook "${PLAY_ARGS[@]}" check.yml -e models_dir=a

# --- A2: again, nothing to do ------------------------------------------------------------------
SEQ=$("${LAB[@]}" hub-seq "$HUB")
stage a2 0 -e models_dir=a
hub_bytes_check "$SEQ" 0 "$ADDR4"
source_lines "$LAB_TMP/a2.log" > "$LAB_TMP/a2.sources"
[ "$(grep -cE '^gpu[1-4]: kimi(-dflash)?: 0 bytes from the Hub, 0 from peers$' "$LAB_TMP/a2.sources")" -eq 8 ] \
    || { cat "$LAB_TMP/a2.sources"; echo "a re-run says it moved bytes" >&2; exit 1; }
served=$(grep -cE 'served 0 bytes to its peers' "$LAB_TMP/a2.log" || true)
[ "$served" -ge 4 ] || { grep -E 'served [0-9]+ bytes' "$LAB_TMP/a2.log"; echo "a re-run moved bytes between peers" >&2; exit 1; }

# --- D: the host that resolves hands out a forged list, and holds forged bytes (issue 20 item 1) --
# gpu1 resolves for the fleet (the first host with Hub access). Its forged listing names other bytes for
# modeling_kimi_k25.py, which it holds in its own tree, ready to serve. The others with Hub access (gpu2,
# gpu3) list the commit themselves and refuse it at the pin, naming gpu1 and the file: the whole play
# stops before any peer server starts or any host fetches. Then no host but gpu1 holds the forged bytes,
# and no host's tree changed at all (every file's inode, size and mtime as before).
tree_state() {
    ANSIBLE_DEPRECATION_WARNINGS=False ansible -i "$INV/inventory.ini" gpu_nodes -m ansible.builtin.shell -o \
        -a "cd $ROOT && find . -printf '%p %i %s %T@\\n' | sort | sha256sum; grep -rl gpufleet-hostile-marker $ROOT | sed s/^/HOSTILE:/ || true" \
        | sed 's/ | CHANGED | rc=0 | (stdout) / /' | sort
}
before=$(tree_state)
ansible-playbook "${PLAY_ARGS[@]}" hostile.yml -e '{"hostile_dirs": ["a"]}' >/dev/null
at_exit ansible-playbook "${PLAY_ARGS[@]}" hostile.yml -e hostile_state=absent
before_hostile=$(tree_state)
if ansible-playbook "${PLAY_ARGS[@]}" gpufleet.llm.stage -e models_dir=a > "$LAB_TMP/d.log" 2>&1; then
    echo "stage d: gpu1 handed out a forged listing, yet the stage passed" >&2
    exit 1
fi
ansible-playbook "${PLAY_ARGS[@]}" hostile.yml -e hostile_state=absent >/dev/null
sed -n '/PLAY RECAP/,$p' "$LAB_TMP/d.log"
python3 - "$LAB_TMP/d.log" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
refused = re.findall(r"^fatal: \[(gpu\d)\]: FAILED!.*handed over from gpu1.*modeling_kimi_k25\.py: ", out, re.M)
assert sorted(refused) == ["gpu2", "gpu3"], "gpu2 and gpu3 must refuse gpu1's listing naming the file: %s" % refused
for task in ("Start the peer server", "Start fetching kimi"):
    assert "TASK [gpufleet.llm.model : %s" % task not in out, "the stage went on to: %s" % task
print("stage d: gpu2 and gpu3 refused gpu1's forged listing at the pin; nothing started")
PY
after=$(tree_state)
# gpu1 holds the forged bytes (it put them there itself); every tree is as it was before the run
[ "$after" = "$before_hostile" ] || { diff <(echo "$before_hostile") <(echo "$after"); echo "stage d changed a tree" >&2; exit 1; }
echo "$after" | grep '^gpu1 ' | grep -q 'HOSTILE:' || { echo "$after"; echo "gpu1 lost its forged bytes: the check sees nothing" >&2; exit 1; }
if echo "$after" | grep -v '^gpu1 ' | grep -q 'HOSTILE:'; then echo "$after"; echo "forged bytes landed" >&2; exit 1; fi
[ "$(echo "$before" | grep -v '^gpu1 ')" = "$(echo "$after" | grep -v '^gpu1 ')" ] || { echo "a tree changed" >&2; exit 1; }
ansible-playbook "${PLAY_ARGS[@]}" check.yml -e models_dir=a -e '{"skip_hosts": ["gpu1"]}'

# --- B: a corrupted peer and a peer stopped mid-transfer --------------------------------------
# gpu4 may use the Hub again: a file whose owner was stopped must come from the Hub for someone.
unroute
rm -f "$INV/host_vars/gpu4.yml"
# gpu1 keeps its corrupted copy as present: its own verify would catch it (a full hash), so it runs
# the quick one, to stay a live peer that serves bad bytes for the whole run.
echo "model_verify_mode: quick" > "$INV/host_vars/gpu1.yml"
# The shares over gpu1..gpu4 (gpu4 has the Hub again): what gpu1 corrupts must be another host's, and
# what gpu2 owns is what the others fetch from gpu2 when it is stopped.
read -r CORRUPT GPU2_KEYS < <(python3 -c '
import json, os, sys
# the collection under test (ANSIBLE_COLLECTIONS_PATH): the same plan peers_start.yml makes
sys.path[:0] = [p for p in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(":") if p]
from ansible_collections.gpufleet.llm.plugins.filter.peer_shares import peer_shares
d = json.load(open("%s/store/gpufleet-lab/Kimi-K2.6-mini/repo.json" % sys.argv[1]))
files = d["commits"][d["refs"]["branches"]["main"]]["files"]
shares = peer_shares(files, ["gpu1", "gpu2", "gpu3", "gpu4"])
big = [f for f in files if f["lfs"]]
corrupt = next(f["path"] for f in big if f["path"] not in shares["gpu1"] and f["path"] not in shares["gpu2"])
print(corrupt, ",".join(f["lfs"]["sha256"] for f in big if f["path"] in shares["gpu2"]))
' "$STORE")
ansible-playbook "${PLAY_ARGS[@]}" seed.yml -e models_dir=b -e "corrupt_path=$CORRUPT" >/dev/null
NS2=$("${LAB[@]}" host "$LAB_JSON" "$INVENTORY" gpu2 netns)
uncap() { ip netns exec "$NS2" tc qdisc del dev eth0 root 2>/dev/null || true; }
uncap
# 2 MiB/s out of gpu2: a 6 MB shard takes seconds to leave it, so the stop lands mid-transfer
ip netns exec "$NS2" tc qdisc add dev eth0 root tbf rate 16mbit burst 64kb latency 2s
at_exit uncap
# shellcheck disable=SC2086
"${LAB[@]}" stop-when "$LAB_JSON" "$INVENTORY" "$ROOT/b" 1048576 gpu2 ${GPU2_KEYS//,/ } > "$LAB_TMP/stopped.txt" 2>&1 &
STOPPER=$!
at_exit kill "$STOPPER"
stage b some -e models_dir=b
if kill -0 "$STOPPER" 2>/dev/null; then
    echo "gpu2's peer server was never caught mid-transfer: nobody fetched its shard from it" >&2
    exit 1
fi
wait "$STOPPER"
cat "$LAB_TMP/stopped.txt"
source_lines "$LAB_TMP/b.log"   # for the log: who dropped whom (the bytes are asserted below, by hash)
grep -q '^stopped gpu2' "$LAB_TMP/stopped.txt"
ansible-playbook "${PLAY_ARGS[@]}" check.yml -e models_dir=b -e '{"skip_hosts": ["gpu1"]}'
uncap

# --- C: a host failing the first model stops its peer server at once (review finding 1) --------
# gpu3 fails kimi (seed_fail.yml). Its server must stop in kimi's rescue, before any host fetches
# kimi-dflash: the others then drop it (connection refused) and take its kimi-dflash share from the
# Hub, instead of waiting model_peer_wait_timeout for a status gpu3 never writes. The wait is made
# far longer than the target may run, and `timeout 1800` (a backstop against a hang, 30x the run's
# normal length) turns that wait into a failure (no recap); the order of events in the log is what is
# asserted, never a duration.
rm -f "$INV/host_vars/gpu1.yml"
ansible-playbook "${PLAY_ARGS[@]}" seed_fail.yml -e models_dir=c >/dev/null
if timeout 1800 ansible-playbook "${PLAY_ARGS[@]}" gpufleet.llm.stage -e models_dir=c -e model_peer_wait_timeout=86400 \
        > "$LAB_TMP/c.log" 2>&1; then
    echo "stage c: gpu3 was to fail kimi, yet the stage passed" >&2
    exit 1
fi
sed -n '/PLAY RECAP/,$p' "$LAB_TMP/c.log"
python3 - "$LAB_TMP/c.log" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
recap = dict((h, int(f)) for h, f in re.findall(r"^(\S+)\s+: ok=\d+\s+changed=\d+\s+unreachable=\d+\s+failed=(\d+)", out, re.M))
assert recap.get("gpu3") == 1 and all(recap[h] == 0 for h in ("gpu1", "gpu2", "gpu4")), recap
# gpu3's server stops in kimi's rescue, before any host starts fetching kimi-dflash
stop = out.index("TASK [gpufleet.llm.model : Stop the peer exchange of this failed host]")
assert stop < out.index("TASK [gpufleet.llm.model : Start fetching kimi-dflash]"), "gpu3 stopped its server only at the end"
assert re.search(r"^ok: \[gpu3\]", out[stop:out.index("TASK [gpufleet.llm.model : Start fetching kimi-dflash]")], re.M)
print("stage c: gpu3 failed kimi and stopped its peer server before kimi-dflash; the others completed")
PY
ansible-playbook "${PLAY_ARGS[@]}" check.yml -e models_dir=c -e '{"skip_hosts": ["gpu3"]}'
echo "fleet: all scenarios passed"
