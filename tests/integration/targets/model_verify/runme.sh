#!/usr/bin/env bash
# model_verify on the lab hosts over SSH: the model role installs the tools venv, the fixture target
# and drafter are copied to /srv/itest-model_verify with manifests, then clean trees (every mode, in
# check mode and for real, twice: changed=0 each time) and broken copies (each caught, file named).
# shellcheck source=../setup_lab/lab.sh
. "$(dirname "$0")/../setup_lab/lab.sh"
if [ ! -f "$LAB_CACHE/fixtures/fixtures.json" ]; then
    echo "fixture store $LAB_CACHE/fixtures not found: run 'tests/stages.sh setup' first" >&2
    exit 1
fi
STAGE=$LAB_TMP/stage
PLAY_ARGS+=(-e "itest_root=/srv/itest-model_verify")
at_exit cleanup_play

mkdir "$STAGE"
python stage_models.py "$LAB_CACHE/fixtures" "$STAGE"
ansible-playbook "${PLAY_ARGS[@]}" setup.yml -e "stage=$STAGE" \
    -e "model_tools_wheelhouse=$WHEELHOUSE"

play 0 clean.yml --check
play 0 clean.yml
play 0 clean.yml
play some corrupt.yml
