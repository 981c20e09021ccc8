#!/usr/bin/env bash
# Reruns docs/performance.md's equal-work comparisons with PyTorch and keeps their records, which
# the page's tables are generated from (scripts/docs_from_records.py's torch blocks): the causal
# LM and the masked LM against transformers' GPT-NeoX and RoFormer at the same shapes and
# parameter count (scripts/compare_torch.py), at `small` and `medium`, with PyTorch's malloc as
# it comes and with the settings this codebase uses. Needs torch and transformers, which are
# not in requirements.txt. About 30 minutes on 2 CPU cores; run it with nothing else running.
#
#   bash scripts/torch_reference.sh RECORDS [PRESET ...]     (small medium, default both)
#   bash scripts/torch_reference.sh docs/results/torch_DATE
#
# RECORDS (new) receives MODEL_PRESET_MALLOC.json, one scripts/compare_torch.py --out record each.
set -euo pipefail
if (($# < 1)); then
  echo "error: give RECORDS. Fix: bash scripts/torch_reference.sh docs/results/torch_DATE" >&2
  exit 2
fi
records=$(realpath -m "$1")  # The caller's path; it runs from the root.
shift
presets=${*:-small medium}
PY=${PYTHON:-python}
cd "$(dirname "$0")/.."
source scripts/reference_steps.sh
refuse_records  # Before the check of torch, which a kept folder makes moot.
if ! $PY -c "import torch, transformers" 2>/dev/null; then
  echo "error: these comparisons need torch and transformers. Fix: pip install torch" \
    "transformers (not in requirements.txt)." >&2; exit 2
fi
timing_of() {  # timing_of PRESET: the steps and rounds of its comparisons, in `timing`.
  case $1 in
    small) timing=(--steps 60 --rounds 12) ;;
    medium) timing=(--steps 12 --rounds 6) ;;
    *) echo "error: preset $1 is not small or medium. Fix: name those." >&2; exit 2 ;;
  esac
}
for preset in $presets; do timing_of "$preset"; done  # Every preset checked before any runs.
new_records
for preset in $presets; do
  timing_of "$preset"
  for model in causal mlm; do
    for malloc in default reuse; do
      echo "=== $model $preset, PyTorch malloc $malloc"
      $PY scripts/compare_torch.py --model "$model" --preset "$preset" "${timing[@]}" \
        --torch_malloc "$malloc" --out "$records.partial/${model}_${preset}_${malloc}.json"
    done
  done
done
publish_records
