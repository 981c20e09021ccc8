#!/usr/bin/env bash
# Reruns docs/translation.md's comparison of RoPE and sinusoidal positions and keeps its records,
# which the page's table and paired bootstrap are generated from (scripts/docs_from_records.py's
# runs and bootstrap blocks): configs/translate.py (en->de on the embedded Bible verses, 2,000
# steps) with each scheme, then eval.py's beam search on each split. About 1-1.5 hours on 2
# CPU cores; run it with nothing else running, since the page reports its wall times.
#
#   bash scripts/translation_reference.sh RUNS RECORDS
#   bash scripts/translation_reference.sh /tmp/translation_runs docs/results/translation_DATE/records
#
# RECORDS/RUN receives each run's config, metrics, evaluation, decoded splits (hypotheses and
# references) and timed commands as it ends (scripts/keep_run.py). A run whose workdir or
# records exist is refused before anything runs.
set -euo pipefail
if (($# != 2)); then
  echo "error: give RUNS and RECORDS. Fix: bash scripts/translation_reference.sh" \
    "/tmp/translation_runs docs/results/translation_DATE/records" >&2; exit 2
fi
runs=$(realpath -m "$1") records=$(realpath -m "$2")  # The caller's paths; it runs from the root.
PY=${PYTHON:-python}
cd "$(dirname "$0")/.."
source scripts/reference_steps.sh
fresh translate_rope translate_sinusoidal
for kind in rope sinusoidal; do
  step "translate_$kind" train $PY train.py --config "configs/translate.py:${kind}" \
    --workdir "$runs/translate_$kind"
  step "translate_$kind" eval $PY eval.py --workdir "$runs/translate_$kind"
  keep "translate_$kind"
done
echo "kept: $records"
