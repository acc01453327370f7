#!/usr/bin/env bash
# Issue 22's proof under load: four servers behind the real SGLang router, rolled to a new revision
# while closed-loop clients stream through the router, and not one request fails.
#
# Set-up: the lab's 4 hosts gpu1..gpu4 each run a server (the sglang role via gpufleet.llm.deploy: the
# lab's SGLang STAND-IN under the real unit, which drains on SIGTERM as SGLang 0.5.23 does); gpu1 also
# runs the real sglang-router 0.3.2 (role gpufleet.llm.sglang_router, group sglang_routers) with
# production health settings (a check every 60 s, 3 failures before it drops a worker: vars.yml), so
# that no roll can pass because the router's own health checks did the drain's work.
# Load: tests/lab/router_load.py on the controller: 8 closed-loop clients, each streaming
# /v1/chat/completions and /generate requests in turn through the router, with its --api-key, until a
# stop file appears; it also polls the router's GET /workers (every 0.2 s) and so knows, per server,
# when it was certainly out of the router. Every request carries an X-Request-Id that the router
# forwards and each server's request log records (GPUFLEET_STANDIN_REQUEST_LOG): "no request reached a
# server after its removal" is checked on those logs against those windows (router_load.py check).
#
# 1. deploy v1.0 on the 4 servers without a router; the router role registers them
# 2. the same deploy again, with the router: changed=0, no server leaves the router, no pid changes
# 3. roll to main with gpufleet_serial=1, then back to v1.0 with gpufleet_serial=2, each under load:
#    0 failed, 0 truncated, no request sent to a removed server, each server out of the router exactly
#    once, all back in /workers and healthy, serving the new commit
# 4. the same roll with sglang_router_drain=false: failed or truncated requests on every server (why that
#    is certain: see there)
# 5. a probe that fails after the restart (under load): rollback, the old server is added back, 0 failed
# 6. sglang_router_min_healthy above what the fleet has: refused before any change
# The figures (sent, failed, truncated, sent after removal; the drain-off failures) are printed at the end.
# shellcheck source=../setup_lab/lab.sh
. "$(dirname "$0")/../setup_lab/lab.sh"
SKEY=rtest-sglang-key-8d2f0c41     # vars.yml; test values
RKEY=rtest-router-key-51c7e9a2
PORT=30112
ROUTER_PORT=30080
CLIENTS=8
# Tokens per request: at GPUFLEET_STANDIN_STEP_MS=100 (vars.yml) every request takes 6 s (no drafter: one
# token per step), far longer than the clients' own gaps between requests and shorter than the stop
# timeout (vars.yml sglang_stop_timeout: 30 s). What the proof needs is streams in flight during every
# removal and restart, so a request is long in time and short in events: 8 clients stream 80 events a
# second through the stand-ins, the router and router_load.py. At 300 tokens and 20 ms a step (400 events a
# second) those three used 132 ms of CPU per request (99 s for 753 requests in one run of this target);
# at 60 tokens, 58 ms (57 s for 985), on the 2 cores make test's lanes share.
MAX_TOKENS=60
OUT=$LAB_TMP/out
LOAD=(python3 "$LAB_DIR/router_load.py")
at_exit cleanup_play

for h in gpu1 gpu2 gpu3 gpu4; do
    grep -q "^$h ansible_host=" "$INVENTORY" || { echo "sglang_router_roll needs 4 lab hosts (gpu1..gpu4 in $INVENTORY)" >&2; exit 1; }
done
addr() { awk -v h="$1" '$1 == h { for (i = 2; i <= NF; i++) if ($i ~ /^ansible_host=/) { sub(/^ansible_host=/, "", $i); print $i } }' "$INVENTORY"; }
# The lab's inventory, and the same with gpu1 in the router group.
INV=$LAB_TMP/inventory.ini
{ cat "$INVENTORY"; printf '\n[sglang_routers]\ngpu1\n'; } > "$INV"
ROUTER_URL=http://$(addr gpu1):$ROUTER_PORT
WORKERS=()
for h in gpu1 gpu2 gpu3 gpu4; do WORKERS+=("http://$(addr $h):$PORT"); done
# the router role installs sglang-router from the lab's wheelhouse (beside the tools one)
PLAY_ARGS=(-i "$INV" -e "@vars.yml" -e "model_tools_wheelhouse=$WHEELHOUSE" -e "sglang_router_wheelhouse=$(dirname "$WHEELHOUSE")/router")

# rplay EXPECT INVENTORY BOOK ARGS...: a play whose recap must show changed EXPECT (0 or some) on every
# lab host; neither key may appear in its output.
rplay() {
    local expect=$1 inv=$2 book=$3; shift 3
    ansible-playbook "${PLAY_ARGS[@]:2}" -i "$inv" "$book" "$@" > "$OUT" 2>&1 || { tail -60 "$OUT"; echo "$book $* failed" >&2; exit 1; }
    no_keys "$OUT"
    sed -n '/PLAY RECAP/,$p' "$OUT"
    assert_recap "$expect" "$book $*" < "$OUT"
}
# must_fail BOOK ARGS...: the play must fail (its output kept in $OUT for expect_in).
must_fail() {
    local book=$1; shift
    if ansible-playbook "${PLAY_ARGS[@]}" "$book" "$@" > "$OUT" 2>&1; then tail -40 "$OUT"; echo "expected $book $* to fail" >&2; exit 1; fi
    no_keys "$OUT"
}
no_keys() { ! grep -qF -e "$SKEY" -e "$RKEY" "$@" || { echo "a test key leaked into $*" >&2; exit 1; }; }
expect_in() { grep -qE -- "$2" "$1" || { sed -n '/fatal\|FAILED\|msg/p' "$1" | tail -20; echo "expected /$2/ in the output" >&2; exit 1; }; }
# pids: "host MainPID" of each server, sorted. Every server must answer: a host whose answer was lost
# (ssh under load) is asked again, up to 3 times, so that a lost answer never reads as a restart, and
# a MainPID of 0 (not running) is an error, not a pid.
pids() {
    local raw out _
    for _ in 1 2 3; do
        raw=$(ansible gpu_nodes -i "$INV" -m ansible.builtin.command -a "systemctl show -p MainPID --value sglang-rtest.service" 2>"$LAB_TMP/pids.err") || true
        out=$(awk '/ \| [A-Z]+ \| rc=[0-9]+ >>$/ { host = $1; next } host { print host, $1; host = "" }' <<<"$raw" | sort)
        if [ "$(awk '$2 ~ /^[1-9][0-9]*$/' <<<"$out" | wc -l)" -eq 4 ]; then echo "$out"; return 0; fi
    done
    printf 'pids: not every server answered with a running main pid (3 tries):\n%s\n' "$raw" >&2
    tail -20 "$LAB_TMP/pids.err" >&2
    return 1
}
# same_pids LABEL BEFORE [EXCEPT]: the servers' pids now are BEFORE (hosts matching EXCEPT left out);
# otherwise the journal of each server (its starts and stops) and the last play's handlers are shown.
same_pids() {
    local now
    now=$(pids)
    [ "$(grep -v "^${3:-none} " <<<"$now")" = "$(grep -v "^${3:-none} " <<<"$2")" ] && return 0
    printf 'before:\n%s\nnow:\n%s\n' "$2" "$now"
    ansible gpu_nodes -i "$INV" -m ansible.builtin.shell \
        -a "journalctl -u sglang-rtest.service --no-pager -o short-iso-precise | grep -E 'Started|Stopping|Main process|Failed with' | tail -6" 2>/dev/null || true
    sed -n '/RUNNING HANDLER\|fatal:\|TASK \[Halt/,+2p' "$OUT" | tail -60
    router_diag
    echo "$1" >&2
    exit 1
}

# The router's /workers, checked: every server listed once and healthy (waits, bounded, for a worker
# the roll added back while the router still polls its /health).
workers_ok() {
    ROUTER_LOAD_API_KEY=$RKEY "${LOAD[@]}" workers --router "$ROUTER_URL" --expect "${WORKERS[@]}" --wait 120 \
        || { router_diag; exit 1; }
}

# A journal of the router's /workers from scenario 1 on (each change: time, url -> [id, healthy]), and the
# router's own journal: shown when a check fails, so that a worker the router dropped or re-added shows when.
WATCH_PID=
watch_start() {
    ROUTER_LOAD_API_KEY=$RKEY "${LOAD[@]}" watch --router "$ROUTER_URL" --out "$LAB_TMP/workers-watch.jsonl" \
        --stop-file "$LAB_TMP/watch.stop" > "$LAB_TMP/watch.log" 2>&1 &
    WATCH_PID=$!
}
watch_stop() { [ -z "$WATCH_PID" ] || { touch "$LAB_TMP/watch.stop"; wait "$WATCH_PID" || true; WATCH_PID=; }; }
at_exit watch_stop
router_diag() {
    echo "-- the router's /workers, each change (last 12):" >&2
    tail -12 "$LAB_TMP/workers-watch.jsonl" >&2 2>/dev/null || true
    echo "-- the router's journal (last 40 lines, without the watch's GET /workers):" >&2
    ansible gpu1 -i "$INV" -m ansible.builtin.shell \
        -a "journalctl -u sglang-router.service --no-pager -o short-iso-precise | grep -v 'method=GET uri=/workers ' | tail -40" 2>/dev/null \
        | sed -e "s/$SKEY/<sglang key>/g" -e "s/$RKEY/<router key>/g" >&2 || true
}

# serving_current: every server answers, as a client on its host would, for the commit `current` points at.
serving_current() {
    ansible-playbook "${PLAY_ARGS[@]}" probe.yml -e rtest_serving=current > "$LAB_TMP/probe.out" 2>&1 \
        || { grep -E 'fatal|FAILED|msg' "$LAB_TMP/probe.out" | tail -20 >&2; echo "a server does not serve the current commit" >&2; exit 1; }
    no_keys "$LAB_TMP/probe.out"
}

# load_start NAME: the load generator in the background; returns once every client had an ok request.
LOAD_PID=
stop_load_at_exit() { [ -z "$LOAD_PID" ] || kill "$LOAD_PID" 2>/dev/null || true; }
at_exit stop_load_at_exit
load_start() {
    local name=$1
    ROUTER_LOAD_API_KEY=$RKEY "${LOAD[@]}" run --router "$ROUTER_URL" --clients $CLIENTS --max-tokens $MAX_TOKENS \
        --prefix "$name-" --out "$LAB_TMP/$name.json" --progress "$LAB_TMP/$name.progress.json" \
        --records "$LAB_TMP/$name.records.jsonl" --stop-file "$LAB_TMP/$name.stop" --watch-workers \
        > "$LAB_TMP/$name.log" 2>&1 &
    LOAD_PID=$!
    load_wait "$name" "$CLIENTS" clients_with_ok
}
# load_wait NAME N [FIELD]: wait until the load's progress FIELD (default ok) has grown by N since the
# call (clients_with_ok: until it reaches N). After a roll the load runs on until every client has
# finished two more requests (16 arrivals, four per server in round_robin), so that the check sees
# each server serve the load again after it came back.
load_wait() {
    python3 - "$LAB_TMP/$1.progress.json" "$LOAD_PID" "$2" "${3:-ok}" <<'PY'
import json, os, sys, time
path, pid, n, field = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def now():
    try:
        with open(path) as f:
            return json.load(f)[field]
    except (OSError, ValueError, KeyError):
        return 0
target = n if field == "clients_with_ok" else now() + n
deadline = time.monotonic() + 300  # a guard against a dead router, not a measurement
while now() < target:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("the load generator exited before its progress %s reached %d" % (field, target))
    if time.monotonic() > deadline:
        sys.exit("the load's %s did not reach %d within 300 s: %s" % (field, target, open(path).read() if os.path.exists(path) else "no progress"))
    time.sleep(0.2)
PY
}
# load_stop NAME: stop file; the clients finish their requests in flight; the summary is written.
load_stop() {
    load_wait "$1" $((2 * CLIENTS))
    touch "$LAB_TMP/$1.stop"
    wait "$LOAD_PID" || { cat "$LAB_TMP/$1.log"; exit 1; }
    LOAD_PID=
    no_keys "$LAB_TMP/$1.json" "$LAB_TMP/$1.records.jsonl" "$LAB_TMP/$1.log"
}
# removals NAME: fetch each server's request log and count the load's requests that reached a server
# while it was out of the router (router_load.py check); prints the check's figures.
removals() {
    local name=$1 logs=() i
    mkdir -p "$LAB_TMP/logs"
    ansible gpu_nodes -i "$INV" -m ansible.builtin.fetch \
        -a "src=/var/lib/sglang/rtest/requests.jsonl dest=$LAB_TMP/logs/{{ inventory_hostname }}.jsonl flat=true" > /dev/null
    for i in 1 2 3 4; do logs+=(--log "${WORKERS[i - 1]}=$LAB_TMP/logs/gpu$i.jsonl"); done
    "${LOAD[@]}" check --summary "$LAB_TMP/$name.json" --records "$LAB_TMP/$name.records.jsonl" "${logs[@]}" \
        --out "$LAB_TMP/$name.check.json" > /dev/null
}
# assert_load NAME WINDOWS MAX_FAILURES|each: the figures of one run, asserted. WINDOWS: how many
# times each server left the router (a list, gpu1..gpu4). each: every server's request log holds at least
# one of the failed or truncated requests (the drain-off roll: each restart cut streams).
FIGURES=()
assert_load() {
    local line
    line=$(python3 - "$LAB_TMP/$1.json" "$LAB_TMP/$1.check.json" "$1" "$2" "$3" "${WORKERS[@]}" <<'PY'
import json, sys
summary, check = (json.load(open(p)) for p in sys.argv[1:3])
name, windows, failures, workers = sys.argv[3], [int(n) for n in sys.argv[4].split(",")], sys.argv[5], sys.argv[6:]
problems = []
line = ("%s: sent %d, ok %d, failed %d, truncated %d, sent after removal %d, latency p50 %ss p99 %ss"
        % (name, summary["sent"], summary["ok"], summary["failed"], summary["truncated"], check["sent_after_removal"],
           summary["latency_p50"], summary["latency_p99"]))
by_url = check.get("failures_by_url", {})
if failures == "each":
    line += "; failed or truncated per server: %s" % ", ".join(str(by_url.get(u, 0)) for u in workers)
    if any(by_url.get(u, 0) < 1 for u in workers):
        problems.append("expected failed or truncated requests on every server, got %s" % by_url)
elif summary["failures"] > int(failures):
    problems.append("%d failed/truncated requests: %s" % (summary["failures"], summary["errors"]))
if check["sent_after_removal"]:
    problems.append("requests reached a server out of the router: %s" % check["violations"][:5])
if summary["workers_watch"]["errors"]:
    problems.append("GET /workers failed %d times: %s" % (summary["workers_watch"]["errors"], summary["workers_watch"]["last_error"]))
for want, url in zip(windows, workers):
    seen = check["per_url"][url]
    got = seen["windows"]
    if len(got) != want:
        problems.append("%s left the router %d times (expected %d): %s" % (url, len(got), want, got))
    for w in got:
        # the check saw the load on that server before it left and after it came back
        if not w["load_before"] or not w["load_after"]:
            problems.append("%s: no load before or after its window %s" % (url, w))
    if not seen["load_requests"]:
        problems.append("%s got none of the load" % url)
print(line)
if problems:
    sys.exit("\n".join([line] + problems))
PY
) || { echo "$line" >&2; exit 1; }
    echo "   $line"
    FIGURES+=("$line")
}

ansible-playbook "${PLAY_ARGS[@]}" cleanup.yml >/dev/null || true
ansible-playbook -i "$INV" "$LAB_DIR/prepare-hosts.yml" >/dev/null

echo "== 1. deploy v1.0 on 4 servers without a router, then the router on gpu1 (it registers them)"
rplay some "$INVENTORY" gpufleet.llm.deploy -e gpufleet_serial=4
rplay some "$INV" router.yml
watch_start
workers_ok
P1=$(pids); echo "$P1"

echo "== 2. the same deploy with the router, under load: changed=0, no server leaves the router"
load_start rerun
rplay 0 "$INV" gpufleet.llm.deploy -e gpufleet_serial=4
load_stop rerun
removals rerun
assert_load rerun 0,0,0,0 0
same_pids "a no-op deploy restarted a server" "$P1"

echo "== 3a. roll to main, one server at a time, under load"
load_start serial1
rplay some "$INV" gpufleet.llm.deploy -e rtest_revision=main -e gpufleet_serial=1
load_stop serial1
removals serial1
assert_load serial1 1,1,1,1 0
workers_ok
serving_current

echo "== 3b. roll back to v1.0, two servers at a time, under load"
load_start serial2
rplay some "$INV" gpufleet.llm.deploy -e rtest_revision=v1.0 -e gpufleet_serial=2
load_stop serial2
removals serial2
assert_load serial2 1,1,1,1 0
workers_ok
serving_current

# Why the drain-off roll fails requests by events, not by luck:
# - the router keeps routing to a server the roll restarts in place: it is never removed, and its
#   health checks (60 s apart, 3 failures) cannot drop it before 120 s, while the stop is bounded by
#   sglang_stop_timeout (30 s), after which systemd SIGKILLs the server;
# - each request takes the same time (60 tokens, one per 100 ms step, no drafter), so the 8 closed-loop
#   clients' requests end in the order they began; round_robin hands out the router's counter in arrival
#   order over the 4 workers, so the 8 requests in flight hold 8 consecutive counter values, two per
#   server, and the request that replaces the oldest one (counter c-7) gets c+1, the same server
#   (8 = 0 mod 4). Every server therefore always has a request in flight;
# - SGLang (and the stand-in, which does the same) keeps accepting requests after SIGTERM and stops only
#   once a look every 5 s finds none left: under this load it never does, and the SIGKILL at 30 s cuts
#   the streams in flight on that server (a stream that has started is never retried by the router).
echo "== 4. the same roll with sglang_router_drain=false: requests fail"
load_start drainoff
rplay some "$INV" gpufleet.llm.deploy -e rtest_revision=main -e gpufleet_serial=2 -e sglang_router_drain=false
load_stop drainoff
removals drainoff
assert_load drainoff 0,0,0,0 each
workers_ok
serving_current

echo "== 5. a probe that fails after the restart, under load: rollback, the old server back in the router"
P5=$(pids)
load_start rollback
must_fail gpufleet.llm.deploy -e rtest_revision=main -e gpufleet_serial=1 -e rtest_ready_timeout=6 \
    -e '{"rtest_env": {"GPUFLEET_STANDIN_NEVER_READY": "1"}}'
load_stop rollback
expect_in "$OUT" 'ROLLED BACK'
removals rollback
# gpu1 (the first batch) left the router, was rolled back and came back; the roll stopped there
assert_load rollback 1,0,0,0 0
workers_ok
serving_current
same_pids "the halted batches restarted a server" "$P5" gpu1

echo "== 6. sglang_router_min_healthy=4 with 4 servers: refused, nothing taken out or restarted"
P6=$(pids)
must_fail gpufleet.llm.deploy -e rtest_revision=v1.0 -e gpufleet_serial=1 -e sglang_router_min_healthy=4
expect_in "$OUT" 'sglang_router_min_healthy'
# the refusal came before any restart: the restart handler changed no server. It may still run (and skip):
# with force_handlers (what ansible-test sets, and lab.sh by hand) the handlers of a failed host run.
! grep -A1 'RUNNING HANDLER \[gpufleet.llm.sglang : Restart SGLang\]' "$OUT" | grep -q '^changed:' \
    || { grep -A3 'RUNNING HANDLER' "$OUT" | tail -40; router_diag; echo "a server was restarted although the removal was refused" >&2; exit 1; }
same_pids "a refused removal restarted a server" "$P6"
workers_ok

echo "== figures (sglang_router_roll)"
printf '   %s\n' "${FIGURES[@]}"
echo "sglang_router_roll: all scenarios passed"
