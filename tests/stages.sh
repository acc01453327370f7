#!/usr/bin/env bash
# The stages behind `make test` / `make demo`: each is timed, the lab is always torn down by `test`.
# Usage: tests/stages.sh STAGE...   (see the case statement at the bottom)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${GPUFLEET_LAB_CACHE:-$HOME/.cache/gpufleet-lab}
export GPUFLEET_LAB_CACHE=$CACHE
VENV=$CACHE/venv
PY=$VENV/bin/python
LAB_HOSTS=${LAB_HOSTS:-2}
COLL_PARENT=${GPUFLEET_BUILD_DIR:-$CACHE/build}
COLL=$COLL_PARENT/ansible_collections/gpufleet/llm
INVENTORY=$CACHE/run/inventory.ini
APT_PACKAGES=(mmdebstrap systemd-container aria2 iproute2 openssh-client rsync git shellcheck ca-certificates)

TIMES=()
log() { printf '%s\n' "$*" >&2; }

# stage NAME CMD...: run CMD, print its wall time, remember it for the summary.
stage() {
    local name=$1; shift
    local t0 t1 rc=0
    log "==> [$name] $(date +%H:%M:%S)"
    t0=$(date +%s.%N)
    # In the background so that `set -e` holds inside the stage: bash ignores it in anything run
    # as part of an `||` list, which is how callers collect failures.
    "$@" &
    wait $! || rc=$?
    t1=$(date +%s.%N)
    local secs
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    TIMES+=("$(printf '%-14s %8ss  %s' "$name" "$secs" "$([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)")")")
    log "<== [$name] ${secs}s $([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)")"
    return $rc
}

summary() {
    log ""
    log "Stage wall times:"
    local line passed=0 failed=0
    for line in "${TIMES[@]}"; do
        log "  $line"
        case $line in *FAILED*) failed=$((failed + 1)) ;; *) passed=$((passed + 1)) ;; esac
    done
    # The plain closing line CI reads: stages, not tests (each test stage prints its own counts).
    echo "stages: $passed passed, $failed failed"
}

# --- setup -------------------------------------------------------------------------------------
do_apt() {
    local missing=() p
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then log "apt: all present"; return 0; fi
    log "apt: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# requirement_files FILE: FILE and every file it pulls in with -r, recursively, each once.
requirement_files() {
    local file=$1 inc
    file=$(realpath "$file")
    echo "$file"
    while read -r inc; do
        requirement_files "$(dirname "$file")/$inc"
    done < <(sed -n 's/^-r[[:space:]]*//p' "$file")
}

do_venv() {
    local stamp=$VENV/.requirements.sha256 want
    # Every file pip reads for the venv: a new -r include changes the stamp, so a fresh or stale
    # venv always gets it.
    want=$(requirement_files "$ROOT/requirements/test.txt" | awk '!seen[$0]++' | xargs cat | sha256sum | cut -d' ' -f1)
    if [ -x "$PY" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then log "venv: up to date"; else
        [ -x "$PY" ] || python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q --disable-pip-version-check -r "$ROOT/requirements/test.txt"
        echo "$want" > "$stamp"
    fi
    # ansible-test bootstraps pip in its venvs with a script it downloads from a host these machines
    # cannot reach; give it our stand-in under the name it looks for.
    local pipv
    pipv=$("$PY" -c "from types import SimpleNamespace as S; from ansible_test._internal.python_requirements import get_venv_packages as g; print(g(S(version='3.11'))['pip'].replace('.', '_'))")
    mkdir -p "$HOME/.ansible/test/cache"
    install -m 0644 "$ROOT/tests/tools/get_pip_offline.py" "$HOME/.ansible/test/cache/get_pip_$pipv.py"
}

do_wheelhouse() { "$PY" "$ROOT/tests/lab/wheelhouse.py" build; }
do_rootfs() { "$PY" "$ROOT/tests/lab/labctl.py" rootfs; }
do_fixtures() { "$PY" "$ROOT/tests/lab/fixtures.py"; }

setup() {
    stage apt do_apt
    stage venv do_venv
    # A lab left by an interrupted run (its processes gone, its mounts and namespaces not) must not
    # meet a rebuilt rootfs or regenerated fixtures; a healthy one is kept (demo, bench).
    stage lab-stale do_lab_stale
    stage wheelhouse do_wheelhouse
    stage rootfs do_rootfs
    stage fixtures do_fixtures
}

link_collection() {
    local dir=$CACHE/collections/ansible_collections/gpufleet
    mkdir -p "$dir"
    ln -sfn "$ROOT" "$dir/llm"
}

# --- checks on the collection -------------------------------------------------------------------
# sync_collection [DEST]: the checkout copied into DEST (default COLL), where ansible-test runs.
sync_collection() {
    local dest=${1:-$COLL}
    mkdir -p "$dest"
    rsync -a --delete --delete-excluded --exclude .git --exclude tests/output --filter=':- .gitignore' "$ROOT/" "$dest/"
}

do_lint() {
    link_collection
    (cd "$ROOT" && PATH=$VENV/bin:$PATH ANSIBLE_COLLECTIONS_PATH=$CACHE/collections ansible-lint --profile production)
    (cd "$ROOT" && PATH=$VENV/bin:$PATH antsibull-changelog lint)
}

do_build() {
    mkdir -p "$CACHE/dist"
    (cd "$ROOT" && PATH=$VENV/bin:$PATH ansible-galaxy collection build --force --output-path "$CACHE/dist")
    ls -l "$CACHE"/dist/gpufleet-llm-*.tar.gz
}

# The collection in an execution environment (docs/awx.md), as far as it goes without a container
# engine: the built tarball installed the way an image build installs it; ansible-builder's
# introspection finds the controller-side requirements through meta/execution-environment.yml; and
# `ansible-builder create` turns that definition, and the image definition docs/awx.md shows, into
# build contexts.
do_ee() {
    local ee=$CACHE/ee coll line
    rm -rf "$ee"
    mkdir -p "$ee/dist" "$ee/image"
    (cd "$ROOT" && "$VENV/bin/ansible-galaxy" collection build --output-path "$ee/dist" >/dev/null)
    ANSIBLE_COLLECTIONS_PATH=$ee/collections "$VENV/bin/ansible-galaxy" collection install --offline -p "$ee/collections" \
        "$ee"/dist/gpufleet-llm-*.tar.gz >/dev/null
    coll=$ee/collections/ansible_collections/gpufleet/llm
    "$VENV/bin/ansible-builder" introspect --sanitize --write-pip "$ee/requirements.txt" \
        --write-bindep "$ee/bindep.txt" "$ee/collections" >/dev/null
    # The collection names its files relative to its root (as introspection reads them), while
    # `create` resolves them relative to the definition file: so it reads the definition from there.
    cp "$coll/meta/execution-environment.yml" "$coll/execution-environment.yml"
    "$VENV/bin/ansible-builder" create -f "$coll/execution-environment.yml" --context "$ee/context-collection" >/dev/null
    for line in "$ee/requirements.txt:matplotlib>=" "$ee/requirements.txt:jmespath>=" "$ee/bindep.txt:openssh-client" \
                "$ee/context-collection/_build/requirements.txt:matplotlib>=" \
                "$ee/context-collection/_build/bindep.txt:openssh-client"; do
        grep -q "^${line#*:}" "${line%%:*}" || { log "ee: no '${line#*:}' in ${line%%:*}"; return 1; }
    done
    "$PY" - "$ROOT/docs/awx.md" > "$ee/image/execution-environment.yml" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
block = re.search(r"<!-- ee-image-definition[^>]*-->\s*```yaml\n(.*?)```", text, re.S)
if not block:
    sys.exit("docs/awx.md: no image definition after <!-- ee-image-definition -->")
print(block.group(1), end="")
PY
    "$VENV/bin/ansible-builder" create -f "$ee/image/execution-environment.yml" --context "$ee/context-image" >/dev/null
    log "ee: introspected $(grep -v '^#' "$ee/requirements.txt" | cut -d' ' -f1 | tr '\n' ' ')+ $(grep -cv '^#' "$ee/bindep.txt")" \
        "bindep lines; build contexts in $ee/context-collection and $ee/context-image (podman or docker builds them)"
}

do_sanity() {
    sync_collection
    (cd "$COLL" && PATH=$VENV/bin:$PATH ansible-test sanity --venv --python 3.11 --requirements --color no)
}

# Then every skipped test with its reason, from the JUnit XML ansible-test writes: a skip fails the
# stage (a full run skips nothing; the real-parser tests need the SGLang venv lab-local builds).
do_units() {
    local rc=0
    sync_collection
    # UNITS_WORKERS (default 4) pytest-xdist workers, not ansible-test's default of one per core: the
    # tests wait on servers and subprocesses about a third of the time (one run: 612 s of CPU in 957 s
    # on 2 cores), and units-fast runs the same tests 4 workers a process.
    (cd "$COLL" && PATH=$VENV/bin:$PATH ansible-test units --venv --python 3.11 --requirements --color no \
        --num-workers "${UNITS_WORKERS:-4}") || rc=$?
    "$PY" "$ROOT/tests/tools/junit_skips.py" "$COLL/tests/output/junit" >&2 || { [ $rc -ne 0 ] || rc=1; }
    return $rc
}

# pytest exits 5 when it collected nothing: that must never read as a pass.
run_pytest() {
    local rc=0
    (cd "$ROOT" && "$PY" -m pytest -p no:cacheprovider "$@") || rc=$?
    if [ $rc -eq 5 ]; then log "pytest collected no tests: failing"; return 1; fi
    return $rc
}

# The fast unit lane (make units-fast): plain pytest on the checkout itself, through the collection
# link (link_collection), without the tests that run ansible-playbook (marker `playbook`, see
# tests/unit/conftest.py); no lab, no ansible-test copy. As in ansible-test units, the tests of modules
# and module_utils run in another pytest process than the controller's (filter and action plugin
# tests import controller code, which turns a module's warnings into controller display calls for the
# rest of the process), both at once, each with parallel workers (pytest-xdist: the tests wait on
# servers and subprocesses far more than they compute; UNITS_FAST_WORKERS per process, default 4).
# Each process's output is printed when it ends. UNITS_FAST_ARGS adds pytest arguments (e.g.
# --durations=30, or -k EXPR).
do_units_fast() {
    link_collection
    local coll=$CACHE/collections out=$CACHE/run/units-fast ctx rc=0 pids=() bad=() controller=()
    local llm=$coll/ansible_collections/gpufleet/llm
    mkdir -p "$out"
    # units_fast_context NAME PATH...: one pytest process, its output in $out/NAME.log.
    units_fast_context() {
        local name=$1 rc=0
        shift
        # shellcheck disable=SC2086  # UNITS_FAST_ARGS is a list of pytest arguments
        (cd "$llm" && PYTHONPATH=$coll "$PY" -m pytest -p no:cacheprovider --import-mode=importlib \
            -n "${UNITS_FAST_WORKERS:-4}" -m "not playbook and not sglang_real" -q -rs ${UNITS_FAST_ARGS:-} "$@") > "$out/$name.log" 2>&1 || rc=$?
        # pytest exits 5 when it collected nothing: that must never read as a pass.
        [ $rc -ne 5 ] || { echo "pytest collected no tests: failing" >> "$out/$name.log"; rc=1; }
        return $rc
    }
    # everything under tests/unit but plugins/modules and plugins/module_utils
    mapfile -t controller < <(cd "$llm" && find tests/unit -mindepth 1 -maxdepth 1 -type d ! -name '__pycache__' ! -name plugins | sort
                              find tests/unit/plugins -mindepth 1 -maxdepth 1 -type d ! -name '__pycache__' ! -name modules ! -name module_utils | sort)
    units_fast_context modules tests/unit/plugins/modules tests/unit/plugins/module_utils & pids+=($!)
    units_fast_context controller "${controller[@]}" & pids+=($!)
    for ctx in modules controller; do
        wait "${pids[0]}" || { rc=1; bad+=("$ctx"); }
        pids=("${pids[@]:1}")
        log "--- units-fast: $ctx ($out/$ctx.log)"
        cat "$out/$ctx.log" >&2
    done
    [ $rc -eq 0 ] || log "units-fast: failed in ${bad[*]}"
    return $rc
}

# The lab's own tests without the lab, in LAB_LOCAL_WORKERS (default 4) pytest-xdist workers: they
# mostly wait on the stand-in's real 5 s drain cadence and on venv installs (one run: 237 s wall for
# 70 s of CPU in one process, 123 s with 4 workers). Each worker starts its own Hub on free ports; the
# fixture store and the SGLang venv are made under a lock.
do_lab_local() {
    run_pytest tests/lab/tests -m "not lab" --deselect tests/lab/tests/test_lab_teardown.py -q -n "${LAB_LOCAL_WORKERS:-4}"
}
# LAB_TESTS_WORKERS (default 4) pytest-xdist workers: the lab tests wait on ssh to 14 hosts, one
# host or host pair per test (a make test of 14 hosts: 203 s with one worker, 69 s with four).
do_lab_marked() { run_pytest tests/lab/tests -m lab -q -n "${LAB_TESTS_WORKERS:-4}"; }
do_lab_up() { "$PY" "$ROOT/tests/lab/labctl.py" up --hosts "$LAB_HOSTS"; }
do_lab_down() { [ -x "$PY" ] || return 0; "$PY" "$ROOT/tests/lab/labctl.py" down; }
# A running lab whose image is out of date (the rootfs recipe or the SGLang stand-in changed) must
# go: the rootfs stage cannot rebuild an image that running hosts have mounted.
rootfs_current() { (cd "$ROOT/tests/lab" && "$PY" -c 'import sys, hosts; sys.exit(hosts.rootfs_state(True) != "ok")'); }
do_lab_stale() {
    if "$PY" "$ROOT/tests/lab/labctl.py" status >/dev/null 2>&1; then
        if rootfs_current; then log "lab is up and healthy: kept"; return 0; fi
        log "lab is up but its host image is out of date: taking it down to rebuild"
    fi
    do_lab_down
}
do_lab_status() { "$PY" "$ROOT/tests/lab/labctl.py" status; }
do_teardown_check() { run_pytest tests/lab/tests/test_lab_teardown.py -q; }

# make test boots TEST_LAB_HOSTS (14) lab hosts and runs the integration targets in lanes at once,
# each on its own hosts under the names the targets know (gpu1, gpu2, ...), from its own copy of the
# collection. With 14 hosts:
#   lane1, hosts 1-2    every target not named below (hf_snapshot, sglang_bench, gpu_info, ...)
#   lane2, hosts 3-4    sglang_role (its scenarios of one server on one commit), then sglang_router
#   lane3, hosts 5-8    fleet (4 hosts), then at once:
#     lane4, hosts 5-6  sglang_role_ranks (sglang_role's scenarios of more than one server)
#     lane5, hosts 7-8  AFTER_FLEET_TARGETS
#   lane6, hosts 9-10   sglang_role_rollback (sglang_role's stale/rollback/second-commit scenarios)
#   lane7, hosts 11-14  ROUTER_ROLL_TARGETS (4 hosts), from the start
# With 10-13 hosts lane7 runs on hosts 7-10 once lane5 and lane6 are done; with 8-9 hosts lane6 does
# not exist: sglang_role_rollback runs in lane5, AFTER_FLEET_TARGETS in lane1, and lane7 on hosts 5-8
# once lane4 and lane5 are done. Most of a target's time is waiting on hosts (the controller's CPU is
# often idle), so the lanes overlap well. The lanes share only the lab Hub, which they read (the
# targets that reset, cap or fault a Hub, hf_snapshot and fleet, run their own private instances).
# Why lane7 on its own hosts from the start: sglang_router_roll is the longest target (830-1192 s
# measured: six deploys of four servers, three of them rolling one or two servers at a time behind a
# router, under load) and most of it is waiting (drains, probes, the load's 6 s requests). Started
# after lanes 5 and 6 it ran alone at the end of make test, adding its whole length (830 s in the
# last CI run) to the stage; beside the others it costs the cores little.
# sglang_router (2 hosts) follows sglang_role in lane2 rather than joining lane1's long list.
# A lab of 4-7 hosts runs two lanes (sglang_role_ranks in the first, sglang_role_rollback after
# sglang_role in the second) and then fleet and ROUTER_ROLL_TARGETS on hosts 1-4; a lab of fewer than 4
# hosts (`make lab-up` gives 2) runs every 2-host target in one lane and says that the 4-host targets
# did not run.
TEST_LAB_HOSTS=${TEST_LAB_HOSTS:-14}
LANE2_TARGETS=(sglang_role sglang_router)
ROLLBACK_TARGETS=(sglang_role_rollback)
FLEET_TARGETS=(fleet)
# the other 4-host target (the proof of the router roll under load): lane7
ROUTER_ROLL_TARGETS=(sglang_router_roll)
# run_router_roll COPY INVENTORY: lane7
run_router_roll() { run_lane lane7 "$1" "$2" "${ROUTER_ROLL_TARGETS[@]}"; }
RANKS_TARGETS=(sglang_role_ranks)
# on hosts 7-8 after fleet (10 hosts; otherwise in lane 1)
AFTER_FLEET_TARGETS=(sglang_preflight role_model_tools)

lab_host_count() { grep -c '^gpu[0-9]* ansible_host=' "$INVENTORY" 2>/dev/null || true; }

# lane_inventory DIR FIRST [COUNT]: DIR/inventory.ini holding lab hosts FIRST..FIRST+COUNT-1 (COUNT
# defaults to 2) as gpu1, gpu2, ... (the lab's vars kept), and DIR/lab.json (what lab.sh and the
# targets read beside the inventory).
lane_inventory() {
    mkdir -p "$1"
    ln -sfn "$CACHE/run/lab.json" "$1/lab.json"
    awk -v first="$2" -v count="${3:-2}" '
        /^gpu[0-9]+ ansible_host=/ {
            n = substr($1, 4) - first + 1
            if (n >= 1 && n <= count) { $1 = "gpu" n; print }
            next
        }
        { print }' "$INVENTORY" > "$1/inventory.ini"
}

# run_lane NAME COLL INVENTORY [ansible-test target args...]: one ansible-test integration from its own
# copy of the collection; its output streams prefixed with [NAME] and is kept in run/integration-NAME.log.
run_lane() {
    local name=$1 coll=$2 inv=$3 out rc=0
    shift 3
    out=$CACHE/run/integration-$name.log
    sync_collection "$coll"
    printf 'GPUFLEET_LAB_INVENTORY=%q\nGPUFLEET_LAB_WHEELHOUSE=%q\nGPUFLEET_LAB_DIR=%q\n' "$inv" "$CACHE/wheelhouse/tools.tar" "$coll/tests/lab" \
        > "$coll/tests/integration/lab.env"
    (cd "$coll" && PATH=$VENV/bin:$PATH ansible-test integration --venv --python 3.11 --requirements --color no "$@") 2>&1 \
        | tee "$out" | sed -u "s/^/[$name] /" || rc=$?
    grep '^== target ' "$out" | while IFS= read -r line; do log "integration [$name]: ${line#== target }"; done || true
    if [ $rc -ne 0 ]; then log "integration [$name]: ansible-test failed (exit $rc)"; return $rc; fi
    # ansible-test exits 0 when every target was skipped: that is no test at all.
    if grep -q "All targets skipped" "$out"; then log "integration [$name]: no target ran"; return 1; fi
}

# ansible-test makes one ssh key pair per user on its first integration run (core_ci.py,
# generate_key_pair). Lanes that start at once on a fresh machine race for it: the second one's
# ssh-keygen meets the first one's half-made key, asks "Overwrite (y/n)?" and the lane fails before any
# target runs. Made once here, before the lanes, the way ansible-test makes it (PEM, RSA header).
ansible_test_key() {
    local key=$HOME/.ansible/test/id_rsa
    [ -f "$key" ] && [ -f "$key.pub" ] && return 0
    mkdir -p "$(dirname "$key")"
    rm -f "$key" "$key.pub"
    ssh-keygen -m PEM -q -t rsa -N '' -f "$key"
    sed -i -E 's/(BEGIN|END) PRIVATE KEY/\1 RSA PRIVATE KEY/' "$key"
}

# lane_copy N: the collection copy lane N runs from.
lane_copy() { echo "$COLL_PARENT-lane$1/ansible_collections/gpufleet/llm"; }
# excluding TARGET...: the ansible-test arguments that leave TARGET... out.
excluding() { local t; for t in "$@"; do printf -- '--exclude\n%s\n' "$t"; done; }

do_integration() {
    # (each lane syncs its own copy of the collection: run_lane; none runs from COLL, the copy sanity
    # and units run from)
    ansible_test_key
    # ansible-test runs each target from a copy without lab.env or tests/lab: the targets find the
    # lab's files through this link in the cache (lab.sh).
    sync_collection "$(lane_copy 1)"
    ln -sfn "$(lane_copy 1)/tests/lab" "$CACHE/run/lab-dir"
    local hosts lane1_out=() pids=() pid rc=0
    hosts=$(lab_host_count)
    hosts=${hosts:-0}
    if [ "$hosts" -lt 4 ]; then
        log "integration: $hosts lab host(s): the 4-host target(s) ${FLEET_TARGETS[*]} ${ROUTER_ROLL_TARGETS[*]} do not run (LAB_HOSTS=4 or more)"
        mapfile -t lane1_out < <(excluding "${FLEET_TARGETS[@]}" "${ROUTER_ROLL_TARGETS[@]}")
        run_lane all "$(lane_copy 1)" "$INVENTORY" "${lane1_out[@]}"
        return
    fi
    lane_inventory "$CACHE/lane1" 1
    lane_inventory "$CACHE/lane2" 3
    if [ "$hosts" -lt 8 ]; then
        # two lanes on hosts 1-2 and 3-4, then fleet and the router roll on hosts 1-4 once both are done
        lane_inventory "$CACHE/lane3" 1 4
        mapfile -t lane1_out < <(excluding "${FLEET_TARGETS[@]}" "${ROUTER_ROLL_TARGETS[@]}" "${LANE2_TARGETS[@]}" \
            "${ROLLBACK_TARGETS[@]}")
        run_lane lane1 "$(lane_copy 1)" "$CACHE/lane1/inventory.ini" "${lane1_out[@]}" &
        pids+=($!)
        (
            rc=0
            run_lane lane2 "$(lane_copy 2)" "$CACHE/lane2/inventory.ini" "${LANE2_TARGETS[@]}" || rc=$?
            run_lane lane6 "$(lane_copy 2)" "$CACHE/lane2/inventory.ini" "${ROLLBACK_TARGETS[@]}" || rc=$?
            exit $rc
        ) &
        pids+=($!)
        for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
        run_lane lane3 "$(lane_copy 3)" "$CACHE/lane3/inventory.ini" "${FLEET_TARGETS[@]}" || rc=$?
        run_router_roll "$(lane_copy 3)" "$CACHE/lane3/inventory.ini" || rc=$?
        return $rc
    fi
    lane_inventory "$CACHE/lane3" 5 4
    lane_inventory "$CACHE/lane4" 5
    lane_inventory "$CACHE/lane5" 7
    local after=("${ROLLBACK_TARGETS[@]}") lane7_first=5
    if [ "$hosts" -ge 10 ]; then
        after=("${AFTER_FLEET_TARGETS[@]}")
        lane_inventory "$CACHE/lane6" 9
        lane7_first=7
    fi
    # 14 hosts: lane7 on hosts 11-14 from the start, beside the others (its waits for drains and probes
    # leave the cores to them, instead of running alone at the end)
    [ "$hosts" -lt 14 ] || lane7_first=11
    lane_inventory "$CACHE/lane7" "$lane7_first" 4
    if [ "$hosts" -ge 14 ]; then
        run_router_roll "$(lane_copy 7)" "$CACHE/lane7/inventory.ini" &
        pids+=($!)
    fi
    mapfile -t lane1_out < <(excluding "${FLEET_TARGETS[@]}" "${ROUTER_ROLL_TARGETS[@]}" "${LANE2_TARGETS[@]}" \
        "${ROLLBACK_TARGETS[@]}" "${RANKS_TARGETS[@]}" "${after[@]}")
    run_lane lane1 "$(lane_copy 1)" "$CACHE/lane1/inventory.ini" "${lane1_out[@]}" &
    pids+=($!)
    run_lane lane2 "$(lane_copy 2)" "$CACHE/lane2/inventory.ini" "${LANE2_TARGETS[@]}" &
    pids+=($!)
    (
        rc=0
        p6=
        # hosts 9-10 (10 hosts or more), from the start
        if [ "$hosts" -ge 10 ]; then
            run_lane lane6 "$(lane_copy 6)" "$CACHE/lane6/inventory.ini" "${ROLLBACK_TARGETS[@]}" &
            p6=$!
        fi
        run_lane lane3 "$(lane_copy 3)" "$CACHE/lane3/inventory.ini" "${FLEET_TARGETS[@]}" || rc=$?
        # hosts 5-6 and 7-8, each pair its own lane, once fleet is done with all four
        run_lane lane4 "$(lane_copy 3)" "$CACHE/lane4/inventory.ini" "${RANKS_TARGETS[@]}" &
        p4=$!
        run_lane lane5 "$(lane_copy 5)" "$CACHE/lane5/inventory.ini" "${after[@]}" || rc=$?
        # lane7's four hosts (fewer than 14 hosts): 7-10 once lane5 and lane6 are done (8-9 hosts: 5-8
        # once lane4 and lane5 are)
        if [ -n "$p6" ]; then wait "$p6" || rc=$?; else wait "$p4" || rc=$?; fi
        [ "$hosts" -ge 14 ] || run_router_roll "$(lane_copy 7)" "$CACHE/lane7/inventory.ini" || rc=$?
        if [ -n "$p6" ]; then wait "$p4" || rc=$?; fi
        exit $rc
    ) &
    pids+=($!)
    for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
    return $rc
}

# --- demo ----------------------------------------------------------------------------------------

do_demo_play() {
    link_collection
    local env=(PATH="$VENV/bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$CACHE/collections" ANSIBLE_HOST_KEY_CHECKING=False
               ANSIBLE_PIPELINING=True)
    local deploy=(ansible-playbook -i "$INVENTORY" playbooks/deploy.yml -e "@$ROOT/tests/lab/demo-vars.yml"
                  -e "model_tools_wheelhouse=$CACHE/wheelhouse/tools")
    log "0/3 tests/lab/prepare-hosts.yml: a stand-in nvidia-smi on each lab host (no GPU here)"
    (cd "$ROOT" && env "${env[@]}" ansible-playbook -i "$INVENTORY" tests/lab/prepare-hosts.yml >/dev/null)
    log "1/3 playbooks/deploy.yml: tools venv, fetch the Kimi-shaped target and its DFlash drafter from the"
    log "    lab Hub (hf_snapshot), verify both (model_verify), switch current, then the gated sglang role:"
    log "    verify again, GPU fit, SGLang's own parser on the config, unit + config, start, probe"
    (cd "$ROOT" && env "${env[@]}" "${deploy[@]}")
    log "2/3 the same playbook again: the re-check (expect changed=0 on every host)"
    (cd "$ROOT" && env "${env[@]}" "${deploy[@]}") | tee "$CACHE/run/demo-recheck.log" | sed -n '/PLAY RECAP/,$p'
    if grep -E "changed=[1-9]" "$CACHE/run/demo-recheck.log" >/dev/null; then
        log "the re-check changed something: see $CACHE/run/demo-recheck.log"; return 1
    fi
    log "3/3 tests/lab/demo.yml: per host, the models, the commit the server serves, checks, accept length"
    (cd "$ROOT" && env "${env[@]}" ansible-playbook -i "$INVENTORY" tests/lab/demo.yml) | sed -n '/TASK \[Report\]/,/PLAY RECAP/p'
    log "The server is the lab's SGLang STAND-IN (no GPU here): its accept length and timings are a model."
}

run_test() {
    local failed=0
    trap 'stage lab-down do_lab_down || true; summary' EXIT
    setup
    stage lab-down do_lab_down          # make test always starts from a fresh lab
    stage lint do_lint || failed=1
    stage build do_build || failed=1
    stage ee do_ee || failed=1
    stage sanity do_sanity || failed=1
    # lab-local first: its wheelhouse tests build the verified SGLang 0.5.23 venv that the units'
    # preflight tests run SGLang's own parser from (without it they skip, and on a fresh machine
    # nothing else builds it before the units).
    stage lab-local do_lab_local || failed=1
    stage units do_units || failed=1
    LAB_HOSTS=$TEST_LAB_HOSTS   # lanes of integration targets at once (do_integration)
    if stage lab-up do_lab_up; then
        stage lab-tests do_lab_marked || failed=1
        stage integration do_integration || failed=1
    else
        failed=1
    fi
    stage lab-down do_lab_down || failed=1
    stage teardown do_teardown_check || failed=1
    trap - EXIT
    summary
    if [ $failed -ne 0 ]; then log "make test: FAILED"; return 1; fi
    log "make test: all stages passed"
}

do_bench_hub() { "$PY" "$ROOT/tests/lab/bench.py" hub-throughput --runs 3; }
do_bench_verify() { "$PY" "$ROOT/tests/lab/bench_verify.py" --runs 5; }

# hf_snapshot vs snapshot_download on gpu1 (needs the tools venv there: the model role installs it).
do_bench_snapshot() {
    link_collection
    (cd "$ROOT/tests/integration/targets/hf_snapshot" && PATH="$VENV/bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$CACHE/collections" \
        ANSIBLE_HOST_KEY_CHECKING=False ansible-playbook -i "$INVENTORY" tools.yml \
        -e "model_tools_wheelhouse=$CACHE/wheelhouse/tools" >/dev/null)
    PATH="$VENV/bin:$PATH" "$PY" "$ROOT/tests/lab/bench_snapshot.py" --rounds 3 --collections "$CACHE/collections"
}

# sglang_bench's client against the lab SGLang stand-in on loopback (figures: client fidelity, not GPUs).
do_bench_sglang() { "$PY" "$ROOT/tests/lab/bench_sglang.py"; }

# Staging 1 host against 4 (hub and peers) under one private-Hub cap (needs 4 lab hosts).
do_bench_fleet() {
    link_collection
    PATH="$VENV/bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$CACHE/collections" "$PY" "$ROOT/tests/lab/bench_fleet.py"
}

# Requests during a 4-server roll behind the SGLang router, with the drain and without it (needs 4 lab hosts).
do_bench_router() {
    link_collection
    PATH="$VENV/bin:$PATH" "$PY" "$ROOT/tests/lab/bench_router.py" --collections "$CACHE/collections" \
        --wheelhouse "$CACHE/wheelhouse/tools"
}

# The peer exchange at 16-256 hosts, simulated on the collection's own scheduling code (no lab needed;
# a few minutes on 2 cores): bench-results/scale.json, scale.md, scale.png.
do_bench_scale() {
    link_collection
    "$PY" "$ROOT/tests/lab/bench_scale.py" --collections "$CACHE/collections" --out "$ROOT/bench-results"
}

run_bench() {
    trap 'stage lab-down do_lab_down || true; summary' EXIT
    setup
    [ "$LAB_HOSTS" -ge 4 ] || LAB_HOSTS=4   # the fleet benchmark stages 4 hosts; the router one rolls 4 servers
    stage lab-up do_lab_up
    stage bench-hub do_bench_hub
    stage bench-verify do_bench_verify
    stage bench-snapshot do_bench_snapshot
    stage bench-sglang do_bench_sglang
    stage bench-fleet do_bench_fleet
    stage bench-router do_bench_router
    stage bench-scale do_bench_scale
}

run_demo() {
    trap summary EXIT
    setup
    stage lab-up do_lab_up
    stage demo do_demo_play
    log ""
    log "The lab stays up for you to look around: inventory $INVENTORY"
    log "  $PY tests/lab/labctl.py status | exec gpu1 -- CMD ; make lab-down removes it."
}

[ $# -gt 0 ] || { log "usage: $0 test|demo|setup|lint|build|ee|sanity|units|units-fast|lab-local|lab-up|lab-down|lab-status|integration|bench|bench-scale"; exit 2; }
for what in "$@"; do
    case $what in
        test) run_test ;;
        demo) run_demo ;;
        setup) setup; summary ;;
        lint) stage lint do_lint ;;
        build) stage build do_build ;;
        ee) stage ee do_ee ;;
        sanity) stage sanity do_sanity ;;
        units) stage units do_units ;;
        units-fast) stage apt do_apt && stage venv do_venv && stage units-fast do_units_fast ;;
        lab-local) stage lab-local do_lab_local ;;
        lab-up) stage lab-up do_lab_up ;;
        lab-down) stage lab-down do_lab_down ;;
        lab-status) do_lab_status ;;
        lab-tests) stage lab-tests do_lab_marked ;;
        integration) stage integration do_integration ;;
        teardown) stage teardown do_teardown_check ;;
        bench) run_bench ;;
        bench-scale) stage bench-scale do_bench_scale ;;
        *) log "unknown stage: $what"; exit 2 ;;
    esac
done
