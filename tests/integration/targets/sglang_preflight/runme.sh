#!/usr/bin/env bash
# sglang_preflight on the lab hosts over SSH, with the real SGLang 0.5.23 the lab image carries
# (/opt/sglang/0.5.23/bin/python, CPU-only): the DFlash config passes in check mode and for real,
# changed=0 each time; every broken copy fails naming its option; a missing interpreter fails
# naming it. The module itself needs only the standard library (Ansible's /usr/bin/python3).
# shellcheck source=../setup_lab/lab.sh
. "$(dirname "$0")/../setup_lab/lab.sh"
forbid_in_output sk-itest-NOT-A-SECRET
PLAY_ARGS+=(-e "itest_root=/srv/itest-sglang_preflight")
at_exit cleanup_play

ansible-playbook "${PLAY_ARGS[@]}" setup.yml >/dev/null

play 0 good.yml --check
play 0 good.yml
play 0 good.yml
play 0 bad.yml --check
play 0 bad.yml
