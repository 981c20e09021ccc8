"""The model types' declarations (roformer/model_types.py) are complete and decide the checks: a
config is refused where its type's declaration says it does not offer something (decoder-only
features, post-norm, the parallel residual, FAVOR+, a run to start from), and accepted where it
does."""

import ast
import pathlib

import pytest

from configs import test as test_config
from roformer import errors
from roformer import model_types
from roformer import models
from roformer import resolve
from roformer import tasks


def test_every_type_is_declared_built_and_trained_alike():
  assert set(model_types.TYPES) == set(models.MODELS) == set(tasks.TASKS)
  for name, declared in model_types.TYPES.items():
    assert declared.name == name
    assert declared.stacks[-1] == models.MODELS[name].causal  # The stack that makes the output.
    assert not declared.starts_from or declared.starts_from in model_types.TYPES


def _config(name):
  if name == 'encoder_decoder':
    from configs import translate  # pylint: disable=import-outside-toplevel
    return translate.get_config()
  config = test_config.get_config({'causal_lm': 'rope', 'mlm': 'mlm', 'classifier': 'classify'}[name])
  assert config.model.type == name
  return config


@pytest.mark.parametrize('name', sorted(model_types.TYPES))
def test_the_declarations_decide_what_a_type_is_offered(name):
  declared = model_types.TYPES[name]
  resolve.validate(_config(name))
  cases = [  # (the declared flag, a change that needs it, what the refusal says)
      ('decoder_only', {'model.layer_kinds': ('rope', 'none')}, 'layer_kinds'),
      ('decoder_only', {'model.layer_windows': (8,)}, 'layer_windows'),
      ('post_norm', {'model.norm': 'post'}, "norm='post'"),
      ('parallel_residual', {'model.residual': 'parallel'}, "residual='parallel'"),
      ('linear_attention', {'model.attention.kind': 'favor'}, "attention.kind='favor'"),
      ('starts_from', {'init_from': '/nonexistent'}, 'init_from'),
  ]
  for flag, change, what in cases:
    config = _config(name)
    for dotted, value in change.items():
      *parents, leaf = dotted.split('.')
      node = config
      for parent in parents:
        node = node[parent]
      node[leaf] = value
    if getattr(declared, flag):
      if flag != 'starts_from':  # (A source is checked once it is read: test_context_extension.)
        resolve.validate(config)
    else:
      with pytest.raises(errors.ConfigError, match=what):
        resolve.validate(config)


def test_an_unknown_type_is_one_error_naming_the_types():
  config = _config('causal_lm')
  config.model.type = 'seq2seq'
  with pytest.raises(errors.ConfigError, match="one of"):
    model_types.of(config.model)


def test_a_types_own_fields_are_read_by_its_runs_only():
  """The schema's readers of the masked LM's, the classifier's and translation's field groups
  come from the declarations: each reads a config of its type and of no other, and its fix
  names the type's starting config."""
  from roformer import config_schema  # pylint: disable=import-outside-toplevel
  readers = {'masking': config_schema.MLM, 'labels and metrics': config_schema.CLASSIFIER,
             'language pairs and decoding': config_schema.TRANSLATION}
  owners = {t.own_fields: t for t in model_types.TYPES.values() if t.own_fields}
  assert set(owners) == set(readers)
  for group, reader in readers.items():
    owner = owners[group]
    for name in model_types.TYPES:
      config = test_config.get_config()
      config.model.type = name
      assert reader.reads(config) == (name == owner.name), (group, name)
    assert owner.start in reader.fix and repr(owner.name) in reader.what


# The registries keyed by type name: the declarations, the models and the tasks (one module per
# type, each saying in its docstring which type it serves).
REGISTRIES = ('roformer/model_types.py', 'roformer/models.py', 'roformer/tasks/')
# The PyTorch comparisons name the PyTorch models they build (their own --model choices).
TORCH_PEERS = ('scripts/benchmark_torch.py', 'scripts/compare_torch.py')


def test_no_module_outside_the_registries_names_a_model_type():
  """The checks, the warm start, the FLOPs, the Hugging Face import and the scripts ask the
  declarations: no string literal of roformer/ or scripts/ outside the registries is a model
  type's name (a type added to the registries needs no edit elsewhere)."""
  root = pathlib.Path(__file__).resolve().parents[1]
  found = []
  for path in sorted([*root.glob('roformer/**/*.py'), *root.glob('scripts/*.py')]):
    rel = path.relative_to(root).as_posix()
    if rel.startswith(REGISTRIES + TORCH_PEERS):
      continue
    for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
      if isinstance(node, ast.Constant) and node.value in model_types.TYPES:
        found.append(f'{rel}:{node.lineno}: {node.value!r}')
  assert not found, found
