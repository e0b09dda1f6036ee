# Extra gated delta-rule cases beyond the shared vectors (docs/spec.md §13): biases on every projection,
# a low-rank gate with biases and A_log stored [H], H_v/H_k = 4 with D_k != D_v and a 3-tap conv, decay
# so strong that a 64-token chunk sums below -1000, and single tokens. Made with the shared generator:
#   /usr/bin/python3 tests/data/make_extra_delta_vectors.py OUT_DIR DIR_OF_deltagen.py   (needs python3-torch)
import json
import os
import sys

import torch

sys.path.insert(0, sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(__file__)))
import deltagen as D  # noqa: E402
from deltagen import gdn, kda  # noqa: E402

torch.set_default_dtype(torch.float64)

# The generator's layers call linear(x, W[name + ".weight"]) without a bias for every projection but
# the KDA gate's; the spec uses any bias present. Its `linear` is swapped for one that finds the bias
# of the weight it is handed (the weights' float64 copies are made once per case, so identity works).
_BIAS_OF = {}
_plain_linear = D.linear


def _linear_with_bias(x, w, b=None):
    return _plain_linear(x, w, b if b is not None else _BIAS_OF.get(id(w)))


D.linear = _linear_with_bias

# name, config, T, seed, decay init, projections that get a bias, A_log stored as [H] instead of [1, 1, H, 1]
STRONG = {"a_range": (1.0, 16.0), "dt": ("target", -30.0, 0.3), "f_scale": 0.05}
CASES = [
    (kda("extra_delta_kda_full_gate_biases", 37, 48, 3, 16, 24, 301, {"source": "separate"}),
     ["q_proj", "k_proj", "v_proj", "f_a_proj", "f_b_proj", "b_proj", "g_proj", "o_proj"], False),
    (kda("extra_delta_kda_low_rank_bias_bound", 29, 48, 2, 16, 16, 302, {"source": "low_rank", "rank": 6},
         "lower_bound", -2.5, init=D.LOWER_BOUND_INIT), ["g_a_proj", "g_b_proj"], True),
    (gdn("extra_delta_gdn_r4_dk_ne_dv", 33, 64, 1, 4, 16, 24, 303, conv_kernel=3),
     ["in_proj_qkvz", "in_proj_ba", "out_proj"], False),
    (gdn("extra_delta_gdn_strong_decay", 140, 32, 1, 2, 16, 16, 304, init=STRONG), [], False),
    (kda("extra_delta_kda_strong_decay", 130, 32, 2, 16, 16, 305, {"source": "low_rank", "rank": 8}, init=STRONG),
     [], False),
    (gdn("extra_delta_gdn_t1", 1, 32, 2, 4, 16, 8, 306), [], False),
    (kda("extra_delta_kda_t1", 1, 32, 2, 8, 16, 307, {"source": "separate"}), ["g_proj"], False),
]


def run(case, biased, a_log_flat, out_dir):
    name, cfg, T, seed, init = case
    gen = torch.Generator().manual_seed(seed)
    W = D.make_weights(cfg, gen, init)
    for p in biased:
        out = W[p + ".weight"].shape[0]
        W[p + ".bias"] = (0.5 * torch.randn(out, generator=gen)).float()
    if a_log_flat:
        W["A_log"] = W["A_log"].reshape(-1).contiguous()
    x = torch.randn(T, cfg["hidden_size"], generator=gen).float()
    Wd = {k: v.double() for k, v in W.items()}
    _BIAS_OF.clear()
    for p in biased:
        _BIAS_OF[id(Wd[p + ".weight"])] = Wd[p + ".bias"]
    res = D.delta_layer(cfg, Wd, x.double())
    tensors = dict(W)
    tensors["x"] = x
    for k in ("y", "o", "gated", "state"):
        tensors[k] = res[k].double().contiguous()
    st = D.stats(res, T)
    D.save_safetensors(os.path.join(out_dir, name + ".safetensors"), tensors,
                       {"config": json.dumps(cfg), "stats": json.dumps(st)})
    with open(os.path.join(out_dir, name + ".config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    print("wrote", name, {k: st[k] for k in ("g_min", "g_max", "max_abs_output") if k in st},
          "chunk64_sum_g_max", st.get("chunk64_sum_g_max"))


def main():
    os.makedirs(sys.argv[1], exist_ok=True)
    for case, biased, a_log_flat in CASES:
        run(case, biased, a_log_flat, sys.argv[1])


if __name__ == "__main__":
    main()
