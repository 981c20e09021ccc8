"""Synthetic length-generalization tasks: train at one length, evaluate at 1x, 2x, 4x and 8x it.

  python train.py --config configs/synthetic.py:passkey --workdir runs/passkey_rope
  python train.py --config configs/synthetic.py:copy,alibi --workdir runs/copy_alibi
  python eval.py --workdir runs/passkey_rope      # accuracy per length (and per key depth)

The argument is a task (`passkey`, `associative_recall`, `copy`, `flip_flop`, or RULER's
`niah_multikey`, `niah_multivalue`, `niah_multiquery`, `variable_tracking`, `common_words`)
optionally followed by a position kind (default rope). Rows are generated from a seed (roformer/data/synthetic.py): no
files. Loss and accuracy count the answer tokens only; `sequence_accuracy` is the share of rows
whose whole answer is right (exactly what greedy decoding from the question gets right). The
model is small enough for a run of a few minutes on 2 CPU cores; configs/sweeps/length.py
compares every scheme on every task at five seeds.
"""

from configs import base
from roformer import positions
from roformer.data import synthetic

# Per task: the training length, and the training fields that differ from the shared ones in
# get_config (2 CPU cores: each run trains in a few minutes). Associative recall is learned only
# once an induction circuit forms: with 128 rows a step of 16 tokens (4 pairs, 2 queries) at a
# constant learning rate of 1e-3 and no weight decay, that took 600-1,200 steps; with 32 rows a
# step it stayed at guessing for 12,000 steps, and a decaying or larger rate missed it within
# 1,200-1,400 (docs/length_generalization.md has every setting tried).
LEARNING_RATE = 3e-3  # Every task's but those that set their own below.

TASKS = {
    'passkey': {'seq_len': 64, 'train': {'steps': 400}},
    'associative_recall': {'seq_len': 16, 'train': {
        'steps': 1500, 'batch_size': 128, 'learning_rate': 1e-3, 'weight_decay': 0.0,
        'end_lr_fraction': 1.0}},
    'copy': {'seq_len': 32, 'train': {'steps': 600}},
    # 32 (instruction, bit) pairs. At these settings rope, alibi and path answer every read of
    # the validation rows by step 200-300, so 600 steps leave a margin of 2-3x; none is at 82%
    # at step 600 and 90% at step 1,500 (docs/length_generalization.md). configs/sweeps/frontier.py
    # runs it for every scheme it compares; length.py only when named (length.py:flip_flop).
    'flip_flop': {'seq_len': 64, 'train': {'steps': 600}},
    # RULER (roformer/data/ruler.py) at its defaults: 4 needles, 4 values, 2 queries, 2 chains
    # of 3 hops, 3 common words 4 times each; the length sweep runs them only when named
    # (length.py:niah_multikey, ...). Variable tracking on associative recall's recipe answered
    # every validation row by step 1,000 (seeds 0 and 1), so 2,000 leave a margin of 2x.
    # Multi-key retrieval at 32 tokens with 256 rows a step (one answer token a row) jumped from
    # choosing among the row's values to 0.99-1.00 of the rows right, by steps 1,750-4,750 at
    # seeds 0-2; with 128 rows it stayed there for 4,000 steps at 32 tokens (one seed of two)
    # and 6,000 at 64 (docs/length_generalization.md). 6,000 steps: a margin of a quarter over
    # the latest seed.
    # The other needle tasks are not tuned.
    'niah_multikey': {'seq_len': 32, 'train': {
        'steps': 6000, 'batch_size': 256, 'learning_rate': 1e-3, 'weight_decay': 0.0,
        'end_lr_fraction': 1.0}},
    'niah_multivalue': {'seq_len': 64, 'train': {'steps': 600}},
    'niah_multiquery': {'seq_len': 64, 'train': {'steps': 600}},
    'variable_tracking': {'seq_len': 64, 'train': {
        'steps': 2000, 'batch_size': 128, 'learning_rate': 1e-3, 'weight_decay': 0.0,
        'end_lr_fraction': 1.0}},
    # Rows of 8 x 64 tokens list 497 distinct words.
    'common_words': {'seq_len': 64, 'train': {'steps': 600}, 'data': {'num_symbols': 512}},
}


def train_fields(task: str) -> dict:
  """`config.train` fields of `task` that differ from the shared ones (the sweeps pass these)."""
  return {'checkpoint_every': TASKS[task]['train']['steps'], **TASKS[task]['train']}


def data_fields(task: str) -> dict:
  """`config.data.synthetic` fields of `task` that differ from their defaults (the sweeps pass
  these too)."""
  return dict(TASKS[task].get('data', {}))


def get_config(arg: str = 'passkey'):
  parts = [p for p in (arg or 'passkey').split(',') if p]
  task, kinds = parts[0], parts[1:]
  known = positions.kinds() + positions.combined_kinds()
  if task not in TASKS or len(kinds) > 1 or (kinds and kinds[0] not in known):
    raise ValueError(f'configs/synthetic.py:{arg}: use a task {sorted(TASKS)} optionally '
                     f'followed by one position kind {positions.kinds()} or a combination '
                     f'such as rope+fox.')
  config = base.get_config()
  config.model.type = 'causal_lm'
  config.model.position.kind = kinds[0] if kinds else 'rope'
  config.model.update(num_layers=2, d_model=64, num_heads=4, d_ff=256)
  config.data.update(name=synthetic.PREFIX + task, seq_len=TASKS[task]['seq_len'])
  # The rows' fields (config.data.synthetic: the evaluation seed, rows per evaluation, each
  # task's sizes) keep their defaults (roformer/config_schema.py) but for TASKS' 'data'.
  config.train.update(batch_size=32, learning_rate=LEARNING_RATE, warmup_steps=50, log_every=50,
                      eval_every=200, eval_batches=4)
  config.train.update(train_fields(task))
  config.data.synthetic.update(data_fields(task))
  config.eval.update(length_multipliers=(1, 2, 4, 8), batch_size=32, max_batches=-1)
  return config
