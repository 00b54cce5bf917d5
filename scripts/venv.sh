# Sourced by run_local.sh, run_tests.sh and run_dataflow.sh: create or update ./.venv.
# Re-installs only when setup.py changed since the last install.
# The venv is made with $PYTHON when set, else the first of python3.12, python3.11,
# python3.10 and python3 on PATH that is a supported version; without one it stops in one line.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.img2tfrecord-installed"
SUPPORTED_PYTHONS="3.10 3.11 3.12"  # what setup.py's python_requires accepts (a test checks they agree)
SUPPORTED_TEXT="Python 3.10, 3.11 or 3.12"
RUN_AGAIN="PYTHON=/path/to/python3.11 ./$(basename "$0")"

python_version() {  # X.Y of the interpreter "$1"; nothing when it does not run (e.g. a pyenv shim of no version)
  "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true
}

is_supported() {  # "$1" (X.Y) is one of SUPPORTED_PYTHONS
  case " $SUPPORTED_PYTHONS " in *" $1 "*) return 0 ;; esac
  return 1
}

if [ -x "$VENV/bin/python" ]; then
  PYTHON_VERSION="$(python_version "$VENV/bin/python")"
  if ! is_supported "$PYTHON_VERSION"; then
    echo "$VENV was made with Python ${PYTHON_VERSION:-that no longer runs}; img2tfrecord needs $SUPPORTED_TEXT: remove $VENV and run $RUN_AGAIN" >&2
    exit 2
  fi
else
  if [ -n "${PYTHON:-}" ]; then
    PYTHON_BIN="$PYTHON"
    PYTHON_VERSION="$(python_version "$PYTHON_BIN")"
    if ! is_supported "$PYTHON_VERSION"; then
      echo "PYTHON=$PYTHON_BIN is ${PYTHON_VERSION:+Python }${PYTHON_VERSION:-not a Python that runs}; img2tfrecord needs $SUPPORTED_TEXT: $RUN_AGAIN" >&2
      exit 2
    fi
  else
    PYTHON_BIN=""
    FOUND=""
    for name in python3.12 python3.11 python3.10 python3; do
      candidate="$(command -v "$name" || true)"
      [ -n "$candidate" ] || continue
      PYTHON_VERSION="$(python_version "$candidate")"
      if is_supported "$PYTHON_VERSION"; then
        PYTHON_BIN="$candidate"
        break
      fi
      if [ -n "$PYTHON_VERSION" ]; then
        FOUND="$FOUND, $name is $PYTHON_VERSION"
      fi
    done
    if [ -z "$PYTHON_BIN" ]; then
      FOUND="${FOUND#, }"
      echo "img2tfrecord needs $SUPPORTED_TEXT (on PATH: ${FOUND:-none}): install one, or name it: $RUN_AGAIN" >&2
      exit 2
    fi
  fi
  echo "creating $VENV with $PYTHON_BIN (Python $PYTHON_VERSION)" >&2
  "$PYTHON_BIN" -m venv "$VENV"
fi
if [ ! -f "$STAMP" ] || [ "$ROOT/setup.py" -nt "$STAMP" ]; then
  echo "installing img2tfrecord and its dependencies into $VENV (a few minutes the first time)" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip setuptools wheel
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test]"
  touch "$STAMP"
fi
# The package's bytecode, also where the environment stops Python from writing it (PYTHONDONTWRITEBYTECODE):
# without it every command compiles the package again as it starts, a quarter of a second here.
"$VENV/bin/python" -m compileall -q "$ROOT/src/img2tfrecord" >/dev/null || true
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
