#!/usr/bin/env bash
# Set up ./.venv, check the code (ruff, mypy) and run the test suite. Extra arguments go to pytest.
#   ./run_tests.sh            everything
#   ./run_tests.sh --quick    lint, types and the fast unit tests only (no CLI runs, pipelines or runners)
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh
# The CLI processes and conversion workers the tests start each import the package: let Python keep its
# compiled modules (an environment with PYTHONDONTWRITEBYTECODE set would compile them in every process).
unset PYTHONDONTWRITEBYTECODE

quick=0
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi

echo "ruff check, ruff format --check, mypy" >&2
ruff check --no-cache --quiet .
ruff format --no-cache --check --quiet .
# mypy checks beside the tests (its first run is single-threaded, about 15 s); its findings and its exit
# status come after pytest's.
mypy_log="$(mktemp "${TMPDIR:-/tmp}/img2tfrecord-mypy.XXXXXX")"
mypy --no-error-summary >"$mypy_log" 2>&1 &
mypy_pid=$!
trap 'kill "$mypy_pid" 2>/dev/null || true; rm -f "$mypy_log"' EXIT

run_pytest() {  # pytest "$@", then mypy's result: the first failure's status
  local status=0 mypy_status=0
  python -m pytest "$@" || status=$?
  wait "$mypy_pid" || mypy_status=$?
  if [ "$mypy_status" != 0 ]; then
    cat "$mypy_log" >&2
    echo "mypy failed (exit $mypy_status)" >&2
  fi
  if [ "$status" = 0 ]; then status=$mypy_status; fi
  return "$status"
}

if [ "$quick" = 1 ]; then
  run_pytest -q -n "${IMG2TFRECORD_TEST_WORKERS:-2}" tests -m "not e2e" "$@"
  exit
fi

# tests/test_report.py opens report.html in Debian's chromium: install it where missing (as root, quietly).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing chromium for the report's browser test" >&2
  if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/tmp/img2tfrecord-chromium-install.log 2>&1; then
    echo "could not install chromium (see /tmp/img2tfrecord-chromium-install.log): the browser test will be skipped" >&2
  fi
fi
# tests/test_object_stores.py runs Azure Blob Storage's emulator, Azurite, from npm: installed into .test-tools/
# where missing (quietly); without Node the Azure tests are skipped with the reason.
if [ ! -x .test-tools/node_modules/.bin/azurite-blob ] && command -v npm >/dev/null 2>&1; then
  echo "installing azurite for the Azure Blob Storage tests" >&2
  if ! npm install --prefix .test-tools --no-audit --no-fund --loglevel=error azurite@3 >/tmp/img2tfrecord-azurite-install.log 2>&1; then
    echo "could not install azurite (see /tmp/img2tfrecord-azurite-install.log): the Azure tests will be skipped" >&2
  fi
fi
# Three pytest workers (pytest-xdist) on two cores: the third fills the time the others wait on the processes
# and servers their tests start (docs/development.md, "The suite's time"). IMG2TFRECORD_TEST_WORKERS=0 runs in
# one process.
run_pytest -q -n "${IMG2TFRECORD_TEST_WORKERS:-3}" tests "$@"
