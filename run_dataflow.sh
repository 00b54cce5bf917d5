#!/usr/bin/env bash
# Run the conversion on Google Cloud Dataflow.
#   PROJECT=my-project ./run_dataflow.sh --input gs://bucket/images --output gs://bucket/records [convert options]
# Environment:
#   PROJECT (or GOOGLE_CLOUD_PROJECT)  required
#   REGION            default us-central1
#   TEMP_LOCATION     default gs://<output bucket>/tmp
#   STAGING_LOCATION  default $TEMP_LOCATION/staging
#   MACHINE_TYPE      default n1-standard-4
#   MAX_NUM_WORKERS   default 20
#   DISK_SIZE_GB      default 50
#   JOB_NAME          default img2tfrecord-<UTC timestamp>
#   EXTRA_BEAM_ARGS   more Beam options, e.g. "--service_account_email=... --subnetwork=..."
set -euo pipefail
caller="$PWD"
cd "$(dirname "$0")"
project="$PWD"

PROJECT="${PROJECT:-${GOOGLE_CLOUD_PROJECT:-}}"
if [ -z "$PROJECT" ]; then
  echo "run_dataflow.sh: set PROJECT (or GOOGLE_CLOUD_PROJECT) to your Google Cloud project id" >&2
  exit 2
fi

output=""
prev=""
for arg in "$@"; do
  case "$arg" in
    --output=*) output="${arg#--output=}" ;;
  esac
  if [ "$prev" = "--output" ]; then output="$arg"; fi
  prev="$arg"
done
if [[ "$output" != gs://* ]]; then
  echo "run_dataflow.sh: --output must be a gs:// path that Dataflow workers can write (got '${output}')" >&2
  exit 2
fi
bucket="${output#gs://}"
bucket="${bucket%%/*}"

REGION="${REGION:-us-central1}"
TEMP_LOCATION="${TEMP_LOCATION:-gs://${bucket}/tmp}"
STAGING_LOCATION="${STAGING_LOCATION:-${TEMP_LOCATION}/staging}"
MACHINE_TYPE="${MACHINE_TYPE:-n1-standard-4}"
MAX_NUM_WORKERS="${MAX_NUM_WORKERS:-20}"
DISK_SIZE_GB="${DISK_SIZE_GB:-50}"
JOB_NAME="${JOB_NAME:-img2tfrecord-$(date -u +%Y%m%d-%H%M%S)}"

source scripts/venv.sh
cd "$caller"  # relative paths in the arguments are the caller's

echo "Dataflow job ${JOB_NAME} in ${PROJECT}/${REGION}; watch it at" >&2
echo "  https://console.cloud.google.com/dataflow/jobs?project=${PROJECT}" >&2
# shellcheck disable=SC2086
exec img2tfrecord convert "$@" \
  --runner DataflowRunner \
  --project "$PROJECT" \
  --region "$REGION" \
  --job_name "$JOB_NAME" \
  --temp_location "$TEMP_LOCATION" \
  --staging_location "$STAGING_LOCATION" \
  --setup_file "$project/setup.py" \
  --machine_type "$MACHINE_TYPE" \
  --max_num_workers "$MAX_NUM_WORKERS" \
  --disk_size_gb "$DISK_SIZE_GB" \
  ${EXTRA_BEAM_ARGS:-}
