#!/usr/bin/env bash
# The main job: set up (idempotent), then reproduce the seed patches' map_perf_test results
# (NUMA node selection, bpf_mem_alloc): modeled on their era's machine, and for real where the
# kernel can (`pybpf reproduce`, about a minute on 2 CPUs), with the project's venv (.venv, made by
# setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/python -m pybpf reproduce "$@"
