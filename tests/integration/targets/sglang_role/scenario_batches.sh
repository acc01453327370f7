# shellcheck shell=bash
# Sourced by runme.sh (scenario batches): placeholder until its scenario lands.
: "scenario batches: not written yet"
