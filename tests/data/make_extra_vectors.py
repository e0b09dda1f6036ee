# Extra reference cases beyond the shared vectors (other shapes, seeds, gate variants, HF layouts), made
# with the shared generator: /usr/bin/python3 tests/data/make_extra_vectors.py OUT_DIR [DIR_OF_refgen.py]
# (needs python3-torch). Only the smaller cases are kept in tests/data/.
import sys, math, torch
sys.path.insert(0, sys.argv[2] if len(sys.argv) > 2 else "../shared/refgen")  # where refgen.py lives
import refgen as R
from refgen import gqa, mla

CASES = [
    gqa("extra_gqa_h6_kv2_d24", 23, 48, 6, 2, 24, {"granularity": "headwise"}, 101),
    gqa("extra_gqa_h8_kv1_d40_silu_add", 9, 80, 8, 1, 40, {"activation": "silu", "combine": "add"}, 102),
    gqa("extra_gqa_mha_g2_shared", 15, 32, 2, 2, 16, {"position": "G2", "shared": True}, 103),
    gqa("extra_gqa_g4_headwise_silu", 11, 64, 4, 2, 16, {"position": "G4", "granularity": "headwise", "activation": "silu"}, 104),
    gqa("extra_gqa_g3_headwise_add", 11, 64, 4, 2, 16, {"position": "G3", "granularity": "headwise", "combine": "add", "activation": "identity"}, 105),
    gqa("extra_gqa_g5_shared", 7, 32, 4, 2, 8, {"position": "G5", "activation": "ns_sigmoid"}, 106),
    gqa("extra_gqa_lowrank_shared_headwise", 12, 64, 4, 2, 16, {"source": "low_rank", "rank": 4, "granularity": "headwise", "shared": True, "bias": True}, 107),
    gqa("extra_gqa_nope_zc_outnorm", 10, 64, 4, 4, 16, {}, 108, partial_rotary_factor=0.0, qk_norm="rms_zero_centered", output_norm="rms_zero_centered"),
    gqa("extra_gqa_yarn_interleaved_noncausal", 14, 64, 4, 2, 32, {}, 109, rope_style="interleaved", causal=False,
        rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 16, "beta_slow": 2, "mscale": 0.8, "mscale_all_dim": 0.5}),
    gqa("extra_gqa_scale_bias", 9, 48, 3, 1, 16, {"bias": True}, 110, attention_scale=0.3, attention_bias=True, qk_norm=None),
    gqa("extra_paper_per_kv_group_g3", 13, 64, 6, 2, 8, {"source": "fused_q", "layout": "per_kv_group"}, 111),
    gqa("extra_qwen_headwise_g4", 13, 64, 8, 2, 16, {"source": "fused_q", "granularity": "headwise"}, 112, qk_norm="rms_zero_centered", partial_rotary_factor=0.5),
    gqa("extra_yarn_truncate_false", 12, 64, 4, 2, 16, {}, 113, rope_scaling={"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8, "truncate": False, "attention_factor": 1.3}),
    mla("extra_mla_noqlora_headwise_silu", 11, 64, 4, 24, 8, 32, 48, 0, {"granularity": "headwise", "activation": "silu"}, 120),
    mla("extra_mla_yarn_neox", 15, 64, 2, 16, 16, 24, 32, 16, {}, 121, rope_style="neox",
        rope_scaling={"type": "yarn", "factor": 10.0, "original_max_position_embeddings": 32, "mscale": 1.0, "mscale_all_dim": 1.0}),
    mla("extra_mla_lowrank_gate", 9, 64, 4, 16, 8, 16, 32, 24, {"source": "low_rank", "rank": 6}, 122),
    mla("extra_mla_shared_add", 9, 64, 4, 16, 8, 16, 32, 24, {"shared": True, "combine": "add", "activation": "identity"}, 123),
]

def hf_qwen3_paper(name, T, d, Hq, Hkv, D, seed, headwise, qkv_bias):
    gran = "headwise" if headwise else "elementwise"
    cfg = gqa(name, T, d, Hq, Hkv, D, {"source": "fused_q", "layout": "per_kv_group", "granularity": gran}, seed,
              qk_norm="rms", rope_theta=1000000.0, attention_bias=qkv_bias)[1]
    hf = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": d, "num_attention_heads": Hq,
          "num_key_value_heads": Hkv, "head_dim": D, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
          ("headwise_attn_output_gate" if headwise else "elementwise_attn_output_gate"): True,
          "qkv_bias": qkv_bias, "use_qk_norm": True, "num_hidden_layers": 4, "vocab_size": 1000, "sliding_window": None,
          "use_sliding_window": False, "max_position_embeddings": 4096}
    return name, cfg, hf, T, seed, "model.layers.1.self_attn.", torch.bfloat16

def hf_kimi_nope(name, T, d, H, dn, dr, dv, dc, qr, seed):
    cfg = mla(name, T, d, H, dn, dr, dv, dc, qr, {}, seed, rope_style="none")[1]
    hf = {"model_type": "kimi_k3", "hidden_size": d, "num_attention_heads": H, "num_key_value_heads": H,
          "q_lora_rank": qr or None, "kv_lora_rank": dc, "qk_nope_head_dim": dn, "qk_rope_head_dim": dr, "v_head_dim": dv,
          "rms_norm_eps": 1e-6, "rope_theta": 50000.0, "mla_use_nope": True, "mla_use_output_gate": True}
    return name, cfg, hf, T, seed, "model.layers.0.self_attn.", torch.bfloat16

def hf_dsv2(name, T, d, H, dn, dr, dv, dc, seed):
    cfg = mla(name, T, d, H, dn, dr, dv, dc, 0, None, seed, rope_theta=10000.0)[1]
    hf = {"model_type": "deepseek_v2", "hidden_size": d, "num_attention_heads": H, "num_key_value_heads": H,
          "q_lora_rank": None, "kv_lora_rank": dc, "qk_nope_head_dim": dn, "qk_rope_head_dim": dr, "v_head_dim": dv,
          "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None, "n_routed_experts": 64}
    return name, cfg, hf, T, seed, "model.layers.2.self_attn.", torch.bfloat16

HF = [
    hf_qwen3_paper("extra_hf_qwen3_paper_headwise_bias", 13, 64, 4, 2, 16, 130, True, True),
    hf_qwen3_paper("extra_hf_qwen3_paper_elementwise", 13, 64, 6, 2, 16, 131, False, False),
    hf_kimi_nope("extra_hf_kimi_k3_nope", 11, 64, 4, 16, 8, 16, 32, 24, 132),
    hf_dsv2("extra_hf_deepseek_v2_plain", 12, 64, 4, 16, 8, 16, 32, 133),
    R.hf_qwen3_next("extra_hf_qwen3_next_7", 17, 64, 4, 1, 64, 134, layer=7),
]
R.write_cases(sys.argv[1], CASES, HF)
