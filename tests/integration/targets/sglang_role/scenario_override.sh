# shellcheck shell=bash
# Sourced by runme.sh after step 6 (or after the first deploy with SGLANG_ROLE_ONLY=override).
# Issue 11 item 1: sglang_args cannot replace an option the gate verified (here model-path, and
# model-path through SGLang's alias `model`), and two spellings of one option (here an alias and its
# name) are an error naming both; each deploy fails before anything is written, the servers untouched.
echo "== override. sglang_args cannot set model-path; two spellings of one option fail; nothing changes"
OVR_BEFORE=$(state)
must_fail "$OUT" gpufleet.llm.deploy "${CUR[@]}" -e '{"itest_args": {"model_path": "/elsewhere"}}'
expect_in "$OUT" "sglang_args: 'model_path' is set by the sglang role .*use sglang_target_model .*or sglang_target_path"
must_fail "$OUT" gpufleet.llm.deploy "${CUR[@]}" -e '{"itest_args": {"model": "/elsewhere"}}'
expect_in "$OUT" "sglang_args: 'model' \(SGLang's model-path\) is set by the sglang role .*use sglang_target_model"
must_fail "$OUT" gpufleet.llm.deploy "${CUR[@]}" -e '{"itest_args": {"tp_size": 8, "tensor-parallel-size": 8}}'
expect_in "$OUT" "sglang_args: 'tp_size' and 'tensor-parallel-size' are two spellings of SGLang's tp-size: keep one"
[ "$(state)" = "$OVR_BEFORE" ] || { echo "a refused sglang_args changed the server:"; echo "$OVR_BEFORE"; state; exit 1; } >&2
