#!/usr/bin/env bash
# Reruns docs/hf_checkpoints.md's context-extension workflow end to end and keeps its records:
# trains the small model that stands in for a checkpoint from the Hub, exports it with --to_hf,
# then runs the page's steps 1, 2, 4 and 5 on the import, each command as the page gives it.
#
#   bash scripts/hf_workflow.sh RUNS RECORDS
#   bash scripts/hf_workflow.sh /tmp/hf_runs docs/results/hf_workflow_2026-11-29/records
#
# RUNS (new) holds the runs; RECORDS receives what the page's tables and links read: each run's
# config.json and metrics.jsonl (the stand-in's in stand_in/), the import's hf_config.json and
# eval_*.json files, and steps.json (each step's command, quoted as a shell reads it, and its
# seconds, the commit the script started at and the date). About 16 minutes on 2 CPU cores.
# The page's tables are scripts/extension_table.py's output on
# RECORDS/imported and RECORDS/imported_yarn.
set -euo pipefail
if (($# != 2)); then
  echo "error: give RUNS and RECORDS. Fix: bash scripts/hf_workflow.sh /tmp/hf_runs" \
    "docs/results/hf_workflow_DATE/records" >&2; exit 2
fi
runs=$(realpath -m "$1") records=$(realpath -m "$2")  # The caller's paths; it runs from the root.
if [[ -e $runs ]]; then
  echo "error: $runs exists; every step starts fresh. Fix: give a new RUNS (or move it" \
    "aside)." >&2; exit 1
fi
if [[ -e $records ]]; then
  echo "error: $records exists. Fix: give a new RECORDS (or move it aside)." >&2; exit 1
fi
PY=${PYTHON:-python}
cd "$(dirname "$0")/.."
mkdir -p "$runs"
source scripts/reference_steps.sh  # step workflow NAME COMMAND...: timed, in workflow.steps.tsv.
mixture="{'plays': {'weight': 0.8}, 'keys': {'weight': 0.2, 'name': 'synthetic/passkey'}}"
step workflow train $PY train.py --config configs/lm.py:llama --workdir "$runs/shakespeare-llama" \
  --config.data.tokenizer=bytes
step workflow export $PY scripts/convert_hf.py --to_hf "$runs/hub/shakespeare-llama" \
  --workdir "$runs/shakespeare-llama"
step workflow import $PY scripts/convert_hf.py --from_hf "$runs/hub/shakespeare-llama" \
  --workdir "$runs/imported"
step workflow extensions bash scripts/evaluate_extensions.sh "$runs/imported" \
  --config.eval.max_batches=4
step workflow passkey $PY eval.py --workdir "$runs/imported" --splits=validation --out eval_passkey.json \
  --config.data.mixture="$mixture" --config.data.synthetic.filler=text \
  --config.data.synthetic.eval_examples=32 --config.eval.length_multipliers=1,2,4,8 \
  --config.eval.max_batches=4
step workflow continue $PY train.py --config "configs/continued.py:$runs/imported" \
  --workdir "$runs/imported_yarn" --config.data.seq_len=1024 --config.train.batch_size=2 \
  --config.train.steps=200 --config.train.warmup_steps=20 --config.train.learning_rate=3e-4 \
  --config.model.position.rope.scaling.kind=yarn --config.model.position.rope.scaling.factor=4
step workflow continued_eval $PY eval.py --workdir "$runs/imported_yarn" \
  --config.eval.length_multipliers=1,2 --config.eval.max_batches=4
# Assembled beside RECORDS and renamed into place whole: a cut copy leaves no half-kept records.
partial=$records.partial
rm -rf "$partial"
mkdir -p "$partial/stand_in" "$partial/imported" "$partial/imported_yarn"
cp "$runs"/shakespeare-llama/{config.json,metrics.jsonl} "$partial/stand_in/"
cp "$runs"/imported/{config.json,hf_config.json} "$runs"/imported/eval_*.json "$partial/imported/"
cp "$runs"/imported_yarn/{config.json,metrics.jsonl,eval_results.json} "$partial/imported_yarn/"
$PY - "$runs/workflow.steps.tsv" "$partial/steps.json" "$made_at" <<'PYTHON'
import sys, time
sys.path.insert(0, '.')
from roformer import files
from scripts import keep_run
steps = [{'step': s['phase'], 'seconds': s['seconds'], 'command': s['command']}
         for s in keep_run.read_steps(sys.argv[1], 'workflow')]
files.write_json_atomic(sys.argv[2], {'date': time.strftime('%Y-%m-%d'), 'commit': sys.argv[3],
                                      'steps': steps})
PYTHON
sync
mv "$partial" "$records"
echo "kept: $records (tables: python scripts/extension_table.py $records/imported)"
