# shellcheck shell=bash
# Sourced by runme.sh (scenario multinode): placeholder until its scenario lands.
: "scenario multinode: not written yet"
