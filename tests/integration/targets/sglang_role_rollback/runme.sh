#!/usr/bin/env bash
# The sglang_role target's scenarios that restart, roll back or move to another commit, split off so
# that make test runs them on their own two lab hosts beside the others (tests/stages.sh,
# do_integration): a fresh deploy and one option changed (step 5's state), then a restart handler lost
# with its controller (scenario_stale.sh), a second commit with a corrupted shard on one host (7.), a
# probe that fails after the restart (8., rollback) and a crash-looping server (scenario_crashloop.sh).
# The scripts, playbooks and vars are sglang_role's (SGLANG_ROLE_PART=rollback there).
cd "$(dirname "$0")/../sglang_role" || exit 1
SGLANG_ROLE_PART=rollback GPUFLEET_TARGET_NAME=sglang_role_rollback exec bash ./runme.sh "$@"
