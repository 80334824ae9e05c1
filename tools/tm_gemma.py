"""tm_gemma.py — the Gemma 3 / Gemma 4 part of tools/make-test-model: shapes, config.json
and the tensor list (names and shapes as transformers writes them, or mlx-lm's layout).

Gemma 3 (--arch gemma3): Gemma3ForCausalLM, flat config, 1+w norms (stored w ~ N(0, 0.02²)),
  sliding/full layers by sliding_window_pattern, query_pre_attn_scalar = head_dim.
Gemma 4 (--arch gemma4): Gemma4ForConditionalGeneration, keys in text_config, tensors under
  model.language_model. (--layout hf) or language_model.model. with split switch_glu experts
  (--layout mlx, forced for quantized snapshots as mlx_lm.convert writes them); every key the
  sources default differently is written. Options: one full layer every --layer-pattern layers
  (last layer full), --sliding-window, --global-head-dim, --k-eq-v with --global-kv-heads,
  --per-layer-input P, --kv-shared N (sharers keep unused k/v tensors, as google's files do),
  --double-wide, --experts E --top-k K --moe-ffn F (beside the dense MLP), --softcap C.
Each tensor's random stream is keyed by its name after the language-model prefix, and a split
expert tensor takes its rows from the fused tensor's stream: the hf and mlx layouts of one seed
(and a quantized snapshot and its float twin) hold the same weights.
"""

SHAPES = {
    "gemma3": {
        "tiny": dict(hidden=64, layers=6, heads=4, kv_heads=1, head_dim=32, ffn=192, vocab=None, window=16,
                     pattern=6),
        "gemma3-4b": dict(hidden=2560, layers=34, heads=8, kv_heads=4, head_dim=256, ffn=10240, vocab=262208,
                          window=1024, pattern=6, rope_factor=8.0),
    },
    "gemma4": {
        "tiny": dict(hidden=64, layers=6, heads=4, kv_heads=2, head_dim=16, global_head_dim=32, ffn=96,
                     vocab=None, window=16, pattern=6),
        "gemma4-e4b": dict(hidden=2560, layers=42, heads=8, kv_heads=2, head_dim=256, global_head_dim=512,
                           ffn=10240, vocab=262144, window=512, pattern=6, pli=256, kv_shared=18),
        "gemma4-26b-a4b": dict(hidden=2816, layers=30, heads=16, kv_heads=8, head_dim=256, global_head_dim=512,
                               ffn=2112, vocab=262144, window=1024, pattern=6, k_eq_v=True, global_kv_heads=2,
                               experts=128, top_k=8, moe_ffn=704),
    },
}


def layer_types(g):
    L, pat = g["layers"], g["pattern"]
    t = ["full_attention" if (i + 1) % pat == 0 else "sliding_attention" for i in range(L)]
    t[-1] = "full_attention"
    return t


def gemma_settings(a, sp):
    """The Gemma keys of shape sp with the command line's overrides."""
    g = dict(sp)
    for k in ("layer_pattern", "global_head_dim", "global_kv_heads", "per_layer_input", "kv_shared",
              "experts", "top_k", "moe_ffn", "sliding_window"):
        v = getattr(a, k, None)
        if v is not None:
            g[{"layer_pattern": "pattern", "per_layer_input": "pli", "sliding_window": "window"}.get(k, k)] = v
    if a.k_eq_v:
        g["k_eq_v"] = True
    if a.double_wide:
        g["double_wide"] = True
    g.setdefault("global_head_dim", g["head_dim"])
    g.setdefault("global_kv_heads", None)
    for k in ("pli", "kv_shared", "experts", "top_k", "moe_ffn"):
        g.setdefault(k, 0)
    g.setdefault("k_eq_v", False)
    g.setdefault("double_wide", False)
    if g["experts"] and not (g["top_k"] and g["moe_ffn"]):
        raise SystemExit("--experts needs --top-k and --moe-ffn")
    if g["kv_shared"] >= g["layers"]:
        raise SystemExit("--kv-shared must leave layers to share from")
    return g


def make_config(a, g, ids, vocab, torch_dtype):
    bos, eos = ids["<|begin_of_text|>"], ids["<|im_end|>"]
    softcap = a.softcap if a.softcap is not None else (None if a.arch == "gemma3" else 30.0)
    if softcap == 0:
        softcap = None
    if a.arch == "gemma3":
        c = {
            "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "attention_bias": False, "attn_logit_softcapping": None, "bos_token_id": bos, "eos_token_id": [eos],
            "final_logit_softcapping": softcap, "head_dim": g["head_dim"],
            "hidden_activation": "gelu_pytorch_tanh", "hidden_size": g["hidden"],
            "intermediate_size": g["ffn"], "max_position_embeddings": a.max_position or 131072,
            "num_attention_heads": g["heads"], "num_hidden_layers": g["layers"],
            "num_key_value_heads": g["kv_heads"], "pad_token_id": ids["<|end_of_text|>"],
            "query_pre_attn_scalar": g["head_dim"], "rms_norm_eps": 1e-6, "rope_local_base_freq": 10000.0,
            "rope_scaling": {"factor": g["rope_factor"], "rope_type": "linear"} if g.get("rope_factor") else None,
            "rope_theta": a.rope_theta or 1000000.0, "sliding_window": g["window"],
            "sliding_window_pattern": g["pattern"], "tie_word_embeddings": True, "torch_dtype": torch_dtype,
            "transformers_version": "4.51.3", "vocab_size": vocab,
        }
        gen = {"bos_token_id": bos, "eos_token_id": [eos, ids["<|end_of_text|>"]]}
        return c, gen
    tc = {
        "model_type": "gemma4_text", "hidden_size": g["hidden"], "intermediate_size": g["ffn"],
        "num_hidden_layers": g["layers"], "num_attention_heads": g["heads"],
        "num_key_value_heads": g["kv_heads"], "num_global_key_value_heads": g["global_kv_heads"],
        "head_dim": g["head_dim"], "global_head_dim": g["global_head_dim"],
        "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "vocab_size": vocab,
        "vocab_size_per_layer_input": vocab, "hidden_size_per_layer_input": g["pli"],
        "max_position_embeddings": a.max_position or 131072, "sliding_window": g["window"],
        "layer_types": layer_types(g),
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": a.rope_theta or 1000000.0}},
        "final_logit_softcapping": softcap, "attention_k_eq_v": g["k_eq_v"],
        "num_kv_shared_layers": g["kv_shared"], "use_double_wide_mlp": g["double_wide"],
        "enable_moe_block": bool(g["experts"]), "num_experts": g["experts"] or None,
        "top_k_experts": g["top_k"] or None, "moe_intermediate_size": g["moe_ffn"] or None,
        "attention_bias": False, "tie_word_embeddings": True, "pad_token_id": ids["<|end_of_text|>"],
        "bos_token_id": bos, "eos_token_id": [eos],
    }
    c = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": tc,
         "tie_word_embeddings": True, "dtype": torch_dtype, "vocab_size": vocab,
         "transformers_version": "5.5.0"}
    gen = {"bos_token_id": bos, "eos_token_id": [eos, ids["<|end_of_text|>"]]}
    return c, gen


def tensor_plan(a, g, vocab, layout):
    """[dict(name, shape, kind, rng, src, qbits)]: rng names the random stream; src (split experts)
    = (fused shape, r0, rows); qbits None = the run's bits, 0 = keep float, (bits, group) = override."""
    gemma4 = a.arch == "gemma4"
    pre = "model." if not gemma4 else ("language_model.model." if layout == "mlx" else "model.language_model.")
    H, L, nH = g["hidden"], g["layers"], g["heads"]
    types = layer_types(g) if gemma4 else ["full_attention" if (i + 1) % g["pattern"] == 0 else
                                           "sliding_attention" for i in range(L)]
    norm = "norm" if gemma4 else "norm0"
    out = []

    def t(rel, shape, kind, qbits=None, src=None, rng=None):
        out.append(dict(name=pre + rel, shape=tuple(shape), kind=kind, rng=rng or rel, src=src, qbits=qbits))

    t("embed_tokens.weight", (vocab, H), "embed")
    if gemma4 and g["pli"]:
        lp = L * g["pli"]
        t("embed_tokens_per_layer.weight", (vocab, lp), "embed")
        t("per_layer_model_projection.weight", (lp, H), "linear", qbits=0)
        t("per_layer_projection_norm.weight", (g["pli"],), norm)
    first_shared = L - g["kv_shared"]
    for i in range(L):
        p = "layers.%d." % i
        full = types[i] == "full_attention"
        d = g["global_head_dim"] if (gemma4 and full) else g["head_dim"]
        kvh = g["global_kv_heads"] if (full and g["k_eq_v"] and g["global_kv_heads"]) else g["kv_heads"]
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            t(p + n + ".weight", (H,), norm)
        t(p + "self_attn.q_proj.weight", (nH * d, H), "linear")
        t(p + "self_attn.q_norm.weight", (d,), norm)
        t(p + "self_attn.k_proj.weight", (kvh * d, H), "linear")
        if not (gemma4 and full and g["k_eq_v"]):
            t(p + "self_attn.v_proj.weight", (kvh * d, H), "linear")
        t(p + "self_attn.k_norm.weight", (d,), norm)
        t(p + "self_attn.o_proj.weight", (H, nH * d), "linear")
        F = g["ffn"] * (2 if (gemma4 and g["double_wide"] and i >= first_shared) else 1)
        t(p + "mlp.gate_proj.weight", (F, H), "linear")
        t(p + "mlp.up_proj.weight", (F, H), "linear")
        t(p + "mlp.down_proj.weight", (H, F), "linear")
        if not gemma4:
            continue
        t(p + "layer_scalar", (1,), "scalar")
        if g["pli"]:
            t(p + "per_layer_input_gate.weight", (g["pli"], H), "linear")
            t(p + "per_layer_projection.weight", (H, g["pli"]), "linear")
            t(p + "post_per_layer_input_norm.weight", (H,), norm)
        if g["experts"]:
            E, Fm = g["experts"], g["moe_ffn"]
            t(p + "router.proj.weight", (E, H), "linear", qbits=(8, 64))
            t(p + "router.scale", (H,), "norm")
            t(p + "router.per_expert_scale", (E,), "norm")
            fused = p + "experts.gate_up_proj"
            if layout == "mlx":
                t(p + "experts.switch_glu.gate_proj.weight", (E, Fm, H), "linear", src=((E, 2 * Fm, H), 0, Fm),
                  rng=fused)
                t(p + "experts.switch_glu.up_proj.weight", (E, Fm, H), "linear", src=((E, 2 * Fm, H), Fm, Fm),
                  rng=fused)
                t(p + "experts.switch_glu.down_proj.weight", (E, H, Fm), "linear", rng=p + "experts.down_proj")
            else:
                t(fused, (E, 2 * Fm, H), "linear", qbits=0)
                t(p + "experts.down_proj", (E, H, Fm), "linear", qbits=0)
            for n in ("pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"):
                t(p + n + ".weight", (H,), norm)
    t("norm.weight", (H,), norm)
    return out
