#!/usr/bin/env bash
# Set up ./.venv and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh
exec python -m pytest -q tests "$@"
