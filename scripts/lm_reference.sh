#!/usr/bin/env bash
# Reproduces the README's language-model reference numbers: trains configs/lm.py with RoPE and
# with sinusoidal positions (about 10 minutes each on 2 CPU cores), then evaluates both at 1x, 2x
# and 4x the training length.  Usage: bash scripts/lm_reference.sh [runs_dir]
set -euo pipefail
runs=${1:-runs}
for kind in rope sinusoidal; do
  python train.py --config "configs/lm.py:${kind}" --workdir "${runs}/lm_${kind}"
  python eval.py --workdir "${runs}/lm_${kind}"
done
