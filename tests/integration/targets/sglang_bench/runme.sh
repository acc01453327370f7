#!/usr/bin/env bash
# playbooks/benchmark.yml (as gpufleet.llm.benchmark) against the lab's SGLang STAND-IN on gpu1,
# deployed by the sglang role as instance itest-bench. The stand-in is not SGLang and has no GPU:
# the figures in these reports say nothing about GPU performance; what is tested is the playbook.
#   1. check mode changes nothing; without the opt-in there is no baseline and no restart;
#   2. with sglang_bench_baseline=true: a report with a speedup per level, no drop-in left,
#      the speculative config serves again;
#   3. a baseline workload failing midway (request_timeout the baseline's requests outlast):
#      the play fails, the server is restored, the report says why;
#   4. the play killed during the baseline: the systemd-run timer restores the server.
# Every run uses the benchmark method (issue 11 item 10): a warm-up per level, 2 repeats each after
# /flush_cache, temperature 1.0, and the chat API (the lab model has a chat_template.jinja).
# shellcheck source=../setup_lab/lab.sh
. "$(dirname "$0")/../setup_lab/lab.sh"
forbid_in_output itest-bench-api-key-NOT-a-secret
# The lab's vars for the sglang role on the stand-in (launch module, SGLang venv, lab nvidia-smi).
ROLE_VARS=${GPUFLEET_SGLANG_ROLE_VARS:-$LAB_DIR/demo-vars.yml}
# The report is written by the controller's Python; it needs matplotlib (the lab venv has it).
REPORT_PY=${GPUFLEET_REPORT_PYTHON:-$LAB_CACHE/venv/bin/python}
REPORTS=$LAB_TMP/reports
mkdir "$REPORTS"
DROPIN=/run/systemd/system/sglang-itest-bench.service.d/50-gpufleet-bench-baseline.conf
PLAY_ARGS+=(-e "@$ROLE_VARS" -e "@$TARGET_DIR/vars.yml" -e gpufleet_hosts=gpu1 -e "model_tools_wheelhouse=$WHEELHOUSE"
            -e "sglang_bench_report_python=$REPORT_PY")
at_exit cleanup_play

invocation() {  # the server's systemd InvocationID: changes with every (re)start
    ansible -i "$INVENTORY" gpu1 -o -m ansible.builtin.command -a "systemctl show -p InvocationID --value sglang-itest-bench.service" \
        | sed -n 's/.*(stdout) //p'
}

# report DIR PYTHON-ASSERTIONS: the newest report in DIR, loaded as `doc`, checked with the assertions.
check_report() {
    "$REPORT_PY" - "$1" "$2" <<'PY'
import glob, json, os, sys
from matplotlib import image
d, checks = sys.argv[1], sys.argv[2]
reports = sorted(glob.glob(os.path.join(d, "benchmark-gpu1-*.json")))
assert reports, "no report in %s" % d
with open(reports[-1]) as f:
    doc = json.load(f)
assert doc["schema_version"] == 2 and doc["host"] == "gpu1" and doc["standin"] is True
spec = doc["runs"]["spec"]
work = spec["workload"]
assert work["api"] == "chat" and "chat_template.jinja" in work["api_reason"], work
assert (work["repeats"], work["flush_cache"], work["temperature"]) == (2, True, 1.0), work
assert all(len(l["repeats"]) == 2 and l["accept_length_source"] == "requests" for l in spec["levels"]), spec["levels"]
assert all(r["api"] == "chat" and r["repeat"] in (0, 1) for r in spec["records"])
for key in ("json", "markdown", "throughput_png", "accept_length_png"):
    assert os.path.isfile(os.path.join(d, doc["files"][key])), key
for key in ("throughput_png", "accept_length_png"):
    h, w = image.imread(os.path.join(d, doc["files"][key])).shape[:2]
    assert (w, h) == (800, 500), (key, w, h)
md = open(os.path.join(d, doc["files"]["markdown"])).read()
rows = [l for l in md.splitlines() if l.startswith("| spec ") or l.startswith("| baseline ")]
assert "say nothing about real GPU performance" in md
exec(checks)
print("report ok: %s (%d table rows)" % (os.path.basename(reports[-1]), len(rows)))
PY
}

ansible-playbook "${PLAY_ARGS[@]}" cleanup.yml >/dev/null
echo "== deploy the stand-in server itest-bench on gpu1 (sglang role)"
ansible-playbook -i "$INVENTORY" "$LAB_DIR/prepare-hosts.yml" >/dev/null
ansible-playbook "${PLAY_ARGS[@]}" gpufleet.llm.deploy | sed -n '/PLAY RECAP/,$p'

echo "== 1. check mode, then no opt-in: no baseline, no restart"
before=$(invocation)
play 0 gpufleet.llm.benchmark --check -e "sglang_bench_report_dir=$REPORTS/none"
play some gpufleet.llm.benchmark -e "sglang_bench_report_dir=$REPORTS/none"
[ "$(invocation)" = "$before" ] || { echo "the server was restarted without the baseline opt-in" >&2; exit 1; }
check_report "$REPORTS/none" '
assert doc["baseline"]["ran"] is False and "sglang_bench_baseline=true" in doc["baseline"]["note"]
assert doc["speedup"] == [] and doc["runs"]["baseline"] is None and len(rows) == 2
'

echo "== 2. baseline opt-in: report with speedup, restored"
play some gpufleet.llm.benchmark -e sglang_bench_baseline=true -e "sglang_bench_report_dir=$REPORTS/full"
[ "$(invocation)" != "$before" ] || { echo "the baseline run did not restart the server" >&2; exit 1; }
ansible-playbook "${PLAY_ARGS[@]}" check.yml | sed -n '/PLAY RECAP/,$p'
check_report "$REPORTS/full" '
assert doc["baseline"]["ran"] is True and len(rows) == 4
assert [s["concurrency"] for s in doc["speedup"]] == [1, 4]
assert all(s["speedup"] > 1.5 for s in doc["speedup"]), doc["speedup"]
base = doc["runs"]["baseline"]
assert base["server"]["speculative"] is False and all(l["accept_length"] is None for l in base["levels"])
assert base["workload"]["api"] == "chat" and all(len(l["repeats"]) == 2 for l in base["levels"])
# two repeats per run: every level has a Welch interval around a ratio the table shows with it
for s in doc["speedup"]:
    assert s["ci_method"] == "welch-t-log-ratio" and (s["repeats_spec"], s["repeats_baseline"]) == (2, 2), s
    assert s["speedup_ci_low"] is not None and s["speedup_ci_low"] <= s["speedup_ci_high"], s
assert all(" [" in r.split("|")[9] for r in rows if r.startswith("| spec ")), rows
assert doc["runs"]["spec"]["server"]["speculative"] is True
'

echo "== 3. the baseline workload fails midway: restored, play fails"
# 64 new tokens: a speculative request takes ~0.45 s (about 18 steps of 24 ms), a baseline one
# 1.3 s (64 steps of 20 ms): a 0.9 s request_timeout passes the first and fails the second.
# No warm-up: the baseline must fail in its measured requests (partial results carried), not in a warm-up.
out=$(ansible-playbook "${PLAY_ARGS[@]}" gpufleet.llm.benchmark -e sglang_bench_baseline=true -e sglang_bench_warmup_requests=0 \
      -e sglang_bench_max_new_tokens=64 -e sglang_bench_request_timeout=0.9 -e "sglang_bench_report_dir=$REPORTS/midway" 2>&1) \
    && { echo "$out"; echo "the play passed although the baseline workload failed" >&2; exit 1; }
printf '%s' "$out" | grep -q "The baseline benchmark failed and the server was restored" \
    || { echo "$out"; echo "no restore message" >&2; exit 1; }
if printf '%s' "$out" | grep -qF -- "$PLAY_FORBIDDEN"; then echo "API key leaked" >&2; exit 1; fi
ansible-playbook "${PLAY_ARGS[@]}" check.yml | sed -n '/PLAY RECAP/,$p'
check_report "$REPORTS/midway" '
assert doc["baseline"]["ran"] is False and "the baseline failed" in doc["baseline"]["note"]
assert "request_timeout" in doc["baseline"]["note"]
'

echo "== 4. the play is killed during the baseline: the timer restores the server"
log=$REPORTS/killed.log
setsid ansible-playbook "${PLAY_ARGS[@]}" gpufleet.llm.benchmark -e sglang_bench_baseline=true \
    -e sglang_bench_restore_deadline=30 -e sglang_bench_num_requests=24 -e "sglang_bench_report_dir=$REPORTS/killed" \
    >"$log" 2>&1 &
pid=$!
seen=""
for _ in $(seq 1 90); do
    if ansible -i "$INVENTORY" gpu1 -o -m ansible.builtin.stat -a "path=$DROPIN get_checksum=false" | grep -q '"exists": true'; then
        seen=1; break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
done
[ -n "$seen" ] || { cat "$log"; echo "the baseline drop-in never appeared" >&2; exit 1; }
sleep 3
kill -KILL -- "-$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
echo "killed the play; waiting for the restore timer (30 s from arming)"
ansible-playbook "${PLAY_ARGS[@]}" check.yml -e wait_seconds=120 > "$log.check" 2>&1 \
    || { grep -B2 -A8 'fatal:' "$log.check"; tail -40 "$log"; exit 1; }
sed -n '/PLAY RECAP/,$p' "$log.check"
ansible -i "$INVENTORY" gpu1 -o -m ansible.builtin.command \
    -a "journalctl -u gpufleet-bench-restore-itest-bench.service --no-pager -n 20" | grep -q "restore sglang-itest-bench" \
    || echo "(journal of the restore unit not found; the restore itself was checked above)"
echo "sglang_bench integration: all scenarios passed"
