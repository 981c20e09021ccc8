"""This codebase's training step against transformers', side by side in one run, in turns.

  pip install torch transformers        # not in requirements.txt
  python scripts/compare_torch.py --model causal --preset small --steps 60 --rounds 12
  python scripts/compare_torch.py --model causal --preset medium --steps 12 --rounds 6
  python scripts/compare_torch.py --model mlm --preset small --steps 60 --rounds 12 --out s.json

`--model causal`: configs/lm.py (the causal LM) against GPTNeoXForCausalLM built to the same
shapes and the same parameter count (scripts/benchmark_torch.py says how). `--model mlm`:
configs/mlm.py:roformer against RoFormerForMaskedLM; the JAX side is timed twice per kind, with
its masked-LM head at the selected tokens only (the default: `rope`, `none`) and at every
position as transformers' head is (`config.data.max_predictions=0`: `rope[max_predictions=0]`),
so that the gain from the gathered head and the gain from the step itself are both visible.

Starts two workers, one after the other so their compilation and warm-up do not overlap:
`scripts/benchmark.py --serve` (one compiled step per JAX variant) and
`scripts/benchmark_torch.py --serve`. Both report their parameter counts (trained parameters);
if they differ the comparison stops there. Then the sides take turns for `--rounds` rounds, each
timing its share of `--steps` steps while the others wait idle, so that a shared host's changing
load reaches all alike. Reports each side's median step and tokens/s, JAX/PyTorch tokens/s
(median and range over the rounds), each kind's step time against `none`'s, and MFU: model
FLOPs (roformer/flops.py, the same count for both sides) per second over the float32 matmul
peak that the JAX worker measured in the same run.

The JAX worker keeps the host memory each step frees for the next, as every entry point of this
codebase does (roformer/host_memory.py); PyTorch runs with glibc's malloc as it comes, or, with
`--torch_malloc=reuse`, with the same settings, to show what they are worth to it.
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
from roformer import files
from roformer import host_memory
from roformer import provenance
from scripts.benchmark_torch import check_parameters
from scripts.timing import TORCH_PRESETS, interleave, round_ratios, round_sizes
# pylint: enable=wrong-import-position

# The JAX side of each comparison: its config and extra benchmark.py flags.
JAX_SIDES = {
    'causal': ('configs/lm.py', []),
    'mlm': ('configs/mlm.py:roformer', ['--vary=data.max_predictions=-1,0']),
}


class Worker:
  """A benchmark process answering `BENCH <json>` lines (see scripts/benchmark.py serve())."""

  def __init__(self, command: list[str]):
    self.command = command
    self.process = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
    self.ready = self._read()
    self.names = self.ready['ready']
    self.parameters = self.ready.get('parameters', {})

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


def base_of(name: str) -> str:
  """The `none` run that `name` is compared with: `none` with the same variant suffix."""
  return 'none' + name[len(name.split('[', 1)[0]):]


def summarize(timed: dict, tokens: int, jax_rows: dict | None = None) -> dict:
  """Per side: median step, tokens/s, and against PyTorch and `none` of the same variant
  (overall and per round); with the JAX worker's report rows (name -> row), MFU for every side
  from the JAX rows' model FLOPs per token and the peak measured in the same run."""
  out = {}
  torch_rounds = timed['torch']
  torch_step = statistics.median(t for r in torch_rounds for t in r)
  median = lambda name: statistics.median(t for r in timed[name] for t in r)
  reference = next(iter(jax_rows.values())) if jax_rows else None
  for name, rounds in timed.items():
    step = median(name)
    row = {'step_s': step, 'tokens_per_s': tokens / step, 'round_step_s':
           [statistics.median(r) for r in rounds]}
    if reference:
      source = jax_rows.get(name, reference)  # PyTorch: the same model FLOPs as the JAX side.
      row['mfu'] = source['flops_per_token'] * tokens / step / reference['peak_flops']
    if name != 'torch':
      # Tokens/s ratio = PyTorch's step over this one's.
      per_round = [1 / x for x in round_ratios(rounds, torch_rounds)]
      row.update(vs_torch=torch_step / step, vs_torch_rounds=per_round)
      base = base_of(name)
      if base in timed:
        row.update(vs_none=step / median(base), vs_none_rounds=round_ratios(rounds, timed[base]))
    out[name] = row
  return out


def table(summary: dict) -> str:
  with_mfu = all('mfu' in row for row in summary.values())
  lines = ['| side | step (ms) | tokens/s | tokens/s vs PyTorch (rounds: median, range) | step '
           'vs `none` (rounds: median, range) |' + (' MFU |' if with_mfu else ''),
           '|---' * (6 if with_mfu else 5) + '|']
  def spread(value, rounds):
    return (f'**{value:.2f}x** ({statistics.median(rounds):.2f}x, '
            f'{min(rounds):.2f}-{max(rounds):.2f})')
  for name, row in summary.items():
    side = 'PyTorch' if name == 'torch' else f'JAX `{name}`'
    vs_torch = spread(row['vs_torch'], row['vs_torch_rounds']) if 'vs_torch' in row else '-'
    vs_none = '-'
    if 'vs_none' in row and base_of(name) != name:
      vs_none = (f'{row["vs_none"]:.3f}x ({statistics.median(row["vs_none_rounds"]):.3f}x, '
                 f'{min(row["vs_none_rounds"]):.3f}-{max(row["vs_none_rounds"]):.3f})')
    mfu = f' {100 * row["mfu"]:.1f}% |' if with_mfu else ''
    lines.append(f'| {side} | {1e3 * row["step_s"]:.1f} | {row["tokens_per_s"]:,.0f} | '
                 f'{vs_torch} | {vs_none} |{mfu}')
  return '\n'.join(lines)


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('--model', choices=sorted(JAX_SIDES), default='causal')
  parser.add_argument('--preset', choices=TORCH_PRESETS, default='small')
  parser.add_argument('--kinds', default='none,rope', help='JAX position kinds, comma-separated.')
  parser.add_argument('--steps', type=int, default=60, help='Timed steps per side.')
  parser.add_argument('--rounds', type=int, default=12)
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--threads', type=int, default=2, help='PyTorch threads.')
  parser.add_argument('--torch_malloc', choices=('default', 'reuse'), default='default',
                      help='reuse: give the PyTorch worker the glibc malloc settings this '
                      'codebase\'s entry points use (roformer/host_memory.py), so that both '
                      'sides keep freed memory; default: PyTorch as it comes.')
  parser.add_argument('--out', default='')
  args = parser.parse_args(argv)
  kinds = [k for k in args.kinds.split(',') if k]
  try:
    round_sizes(args.steps, args.rounds)
  except ValueError as e:
    parser.error(str(e))
  if 'torch' in kinds or not kinds:
    parser.error(f'--kinds={args.kinds!r}: name JAX position kinds, e.g. none,rope.')
  why = host_memory.unavailable() if args.torch_malloc == 'reuse' else None
  if why:  # Before the JAX worker compiles: the PyTorch worker would refuse it only after that.
    parser.error(f'--torch_malloc=reuse: {why}. Fix: leave --torch_malloc at default, or unset '
                 f'{host_memory.ENV}.')
  missing = [m for m in ('torch', 'transformers') if importlib.util.find_spec(m) is None]
  if missing:
    print(f'error: this comparison needs {" and ".join(missing)} (pip install torch '
          'transformers); they are not in requirements.txt.', file=sys.stderr)
    return 2
  config, extra = JAX_SIDES[args.model]
  workers = []
  try:
    workers.append(Worker([sys.executable, 'scripts/benchmark.py', f'--config={config}',
                           f'--preset={args.preset}', f'--kinds={",".join(kinds)}',
                           f'--warmup={args.warmup}', *extra, '--serve']))
    workers.append(Worker([sys.executable, 'scripts/benchmark_torch.py',
                           f'--model={args.model}', f'--preset={args.preset}',
                           f'--threads={args.threads}', f'--warmup={args.warmup}',
                           f'--malloc={args.torch_malloc}', '--serve']))
    jax_counts, torch_count = workers[0].parameters, workers[1].parameters['torch']
    print(f'parameters: PyTorch {torch_count:,}; JAX ' + ', '.join(
        f'{name} {n:,}' for name, n in sorted(jax_counts.items())), flush=True)
    refusal = check_parameters(jax_counts, torch_count)
    if refusal:
      raise RuntimeError(refusal)
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
  summary = summarize(timed, tokens, {r['name']: r for r in jax_report['rows']})
  print(f'\n{args.model} {args.preset}: {tokens} tokens per step; {torch_count:,} parameters '
        f'each side; {args.steps} steps per side in {args.rounds} rounds, taking turns; '
        f'{torch_report["model"]} ({torch_report["framework"]}, {torch_report["threads"]} '
        f'threads, {torch_report["attention"]} attention); malloc: JAX '
        f'{jax_report["malloc"]}, PyTorch {torch_report["malloc"]}; MFU against a '
        f'{jax_report["peak_flops"] / 1e9:.0f} GFLOP/s float32 matmul measured in this run\n')
  print(table(summary))
  if args.model == 'mlm':
    print('\n`[max_predictions=0]`: the JAX head at every position, as transformers computes '
          "it (equal work); without it, the head at the selected tokens only.")
  if args.out:
    result = {'date': time.strftime('%Y-%m-%d'), 'commit': provenance.commit(),
              'model': args.model, 'preset': args.preset,
              'steps': args.steps, 'rounds': args.rounds, 'summary': summary, 'times': timed,
              'jax': jax_report, 'torch': torch_report}
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    files.write_json_atomic(args.out, result)
    print(f'wrote {args.out}')
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
