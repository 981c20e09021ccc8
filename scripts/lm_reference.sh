#!/usr/bin/env bash
# Reruns docs/language_model.md's reference results and keeps their records, which the page's
# table is generated from (scripts/docs_from_records.py): trains configs/lm.py with RoPE and
# with sinusoidal positions, then evaluates both at 1x, 2x and 4x the training length (about
# 15 minutes on 2 CPU cores).
#
#   bash scripts/lm_reference.sh RUNS RECORDS
#   bash scripts/lm_reference.sh /tmp/lm_runs docs/results/lm_DATE/records
#
# RECORDS/RUN receives each run's config, metrics, evaluations and timed commands as it ends
# (scripts/keep_run.py). A run whose workdir or records exist is refused before anything runs.
set -euo pipefail
if (($# != 2)); then
  echo "error: give RUNS and RECORDS. Fix: bash scripts/lm_reference.sh /tmp/lm_runs" \
    "docs/results/lm_DATE/records" >&2; exit 2
fi
runs=$(realpath -m "$1") records=$(realpath -m "$2")  # The caller's paths; it runs from the root.
PY=${PYTHON:-python}
cd "$(dirname "$0")/.."
source scripts/reference_steps.sh
fresh lm_rope lm_sinusoidal
for kind in rope sinusoidal; do
  step "lm_$kind" train $PY train.py --config "configs/lm.py:${kind}" --workdir "$runs/lm_$kind"
  step "lm_$kind" eval $PY eval.py --workdir "$runs/lm_$kind"
  keep "lm_$kind"
done
echo "kept: $records"
