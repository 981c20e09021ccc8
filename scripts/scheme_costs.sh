#!/usr/bin/env bash
# Times the causal train step of configs/lm.py under every position kind, and under each
# attention kind and option with RoPE, and keeps the records that the cost tables of
# docs/positions.md and docs/language_model.md are generated from (scripts/docs_from_records.py's
# rows blocks). FAVOR+ (linear attention, docs/performer.md), NoPE's temperature (for NoPE
# layers), Gemma's query scale (logit_scale: one product of the queries by a constant),
# Granite's (softmax_scale: the same product) and OLMo's and MPT's clamp (qkv_clip: one clamp of
# the projections) are left out. About 17 minutes on 2 CPU cores; run it with nothing else on
# the machine.
#
#   bash scripts/scheme_costs.sh RECORDS [--steps 12 --rounds 3 ...]
#   bash scripts/scheme_costs.sh docs/results/scheme_costs_DATE
#
# RECORDS (new) receives kinds.json (every position kind, taking turns in the same rounds, so
# each ratio to `none` is within one run) and attention_NAME.json for each attention kind or
# option (RoPE without and with it, in turns; DAPE, which reads a bias, with ALiBi), each a
# scripts/benchmark.py --out record with its date, commit, device and the measured matmul peak.
# Further arguments go to every benchmark call.
set -euo pipefail
if (($# < 1)); then
  echo "error: give RECORDS. Fix: bash scripts/scheme_costs.sh docs/results/scheme_costs_DATE" >&2
  exit 2
fi
records=$(realpath -m "$1")  # The caller's path; it runs from the root.
shift
PY=${PYTHON:-python}
cd "$(dirname "$0")/.."
source scripts/reference_steps.sh
refuse_records
kinds=$($PY -c "from roformer import positions
print(','.join(['none'] + [k for k in positions.kinds() if k != 'none']))")
new_records
bench() {  # bench NAME ARGS...: one benchmark record, RECORDS/NAME.json.
  local name=$1
  shift
  echo "=== $name"
  $PY scripts/benchmark.py --config configs/lm.py --steps 12 --rounds 3 "$@" \
    --out "$records.partial/$name.json"
}
bench kinds --kinds "$kinds" "$@"
bench attention_stick_breaking --kinds rope --vary model.attention.kind=softmax,stick_breaking "$@"
for option in differential output_gate qk_norm ssmax softcap sink_logit; do
  bench "attention_$option" --kinds rope --vary "model.attention.$option=False,True" "$@"
done
bench attention_dape --kinds alibi --vary model.attention.dape=False,True "$@"  # It reads a bias.
publish_records
