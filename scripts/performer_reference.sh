#!/usr/bin/env bash
# Reruns docs/performer.md's measurements and keeps their records, which the page's tables are
# generated from (scripts/docs_from_records.py): configs/performer.py (300 steps) with RoPE on
# q/k and without positions; softmax attention with RoPE on the same schedule; their
# validation-loss plot (RECORDS/performer_validation_loss.png); the step time and memory of
# softmax vs FAVOR+ attention from L = 512 to 8192 (RECORDS/attention_scaling.json); and the
# RoFormer paper's own form (rope_mode='features'), which stops on a non-finite loss here and is
# kept with the losses it logged until then. Under half an hour on 2 CPU cores.
#
#   bash scripts/performer_reference.sh RUNS RECORDS [step ...]
#     (1 runs, 2 plot, 3 scaling, 4 the paper's form; 1-3 by default)
#   bash scripts/performer_reference.sh /tmp/performer_runs docs/results/performer_DATE/records
#
# RECORDS/RUN receives each run's config, metrics and timed commands as it ends
# (scripts/keep_run.py). A run whose workdir or records exist is refused before anything runs.
set -euo pipefail
if (($# < 2)); then
  echo "error: give RUNS and RECORDS. Fix: bash scripts/performer_reference.sh" \
    "/tmp/performer_runs docs/results/performer_DATE/records [step ...]" >&2; exit 2
fi
runs=$(realpath -m "$1") records=$(realpath -m "$2")  # The caller's paths; it runs from the root.
shift 2
steps=${*:-1 2 3}
PY=${PYTHON:-python}
cd "$(dirname "$0")/.."
source scripts/reference_steps.sh
for s in $steps; do
  case $s in
    1) fresh performer_rope performer_none softmax300 ;;
    4) fresh performer_features ;;
    2) ;;
    3) if [[ -e $records/attention_scaling.json ]]; then
         echo "error: $records/attention_scaling.json exists. Fix: give a new RECORDS (or move" \
           "it aside)." >&2; exit 1
       fi ;;
    *) echo "error: step $s is not one of 1 2 3 4. Fix: name steps 1-4." >&2; exit 2 ;;
  esac
done
for s in $steps; do
  case $s in
    1) for kind in rope none; do
         step "performer_$kind" train $PY train.py --config "configs/performer.py:${kind}" \
           --workdir "$runs/performer_$kind"
         keep "performer_$kind"
       done
       step softmax300 train $PY train.py --config configs/lm.py:rope --config.train.steps=300 \
         --config.train.warmup_steps=30 --config.train.eval_every=50 --workdir "$runs/softmax300"
       keep softmax300 ;;
    2) mkdir -p "$records"
       $PY scripts/plot_curves.py "$runs/performer_rope" "$runs/performer_none" \
         "$runs/softmax300" --labels 'favor + rope,favor (no positions),softmax + rope' \
         --out "$records/performer_validation_loss.png" \
         --title 'Performer LM validation loss (Shakespeare)' ;;
    3) $PY scripts/attention_scaling.py --out "$records/attention_scaling.json" ;;
    4) if step performer_features train $PY train.py --config configs/performer.py:rope,features \
           --workdir "$runs/performer_features"; then
         echo "note: performer_features finished, where docs/performer.md reports that it stops."
       elif compgen -G "$runs/performer_features/nonfinite_step_*.npz" > /dev/null; then
         echo "note: performer_features stopped on a non-finite loss, as docs/performer.md" \
           "reports; keeping it."
       else
         echo "error: performer_features failed otherwise (its output above). Fix: that first." >&2
         exit 1
       fi
       keep performer_features ;;
  esac
done
echo "kept: $records"
