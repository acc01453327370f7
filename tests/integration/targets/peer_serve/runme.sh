#!/usr/bin/env bash
# peer_serve against two lab hosts (make lab-up): each host serves a small tree of its own and the other
# host fetches from it over HTTP (token, Range, HEAD, every denial); check mode, start, re-run
# changed=0, stop. The token never appears in any play's output (forbid_in_output).
# shellcheck source=../setup_lab/lab.sh
. "$(dirname "$0")/../setup_lab/lab.sh"
TOKEN=$(python3 -c 'import secrets; print(secrets.token_urlsafe(30))')
forbid_in_output "$TOKEN"
PLAY_ARGS+=(-e "peer_token=$TOKEN")
at_exit cleanup_play

cleanup_play
ansible-playbook "${PLAY_ARGS[@]}" setup.yml >/dev/null
play some serve.yml --check
ansible-playbook "${PLAY_ARGS[@]}" absent.yml >/dev/null
play some serve.yml
play 0 serve.yml
play 0 serve.yml --check
play 0 probe.yml
play some stop.yml
ansible-playbook "${PLAY_ARGS[@]}" absent.yml >/dev/null
play 0 stop.yml
play some stale.yml
ansible-playbook "${PLAY_ARGS[@]}" role.yml --tags model_install_nginx >/dev/null
