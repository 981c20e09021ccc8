"""The attention options (`config.model.attention`): each one's type, range and default, declared
once. roformer/config_schema.py puts them in the config, and a model config without the group
(one built by hand) reads these defaults (`self_attention.attention_config`).

The options act in roformer/self_attention.py and roformer/attention.py; what each one
requires of the others is checked in roformer/config_lib.py.
"""

from roformer.specs import Bool, Float, Int, Str, defaults

_STEPS = 2**31 - 1  # Step counters are int32.

SPECS = {
    # 'softmax', 'favor': FAVOR+ linear attention (Performer), or 'stick_breaking'
    # (Tan et al. 2025: sigmoid weights, each query's stick broken from its nearest key
    # outwards; causal LMs, einsum path).
    'kind': Str(('softmax', 'favor', 'stick_breaking'), default='softmax'),
    # stick_breaking: a query may attend to its own token (the product then runs to it).
    'attend_current': Bool(default=False),
    # RMSNorm of each head's queries and keys (a learned scale per dimension, shared by
    # the heads), before any rotation.
    'qk_norm': Bool(default=False),
    # Scalable-Softmax (Nakanishi 2025): logits times s_h log n_i, n_i the keys query i
    # sees, s_h learned per head from `ssmax_init` (the paper's 0.43).
    'ssmax': Bool(default=False),
    'ssmax_init': Float(0, 100, min_open=True, default=0.43),
    # Gated attention (Qiu et al. 2025): each head's output times sigmoid(x W_g + b),
    # x the layer's (normed) input, elementwise per head and dimension, before the
    # output projection (W_g: d_model x d_model more parameters and matmul per layer).
    'output_gate': Bool(default=False),
    # Differential attention (Ye et al. 2025): num_heads / 2 heads, each the difference
    # of two softmax maps (one learned lambda per layer) over values of twice the head
    # width, RMS-normed per head (roformer/differential.py); adds 6 x head_dim
    # parameters per layer.
    'differential': Bool(default=False),
    # DAPE (Zheng et al. 2024): logits q.k/sqrt(d) + B + f([q.k/sqrt(d); B]) with f a
    # two-layer MLP (2 heads -> dape_width -> heads, GELU) applied to each query-key
    # pair's logits and biases over the heads; schemes that add a bias (alibi, kerple,
    # fire, t5, ...). It materialises [batch, L, L, 2 heads + width] per layer.
    'dape': Bool(default=False),
    'dape_width': Int(1, 4096, default=32),
    # Llama 4's attention temperature on the layers without positions (NoPE): their
    # queries times 1 + scale log(floor((p + 1) / floor) + 1) at position p (1 below
    # `floor`), so that attention sharpens with the distance it must cover.
    'nope_temperature': Bool(default=False),
    'nope_temperature_floor': Int(1, 2**30, default=8192),
    'nope_temperature_scale': Float(0, 100, default=0.1),
    'num_features': Int(1, 2**16, default=256),  # FAVOR+ random features per head.
    'redraw_interval': Int(0, _STEPS, default=1000),  # Steps between redraws; 0: never.
    # RoPE with favor: rotate q and k, or the features (the paper's eq. 19).
    'rope_mode': Str(('features', 'qk'), default='qk'),
    'chunk': Int(1, 2**20, default=128),  # Causal prefix sums: rows per scan step.
}
DEFAULTS = defaults(SPECS)
