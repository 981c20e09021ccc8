"""Hugging Face checkpoints in and out of workdirs (roformer/hf.py).

  python scripts/convert_hf.py --from_hf path/to/Llama-3.2-1B --workdir runs/llama32
  python scripts/convert_hf.py --to_hf exported/ --workdir runs/lm_llama [--step N]

--from_hf reads a local directory as `save_pretrained` writes it (config.json, model.safetensors
or its shards with model.safetensors.index.json, tokenizer.json and tokenizer_config.json) of a
LlamaForCausalLM, MistralForCausalLM, Phi3ForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
Gemma2ForCausalLM, Gemma3ForCausalLM (or Gemma3ForConditionalGeneration's language model),
OlmoForCausalLM, Olmo2ForCausalLM, Olmo3ForCausalLM, SmolLM3ForCausalLM, GPTNeoXForCausalLM,
PhiForCausalLM, CohereForCausalLM, Cohere2ForCausalLM, GraniteForCausalLM, StableLmForCausalLM,
GPTJForCausalLM, GPT2LMHeadModel, BloomForCausalLM or MptForCausalLM (docs/hf_checkpoints.md),
and writes a new workdir that eval.py, scripts/generate.py and train.py (--config
configs/continued.py:WORKDIR) read. --to_hf writes a directory that
transformers.AutoModelForCausalLM.from_pretrained loads with the same logits, and the run's
tokenizer where it has a transformers form (roformer/hf_tokenizers.py).
"""

import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import cli  # pylint: disable=wrong-import-position


def main(argv):
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  direction = parser.add_mutually_exclusive_group(required=True)
  direction.add_argument('--from_hf', type=cli.path_arg,
                         help='a Hugging Face model directory to import into --workdir')
  direction.add_argument('--to_hf', type=cli.path_arg,
                         help='a new directory to export --workdir into')
  parser.add_argument('--workdir', required=True, type=cli.path_arg)
  parser.add_argument('--step', type=int, default=None,
                      help='--to_hf: the checkpoint to export (default: the latest)')
  args = parser.parse_args(argv)
  from roformer import hf  # pylint: disable=g-import-not-at-top  # After the flags' checks.
  from roformer import positions  # pylint: disable=g-import-not-at-top
  if args.from_hf:
    config = hf.import_checkpoint(args.from_hf, args.workdir)
    m = config.model
    width = f' of {m.head_dim}' if m.head_dim else ''
    layout = 'QK-norm, ' if m.attention.qk_norm else ''
    if m.attention.qkv_clip:
      layout += f'q, k and v clamped at {m.attention.qkv_clip_value:g}, '
    if m.attention.softmax_scale:
      layout += f'q.k times {m.attention.softmax_scale_value:g}, '
    for what, value in (('embeddings', m.embedding_multiplier),
                        ('each branch', m.residual_multiplier)):
      layout += f'{what} times {value:g}, ' if value != 1 else ''
    rotates = positions.rope_layers(m)
    if rotates and not all(rotates):
      layout += f'{rotates.count(False)} of {len(rotates)} layers without positions, '
    bases = (f'rope bases {", ".join(f"{b:g}" for b in sorted(set(m.layer_rope_bases)))} by layer'
             if m.layer_rope_bases else f'rope base {m.position.rope.base:g}')
    if m.position.rope.fraction < 1:
      bases += f' over {m.position.rope.fraction:g} of each head'
    if m.position.rope.layout == 'interleaved':
      bases += ' on interleaved pairs'
    rows = positions.learned_rows(m)
    scheme = (f'learned positions over {rows} rows' if rows else
              f'{bases}, scaling {m.position.rope.scaling.kind}' if rotates else
              f'position.kind={m.position.kind!r}' + (', a norm of the embeddings'
                                                      if m.embedding_norm else ''))
    output = ''.join(text for text, on in ((', an output bias', m.output_bias),
                                            (f', logits times {m.logits_multiplier:g}',
                                             m.logits_multiplier != 1)) if on)
    print(f'wrote {args.workdir}: {m.num_layers} layers, d_model {m.d_model}, {m.num_heads} heads'
          f'{width} ({m.num_kv_heads or m.num_heads} key/value), vocabulary {m.vocab_size}, '
          f'{layout}trained length {config.data.seq_len}, {scheme}{output}')
  else:
    arch = hf.export_checkpoint(args.workdir, args.to_hf, args.step)
    print(f'wrote {args.to_hf}: {arch} (transformers.AutoModelForCausalLM.from_pretrained reads '
          'it)')
    if not os.path.exists(os.path.join(args.to_hf, 'tokenizer.json')):
      print("  and no tokenizer: the run's has no transformers form (a SentencePiece model "
            'that is neither unigram nor BPE, or has user-defined pieces or rules of its own), '
            "or its form did not encode the check's texts as the run does "
            f'(roformer/hf_tokenizers.py). Encode with hf.load({args.workdir!r}).encode and pass '
            'the ids.')


if __name__ == '__main__':
  cli.guard(main)(sys.argv[1:])
