// The demo: a Qwen3-Next-shaped full-attention layer (d 2048, H_q 16, H_kv 2, D 256, partial RoPE
// 0.25, elementwise sigmoid G1 gate fused into q_proj) with random weights; prefill, then decode
// token by token; prints throughput and the paper's gate statistics.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gattn/gattn.hpp>

namespace {

gattn::index arg(int argc, char** argv, const char* name, gattn::index fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atol(argv[i + 1]);
  return fallback;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const gattn::index prompt = arg(argc, argv, "--prompt", 512);
  const gattn::index steps = arg(argc, argv, "--decode", 64);
  if (prompt < 1 || steps < 0) {
    std::fprintf(stderr, "usage: gattn_demo [--prompt N>=1] [--decode N>=0]\n");
    return 2;
  }

  gattn::gqa_config cfg;
  cfg.hidden = 2048;
  cfg.q_heads = 16;
  cfg.kv_heads = 2;
  cfg.head_dim = 256;
  cfg.qk_norm = gattn::norm_kind::rms_zero_centered;
  cfg.partial_rotary_factor = 0.25;
  cfg.rope.theta = 1e7;
  cfg.rope.rotary_dim = gattn::rotary_width(cfg.head_dim, cfg.partial_rotary_factor);
  cfg.gate.enabled = true;
  cfg.gate.source = gattn::gate_source::fused_q;  // Qwen3-Next: per head [q_h | u_h] in q_proj
  cfg.gate.layout = gattn::fused_layout::per_head;

  const gattn::index d = cfg.hidden, D = cfg.head_dim, Hq = cfg.q_heads, Hkv = cfg.kv_heads;
  std::mt19937 rng(2025);
  auto random = [&](gattn::index rows, gattn::index cols, float scale) {
    std::normal_distribution<float> n(0.0f, scale);
    std::vector<float> v(std::size_t(rows * cols));
    for (float& e : v) e = n(rng);
    return v;
  };
  const float s = 1.0f / std::sqrt(float(d));
  gattn::weight_map w;
  w.set("q_proj.weight", {2 * Hq * D, d}, random(2 * Hq * D, d, s));
  w.set("k_proj.weight", {Hkv * D, d}, random(Hkv * D, d, s));
  w.set("v_proj.weight", {Hkv * D, d}, random(Hkv * D, d, s));
  w.set("o_proj.weight", {d, Hq * D}, random(d, Hq * D, 1.0f / std::sqrt(float(Hq * D))));
  w.set("q_norm.weight", {D}, random(1, D, 0.1f));
  w.set("k_norm.weight", {D}, random(1, D, 0.1f));

  gattn::gqa_layer layer(cfg, w);
  gattn::kv_cache cache(cfg, prompt + steps);
  const auto x = random(prompt + steps, d, 1.0f);
  std::vector<float> y(x.size());
  gattn::statistics_observer stats;

  std::printf("gattn demo: Qwen3-Next full-attention layer, d=%ld H_q=%ld H_kv=%ld D=%ld, RoPE on %ld of %ld "
              "channels, elementwise sigmoid G1 gate (fused q_proj)\nsimd arch: %s\n",
              long(d), long(Hq), long(Hkv), long(D), long(cfg.rope.rotary_dim), long(D),
              gattn::default_arch_name().c_str());
  auto t0 = std::chrono::steady_clock::now();
  layer.prefill({x.data(), prompt, d, d}, cache, {y.data(), prompt, d, d});
  const double t_prefill = seconds_since(t0);
  std::printf("prefill %5ld tokens: %8.1f ms  (%8.1f tokens/s)\n", long(prompt), 1e3 * t_prefill,
              double(prompt) / t_prefill);

  t0 = std::chrono::steady_clock::now();
  for (gattn::index t = prompt; t < prompt + steps; ++t)
    layer.decode({x.data() + t * d, 1, d, d}, cache, {y.data() + t * d, 1, d, d});
  const double t_decode = seconds_since(t0);
  if (steps > 0)
    std::printf("decode  %5ld tokens: %8.1f ms  (%8.1f tokens/s, one layer, cache up to %ld)\n", long(steps),
                1e3 * t_decode, double(steps) / t_decode, long(cache.size()));

  // Statistics of the whole sequence (a second pass with the observer on, so the timing above is clean).
  gattn::kv_cache cache2(cfg, prompt + steps);
  layer.prefill({x.data(), prompt + steps, d, d}, cache2, {y.data(), prompt + steps, d, d}, &stats);
  std::printf("gate statistics (docs/spec.md §6):\n%s\n", stats.result().to_json().dump(2).c_str());
  return 0;
}
