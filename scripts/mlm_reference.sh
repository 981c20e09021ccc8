#!/usr/bin/env bash
# Reruns docs/mlm_and_finetuning.md's pretraining and fine-tuning comparisons and keeps their
# records, which the page's tables are generated from (scripts/docs_from_records.py). Steps:
#   1. masked-LM pretraining, BERT (learned positions) vs RoFormer (RoPE), same steps;
#   2. the validation-loss plot of both, as RECORDS/mlm_validation_loss.png;
#   3. rotten_tomatoes fine-tuned from each pretrained encoder, and from scratch;
#   4. imdb fine-tuned from the RoFormer encoder at 512 and 1024 tokens (test split).
# Steps 1 and 3 take minutes on 2 CPU cores, step 4 most of an hour; each run's records hold
# its time.
#
#   bash scripts/mlm_reference.sh RUNS RECORDS [step ...]      (steps 1-4, default all)
#   bash scripts/mlm_reference.sh /tmp/mlm_runs docs/results/mlm_DATE/records 1 2 3
#
# RUNS holds the runs (steps 2-4 read step 1's there); RECORDS/RUN receives each run's config,
# metrics, evaluations and timed commands as it ends (scripts/keep_run.py). A run whose workdir
# or records exist is refused before anything runs.
set -euo pipefail
if (($# < 2)); then
  echo "error: give RUNS and RECORDS. Fix: bash scripts/mlm_reference.sh /tmp/mlm_runs" \
    "docs/results/mlm_DATE/records [step ...]" >&2; exit 2
fi
if [[ $2 =~ ^[0-9]+$ ]]; then
  echo "error: RECORDS is $2, a step number. Fix: bash scripts/mlm_reference.sh RUNS RECORDS" \
    "$2 (both folders first)." >&2; exit 2
fi
runs=$(realpath -m "$1") records=$(realpath -m "$2")  # The caller's paths; it runs from the root.
shift 2
steps=${*:-1 2 3 4}
PY=${PYTHON:-python}
cd "$(dirname "$0")/.."
source scripts/reference_steps.sh
for s in $steps; do
  case $s in
    1) fresh mlm_bert mlm_roformer ;;
    2) ;;
    3) fresh rt_bert rt_roformer rt_scratch ;;
    4) fresh imdb_512 imdb_1024 ;;
    *) echo "error: step $s is not one of 1 2 3 4. Fix: name steps 1-4." >&2; exit 2 ;;
  esac
done
for s in $steps; do
  case $s in
    1) for model in bert roformer; do
         step "mlm_$model" train $PY train.py --config "configs/mlm.py:${model}" \
           --workdir "$runs/mlm_$model"
         step "mlm_$model" eval $PY eval.py --workdir "$runs/mlm_$model"
         keep "mlm_$model"
       done ;;
    2) mkdir -p "$records"
       $PY scripts/plot_curves.py "$runs/mlm_bert" "$runs/mlm_roformer" \
         --labels bert,roformer --out "$records/mlm_validation_loss.png" \
         --title 'Masked-LM validation loss (Shakespeare)' ;;
    3) for model in bert roformer; do
         step "rt_$model" train $PY train.py \
           --config "configs/classify.py:rotten_tomatoes,${model}" \
           --config.init_from="$runs/mlm_$model" --workdir "$runs/rt_$model"
         step "rt_$model" eval $PY eval.py --workdir "$runs/rt_$model"
         keep "rt_$model"
       done
       step rt_scratch train $PY train.py --config configs/classify.py:rotten_tomatoes \
         --workdir "$runs/rt_scratch"
       step rt_scratch eval $PY eval.py --workdir "$runs/rt_scratch"
       keep rt_scratch ;;
    4) for len in 512 1024; do
         step "imdb_$len" train $PY train.py --config configs/classify.py:imdb,roformer \
           --config.init_from="$runs/mlm_roformer" --config.data.seq_len=$len \
           --workdir "$runs/imdb_$len"
         step "imdb_$len" eval $PY eval.py --workdir "$runs/imdb_$len" \
           --config.eval.splits='("test",)'
         keep "imdb_$len"
       done ;;
  esac
done
echo "kept: $records"
