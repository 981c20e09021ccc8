"""Every config field, declared once: its default, its type and range, and which runs read it.

`default_config()` is the config with every field at its default (configs/base.py returns it; the
task configs in configs/ change fields of it). `check(config)` holds every field to its spec
(roformer/specs.py) before anything is built: the type, the range, finiteness for every number; a
field declared nowhere is an error (a typo in a config file, a new field added without a spec), and
so is a declared field that is missing. `saved_config.migrate(saved)` brings a config saved by an
earlier version up to date: a field added since then takes its default, which is the behaviour the
code had before the field existed (a new field's default keeps that behaviour, e.g.
`model.scan_layers=False`: the loop).

Fields that only some runs read (a masked LM's masking, a classifier's labels, translation's beam, a
synthetic task's rows) declare their `reader`; `config_checks.unread_changes(config)` lists those
changed from their defaults in a run that does not read them, so that such a setting is refused
rather than silently ignored, as position-scheme options of another kind are. The position schemes
declare their options in their own classes (`options`), so `config.model.position` comes from the
registry. The checks that relate several fields (d_model divisible by num_heads, warmup_steps <=
steps, ...) are in roformer/resolve.py.
"""

import copy
import dataclasses
from typing import Callable

import ml_collections

from roformer import attention
from roformer import attention_options
from roformer import blocks
from roformer import latent_attention
from roformer import layers
from roformer import metrics
from roformer import model_types
from roformer import models
from roformer import moe
from roformer import positions
from roformer import sharding
from roformer import stack
from roformer.data import corpus
from roformer.data import mixture
from roformer.data import synthetic
from roformer.data import tokenizer as tokenizer_lib
from roformer.specs import (Bool, Float, Int, Map, Names, Record, Seq, Str, check_tree,
                            defaults, kept)

_STEPS = 2**31 - 1  # Step counters are int32.
_BIG = 2**24  # Sizes and counts beyond any model this project trains on one host.


@dataclasses.dataclass(frozen=True)
class Reader:
  """The runs that read a group of fields: `what` names them in messages, `fix` says how to
  get such a run."""
  what: str
  reads: Callable[[ml_collections.ConfigDict], bool]
  fix: str


def _owned(group: str) -> Reader:
  """The runs of the model type that owns the field group `group` (roformer/model_types.py)."""
  t = model_types.owning(group)
  return Reader(f'{t.about} (model.type={t.name!r})', lambda c: c.model.type == t.name,
                f'start from {t.start}')


MLM = _owned('masking')
CLASSIFIER = _owned('labels and metrics')
TRANSLATION = _owned('language pairs and decoding')
FILES = Reader(f"runs on your own files (data.name='{corpus.NAME}')",
               lambda c: corpus.is_files(c.data), f'set --config.data.name={corpus.NAME}')
def _types_with(flag: str, what: str, text: bool = True) -> Reader:
  """The runs of the model types that declare `flag` (roformer/model_types.py), `what` in
  words: on text alone (not a synthetic task) where `text`."""
  types = [t for t in model_types.TYPES.values() if getattr(t, flag)]
  names = ' or '.join(repr(t.name) for t in types)
  if not text:
    return Reader(f'{what} (model.type {names})', lambda c: c.model.type in {
        t.name for t in types}, 'start from ' + ' or '.join(t.start for t in types))
  return Reader(f'{what} on text (model.type {names}, not a synthetic task)',
                lambda c: c.model.type in {t.name for t in types} and not synthetic.task_name(
                    c.data), 'start from ' + ' or '.join(t.start for t in types))


def _not_owned(group: str, what: str) -> Reader:
  """The runs of every model type but the one that owns the field group `group`."""
  owner = model_types.owning(group)
  others = [t for t in model_types.TYPES.values() if t is not owner]
  return Reader(f'{what} (model.type not {owner.name!r})', lambda c: c.model.type != owner.name,
                'start from ' + ' or '.join(t.start for t in others))


MOE = Reader("models with a mixture of experts (model.mlp='moe')",
             lambda c: c.model.mlp == 'moe', 'set --config.model.mlp=moe')
MLA = Reader('models with latent attention (model.mla.kv_rank > 0)',
             lambda c: c.model.mla.kv_rank > 0, 'set --config.model.mla.kv_rank')
TEXT_LM = _types_with('documents', 'language models')
TEXT_CAUSAL_LM = _types_with('decoder_only', 'causal LMs')
CAUSAL_LM = _types_with('decoder_only', 'causal LMs', text=False)
TEXT = Reader('runs on text (data.name a dataset or your files, not a synthetic task, whose '
              'vocabulary follows from the task)', lambda c: not synthetic.task_name(c.data),
              'train on text (data.name) instead of a synthetic task')
SYNTHETIC = Reader(f"synthetic tasks (data.name='{synthetic.PREFIX}TASK', or a source of "
                   'data.mixture)',
                   lambda c: synthetic.task_name(c.data) is not None or (
                       mixture.has_synthetic(c.data) and TEXT_LM.reads(c)),
                   'start from configs/synthetic.py')


def _synthetic_tasks(c) -> set[str]:
  """The synthetic tasks whose rows the run reads: its own, or its mixture's sources'."""
  task = synthetic.task_name(c.data)
  if task:
    return {task}
  if not TEXT_LM.reads(c):
    return set()
  return {synthetic.task_name(mixture.member_config(c.data, entry))
          for entry in mixture.entries(c.data).values()} - {None}


def _tasks(*tasks: str) -> Reader:
  """The runs whose rows come from one of `tasks` (a field of config.data.synthetic that the
  others never read)."""
  return Reader(f"the synthetic task{'s' if len(tasks) > 1 else ''} {', '.join(tasks)}",
                lambda c: bool(_synthetic_tasks(c) & set(tasks)),
                f'train one of them (configs/synthetic.py:{tasks[0]})')


def _key_digits() -> Reader:
  """The runs that read config.data.synthetic.key_digits: passkey's key, and the values of
  RULER's tasks in text (with the task's own words, a value is one word)."""
  ruler_tasks = set(synthetic.TEXT_TASKS) - {'passkey'}
  return Reader(
      "the synthetic task passkey, and RULER's tasks with filler='text'",
      lambda c: 'passkey' in _synthetic_tasks(c) or (
          c.data.synthetic.filler == 'text' and bool(_synthetic_tasks(c) & ruler_tasks)),
      'train passkey (configs/synthetic.py:passkey), or give a RULER task '
      '--config.data.synthetic.filler=text')


def _attention_fields() -> dict:
  """config.model.attention's specs, each kind's and switch's own fields read only by the
  runs that have it on (attention.num_features without FAVOR+ would change nothing)."""
  out = {}
  for name, spec in attention_options.SPECS.items():
    found = attention_options.owners(name)
    out[name] = spec
    if found:
      out[name] = copy.copy(spec)
      out[name].reader = Reader(
          'runs with ' + ' or '.join(words for words, _ in found),
          lambda c, name=name: attention_options.reads(c.model.attention, name),
          f'train with --config.model.{found[0][0]}')
  return out


def _read_by(reader: Reader, tree: dict) -> dict:
  """`tree` (specs and groups of specs) with every spec marked as read by `reader` only (a
  spec marked already, by a narrower reader inside the group, keeps its own)."""
  out = {}
  for key, spec in tree.items():
    if isinstance(spec, dict):
      out[key] = _read_by(reader, spec)
    else:
      out[key] = copy.copy(spec)
      out[key].reader = spec.reader or reader
  return out


# What a trained run's fields decide, for `_kept`: the occasions that read a saved run are
# roformer/saved_config.py's (resume, continue, evaluate).
_ALL = ('resume', 'continue', 'evaluate')
_TOKENIZER = 'the tokenizer and the texts the weights were trained on'
_PIPELINE = "the data pipeline's saved position counts batches of this exact stream"
_WORDS = 'the synthetic vocabulary laid out from the task sizes: which word each id names'


def taken_with_the_tokenizer() -> tuple[str, ...]:
  """The fields of config.data that a run started from another (init_from) takes from it with
  its tokenizer: those held on a continuation for the tokenizer's sake."""
  return tuple(field.removeprefix('data.') for field, when, why in fixed_fields()
               if why == _TOKENIZER and 'continue' in when)


def fixed_fields() -> list[tuple[str, tuple, str]]:
  """(dotted field, occasions, why) of every field declared fixed on some occasion."""
  out = []

  def walk(tree, name):
    for key, spec in tree.items():
      if isinstance(spec, dict):
        walk(spec, f'{name}{key}.')
      elif spec.fixed_on:
        out.append((f'{name}{key}', spec.fixed_on, spec.fixed_because))
  walk(schema(), '')
  return out


def _with_mixture(data: dict) -> dict:
  """The data group with data.mixture after data.token_cache: a dict of entries, each its
  weight and the source fields it sets over config.data's (held to the same specs as those,
  without their defaults: an entry sets only what it names)."""
  fields = {'weight': Float(0, 1e6, min_open=True, default=1.0)}
  for key in mixture.ENTRY_FIELDS:
    spec = copy.copy(data[key])
    spec.reader = None  # Read whenever the entry is.
    fields[key] = spec
  entry = Record(fields, required=('weight',))
  out = {}
  for key, spec in data.items():
    out[key] = spec
    if key == 'token_cache':
      out.update(_read_by(TEXT_LM, {'mixture': kept(('resume',), _PIPELINE,
                                                     Map(entry, default={}))}))
  return out


def schema() -> dict:
  """{field: spec or group}, built on each call: position schemes may register later."""
  return {
      'seed': kept(('resume',), "the run's data order and dropout keys",
                    Int(0, 2**31 - 2, default=0)),  # seed + 1 seeds dropout.
      # A workdir to start from: a masked-LM run for a classifier (its encoder), or a causal-LM
      # run to continue (every parameter; what may change: roformer/saved_config.py). '': none.
      'init_from': kept(('resume',), 'the weights the run started from', Str(default='')),
      'data': _with_mixture({
          # An embedded dataset (shakespeare, bible_en_de, rotten_tomatoes, imdb), a synthetic
          # task (synthetic/TASK), your own files ('files': data.files) or any TFDS dataset name
          # (e.g. 'lm1b').
          'name': kept(('resume', 'evaluate'), _TOKENIZER, Str(nonempty=True, default='shakespeare')),
          'data_dir': Str(default=''),  # '': $ROFORMER_DATA_DIR or ~/.cache/roformer/tfds.
          # '' where the task reads other features.
          'text_key': kept(('resume', 'evaluate'), _TOKENIZER, Str(default='text')),
          # Your own documents (roformer/data/corpus.py): comma-separated globs of .txt and .md
          # (one document per file), .jsonl/.jsonl.gz/.json.gz (text under data.text_key) and
          # .parquet files, converted once into the cache under data.data_dir.
          **_read_by(FILES, kept(('resume',), _PIPELINE, {
              'files': Str(default=''),
              # Globs of their own for validation and test; both '': carved out of data.files
              # by a hash of each document's text, in these fractions.
              'validation_files': Str(default=''),
              'test_files': Str(default=''),
              'validation_fraction': Float(0, 0.5, default=0.05),
              'test_fraction': Float(0, 0.5, default=0.05),
              'skip_bad_documents': Bool(default=False),  # Documents that are not UTF-8.
          })),
          # Optional renames, e.g. {'validation': 'test'} for datasets without a validation split.
          'splits': kept(('resume',), _PIPELINE, Map(Str(nonempty=True), default={})),
          # 'sentencepiece' (trained on the train split), 'bytes' (256 ids, nothing trained) or
          # the path of a SentencePiece .model or a Hugging Face tokenizer.json
          # (roformer/data/vocabularies.py).
          # A run started from another (init_from) takes that run's tokenizer whole: its ids are
          # the rows of the weights taken over (resolve.check_init_from).
          **_read_by(TEXT, {'tokenizer': kept(('resume', 'continue', 'evaluate'), _TOKENIZER,
                                              Str(nonempty=True, default='sentencepiece'))}),
          # The size of a tokenizer trained on the data (bytes and given files have their own).
          'vocab_size': kept(('resume', 'continue', 'evaluate'), _TOKENIZER,
                             Int(16, 2**20, default=4096)),
          # The trained tokenizer reads at most this many documents, taken evenly over the train
          # split (0: every one), and at most this many characters of them.
          **kept(('resume', 'continue', 'evaluate'), _TOKENIZER, {
              'tokenizer_documents': Int(0, 2**31 - 1, default=tokenizer_lib.EVERY_DOCUMENT),
              'tokenizer_chars': Int(1000, 2**31 - 1, default=tokenizer_lib.MAX_CHARS)}),
          # Tokenize each split once into the cache (ids in the smallest type the vocabulary
          # fits, roformer/data/tokens.py) instead of encoding the text again every epoch.
          **_read_by(TEXT_LM, {'token_cache': Bool(default=False)}),
          # (data.mixture follows here, `_with_mixture`: several sources trained on together,
          # roformer/data/mixture.py. NAME -> {'weight': its share of the training rows, and any
          # of name, text_key, splits and the files' fields that it sets over these}, e.g.
          # {'plays': {'weight': 0.8}, 'keys': {'weight': 0.2, 'name': 'synthetic/passkey'}};
          # each source is evaluated on its own. {}: the one source these fields name.)
          'seq_len': kept(('resume',), _PIPELINE, Int(1, 2**20, default=256)),
          # Chunks shuffled in a window so that one batch mixes documents.
          'shuffle_window': kept(('resume',), _PIPELINE, Int(0, _BIG, default=512)),
          **_read_by(MLM, {
              # BERT's masking: this share of tokens is selected; of those, mask_fraction become
              # [MASK], random_fraction a random token, the rest stay.
              **kept(('resume',), _PIPELINE, {
                  'mask_rate': Float(0, 1, min_open=True, default=0.15),
                  'mask_fraction': Float(0, 1, default=0.8),
                  'random_fraction': Float(0, 1, default=0.1)}),
              # Positions that get output logits: -1 as many as the selection can need (per
              # batch shard, from the binomial tail; the selections beyond, an expected 1e-6 of
              # them, stay unmasked), 0 every position, N at most N per row (BERT's
              # max_predictions_per_seq).
              'max_predictions': Int(-1, _BIG, default=-1),
          }),
          # The features a classifier reads (one text or a pair, and the label) and those a
          # translation model reads; empty where the run reads plain text (data.text_key), which
          # is how the data pipeline tells what to read.
          **_read_by(CLASSIFIER, kept(('resume', 'evaluate'), _TOKENIZER, {
              'text_keys': Seq(Str(nonempty=True), 0, 2, default=()),
              'label_key': Str(default=''),
          })),
          **_read_by(TRANSLATION, {
              **kept(('resume', 'evaluate'), _TOKENIZER, {
                  'source_key': Str(default=''),
                  'target_key': Str(default='')}),
              # Translate target -> source.
              'reverse': kept(('resume', 'evaluate'), 'the translation direction the weights '
                               'were trained for', Bool(default=False)),
          }),
          'synthetic': _read_by(SYNTHETIC, {
              # Evaluation rows (the same for every run); training rows add config.seed.
              'seed': Int(0, 2**31 - 1, default=0),
              'eval_examples': Int(1, 10**9, default=256),  # Rows per split and length.
              # passkey: digits of the key; RULER's tasks in text: of a value.
              **_read_by(_key_digits(), {'key_digits': Int(1, 10, default=5)}),
              # passkey and RULER's tasks: what hides the needles: the task's own few
              # sentences ('words'), or, as a source of a mixture, config.data.name's text in the
              # run's tokenizer ('text': roformer/data/passkey_text.py, ruler_text.py).
              'filler': Str(('words', 'text'), default='words'),
              # passkey: accuracy reported per band of the key's depth.
              **_read_by(_tasks(*synthetic.DEPTH_TASKS), {'depth_buckets': Int(1, 100, default=5)}),
              # associative_recall: distinct keys (pairs fill the row: rows of 8x the training
              # length need as many keys as they hold pairs), values, queries per row.
              **kept(_ALL, _WORDS, {
                  'num_keys': Int(1, 100_000, default=128),
                  'num_values': Int(2, 100_000, default=16)}),
              **_read_by(_tasks('associative_recall'), {'num_queries': Int(1, 1000, default=2)}),
              'num_symbols': kept(_ALL, _WORDS, Int(2, 100_000, default=128)),  # copy: alphabet.
              **_read_by(_tasks('copy'), {
                  # copy: fewest symbols (the most is what fits the row).
                  'min_length': Int(1, 100_000, default=1),
                  # copy: the second half reversed (the answer each row asks for).
                  'reverse': kept(('resume', 'evaluate'), 'the answer a row asks for',
                                   Bool(default=False))}),
              # flip_flop: the probability of an `ignore` instruction (writes and reads share
              # the rest alike); the paper's FFL(0.8).
              **_read_by(_tasks('flip_flop'), {
                  'flip_flop_ignore': Float(0, 1, max_open=True, default=0.8)}),
              # RULER (roformer/data/ruler.py): needles of distinct keys (niah_multikey,
              # niah_multiquery), values of the one key (niah_multivalue), keys asked
              # (niah_multiquery), variable-tracking chains and hops per chain, common words
              # and how often each appears (common_words; every other word appears once).
              **_read_by(_tasks('niah_multikey', 'niah_multiquery'), {
                  'needles': Int(1, 10_000, default=4)}),
              **_read_by(_tasks('niah_multivalue'), {'needle_values': Int(1, 10_000, default=4)}),
              **_read_by(_tasks('niah_multiquery'), {
                  'needle_queries': Int(1, 10_000, default=2)}),
              **_read_by(_tasks('variable_tracking'), {'chains': Int(1, 1000, default=2),
                                                      'hops': Int(1, 1000, default=3)}),
              **_read_by(_tasks('common_words'), {'common_words': Int(1, 10_000, default=3),
                                                 'common_count': Int(2, 10_000, default=4)}),
              # The asked needle's depth in [0, 1] (-1: uniform at random, like the others).
              'needle_depth': Float(-1, 1, default=-1.0),
          }),
      }),
      'model': {
          'type': Str(choices=lambda: models.MODELS, default=model_types.DEFAULT),
          'vocab_size': Int(1, _BIG, default=4096),  # Set from the tokenizer.
          'num_layers': Int(1, 1024, default=4),
          'd_model': Int(1, 2**16, default=256),
          'num_heads': Int(1, 1024, default=4),
          # Each head's width; 0: d_model / num_heads. Set, the attention's inner width is
          # num_heads * head_dim, projected back to d_model (Qwen3, Gemma, Mistral NeMo).
          'head_dim': Int(0, 4096, default=0),
          'd_ff': Int(1, 2**18, default=1024),
          'dropout': Float(0, 1, max_open=True, default=0.0),
          # Activations; parameters, optimizer state and statistics stay float32.
          'dtype': Str(('float32', 'bfloat16', 'float16'), default='float32'),
          # Recompute blocks in the backward pass: 'none', 'full', 'dots', 'dots_no_batch'.
          'remat': Str(choices=lambda: stack.REMAT_POLICIES, default='none'),
          # Keep the blocks' parameters stacked and run the stack as one lax.scan (a period
          # of blocks compiled, whatever the depth; the same outputs, gradients and
          # checkpoints as the loop: roformer/scanned.py). Decoding runs layer by layer.
          'scan_layers': Bool(default=False),
          # The hand-written backward passes (roformer/autodiff.py) where they are kept; False:
          # autodiff throughout, which forward mode (jax.jvp, Hessian-vector products) needs.
          'custom_gradients': Bool(default=True),
          # 'auto': cuDNN flash attention on GPU in bf16, XLA's on other accelerators, einsum on
          # CPU (and for Shaw). Or force 'einsum' (every scheme), 'xla' or 'cudnn'.
          'attention_impl': Str(attention.IMPLEMENTATIONS, default='auto'),
          # Causal LM: the output layer and its loss this many sequence positions (of every
          # row) at a time (roformer/losses.py), never the whole [tokens, vocabulary] logits;
          # 0, or a chunk as long as the row or longer: all at once (tasks.chunks).
          'loss_chunk': Int(0, 2**20, default=32),
          # Causal self-attention (einsum path, no value term): queries in blocks of about this
          # many rows, each attending only to keys up to its last row, so blocks above the
          # diagonal are never computed (attention.causal_block_attention); 0: the whole matrix.
          'causal_block': Int(0, 2**20, default=128),
          # The norm before each residual branch, 'post' (BERT, HF RoFormer), 'sandwich'
          # (before each branch and on its output: Gemma 2 and 3) or 'output' (on each branch's
          # output alone: OLMo 2 and 3).
          'norm': Str(blocks.PLACEMENTS, default='pre'),
          # The block's components (roformer/layers.py, roformer/blocks.py); the defaults are
          # the classic block, configs/lm.py:llama sets Llama's. The norm: 'layer_norm',
          # 'layer_norm_unbiased' (MPT's: no bias), 'layer_norm_nonparametric' (OLMo 1's: no
          # scale and no bias) or 'rms_norm' (eps: layer_norm_eps).
          'normalization': Str(choices=lambda: layers.NORMS, default='layer_norm'),
          # The MLP: 'plain' down(act(up x)), 'gated' down(act(gate x) * up x) (SwiGLU with
          # activation 'silu', GeGLU with 'gelu'), or 'moe', a mixture of gated experts of
          # width d_ff (roformer/moe.py), with its options:
          'mlp': Str(choices=lambda: layers.MLPS, default='plain'),
          'moe': _read_by(MOE, moe.FIELDS),
          # MLP activation: 'gelu_tanh', 'gelu' (exact erf), 'relu', 'silu', 'relu_squared'
          # (Primer's; Nemotron, Arcee).
          'activation': Str(choices=lambda: layers.ACTIVATIONS, default='gelu_tanh'),
          'layer_norm_eps': Float(0, 1, min_open=True, default=1e-6),
          # Key/value heads shared by the query heads (grouped-query attention; 1: multi-query);
          # 0: one per query head. The key/value cache keeps this many heads.
          'num_kv_heads': Int(0, 1024, default=0),
          # Multi-head latent attention (DeepSeek-V2 and V3; roformer/latent_attention.py): keys
          # and values from a latent kv_rank wide, RoPE on rope_dim key dimensions every head
          # shares; kv_rank 0: the q/k/v projection.
          'mla': {**latent_attention.FIELDS, **_read_by(MLA, latent_attention.LATENT_FIELDS)},
          # Which of a block's dense layers have a bias: 'all' (the classic block, GPT-NeoX),
          # 'attention' (q, k, v and output), 'qkv' (Qwen2), 'mlp' (GPT-J) or 'none' (Llama,
          # Mistral).
          'biases': Str(choices=lambda: layers.BIASES, default='all'),
          # The residual branches: 'sequential', 'parallel' (GPT-NeoX: x + attn(norm_1 x) +
          # mlp(norm_2 x)) or 'parallel_shared' (Phi-2, GPT-J: x + attn(norm x) + mlp(norm x)).
          'residual': Str(blocks.RESIDUALS, default='sequential'),
          # Each residual branch's output times this before its sum (Granite's
          # residual_multiplier); 1: unscaled.
          'residual_multiplier': Float(0, 1e6, min_open=True, default=1.0),
          # The output layer: the embedding transposed (True), or a matrix of its own.
          'tie_embeddings': Bool(default=True),
          # A bias of the causal LM's output layer (Phi-1 and 2, GPT-J); the masked LM's has one
          # always.
          **_read_by(CAUSAL_LM, {'output_bias': Bool(default=False)}),
          # The token embeddings times this at the input, not at the output (Gemma:
          # sqrt(d_model)); 1: unscaled.
          'embedding_multiplier': Float(0, 1e6, min_open=True, default=1.0),
          # A norm (model.normalization) of the token embeddings before the first block and any
          # absolute position (BLOOM's word_embeddings_layernorm); a post-norm block has its own.
          'embedding_norm': Bool(default=False),
          **_read_by(_not_owned('labels and metrics', 'models with outputs over the vocabulary'),
                     {  # > 0: the output logits l become c tanh(l / c) (Gemma 2: 30); 0: not.
                         'logits_softcap': Float(0, 1e6, default=0.0),
                         # The output logits times this, before any bias and cap (Cohere's
                         # logit_scale: 0.0625 in Command R); 1: unscaled.
                         'logits_multiplier': Float(0, 1e6, min_open=True, default=1.0)}),
          # How weights are drawn: 'classic' (T5's: N(0, 1) embedding read out at
          # 1/sqrt(d_model), dense layers N(0, 1/fan_in)) or 'normal' (GPT-2, GPT-NeoX, Llama:
          # every weight N(0, init_std^2), the output layer unscaled); roformer/layers.py.
          'init': Str(choices=lambda: layers.INITS, default='classic'),
          'init_std': Float(0, 10, min_open=True, default=0.02),
          'type_vocab_size': Int(0, 1024, default=0),  # > 0: token types (sentence A/B), BERT.
          'position': positions.field_specs(),  # The kind and every kind's own options.
          # Each layer's position kind, cycled over the layers, in place of position.kind
          # (which is then unused): three RoPE layers then one without positions is Llama 4's
          # iRoPE (docs/positions.md). Empty: every layer position.kind. Causal LMs.
          'layer_kinds': Seq(Str(nonempty=True), default=()),
          # Sliding-window attention per layer, cycled over the layers: layer i's query sees
          # the last layer_windows[i % n] keys (itself included); 0: the whole causal context.
          # E.g. (128, 0) alternates windowed and global layers. Causal LMs.
          'layer_windows': Seq(Int(0, 2**24), default=()),
          # Chunked attention per layer (Llama 4's local layers), cycled over the layers: layer
          # i's query at position p sees the keys of its own chunk, positions with the same
          # p // layer_chunks[i % n], up to itself; 0: no chunks. Causal LMs.
          'layer_chunks': Seq(Int(0, 2**24), default=()),
          # RoPE's base per layer, cycled over the layers, in place of position.rope.base:
          # Gemma 3 uses 10,000 on its windowed layers and 1,000,000 on its global ones
          # (configs/lm.py:gemma3). Empty: every layer position.rope.base.
          'layer_rope_bases': Seq(Float(1, 1e12, min_open=True), default=()),
          'attention': _attention_fields(),  # roformer/attention_options/
          **_read_by(CLASSIFIER, {
              'num_classes': Int(1, 2**20, default=2),  # 1: regression (squared error).
              'pooling': Str(models.POOLINGS, default='first'),
          }),
      },
      'train': {
          # Global, across all devices and processes.
          'batch_size': kept(('resume',), _PIPELINE, Int(1, _BIG, default=8)),
          'grad_accum_steps': Int(1, 2**16, default=1),  # Micro-batches per step.
          'steps': Int(1, _STEPS, default=600),
          'learning_rate': Float(0, min_open=True, default=1e-3),
          'warmup_steps': Int(0, _STEPS, default=60),
          'schedule': Str(('cosine', 'rsqrt', 'wsd'), default='cosine'),
          'end_lr_fraction': Float(0, 1, default=0.1),  # Of the peak, at the last step.
          'decay_steps': Int(0, _STEPS, default=0),  # 'wsd' only: the final decay's steps.
          'weight_decay': Float(0, default=0.1),
          'b1': Float(0, 1, max_open=True, default=0.9),
          'b2': Float(0, 1, max_open=True, default=0.98),
          'grad_clip': Float(0, min_open=True, default=1.0),  # Global norm.
          'label_smoothing': Float(0, 1, max_open=True, default=0.0),
          'log_every': Int(1, _STEPS, default=25),
          'eval_every': Int(1, _STEPS, default=100),
          'eval_batches': Int(1, _STEPS, also=(-1,), default=-1),  # -1: the whole split.
          # Compile the evaluation passes in a background thread while training runs
          # (roformer/compile_ahead.py): the same programs, off the critical path. 'auto': on
          # a GPU or TPU, whose host cores are free while the device trains; not on the CPU,
          # whose cores train.
          'compile_ahead': Str(('auto', 'on', 'off'), default='auto'),
          'checkpoint_every': Int(1, _STEPS, default=200),
          # After SIGTERM/SIGINT: save and exit within this, else exit 1; 0: no limit.
          'grace_period_s': Float(0, 10**7, default=60),
          # A non-finite loss or gradient: 'stop' (keep the last checkpoint) or 'skip' (drop
          # that update, counted as skipped_steps).
          'on_nonfinite': Str(('stop', 'skip'), default='stop'),
          # Training positions other than 0, 1, ...: each sampler's own fields (randomized
          # positions, PoSE, random float sampling), declared in roformer/positions/.
          **positions.training.options(),
          'max_to_keep': Int(1, 10**6, default=3),  # Checkpoints kept (the best one apart).
      },
      'eval': {
          'length_multipliers': Seq(Int(1, 1024), 1, default=(1, 2, 4)),  # x data.seq_len.
          'batch_size': Int(1, _BIG, default=8),
          'max_batches': Int(1, _STEPS, also=(-1,), default=-1),  # -1: the whole split.
          # eval.py with RoPE scaling: at each length L, rope.scaling.factor = L / the trained
          # length (at least 1), instead of one fixed factor for every length; for a model
          # trained with a scaling, L / its original_length (at least its own factor).
          'scale_rope_to_length': Bool(default=False),
          # Loss per bucket of this many positions in eval_results.json (0: data.seq_len / 4).
          'position_bucket': Int(0, 2**20, default=0),
          **_read_by(TEXT_CAUSAL_LM, {
              # 'windows': each evaluation length's rows cut one after the other, a token's
              # context whatever precedes it in its row. 'sliding': rows every `stride` tokens,
              # each token scored once with at least L - stride tokens of context (the protocol
              # long-context papers report; eval.stride 0: half the evaluated length L).
              'protocol': Str(('windows', 'sliding'), default='windows'),
              'stride': Int(0, 2**24, default=0),
          }),
          **_read_by(CLASSIFIER, {
              'metrics': Seq(Str(choices=lambda: {**metrics.CLASSIFICATION_METRICS,
                                                  **metrics.REGRESSION_METRICS}), 1,
                             default=('accuracy',)),
              'splits': Seq(Str(nonempty=True), 1, default=('validation', 'test')),
          }),
          **_read_by(TRANSLATION, {
              'beam_size': Int(1, 1024, default=4),
              'alpha': Float(0, 100, default=0.6),  # GNMT length penalty.
              # Sentences decoded for BLEU: in training's validation, and by eval.py on the test
              # split; -1: the whole split.
              'bleu_sentences': Int(1, _BIG, also=(-1,), default=200),
              'bleu_sentences_test': Int(1, _BIG, also=(-1,), default=-1),
          }),
      },
      # Mesh axis sizes; -1 takes the remaining devices (num_devices: all). Every axis exists
      # (size 1 if unused).
      'mesh': {
          'data': Int(1, 2**20, also=(-1,), default=-1),
          'fsdp': Int(1, 2**20, also=(-1,), default=1),
          'tensor': Int(1, 2**20, also=(-1,), default=1),
          'num_devices': Int(1, 2**20, also=(-1,), default=-1),
          # Logical axis -> mesh axes (roformer/sharding.py): with fsdp > 1 parameters and
          # optimizer state split along d_model (FSDP); with tensor > 1 heads, MLP columns and
          # vocabulary split.
          'rules': Map(Names(), default=sharding.DEFAULT_RULES),
      },
  }


def default_config() -> ml_collections.ConfigDict:
  """Every field at its default."""
  return ml_collections.ConfigDict(copy.deepcopy(defaults(schema())))


def spec_at(path: str):
  """The spec (or group) of the dotted field `path` ('model.position.rope.base'), or None."""
  node = schema()
  for part in path.split('.'):
    if not isinstance(node, dict) or part not in node:
      return None
    node = node[part]
  return node


def check(config, tree: dict | None = None) -> None:
  """Raises ConfigError naming the first field that is undeclared, missing or outside its
  spec. `tree`: schema(), where the caller has built it already."""
  check_tree(config, schema() if tree is None else tree, 'config', complete=True)
