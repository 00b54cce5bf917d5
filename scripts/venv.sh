# Sourced by run_local.sh, run_tests.sh and run_dataflow.sh: create or update ./.venv.
# Re-installs only when setup.py changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON_BIN="${PYTHON:-$(command -v python3.11 || command -v python3)}"
STAMP="$VENV/.img2tfrecord-installed"

if [ ! -x "$VENV/bin/python" ]; then
  echo "creating $VENV with $PYTHON_BIN" >&2
  "$PYTHON_BIN" -m venv "$VENV"
fi
if [ ! -f "$STAMP" ] || [ "$ROOT/setup.py" -nt "$STAMP" ]; then
  echo "installing img2tfrecord and its dependencies into $VENV (a few minutes the first time)" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip setuptools wheel
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test]"
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
