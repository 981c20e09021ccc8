"""This codebase's MLM RoFormer against PyTorch's, side by side in one run, in turns.

  pip install torch transformers        # not in requirements.txt
  python scripts/compare_torch.py --preset small --steps 60 --rounds 12 --out small.json
  python scripts/compare_torch.py --preset medium --steps 12 --rounds 6 --out medium.json

Starts two workers, one after the other so their compilation and warm-up do not overlap:
`scripts/benchmark.py --serve` (configs/mlm.py:roformer at the preset, one compiled step per
`--kinds`) and `scripts/benchmark_torch.py --serve` (transformers' RoFormerForMaskedLM). Then
the JAX kinds and PyTorch take turns for `--rounds` rounds, each timing its share of `--steps`
steps while the others wait idle, so that a shared host's changing load reaches both sides
alike. Reports each side's median step and tokens/s, JAX/PyTorch tokens/s per kind and per
round (median and range), and each kind's step time against `none`.
"""

import importlib.util
import json
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# pylint: disable=wrong-import-position
from roformer import cli
from scripts.timing import TORCH_PRESETS, interleave, round_ratios, round_sizes
# pylint: enable=wrong-import-position


class Worker:
  """A benchmark process answering `BENCH <json>` lines (see scripts/benchmark.py serve())."""

  def __init__(self, command: list[str]):
    self.command = command
    self.process = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
    self.names = self._read()['ready']

  def _read(self) -> dict:
    for line in self.process.stdout:
      if line.startswith('BENCH '):
        reply = json.loads(line[len('BENCH '):])
        if 'error' in reply:
          raise RuntimeError(f'{self.command[1]}: {reply["error"]}')
        return reply
    code = self.process.wait()
    raise RuntimeError(f'{" ".join(self.command)} exited with status {code} (its stderr is '
                       'above).')

  def ask(self, command: str) -> dict:
    self.process.stdin.write(command + '\n')
    self.process.stdin.flush()
    return self._read()

  def timer(self, name: str):
    return lambda steps: self.ask(f'time {name} {steps}')['times']

  def close(self) -> None:
    if self.process.poll() is None:
      try:
        self.process.stdin.write('quit\n')
        self.process.stdin.close()
        self.process.wait(timeout=60)
      except (OSError, subprocess.TimeoutExpired):
        self.process.kill()


def summarize(timed: dict, tokens: int) -> dict:
  """Per kind: median step, tokens/s, and against PyTorch and `none` (overall and per round)."""
  out = {}
  torch_rounds = timed['torch']
  torch_step = statistics.median(t for r in torch_rounds for t in r)
  for name, rounds in timed.items():
    step = statistics.median(t for r in rounds for t in r)
    row = {'step_s': step, 'tokens_per_s': tokens / step, 'round_step_s':
           [statistics.median(r) for r in rounds]}
    if name != 'torch':
      # Tokens/s ratio = PyTorch's step over this one's.
      per_round = [1 / x for x in round_ratios(rounds, torch_rounds)]
      row.update(vs_torch=torch_step / step, vs_torch_rounds=per_round)
      if 'none' in timed:
        row.update(vs_none=step / statistics.median(t for r in timed['none'] for t in r),
                   vs_none_rounds=round_ratios(rounds, timed['none']))
    out[name] = row
  return out


def table(summary: dict) -> str:
  lines = ['| side | step (ms) | tokens/s | tokens/s vs PyTorch (rounds: median, range) | step '
           'vs `none` (rounds: median, range) |', '|---' * 5 + '|']
  def spread(value, rounds):
    return (f'**{value:.2f}x** ({statistics.median(rounds):.2f}x, '
            f'{min(rounds):.2f}-{max(rounds):.2f})')
  for name, row in summary.items():
    side = 'PyTorch' if name == 'torch' else f'JAX `{name}`'
    vs_torch = spread(row['vs_torch'], row['vs_torch_rounds']) if 'vs_torch' in row else '-'
    vs_none = '-'
    if 'vs_none' in row and name != 'none':
      vs_none = (f'{row["vs_none"]:.3f}x ({statistics.median(row["vs_none_rounds"]):.3f}x, '
                 f'{min(row["vs_none_rounds"]):.3f}-{max(row["vs_none_rounds"]):.3f})')
    lines.append(f'| {side} | {1e3 * row["step_s"]:.1f} | {row["tokens_per_s"]:,.0f} | '
                 f'{vs_torch} | {vs_none} |')
  return '\n'.join(lines)


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
  parser.add_argument('--preset', choices=TORCH_PRESETS, default='small')
  parser.add_argument('--kinds', default='none,rope', help='JAX position kinds, comma-separated.')
  parser.add_argument('--steps', type=int, default=60, help='Timed steps per side.')
  parser.add_argument('--rounds', type=int, default=12)
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--threads', type=int, default=2, help='PyTorch threads.')
  parser.add_argument('--out', default='')
  args = parser.parse_args(argv)
  kinds = [k for k in args.kinds.split(',') if k]
  try:
    round_sizes(args.steps, args.rounds)
  except ValueError as e:
    parser.error(str(e))
  if 'torch' in kinds or not kinds:
    parser.error(f'--kinds={args.kinds!r}: name JAX position kinds, e.g. none,rope.')
  missing = [m for m in ('torch', 'transformers') if importlib.util.find_spec(m) is None]
  if missing:
    print(f'error: this comparison needs {" and ".join(missing)} (pip install torch '
          'transformers); they are not in requirements.txt.', file=sys.stderr)
    return 2
  workers = []
  try:
    workers.append(Worker([sys.executable, 'scripts/benchmark.py',
                           '--config=configs/mlm.py:roformer', f'--preset={args.preset}',
                           f'--kinds={",".join(kinds)}', f'--warmup={args.warmup}', '--serve']))
    workers.append(Worker([sys.executable, 'scripts/benchmark_torch.py',
                           f'--preset={args.preset}', f'--threads={args.threads}',
                           f'--warmup={args.warmup}', '--serve']))
    timers = {name: w.timer(name) for w in workers for name in w.names}
    timed = interleave(timers, args.steps, args.rounds)
    jax_report, torch_report = (w.ask('report') for w in workers)
  except RuntimeError as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  finally:
    for w in workers:
      w.close()
  tokens = torch_report['tokens']
  summary = summarize(timed, tokens)
  print(f'\n{args.preset}: {tokens} tokens per step; {args.steps} steps per side in '
        f'{args.rounds} rounds, taking turns; {torch_report["framework"]}, '
        f'{torch_report["threads"]} threads\n')
  print(table(summary))
  if args.out:
    result = {'date': time.strftime('%Y-%m-%d'), 'preset': args.preset, 'steps': args.steps,
              'rounds': args.rounds, 'summary': summary, 'times': timed, 'jax': jax_report,
              'torch': torch_report}
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, 'w', encoding='utf-8') as f:
      json.dump(result, f, indent=2)
    print(f'wrote {args.out}')
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
