#!/usr/bin/env bash
# Reproduces the README's pretraining and fine-tuning numbers on the embedded data:
#   1. masked-LM pretraining, BERT (learned positions) vs RoFormer (RoPE), same steps;
#   2. the validation-loss plot of both;
#   3. rotten_tomatoes fine-tuned from each pretrained encoder, and from scratch;
#   4. imdb fine-tuned from the RoFormer encoder at 512 and 1024 tokens (test split).
# Usage: bash scripts/mlm_reference.sh [runs_dir] [step ...]   (steps 1-4, default all)
set -euo pipefail
runs=${1:-runs}
shift || true
steps=${*:-1 2 3 4}
for step in $steps; do
  case $step in
    1) for model in bert roformer; do
         python train.py --config "configs/mlm.py:${model}" --workdir "${runs}/mlm_${model}"
         python eval.py --workdir "${runs}/mlm_${model}"
       done ;;
    2) python scripts/plot_curves.py "${runs}/mlm_bert" "${runs}/mlm_roformer" \
         --labels bert,roformer --out docs/mlm_validation_loss.png \
         --title 'Masked-LM validation loss (Shakespeare)' ;;
    3) for model in bert roformer; do
         python train.py --config "configs/classify.py:rotten_tomatoes,${model}" \
           --config.init_from="${runs}/mlm_${model}" --workdir "${runs}/rt_${model}"
         python eval.py --workdir "${runs}/rt_${model}"
       done
       python train.py --config configs/classify.py:rotten_tomatoes --workdir "${runs}/rt_scratch"
       python eval.py --workdir "${runs}/rt_scratch" ;;
    4) for len in 512 1024; do
         python train.py --config configs/classify.py:imdb,roformer \
           --config.init_from="${runs}/mlm_roformer" --config.data.seq_len=${len} \
           --workdir "${runs}/imdb_${len}"
         python eval.py --workdir "${runs}/imdb_${len}" --config.eval.splits='("test",)'
       done ;;
  esac
done
