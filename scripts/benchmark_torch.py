"""The PyTorch side of the speed comparison: Hugging Face RoFormerForMaskedLM, same shapes.

  pip install torch transformers        # not in requirements.txt
  python scripts/benchmark_torch.py --preset small [--steps 10] [--threads 2] [--out t.json]
  python scripts/benchmark.py --config configs/mlm.py:roformer --preset small --kinds none,rope
  python scripts/compare_torch.py --preset small     # both sides, taking turns in one run

The model matches `scripts/benchmark.py --preset` on configs/mlm.py:roformer: post-norm
encoder with RoPE, GELU MLP, tied MLM head, dropout 0, AdamW; the batch is random tokens with
15% of positions selected (80/10/10 corruption done on the host, outside the timing, as the
JAX side does it inside its step), loss on the selected ones. Reports the median step time and
tokens/s over `--steps` after `--warmup` steps, in float32 eager mode.
"""

import argparse
import json
import statistics
import sys
import time
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from scripts.timing import PRESETS, TORCH_PRESETS  # pylint: disable=wrong-import-position


def build(preset: str, threads: int):
  """The model, optimizer and batch of `preset`; returns (step, info). step() runs one
  optimizer step and returns the loss tensor."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  if threads:
    torch.set_num_threads(threads)
  p = PRESETS[preset]
  config = transformers.RoFormerConfig(
      vocab_size=p['vocab_size'], embedding_size=p['d_model'], hidden_size=p['d_model'],
      num_hidden_layers=p['num_layers'], num_attention_heads=p['num_heads'],
      intermediate_size=p['d_ff'], hidden_act='gelu', hidden_dropout_prob=0.0,
      attention_probs_dropout_prob=0.0, max_position_embeddings=p['seq_len'],
      type_vocab_size=2, rotary_value=False)
  torch.manual_seed(0)
  model = transformers.RoFormerForMaskedLM(config).train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
  b, length = p['batch_size'], p['seq_len']
  generator = torch.Generator().manual_seed(0)
  tokens = torch.randint(5, p['vocab_size'] - 1, (b, length), generator=generator)
  selected = torch.rand((b, length), generator=generator) < 0.15
  labels = torch.where(selected, tokens, torch.full_like(tokens, -100))
  inputs = torch.where(selected, torch.full_like(tokens, p['vocab_size'] - 1), tokens)

  def step():
    optimizer.zero_grad(set_to_none=True)
    loss = model(input_ids=inputs, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss

  info = {'framework': f'torch {torch.__version__}, transformers {transformers.__version__}',
          'preset': preset, 'threads': torch.get_num_threads(), 'tokens': b * length,
          'parameters': sum(t.numel() for t in model.parameters())}
  return step, info


def time_steps(step, steps: int) -> tuple[list[float], float]:
  times, loss = [], None
  for _ in range(steps):
    start = time.perf_counter()
    loss = step()
    times.append(time.perf_counter() - start)
  return times, float('nan') if loss is None else loss.item()


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--preset', choices=TORCH_PRESETS, default='small')
  parser.add_argument('--steps', type=int, default=10)
  parser.add_argument('--warmup', type=int, default=2)
  parser.add_argument('--threads', type=int, default=0, help='torch threads (0: default).')
  parser.add_argument('--out', default='')
  parser.add_argument('--serve', action='store_true',
                      help='Warm up, then take commands on stdin (the worker of '
                      'scripts/compare_torch.py): `time torch N`, `report`, `quit`.')
  args = parser.parse_args(argv)
  try:
    step, info = build(args.preset, args.threads)
  except ImportError:
    print('error: this benchmark needs torch and transformers (pip install torch '
          'transformers); they are not in requirements.txt.', file=sys.stderr)
    return 2
  time_steps(step, args.warmup)
  if args.serve:
    return serve(step, info)
  times, loss = time_steps(step, args.steps)
  step_s = statistics.median(times)
  result = {**info, 'step_s': step_s, 'tokens_per_s': info['tokens'] / step_s, 'loss': loss,
            'date': time.strftime('%Y-%m-%d')}
  print(json.dumps(result, indent=2))
  if args.out:
    with open(args.out, 'w', encoding='utf-8') as f:
      json.dump(result, f, indent=2)
  return 0


def serve(step, info: dict) -> int:
  """Answers `time torch N` / `report` / `quit` with `BENCH <json>` lines (as
  scripts/benchmark.py --serve does for the JAX side)."""
  def reply(obj):
    print('BENCH ' + json.dumps(obj), flush=True)
  all_times, loss = [], float('nan')
  reply({'ready': ['torch']})
  for line in sys.stdin:
    words = line.split()
    if not words or words[0] == 'quit':
      break
    if words[:2] == ['time', 'torch'] and len(words) == 3:
      times, loss = time_steps(step, int(words[2]))
      all_times.extend(times)
      reply({'times': times})
    elif words[0] == 'report':
      step_s = statistics.median(all_times)
      reply({**info, 'step_s': step_s, 'tokens_per_s': info['tokens'] / step_s, 'loss': loss,
             'steps': len(all_times), 'date': time.strftime('%Y-%m-%d')})
    else:
      reply({'error': f'unknown command {line.strip()!r}'})
  return 0


if __name__ == '__main__':
  sys.exit(main())
