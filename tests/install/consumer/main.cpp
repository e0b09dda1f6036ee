// A downstream program built against an *installed* gattn, written as the README's usage section says:
// find_package(gattn), <gattn/io.hpp>, any_layer from a config file, make_cache, prefill. It runs
// each Hugging Face folder given on the command line and checks y against the folder's float64
// reference, and it fails if the installed target did not bring OpenMP along.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <gattn/io.hpp>

namespace {

/// max|y - y_ref| / max|y_ref| for one folder (config.json, model.safetensors, io.safetensors).
double run_folder(const std::string& dir) {
  const auto io = gattn::io::safetensors_file::open(dir + "/io.safetensors");
  const auto weights = gattn::io::checkpoint::open(dir);  // a file, an index or a directory

  // The layer the folder holds, "model.layers.{i}.self_attn.": a hybrid model's config (Qwen3-Next)
  // describes layers of two kinds, so the index says which one is meant.
  const std::string prefix = io.metadata().at("prefix");
  const gattn::index index = std::stol(prefix.substr(std::string("model.layers.").size()));
  gattn::any_layer layer(gattn::io::load_layer_config(dir + "/config.json", index),
                         gattn::io::load_weights(weights, prefix));
  const std::vector<float> x = io.read_f32("x");
  const std::vector<double> y_ref = io.read_f64("y");
  const gattn::index d = layer.hidden(), T = gattn::index(x.size()) / d;
  std::vector<float> y(x.size());

  gattn::kv_cache cache = layer.make_cache(/*capacity=*/T);
  const gattn::index prompt = T / 2;  // prefill half, then decode token by token
  layer.prefill({x.data(), prompt, d, d}, cache, {y.data(), prompt, d, d});
  for (gattn::index t = prompt; t < T; ++t)
    layer.decode({x.data() + t * d, 1, d, d}, cache, {y.data() + t * d, 1, d, d});

  double err = 0, scale = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    err = std::max(err, std::fabs(double(y[i]) - y_ref[i]));
    scale = std::max(scale, std::fabs(y_ref[i]));
  }
  return err / scale;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef _OPENMP
  std::printf("gattn consumer: OpenMP with %d threads, arch %s\n", omp_get_max_threads(),
              gattn::default_arch_name().c_str());
#else
  std::printf("gattn consumer: built without OpenMP, but the installed gattn::gattn should bring it\n");
  return 1;
#endif
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    try {
      const double rel = run_folder(argv[i]);
      const bool ok = rel <= 1e-4;
      std::printf("%s: max|y - y_ref| / max|y_ref| = %.3g %s\n", argv[i], rel, ok ? "ok" : "FAILED");
      failures += ok ? 0 : 1;
    } catch (const gattn::error& e) {
      std::printf("%s: %s\n", argv[i], e.what());
      ++failures;
    }
  }
  return failures == 0 && argc > 1 ? 0 : 1;
}
