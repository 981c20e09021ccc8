"""The Hugging Face RoFormer converter against `transformers.RoFormerModel` itself.

Runs when torch and transformers are installed (they are not in requirements.txt) and is
skipped otherwise: pip install torch transformers.
"""

import numpy as np
import pytest

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')

from flax import nnx  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp  # pylint: disable=wrong-import-position

from roformer import models  # pylint: disable=wrong-import-position
from scripts import convert_hf_roformer as convert  # pylint: disable=wrong-import-position


def hf_model(tmp_path, **overrides):
  """A small random RoFormerForMaskedLM saved as safetensors, with non-trivial LayerNorms."""
  torch.manual_seed(0)
  cfg = transformers.RoFormerConfig(
      vocab_size=120, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
      intermediate_size=96, max_position_embeddings=64, hidden_dropout_prob=0.0,
      attention_probs_dropout_prob=0.0, **overrides)
  model = transformers.RoFormerForMaskedLM(cfg).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if 'LayerNorm' in name or name.endswith('bias'):
        p.add_(0.1 * torch.randn_like(p))
  model.save_pretrained(tmp_path)
  return model


def ours(tmp_path):
  weights, hf = convert.locate(str(tmp_path))
  config = convert.model_config(hf)
  config.model.dropout = 0.0
  params, missing = convert.convert(convert.read_safetensors(weights), config)
  assert not missing
  model = models.create(config.model)
  state = nnx.state(model, nnx.Param)
  target = state.to_pure_dict()
  target.update(params)
  nnx.replace_by_pure_dict(state, target)
  nnx.update(model, state)
  return model


@pytest.mark.parametrize('rotary_value', [False, True])
def test_converted_model_matches_transformers(tmp_path, rotary_value):
  reference = hf_model(tmp_path, rotary_value=rotary_value)
  model = ours(tmp_path)
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 120, (2, 40))
  types = rng.integers(0, 2, (2, 40))
  attention = np.ones((2, 40), np.int64)
  attention[1, 30:] = 0  # Padding in the second row.
  with torch.no_grad():
    out = reference(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                    attention_mask=torch.tensor(attention), output_hidden_states=True)
  expected_hidden = out.hidden_states[-1].numpy()
  positions = np.broadcast_to(np.arange(40), ids.shape)
  mask = models.attention.make_mask(jnp.asarray(attention), jnp.asarray(attention), causal=False)
  hidden = np.asarray(model.encode(jnp.asarray(ids), jnp.asarray(positions), mask,
                                   token_types=jnp.asarray(types)))
  real = attention.astype(bool)
  np.testing.assert_allclose(hidden[real], expected_hidden[real], atol=1e-4, rtol=1e-4)
  # The MLM head too: the sqrt(d_model) folded into its LayerNorm gives HF's logits.
  logits = np.asarray(model(jnp.asarray(ids), jnp.asarray(positions), jnp.asarray(attention),
                            token_types=jnp.asarray(types)))
  np.testing.assert_allclose(logits[real], out.logits.numpy()[real], atol=1e-3, rtol=1e-4)


def test_converter_writes_a_workdir_and_refuses_a_used_one(tmp_path):
  hf_model(tmp_path / 'hf')
  convert.main(['--checkpoint', str(tmp_path / 'hf'), '--workdir', str(tmp_path / 'run')])
  assert (tmp_path / 'run' / 'config.json').exists()
  assert (tmp_path / 'run' / 'checkpoints' / '0').exists()
  from configs import test as test_config  # pylint: disable=g-import-not-at-top
  from roformer import errors, workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  cfg = test_config.get_config('classify')
  cfg.init_from = str(tmp_path / 'run')
  with pytest.raises(errors.ConfigError, match='vocabulary is not a tokenizer'):
    workdir_lib.setup_data(cfg)
  with pytest.raises(errors.ConfigError, match='not empty'):  # cli.guard prints it as one line.
    convert.main(['--checkpoint', str(tmp_path / 'hf'), '--workdir', str(tmp_path / 'run')])
