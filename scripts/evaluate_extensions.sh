#!/usr/bin/env bash
# Evaluates a RoPE causal LM (trained here or imported with scripts/convert_hf.py) at 1x-8x its
# trained length as it is, under every RoPE scaling applied at evaluation (the factor of each
# length: eval.scale_rope_to_length) and under every training-free distance remap, each into
# its own WORKDIR/eval_results.VARIANT.json, which scripts/report.py tables and plots.
#
#   bash scripts/evaluate_extensions.sh WORKDIR [eval.py flags ...]
#   bash scripts/evaluate_extensions.sh runs/imported --config.eval.max_batches=4
#
# VARIANTS (default: all) names some of: plain linear ntk yarn llama3 dynamic rerope
# leaky_rerope self_extend string dca sinks. MULTIPLIERS (default 1,2,4,8) sets the lengths.
# The remaps' windows default to half the trained length (rerope, leaky_rerope, sinks, dca's
# chunk), Self-Extend's neighbour window to a quarter with groups of 8, STRING's shift to a
# half, with STRING's and DCA's local window kept below it (their papers' proportions at 4k-8k;
# roformer/positions/remap.py); pass --config
# overrides after WORKDIR to change them.
set -euo pipefail
workdir=${1:?usage: scripts/evaluate_extensions.sh WORKDIR [eval.py flags ...]}
shift
known="plain linear ntk yarn llama3 dynamic rerope leaky_rerope self_extend string dca sinks"
variants=${VARIANTS:-$known}
for variant in $variants; do  # Every name checked before the first evaluation runs.
  if [[ " $known " != *" $variant "* ]]; then
    echo "error: VARIANTS names $variant, which is unknown. Fix: some of: $known." >&2; exit 2
  fi
done
if [[ ! -d $workdir ]]; then
  echo "error: $workdir is not a directory. Fix: give a workdir made by train.py or" \
    "scripts/convert_hf.py." >&2; exit 1
fi
workdir=$(cd "$workdir" && pwd)  # The script runs from the repository's root.
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
# The trained length and STRING's local window, or one line naming what is wrong with the
# workdir (cli.guard).
read -r trained local_window < <($PY -c "import sys; sys.path.insert(0, '.'); \
from roformer import cli, saved_config; c = cli.guard(saved_config.load)(sys.argv[1]); \
print(c.data.seq_len, c.model.position.rope.remap.local_window)" "$workdir") || exit 1
half=$((trained / 2)) quarter=$((trained / 4))
# STRING's local window must stay below its shift, and DCA's fit with its chunk in the trained
# length: a short model's half is not above the default window, which then takes a quarter.
if ((local_window >= half)); then local_window=$((half / 2)); fi
multipliers=${MULTIPLIERS:-1,2,4,8}
rope=--config.model.position.rope
for variant in $variants; do
  case $variant in
    plain) flags=() out=eval_results.json ;;
    linear|ntk|yarn|llama3|dynamic)
      flags=("$rope.scaling.kind=$variant" --config.eval.scale_rope_to_length=True)
      out=eval_results.rope_$variant.json ;;
    rerope|leaky_rerope|sinks) flags=("$rope.remap.method=$variant" "$rope.remap.window=$half")
      out=eval_results.remap_$variant.json ;;
    self_extend) flags=("$rope.remap.method=self_extend" "$rope.remap.neighbor_window=$quarter")
      out=eval_results.remap_$variant.json ;;
    string) flags=("$rope.remap.method=string" "$rope.remap.shift=$half"
                   "$rope.remap.local_window=$local_window")
      out=eval_results.remap_$variant.json ;;
    dca) flags=("$rope.remap.method=dca" "$rope.remap.chunk_size=$half"
                "$rope.remap.local_window=$local_window")
      out=eval_results.remap_$variant.json ;;
  esac
  echo "=== $variant -> $workdir/$out"
  $PY eval.py --workdir "$workdir" --splits=validation --out "$out" \
    "--config.eval.length_multipliers=$multipliers" ${flags[@]+"${flags[@]}"} "$@"
done
