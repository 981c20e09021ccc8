"""roformer: a JAX/Flax codebase for studying how Transformers encode position."""
