# shellcheck shell=bash
# Sourced by runme.sh at step 0: the models are fetched, the hosts never ran SGLang (or with
# SGLANG_ROLE_ONLY="first_check ..."). Issue 11 item 6: a --check --diff deploy on a host without
# /etc/sglang, the service user or the unit succeeds and shows the config, environment and unit it
# would write, with the API key and a secret-looking environment value masked; afterwards nothing of
# the server exists on the hosts.
echo "== first_check. --check --diff on hosts that never ran the sglang role: the diff, secrets masked, nothing written"
FC_SECRET=itest-env-secret-0b7e52d1
# cleanup.yml keeps the service user of earlier runs: without it the hosts are as fresh as a new one.
on gpu_nodes 'systemctl stop sglang-itest.service 2>/dev/null; userdel sglang 2>/dev/null; groupdel sglang 2>/dev/null; rm -rf /etc/sglang; true' >/dev/null
ansible-playbook "${PLAY_ARGS[@]}" gpufleet.llm.deploy --check --diff \
    -e "{\"itest_env\": {\"HF_TOKEN\": \"$FC_SECRET\"}}" > "$OUT" 2>&1 || { cat "$OUT"; exit 1; }
expect_in "$OUT" '^\+model-path: "/srv/itest-sglang/models/kimi/'
expect_in "$OUT" '^\+api-key: "\*\*\*\*\*\*\*\*"'
expect_in "$OUT" '^\+ExecStart=.* --config /etc/sglang/itest.yaml'
expect_in "$OUT" '^\+HF_TOKEN="\*\*\*\*\*\*\*\*"'
expect_in "$OUT" '^\+NCCL_DEBUG="WARN"'
expect_in "$OUT" 'sglang-itest.service is not installed yet; it would be written, enabled and started'
for secret in "$KEY" "$FC_SECRET"; do
    ! grep -qF -- "$secret" "$OUT" || { echo "a secret is in the check-mode output" >&2; exit 1; }
done
[ "$(grep -cE '^(gpu1|gpu2) +: ok=[0-9]+ +changed=[1-9][0-9]* +unreachable=0 +failed=0' "$OUT")" = 2 ] \
    || { sed -n '/PLAY RECAP/,$p' "$OUT"; echo "expected both hosts to report changes and no failure" >&2; exit 1; }
# shellcheck disable=SC2016  # expanded on the host, not here
FC_LEFT=$(on gpu_nodes 'for p in /etc/sglang /etc/systemd/system/sglang-itest.service; do [ ! -e $p ] || echo $p; done; ! id -u sglang >/dev/null 2>&1 || echo user-sglang; ! getent group sglang >/dev/null || echo group-sglang; true')
[ "$(awk '$2 != "-"' <<<"$FC_LEFT")" = "" ] || { echo "check mode left something on the hosts:"; echo "$FC_LEFT"; exit 1; } >&2
