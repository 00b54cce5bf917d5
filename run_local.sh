#!/usr/bin/env bash
# Set up ./.venv and convert images on this machine.
#   ./run_local.sh               convert the built-in sample dataset into ./output
#   ./run_local.sh ARGS...       img2tfrecord convert ARGS... (relative paths are the caller's)
set -euo pipefail
caller="$PWD"
cd "$(dirname "$0")"
source scripts/venv.sh

if [ "$#" -eq 0 ]; then
  if [ ! -d sample_data ]; then
    img2tfrecord sample sample_data
  fi
  exec img2tfrecord convert --input sample_data --output output --image-size 128 \
    --splits train=0.8,validation=0.1,test=0.1 --seed 42 --overwrite
fi
cd "$caller"
exec img2tfrecord convert "$@"
