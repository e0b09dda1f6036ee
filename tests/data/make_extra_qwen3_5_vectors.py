# Extra Qwen3.5 / Qwen3.6 folders (docs/spec.md §14) beyond the shared hf_qwen3_5 ones: a text-only
# (`qwen3_5_text`) Gated DeltaNet layer with H_v/H_k = 4 and D_k != D_v, a `qwen3_5_moe` wrapper's
# Gated DeltaNet layer with H_v = H_k and D_k != D_v, a `qwen3_5_moe` full-attention layer found by
# full_attention_interval, and a text-only full-attention layer with attn_output_gate false (no gate).
# The linear layers' y is computed from the split projections (in_proj_qkv, in_proj_z, in_proj_b,
# in_proj_a) as §14 lays them out, and checked against the shared generator's fused layer on the
# same weights regrouped. Made with the shared generators:
#   /usr/bin/python3 tests/data/make_extra_qwen3_5_vectors.py OUT_DIR DIR_OF_refgen.py_AND_deltagen.py
# (needs python3-torch).
import json
import math
import os
import sys

import torch

sys.path.insert(0, sys.argv[2] if len(sys.argv) > 2 else "../shared/refgen")
import deltagen as D  # noqa: E402
import refgen as R  # noqa: E402

torch.set_default_dtype(torch.float64)


def text_config(text_type, d, n_layers, layer_types=None, interval=None, Hq=4, Hkv=2, Dh=16, theta=1e7,
                mrope=(1, 1, 0), linear=None, **extra):
    """The text model's keys as Qwen3.5 checkpoints write them (under text_config, or at the top)."""
    t = {"model_type": text_type, "hidden_size": d, "num_hidden_layers": n_layers, "num_attention_heads": Hq,
         "num_key_value_heads": Hkv, "head_dim": Dh, "attention_bias": False, "attention_dropout": 0.0,
         "rms_norm_eps": 1e-6, "hidden_act": "silu", "intermediate_size": 4 * d, "max_position_embeddings": 262144,
         "vocab_size": 248320, "tie_word_embeddings": False, "use_cache": True, "dtype": "bfloat16",
         "attn_output_gate": True,
         "rope_parameters": {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": 0.25,
                             "mrope_section": list(mrope), "mrope_interleaved": True}}
    if layer_types is not None:
        t["layer_types"] = layer_types
    if interval is not None:
        t["full_attention_interval"] = interval
    if linear is not None:
        Hk, Hv, Dk, Dv = linear
        t.update({"linear_num_key_heads": Hk, "linear_num_value_heads": Hv, "linear_key_head_dim": Dk,
                  "linear_value_head_dim": Dv, "linear_conv_kernel_dim": 4})
    t.update(extra)
    return t


def wrapper(text, moe):
    """The multimodal config around a text config (its vision keys do not concern the layers)."""
    return {"architectures": ["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"],
            "model_type": "qwen3_5_moe" if moe else "qwen3_5", "text_config": text,
            "vision_config": {"model_type": "qwen3_5_moe" if moe else "qwen3_5", "depth": 2, "hidden_size": 32,
                              "out_hidden_size": text["hidden_size"]},
            "image_token_id": 248056, "video_token_id": 248057, "tie_word_embeddings": False}


MOE_KEYS = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32, "router_aux_loss_coef": 0.001}


# ----------------------------------------------------------------------------- Gated DeltaNet, split
def split_projections(cfg, W):
    """Qwen3-Next's per-group in_proj_qkvz / in_proj_ba rows regrouped into Qwen3.5's four tensors:
    in_proj_qkv [q of every key head | k of every key head | v of every value head], in_proj_z,
    in_proj_b, in_proj_a (value heads in order)."""
    Hk, Hv, Dk, Dv = cfg["num_key_heads"], cfg["num_value_heads"], cfg["key_head_dim"], cfg["value_head_dim"]
    r = Hv // Hk
    qkvz = W.pop("in_proj_qkvz.weight")
    per_group = qkvz.reshape(Hk, 2 * Dk + 2 * r * Dv, -1)
    q = per_group[:, :Dk].reshape(Hk * Dk, -1)
    k = per_group[:, Dk:2 * Dk].reshape(Hk * Dk, -1)
    v = per_group[:, 2 * Dk:2 * Dk + r * Dv].reshape(Hv * Dv, -1)
    z = per_group[:, 2 * Dk + r * Dv:].reshape(Hv * Dv, -1)
    ba = W.pop("in_proj_ba.weight").reshape(Hk, 2 * r, -1)
    W["in_proj_qkv.weight"] = torch.cat([q, k, v]).contiguous()
    W["in_proj_z.weight"] = z.contiguous()
    W["in_proj_b.weight"] = ba[:, :r].reshape(Hv, -1).contiguous()
    W["in_proj_a.weight"] = ba[:, r:].reshape(Hv, -1).contiguous()
    return W


def gdn_split_layer(cfg, W, x):
    """docs/spec.md §14's Gated DeltaNet over the split projections, in float64."""
    T = x.shape[0]
    Hk, Hv, Dk, Dv = cfg["num_key_heads"], cfg["num_value_heads"], cfg["key_head_dim"], cfg["value_head_dim"]
    mixed = D.short_conv_silu(D.linear(x, W["in_proj_qkv.weight"]), W["conv1d.weight"])  # already the conv order
    q = D.l2norm(mixed[:, :Hk * Dk].reshape(T, Hk, Dk))
    k = D.l2norm(mixed[:, Hk * Dk:2 * Hk * Dk].reshape(T, Hk, Dk))
    v = mixed[:, 2 * Hk * Dk:].reshape(T, Hv, Dv)
    z = D.linear(x, W["in_proj_z.weight"]).reshape(T, Hv, Dv)
    beta = torch.sigmoid(D.linear(x, W["in_proj_b.weight"]))
    g = -torch.exp(W["A_log"]) * D.softplus(D.linear(x, W["in_proj_a.weight"]) + W["dt_bias"])
    reads = torch.arange(Hv) // (Hv // Hk)  # value head h reads key head h / (H_v / H_k)
    o, S = D.delta_rule(q[:, reads], k[:, reads], v, g, beta, 1.0 / math.sqrt(Dk))
    gate = D.silu(z)
    gated = R.rms_norm(o, W["norm.weight"], cfg.get("rms_norm_eps", 1e-6), False) * gate
    y = D.linear(gated.reshape(T, Hv * Dv), W["out_proj.weight"])
    return {"y": y, "o": o.reshape(T, Hv * Dv), "gated": gated.reshape(T, Hv * Dv), "state": S, "g": g,
            "beta": beta, "gate": gate}


def write_folder(out_dir, name, hf, prefix, layer, weights, io, gattn_config, stats=None):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf, f, indent=2)
        f.write("\n")
    R.save_safetensors(os.path.join(d, "model.safetensors"), {prefix + k: v for k, v in weights.items()},
                       {"format": "pt"})
    meta = {"prefix": prefix, "layer": str(layer), "gattn_config": json.dumps(gattn_config)}
    if stats is not None:
        meta["stats"] = json.dumps(stats)
    R.save_safetensors(os.path.join(d, "io.safetensors"), io, meta)
    print("wrote", name)


def linear_case(out_dir, name, hf, root, layer, T, shape, seed):
    d = (hf.get("text_config") or hf)["hidden_size"]
    cfg = D.gdn(name, T, d, *shape, seed)[1]
    gen = torch.Generator().manual_seed(seed)
    fused = {k: v.to(torch.bfloat16) for k, v in D.make_weights(cfg, gen, None).items()}
    x = torch.randn(T, d, generator=gen).float()
    split = split_projections(cfg, dict(fused))
    res = gdn_split_layer(cfg, {k: v.double() for k, v in split.items()}, x.double())
    ref = D.gdn_layer(cfg, {k: v.double() for k, v in fused.items()}, x.double())
    for key in ("y", "o", "gated", "state"):  # the same arithmetic as Qwen3-Next's fused layer
        assert torch.allclose(res[key], ref[key], rtol=0, atol=1e-12), (name, key)
    io = {"x": x}
    for key in ("y", "o", "gated", "state"):
        io[key] = res[key].double().contiguous()
    write_folder(out_dir, name, hf, f"{root}layers.{layer}.linear_attn.", layer, split, io, cfg, D.stats(res, T))


def full_case(out_dir, name, hf, root, layer, T, seed, gated):
    text = hf.get("text_config") or hf
    gate = {"source": "fused_q"} if gated else None
    cfg = R.gqa(name, T, text["hidden_size"], text["num_attention_heads"], text["num_key_value_heads"],
                text["head_dim"], gate, seed, qk_norm="rms_zero_centered", partial_rotary_factor=0.25,
                rope_theta=text["rope_parameters"]["rope_theta"])[1]
    gen = torch.Generator().manual_seed(seed)
    W = {k: v.to(torch.bfloat16) for k, v in R.make_weights(cfg, gen).items()}
    x = torch.randn(T, cfg["hidden_size"], generator=gen).float()
    y = R.gqa_layer(cfg, {k: v.double() for k, v in W.items()}, x.double())[0]
    write_folder(out_dir, name, hf, f"{root}layers.{layer}.self_attn.", layer, W, {"x": x, "y": y.double()},
                 R.public_config(cfg))


def main():
    out = sys.argv[1]
    L, F = "linear_attention", "full_attention"
    six = [L, L, L, F, L, F]
    # qwen3_5_text at the top level: H_k 2, H_v 8 (r = 4), D_k 16, D_v 24; float32 state declared.
    text = text_config("qwen3_5_text", 64, 6, layer_types=six, linear=(2, 8, 16, 24), mamba_ssm_dtype="float32")
    linear_case(out, "extra_hf_qwen3_5_text_linear_r4", text, "model.", 2, 37, (2, 8, 16, 24), 401)
    # qwen3_5_moe wrapper: H_k = H_v = 4 (r = 1), D_k 32, D_v 16.
    moe_text = text_config("qwen3_5_moe_text", 64, 4, layer_types=[F, L, L, F], linear=(4, 4, 32, 16), **MOE_KEYS)
    linear_case(out, "extra_hf_qwen3_5_moe_linear_mha", wrapper(moe_text, True), "model.language_model.", 1, 29,
                (4, 4, 32, 16), 402)
    # qwen3_5_moe wrapper, full attention at layer 7 of 8 by full_attention_interval (no layer_types).
    moe_full = text_config("qwen3_5_moe_text", 64, 8, interval=4, Hq=8, Hkv=2, Dh=32, theta=1e6, mrope=(2, 1, 1),
                           linear=(2, 4, 16, 16), **MOE_KEYS)
    full_case(out, "extra_hf_qwen3_5_moe_full_7", wrapper(moe_full, True), "model.language_model.", 7, 19, 403, True)
    # qwen3_5_text, attn_output_gate false: q_proj without the gate half, otherwise the same layer.
    ungated = text_config("qwen3_5_text", 64, 4, interval=4, Hq=4, Hkv=4, Dh=16, attn_output_gate=False)
    full_case(out, "extra_hf_qwen3_5_text_ungated", ungated, "model.", 3, 13, 404, False)


if __name__ == "__main__":
    main()
