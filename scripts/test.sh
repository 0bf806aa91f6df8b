#!/usr/bin/env bash
# Set up (idempotent), then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
python3 -m pytest -q
