#!/usr/bin/env bash
# Reproduces the README's Performer numbers: configs/performer.py (300 steps) with RoPE on q/k
# and without positions; softmax attention with RoPE on the same schedule; their validation-loss
# plot; and the step time / memory scaling of softmax vs FAVOR+ attention from L = 512 to 8192.
# Usage: bash scripts/performer_reference.sh [runs_dir]
set -euo pipefail
runs=${1:-runs}
for kind in rope none; do
  python train.py --config "configs/performer.py:${kind}" --workdir "${runs}/performer_${kind}"
done
python train.py --config configs/lm.py:rope --config.train.steps=300 \
  --config.train.warmup_steps=30 --config.train.eval_every=50 --workdir "${runs}/softmax300"
python scripts/plot_curves.py "${runs}/performer_rope" "${runs}/performer_none" "${runs}/softmax300" \
  --labels 'favor + rope,favor (no positions),softmax + rope' \
  --out docs/performer_validation_loss.png --title 'Performer LM validation loss (Shakespeare)'
python scripts/attention_scaling.py --out docs/attention_scaling.json
