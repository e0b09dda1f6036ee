// ctest openmp.consumer_without_openmp: a consumer built against gattn::headers, without -fopenmp,
// with -Wall -Wextra -Werror: the headers compile warning-free, a default execution_context runs
// on the calling thread, and one layer call gives the same output as the serial context's.
#ifdef _OPENMP
#error "this test must be compiled without OpenMP (it links gattn::headers)"
#endif

#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include <gattn/attention/any_layer.hpp>

namespace {

std::vector<float> values(gattn::index n, unsigned seed, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  unsigned s = seed;
  for (float& e : v) {
    s = s * 1664525u + 1013904223u;
    e = scale * float(int(s >> 9) % 2001 - 1000) / 1000.0f;
  }
  return v;
}

}  // namespace

int main() {
  gattn::gqa_config c;
  c.hidden = 32;
  c.q_heads = 4;
  c.kv_heads = 2;
  c.head_dim = 8;
  c.rope.rotary_dim = 8;
  c.gate.enabled = true;
  gattn::weight_map w;
  unsigned seed = 1;
  for (const auto& [name, out, in] : {std::make_tuple("q_proj", 32, 32), std::make_tuple("k_proj", 16, 32),
                                      std::make_tuple("v_proj", 16, 32), std::make_tuple("o_proj", 32, 32),
                                      std::make_tuple("g_proj", 32, 32)})
    w.set(std::string(name) + ".weight", {out, in}, values(out * in, seed++, 0.2f));
  const gattn::any_layer layer(c, w);

  const gattn::index T = 6, d = c.hidden;
  const std::vector<float> x = values(T * d, 99, 1.0f);
  std::vector<float> y(x.size()), y_serial(x.size());
  const gattn::execution_context fallback;
  layer.forward({x.data(), T, d, d}, {y.data(), T, d, d}, nullptr);
  layer.forward({x.data(), T, d, d}, {y_serial.data(), T, d, d}, nullptr, gattn::execution_context::serial());
  double norm = 0;
  for (float v : y) norm += double(v) * v;
  const bool same = y == y_serial, finite = std::isfinite(norm) && norm > 0;
  std::printf("gattn without OpenMP: arch %s, default context concurrency %d, |y|^2 = %.6g, same as serial: %s\n",
              gattn::default_arch_name().c_str(), fallback.concurrency(), norm, same ? "yes" : "no");
  return same && finite && fallback.concurrency() == 1 ? 0 : 1;
}
