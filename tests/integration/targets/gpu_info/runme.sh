#!/usr/bin/env bash
# gpu_info on the lab hosts over SSH. The lab has no GPU: a STAND-IN nvidia-smi (files/nvidia-smi-*,
# canned output in nvidia-smi's format) is copied to each host. Facts and the memory fit of a
# Kimi-K2.6-sized model (index total_size 589 GB + a 6.5 GB sparse drafter shard) pass on 8x B300 in
# check mode and for real (changed=0), fail on 8x H100 naming the numbers; no nvidia-smi fails
# clearly, or reports gpu_count=0 with require_gpu=false. Standard library only on the host.
# shellcheck source=../setup_lab/lab.sh
. "$(dirname "$0")/../setup_lab/lab.sh"
PLAY_ARGS+=(-e "itest_root=/srv/itest-gpu_info")
at_exit cleanup_play

ansible-playbook "${PLAY_ARGS[@]}" setup.yml >/dev/null

play 0 fit.yml --check
play 0 fit.yml
play 0 fit.yml
play 0 misfit.yml --check
play 0 misfit.yml
