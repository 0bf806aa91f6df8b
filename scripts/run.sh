#!/usr/bin/env bash
# The main job: set up (idempotent), then create one map of each supported type on the
# default backend and print them as `bpftool map show` / `bpftool map dump` would.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
python3 -m pybpf maps "$@"
