#!/usr/bin/env bash
# The main job: set up (idempotent), then reproduce the two map_perf_test results (NUMA node
# selection, bpf_mem_alloc) on the default backend in a few seconds (`pybpf reproduce`), with
# the project's venv (.venv, made by setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/python -m pybpf reproduce "$@"
