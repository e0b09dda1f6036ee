// The README's usage example: a Qwen3-Next-shaped gated GQA layer, prefill then decode.
#include <cstdio>
#include <random>
#include <vector>

#include <gattn/gattn.hpp>

int main() {
  gattn::gqa_config cfg;  // C++17: no designated initialisers
  cfg.hidden = 256;
  cfg.q_heads = 4;
  cfg.kv_heads = 2;
  cfg.head_dim = 64;
  cfg.qk_norm = gattn::norm_kind::rms_zero_centered;
  cfg.partial_rotary_factor = 0.25;
  cfg.rope.rotary_dim = gattn::rotary_width(cfg.head_dim, cfg.partial_rotary_factor);
  cfg.gate.enabled = true;  // G1, elementwise, sigmoid, from its own g_proj
  cfg.gate.position = gattn::gate_position::g1;
  cfg.gate.granularity = gattn::granularity::elementwise;

  // Weights by name in nn.Linear layout [out, in]; normally io::load_weights(file, prefix).
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  auto random = [&](gattn::index rows, gattn::index cols) {
    std::vector<float> v(std::size_t(rows * cols));
    for (float& e : v) e = normal(rng);
    return v;
  };
  const gattn::index d = cfg.hidden, qd = cfg.q_heads * cfg.head_dim, kvd = cfg.kv_heads * cfg.head_dim;
  gattn::weight_map w;
  w.set("q_proj.weight", {qd, d}, random(qd, d));
  w.set("k_proj.weight", {kvd, d}, random(kvd, d));
  w.set("v_proj.weight", {kvd, d}, random(kvd, d));
  w.set("g_proj.weight", {qd, d}, random(qd, d));
  w.set("o_proj.weight", {d, qd}, random(d, qd));
  w.set("q_norm.weight", {cfg.head_dim}, std::vector<float>(std::size_t(cfg.head_dim), 0.0f));
  w.set("k_norm.weight", {cfg.head_dim}, std::vector<float>(std::size_t(cfg.head_dim), 0.0f));

  gattn::gqa_layer layer(cfg, w);
  gattn::kv_cache cache(cfg, /*capacity=*/64);
  const gattn::index prompt = 16;
  std::vector<float> x(std::size_t(prompt * d), 0.1f), y(x.size());
  layer.prefill({x.data(), prompt, d, d}, cache, {y.data(), prompt, d, d});  // [T, d] row-major views
  std::vector<float> token(std::size_t(d), 0.2f);
  std::vector<float> out(static_cast<std::size_t>(d));
  layer.decode({token.data(), 1, d, d}, cache, {out.data(), 1, d, d});
  std::printf("cached %ld tokens; y[0] = %.6f (arch %s)\n", long(cache.size()), double(out[0]),
              gattn::default_arch_name().c_str());
  return 0;
}
