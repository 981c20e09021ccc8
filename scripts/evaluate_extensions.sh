#!/usr/bin/env bash
# Evaluates a RoPE causal LM (trained here or imported with scripts/convert_hf.py) at 1x-8x its
# trained length as it is, under every RoPE scaling applied at evaluation and under every
# training-free distance remap, each into its own WORKDIR/eval_results.VARIANT.json, which
# scripts/extension_table.py tables.
#
#   bash scripts/evaluate_extensions.sh WORKDIR [eval.py flags ...]
#   bash scripts/evaluate_extensions.sh runs/imported --config.eval.max_batches=4
#
# VARIANTS (default: all; names separated by spaces) names some of: plain linear ntk yarn llama3
# dynamic rerope leaky_rerope self_extend string dca sinks. MULTIPLIERS (default 1,2,4,8) sets
# the lengths. TAG=NAME writes eval_results.NAME.json and eval_results.NAME.VARIANT.json
# instead, beside evaluations made before (scripts/extension_table.py --tag NAME tables them).
# A scaling's factor is set at each length (eval.scale_rope_to_length: length / the trained
# length, or a model trained with a scaling keeps its own factor up to the length it reaches);
# a model's own scaling options that another scaling does not read (an imported YaRN's ramp,
# llama3's band) go back to their defaults under that one.
# The remaps are sized as configs/sweeps/passkey_extension.py sizes them, by one rule
# (roformer/positions/remap.py, fitted): windows of half the trained length, DCA's chunk and
# local window and the sinks' 4 tokens and window filling it, STRING's shift at a half with a
# local window of an eighth, and Self-Extend's groups and leaky ReRoPE's k large enough that
# the longest length's distances stay below the trained length. Pass --config overrides after
# WORKDIR to change them: a remap option reaches only the method that reads it, a scaling field
# only the scalings.
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then  # The comment above, as its help.
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0
fi
if (($# < 1)); then
  echo "error: no WORKDIR given. Fix: bash scripts/evaluate_extensions.sh WORKDIR" \
    "[eval.py flags ...] (--help says more)." >&2; exit 2
fi
workdir=$1
shift
# Each of RoPE's scalings and remaps, every one the registries hold (a test keeps them equal:
# each variant below sizes its method's options to the trained length), but LongRoPE, whose
# pair factors are searched per model: a model imported with it is the plain variant.
scalings="linear ntk yarn llama3 dynamic"
remaps="rerope leaky_rerope self_extend string dca sinks"
known="plain $scalings $remaps"
variants=${VARIANTS:-$known}
for variant in $variants; do  # Every name checked before the first evaluation runs.
  if [[ " $known " != *" $variant "* ]]; then
    echo "error: VARIANTS names $variant, which is unknown. Fix: some of, separated by" \
      "spaces: $known." >&2; exit 2
  fi
done
for arg in "$@"; do
  if [[ $arg == --out || $arg == --out=* ]]; then
    echo "error: $arg: the script names each variant's file (eval_results.VARIANT.json). Fix:" \
      "TAG=NAME bash scripts/evaluate_extensions.sh ... writes eval_results.NAME.VARIANT.json" \
      "instead." >&2; exit 2
  fi
done
tag=${TAG:-}
if [[ -n $tag && ! $tag =~ ^[A-Za-z0-9_-]+$ ]]; then
  echo "error: TAG=$tag: a tag is letters, digits, _ and - (it becomes part of each file's" \
    "name). Fix: e.g. TAG=mine." >&2; exit 2
fi
if [[ ! -d $workdir ]]; then
  echo "error: $workdir is not a directory. Fix: give a workdir made by train.py or" \
    "scripts/convert_hf.py." >&2; exit 1
fi
root=$(cd "$(dirname "$0")/.." && pwd)  # The repository; the paths given are the caller's.
PY=${PYTHON:-python}
multipliers=${MULTIPLIERS:-1,2,4,8}
# Each remap method's flags from remap.fitted (METHOD FLAG...) and each scaling's (KIND FLAG...:
# the model's own scaling options that KIND does not read, set back to their defaults), then
# each remap method's options
# (METHOD=OPTION,OPTION: the flags given after WORKDIR reach only the variants that read them);
# or one line naming what is wrong with the workdir or MULTIPLIERS (cli.guard) and exit 1.
sizing_text=$(
  $PY - "$root" "$workdir" "$multipliers" "$variants" <<'PYTHON'
import sys
sys.path.insert(0, sys.argv.pop(1))
from roformer import cli, errors, positions, saved_config
from roformer.positions import remap, scaling

def options(workdir, multipliers, variants):
  c = saved_config.load(workdir)
  layers = positions.layer_kinds(c.model)
  wanted = set(variants.split())
  scalings = wanted & (set(scaling.KINDS) - {'none'})
  remaps = wanted & set(remap.OPTIONS)
  no_rope = not any('rope' in kind.split('+') for kind in layers)
  why = ("RoPE's scalings need RoPE in the position kind" if scalings and no_rope else
         'the remaps need layers of plain rope (not combined with a bias, not xpos)'
         if remaps and 'rope' not in layers else '')
  if why:
    raise errors.ConfigError(
        f'{workdir} is a model with position.kind={c.model.position.kind!r}'
        + (f' (layers {sorted(set(layers))})' if c.model.get('layer_kinds') else '')
        + f': {why}. Fix: VARIANTS=plain' + ('' if no_rope else ' and the scalings')
        + ', or a RoPE run; eval.py evaluates any run.')
  try:
    factors = [int(m) for m in multipliers.split(',')]
  except ValueError:
    factors = []
  if not factors or min(factors) < 1:
    raise errors.ConfigError(f'MULTIPLIERS={multipliers}: not whole numbers of at least 1 '
                             'separated by commas. Fix: e.g. MULTIPLIERS=1,2,4,8.')
  longest = c.data.seq_len * max(factors)
  for method, sized in (remap.fitted(c.data.seq_len, longest) if remaps else {}).items():
    print(method, *(f'--config.model.position.rope.remap.{k}={v}' for k, v in sized.items()))
  own = c.model.position.rope.scaling
  for kind in sorted(scalings):  # The model's own scaling's options that another kind refuses.
    if reset := scaling.switched(own, kind):
      print(kind, *(f'--config.model.position.rope.scaling.{k}={v}' for k, v in reset.items()))
  print(' '.join(f'{m}={",".join(o)}' for m, o in remap.OPTIONS.items() if o))

cli.guard(options)(*sys.argv[1:])
PYTHON
) || exit 1  # The error line is out already.
mapfile -t sizing <<< "$sizing_text"
declare -A fitted reads
for line in "${sizing[@]:0:${#sizing[@]}-1}"; do fitted[${line%% *}]=${line#* }; done
read -r -a method_options <<< "${sizing[-1]}"
for entry in "${method_options[@]}"; do reads[${entry%%=*}]=,${entry#*=},; done
given() {  # given VARIANT: the flags after WORKDIR that VARIANT reads (a remap option only its
  # method's; a scaling field only the scalings').
  local arg name
  for arg in "${@:2}"; do
    if [[ $arg == --config.model.position.rope.remap.* ]]; then
      name=${arg#--config.model.position.rope.remap.}; name=${name%%=*}
      [[ ${reads[$1]:-} == *",$name,"* ]] || continue
    elif [[ $arg == --config.model.position.rope.scaling.* ]]; then
      [[ " $scalings " == *" $1 "* ]] || continue
    fi
    printf '%s\0' "$arg"
  done
}
rope=--config.model.position.rope
prefix=eval_results${tag:+.$tag}
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
for variant in $variants; do
  case $variant in
    plain) flags=() ;;
    linear|ntk|yarn|llama3|dynamic)
      read -r -a flags <<< "${fitted[$variant]:-}"
      flags=("$rope.scaling.kind=$variant" --config.eval.scale_rope_to_length=True
             ${flags[@]+"${flags[@]}"}) ;;
    *) read -r -a flags <<< "${fitted[$variant]}" ;;
  esac
  case $variant in
    plain) out=$prefix.json ;;
    linear|ntk|yarn|llama3|dynamic) out=$prefix.rope_$variant.json ;;
    *) out=$prefix.remap_$variant.json flags=("$rope.remap.method=$variant" "${flags[@]}") ;;
  esac
  echo "=== $variant -> $workdir/$out"
  # eval.py's errors pass through as they come, and are read once it ends: its refusal to
  # replace $out names --out, which this script sets itself.
  mapfile -d '' -t passed < <(given "$variant" "$@")
  if ! { $PY "$root/eval.py" --workdir "$workdir" --splits=validation --out "$out" \
      "--config.eval.length_multipliers=$multipliers" ${flags[@]+"${flags[@]}"} \
      ${passed[@]+"${passed[@]}"} 2>&1 1>&3 3>&- | tee "$errors" >&2; } 3>&1; then
    if grep -q -- '--out=' "$errors"; then
      echo "(evaluate_extensions.sh: to keep $out, TAG=NAME writes eval_results.NAME.VARIANT.json" \
        "instead; --replace replaces it.)" >&2
    fi
    exit 1
  fi
done
echo "table: python $root/scripts/extension_table.py $workdir${tag:+ --tag $tag}"
