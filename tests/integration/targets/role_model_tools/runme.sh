#!/usr/bin/env bash
# The model role's install stage against the lab hosts (make lab-up), community.docker's pattern:
# check mode, for real, both again, then again after one pin was uninstalled; the play recap's changed
# counts are asserted each time.
# shellcheck source=../setup_lab/lab.sh
. "$(dirname "$0")/../setup_lab/lab.sh"
VENV=/opt/gpufleet/tools-itest
# Both forms of model_tools_wheelhouse: the lab's archive (tools.tar, what every other target gives the
# role) for the first install, the directory it was made from for the reinstall below.
WHEELHOUSE_DIR=${WHEELHOUSE%.tar}
PLAY_ARGS+=(-e "model_tools_wheelhouse=$WHEELHOUSE" -e "model_tools_venv=$VENV")

ansible-playbook -i "$INVENTORY" cleanup.yml -e "venv=$VENV"
play some apply.yml --check
ansible-playbook -i "$INVENTORY" verify.yml -e "venv=$VENV" -e expect_installed=false
play some apply.yml
play 0 apply.yml
play 0 apply.yml --check
# One pin gone from the venv (the role reads what it holds with importlib.metadata): only the role's
# install puts it back, and the run after that changes nothing again.
ansible gpu_nodes -i "$INVENTORY" -m ansible.builtin.command -a "$VENV/bin/python -m pip uninstall --yes --quiet jmespath" >/dev/null
play some apply.yml -e "model_tools_wheelhouse=$WHEELHOUSE_DIR"
play 0 apply.yml -e "model_tools_wheelhouse=$WHEELHOUSE_DIR"
ansible-playbook -i "$INVENTORY" verify.yml -e "venv=$VENV" -e expect_installed=true
ansible-playbook -i "$INVENTORY" cleanup.yml -e "venv=$VENV"
