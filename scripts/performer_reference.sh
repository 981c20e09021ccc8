#!/usr/bin/env bash
# Reproduces the README's Performer numbers: configs/performer.py with RoPE (features rotated in
# the numerator) and without positions, the same 600 steps; their validation-loss plot; and the
# step time / memory scaling of softmax vs FAVOR+ attention from L = 512 to 8192.
# The softmax curve is runs_dir/lm_rope from scripts/lm_reference.sh.
# Usage: bash scripts/performer_reference.sh [runs_dir]
set -euo pipefail
runs=${1:-runs}
for kind in rope none; do
  python train.py --config "configs/performer.py:${kind}" --workdir "${runs}/performer_${kind}"
done
python scripts/plot_curves.py "${runs}/performer_rope" "${runs}/performer_none" "${runs}/lm_rope" \
  --labels 'favor + rope,favor (no positions),softmax + rope' \
  --out docs/performer_validation_loss.png --title 'Performer LM validation loss (Shakespeare)'
python scripts/attention_scaling.py --out docs/attention_scaling.json
