#!/usr/bin/env bash
# The steps of the reference scripts (scripts/*_reference.sh), which source this file. They set
# runs (their runs folder), records (where kept records go) and PY (the python to run) first:
#   fresh RUN...             refuses, before anything runs, a run whose workdir, steps file or
#                            records exist;
#   step RUN PHASE COMMAND...  runs COMMAND from the repository root, timed, noting it in
#                            $runs/RUN.steps.tsv (run, phase, start, end, the arguments), and
#                            returns its status (a run expected to stop: `if step ...`);
#   keep RUN                 keeps $runs/RUN's records and steps in $records/RUN
#                            (scripts/keep_run.py), with the commit the script started at;
#   refuse_records           for a script that writes $records whole (benchmarks): refuses a
#                            $records that exists, or an earlier run's $records.partial (call
#                            it before anything runs);
#   new_records              refuse_records, then makes $records.partial for the script's files
#                            (removed at exit if empty);
#   publish_records          puts $records.partial in its place once every file is written.
made_at=$(PYTHONPATH=. $PY -c "from roformer import provenance; print(provenance.commit())") ||
  made_at=
fresh() {
  local run
  for run in "$@"; do
    if [[ -e $runs/$run || -e $runs/$run.steps.tsv || -e $records/$run ]]; then
      echo "error: $runs/$run, its steps file or $records/$run exists, and this run starts" \
        "fresh. Fix: give a new runs folder and records folder (or move those aside)." >&2
      exit 1
    fi
  done
}
step() {
  local run=$1 phase=$2 start end status=0
  shift 2
  echo "=== $run $phase: $*"
  start=$EPOCHREALTIME
  "$@" || status=$?
  end=$EPOCHREALTIME
  mkdir -p "$runs"
  # The arguments joined by the unit separator; scripts/keep_run.py quotes them for a shell.
  (IFS=$'\x1f'; printf '%s\t%s\t%s\t%s\t%s\n' "$run" "$phase" "${start/,/.}" "${end/,/.}" \
    "$*") >> "$runs/$run.steps.tsv"
  return $status
}
keep() {
  $PY scripts/keep_run.py "$runs/$1" "$records/$1" --steps "$runs/$1.steps.tsv" \
    --commit "$made_at"
}
refuse_records() {
  if [[ -e $records ]]; then
    echo "error: $records exists. Fix: give a new RECORDS (or move it aside)." >&2; exit 1
  fi
  if [[ -e $records.partial ]]; then
    echo "error: $records.partial holds an earlier run's records, cut short. Fix: move it" \
      "aside (or delete it), then run again." >&2; exit 1
  fi
}
new_records() {
  refuse_records
  mkdir -p "$records.partial"
  trap 'rmdir "$records.partial" 2>/dev/null || true' EXIT  # Left only if it holds records.
}
publish_records() {
  sync
  mv "$records.partial" "$records"
  echo "kept: $records"
}
