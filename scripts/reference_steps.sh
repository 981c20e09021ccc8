# Sourced by the reference scripts, after they set runs (their runs folder), records (where
# kept records go) and PY (the python to run):
#   fresh RUN...             refuses, before anything runs, a run whose workdir or records exist;
#   step RUN PHASE COMMAND...  runs COMMAND from the repository root, timed, noting it in
#                            $runs/steps.tsv (run, phase, start, end, the command as quoted);
#   keep RUN                 keeps $runs/RUN's records and steps in $records/RUN
#                            (scripts/keep_run.py).
fresh() {
  local run
  for run in "$@"; do
    if [[ -e $runs/$run || -e $records/$run ]]; then
      echo "error: $runs/$run or $records/$run exists, and this run starts fresh. Fix: give" \
        "a new runs folder and records folder (or move those aside)." >&2
      exit 1
    fi
  done
}
step() {
  local run=$1 phase=$2 start
  shift 2
  echo "=== $run $phase: $*"
  start=$EPOCHREALTIME
  "$@"
  mkdir -p "$runs"
  printf '%s\t%s\t%s\t%s\t%s\n' "$run" "$phase" "$start" "$EPOCHREALTIME" \
    "$(printf '%q ' "$@")" >> "$runs/steps.tsv"
}
keep() {
  $PY scripts/keep_run.py "$runs/$1" "$records/$1" --steps "$runs/steps.tsv"
}
