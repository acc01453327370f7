#!/usr/bin/env bash
# The sglang_role target's multi-server scenarios, split off so that make test runs them on their own
# two lab hosts beside the single-server scenarios (tests/stages.sh, do_integration): a fresh deploy,
# then a bad config in batch 1 stopping the roll (scenario_batches.sh), two hosts as one multi-node
# server (scenario_multinode.sh) and verify.yml on a corrupted shard of that server. The scripts,
# playbooks and vars are sglang_role's (SGLANG_ROLE_PART=ranks there).
cd "$(dirname "$0")/../sglang_role" || exit 1
SGLANG_ROLE_PART=ranks GPUFLEET_TARGET_NAME=sglang_role_ranks exec bash ./runme.sh "$@"
