"""Benchmark shapes and timing in turns, shared by scripts/benchmark.py, benchmark_torch.py and
compare_torch.py; standard library only, so that the PyTorch worker and the comparison's parent
process do not import JAX."""

import statistics

# Benchmark shapes; scripts/benchmark_torch.py takes the TORCH_PRESETS names.
PRESETS = {
    'small': {'num_layers': 2, 'd_model': 256, 'num_heads': 4, 'd_ff': 1024, 'vocab_size': 8000,
              'seq_len': 128, 'batch_size': 8},
    'medium': {'num_layers': 6, 'd_model': 512, 'num_heads': 8, 'd_ff': 2048,
               'vocab_size': 32000, 'seq_len': 512, 'batch_size': 8},
    # The GPU target: a GPT-2-small-sized decoder (124M parameters with configs/lm.py) in
    # bfloat16 at sequence 2048; no PyTorch counterpart.
    'gpu_125m': {'num_layers': 12, 'd_model': 768, 'num_heads': 12, 'd_ff': 3072,
                 'vocab_size': 50304, 'seq_len': 2048, 'batch_size': 16, 'dtype': 'bfloat16'},
}
TORCH_PRESETS = ('small', 'medium')


def round_sizes(steps: int, rounds: int) -> list[int]:
  """`steps` split into `rounds` near-equal positive parts."""
  if steps < 1:
    raise ValueError(f'--steps={steps} must be a positive number of steps to time.')
  if not 1 <= rounds <= steps:
    raise ValueError(f'--rounds={rounds} must be between 1 and --steps={steps} (0 where a '
                     'script takes it: its default share of the steps).')
  return [steps // rounds + (r < steps % rounds) for r in range(rounds)]


def interleave(timers: dict, steps: int, rounds: int) -> dict[str, list[list[float]]]:
  """Times `steps` steps of every timer (name -> f(n) returning n step times) in `rounds` rounds.

  The timers take turns, the first one rotating each round, so that a change in the machine's
  load during the run reaches all of them alike: on a shared host, timing one after the other
  moves their ratio by more than the differences being measured. Returns name -> the times of
  each round.
  """
  names = list(timers)
  out = {name: [] for name in names}
  for r, size in enumerate(round_sizes(steps, rounds)):
    first = r % len(names)
    for name in names[first:] + names[:first]:
      out[name].append(list(timers[name](size)))
  return out


def round_ratios(rounds_a: list[list[float]], rounds_b: list[list[float]]) -> list[float]:
  """Per round, the median step of a over the median step of b."""
  return [statistics.median(a) / statistics.median(b) for a, b in zip(rounds_a, rounds_b)]
