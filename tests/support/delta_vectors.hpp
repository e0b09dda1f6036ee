// Loads one gated delta-rule vector case (docs/spec.md §13): config, weights, x, and the float64
// expectations y, o, gated, state. Flat files (tests/data/NAME.safetensors) carry the weights beside
// them; Hugging Face folders keep prefixed bf16 weights in model.safetensors and the rest in io.safetensors.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gattn/io/delta_config.hpp"
#include "gattn/io/load_weights.hpp"
#include "gattn/io/safetensors.hpp"

namespace gattn::test {

struct delta_case {
  std::string name;
  delta_config config;
  weight_map weights;
  std::vector<float> x;
  std::vector<double> y, o, gated, state;
  index tokens = 0, hidden = 0;
};

namespace delta_vectors_detail {

inline bool is_io_tensor(const std::string& n) {
  for (const char* o : {"x", "y", "o", "gated", "state"})
    if (n == o) return true;
  return false;
}

/// x and the expectations of `file`, and the config in its metadata entry `config_key`.
inline void read_io(const io::safetensors_file& file, const char* config_key, delta_case& c) {
  c.config = io::detail::parse_delta_config(nlohmann::json::parse(file.metadata().at(config_key)));
  c.x = file.read_f32("x");
  c.tokens = file.info("x").shape[0];
  c.hidden = file.info("x").shape[1];
  c.y = file.read_f64("y");
  c.o = file.read_f64("o");
  c.gated = file.read_f64("gated");
  c.state = file.read_f64("state");
}

}  // namespace delta_vectors_detail

inline std::string delta_data_path(const std::string& rel) { return std::string(GATTN_TEST_DATA) + "/" + rel; }

/// tests/data/NAME.safetensors: fp32 weights without prefix, x, y, o, gated, state; metadata `config`.
inline delta_case load_delta_case(const std::string& name) {
  const auto file = io::safetensors_file::open(delta_data_path(name + ".safetensors"));
  delta_case c;
  c.name = name;
  delta_vectors_detail::read_io(file, "config", c);
  const weight_map all = io::load_weights(file);
  for (const auto& [n, t] : all.all())
    if (!delta_vectors_detail::is_io_tensor(n)) c.weights.set(n, t);
  return c;
}

/// tests/data/DIR/: model.safetensors (bf16, names under the prefix io.safetensors' metadata gives)
/// and io.safetensors (x, expectations, metadata `gattn_config`).
inline delta_case load_hf_delta_case(const std::string& dir) {
  const auto io_file = io::safetensors_file::open(delta_data_path(dir + "/io.safetensors"));
  delta_case c;
  c.name = dir;
  delta_vectors_detail::read_io(io_file, "gattn_config", c);
  const auto model = io::safetensors_file::open(delta_data_path(dir + "/model.safetensors"));
  c.weights = io::load_weights(model, io_file.metadata().at("prefix"));
  return c;
}

/// The delta-rule cases of tests/data: the public vectors, then tests/data/make_extra_delta_vectors.py's.
inline std::vector<std::string> delta_case_names() {
  return {"delta_gdn", "delta_gdn_mha", "delta_kda", "delta_kda_full_gate_bound",
          "extra_delta_kda_full_gate_biases", "extra_delta_kda_low_rank_bias_bound", "extra_delta_gdn_r4_dk_ne_dv",
          "extra_delta_gdn_strong_decay", "extra_delta_kda_strong_decay", "extra_delta_gdn_t1", "extra_delta_kda_t1"};
}

/// max |a − b| / max(1, max |b|) over two arrays of equal length (infinity when the lengths differ).
inline double delta_relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 1e300;
  double diff = 0, scale = 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

}  // namespace gattn::test
