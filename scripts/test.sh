#!/usr/bin/env bash
# Set up (idempotent), then run the whole test suite with the project's venv (.venv).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/python -m pytest -q "$@"
