// gattn: run a gated attention layer from files, print its cost model, or describe the build.
//
//   gattn run  --config C.json --weights W.safetensors --input X.safetensors --output Y.safetensors
//              [--prefix P] [--decode-from K] [--stats S.json] [--reference] [--mla-form F]
//   gattn cost --config C.json [--layers L] [--context N] [--tokens N]
//   gattn info [--weights W.safetensors]
//
// Exit status: 0 success, 1 bad input (file, config, weights), 2 bad usage, 3 internal error.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "gattn/gattn.hpp"

#ifndef GATTN_VERSION
#define GATTN_VERSION "unknown"
#endif

namespace {

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* const usage_text =
    "usage:\n"
    "  gattn run  --config C.json --weights W.safetensors --input X.safetensors --output Y.safetensors\n"
    "             [--prefix P] [--decode-from K] [--stats S.json] [--reference]\n"
    "             [--mla-form automatic|absorbed|expanded]\n"
    "  gattn cost --config C.json [--layers L] [--context N] [--tokens N]\n"
    "  gattn info [--weights W.safetensors]\n";

/// --key value pairs and bare --flags; anything else is a usage error.
struct arguments {
  std::map<std::string, std::string> values;
  std::vector<std::string> flags;

  arguments(int argc, char** argv, int first, const std::vector<std::string>& known_values,
            const std::vector<std::string>& known_flags) {
    for (int i = first; i < argc; ++i) {
      const std::string a = argv[i];
      auto is = [&](const std::vector<std::string>& list) {
        for (const auto& k : list)
          if (k == a) return true;
        return false;
      };
      if (is(known_flags)) {
        flags.push_back(a);
      } else if (is(known_values)) {
        if (i + 1 >= argc) throw usage_error("option " + a + " needs a value");
        if (values.count(a)) throw usage_error("option " + a + " given twice");
        values[a] = argv[++i];
      } else {
        throw usage_error("unknown argument '" + a + "'");
      }
    }
  }
  bool has(const std::string& k) const { return values.count(k) != 0; }
  bool flag(const std::string& k) const {
    for (const auto& f : flags)
      if (f == k) return true;
    return false;
  }
  const std::string& need(const std::string& k) const {
    auto it = values.find(k);
    if (it == values.end()) throw usage_error("missing required option " + k);
    return it->second;
  }
  gattn::index integer(const std::string& k, gattn::index fallback, gattn::index min_value) const {
    auto it = values.find(k);
    if (it == values.end()) return fallback;
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(it->second, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != it->second.size() || used == 0)
      throw usage_error("option " + k + " needs an integer, got '" + it->second + "'");
    if (v < min_value || v > (1LL << 40))
      throw usage_error("option " + k + "=" + it->second + " is out of range (min " + std::to_string(min_value) + ")");
    return gattn::index(v);
  }
};

/// The checkpoint prefix: --prefix, else the one under which "o_proj.weight" appears exactly once.
std::string find_prefix(const gattn::io::checkpoint& file, const arguments& args) {
  if (args.has("--prefix")) return args.values.at("--prefix");
  std::vector<std::string> found;
  const std::string leaf = "o_proj.weight";
  for (const auto& t : file.tensors())
    if (t.name.size() >= leaf.size() && t.name.compare(t.name.size() - leaf.size(), leaf.size(), leaf) == 0)
      found.push_back(t.name.substr(0, t.name.size() - leaf.size()));
  if (found.size() == 1) return found[0];
  if (found.empty()) return "";  // the layer then names the missing weight
  std::string list;
  for (std::size_t i = 0; i < found.size() && i < 4; ++i) list += (i ? ", '" : "'") + found[i] + "'";
  throw gattn::weight_error("the weights hold " + std::to_string(found.size()) + " layers (prefixes " + list +
                            (found.size() > 4 ? ", ..." : "") + "); choose one with --prefix");
}

int run_command(int argc, char** argv) {
  const arguments args(argc, argv, 2,
                       {"--config", "--weights", "--input", "--output", "--prefix", "--decode-from", "--stats",
                        "--mla-form"},
                       {"--reference"});
  const gattn::layer_config cfg = gattn::io::load_layer_config(args.need("--config"));
  const auto weights_file = gattn::io::checkpoint::open(args.need("--weights"));  // a file, an index or a directory
  const std::string prefix = find_prefix(weights_file, args);
  gattn::any_layer layer(cfg, gattn::io::load_weights(weights_file, prefix, /*skip_non_float=*/true));
  if (args.flag("--reference")) layer.set_backend(gattn::sdpa_backend::reference);
  if (args.has("--mla-form")) {
    const std::string f = args.values.at("--mla-form");
    if (f == "absorbed") layer.set_mla_form(gattn::mla_form::absorbed);
    else if (f == "expanded") layer.set_mla_form(gattn::mla_form::expanded);
    else if (f != "automatic") throw usage_error("--mla-form must be automatic, absorbed or expanded, got '" + f + "'");
  }

  const std::string input_path = args.need("--input");
  const auto input = gattn::io::safetensors_file::open(input_path);
  const auto& xi = input.info("x");
  const gattn::index d = layer.hidden();
  gattn::detail::require<gattn::shape_error>(xi.shape.size() == 2 && xi.shape[1] == d, input_path, ": 'x' has shape ",
                                             gattn::io::detail::shape_string(xi.shape), ", expected [T, ", d, "]");
  const gattn::index T = xi.shape[0];
  const std::vector<float> x = input.read_f32("x");
  std::vector<float> y(std::size_t(T * d));
  const std::string output_path = args.need("--output");

  gattn::statistics_observer observer;
  gattn::statistics_observer* stats = args.has("--stats") ? &observer : nullptr;
  if (!args.has("--decode-from")) {
    layer.forward({x.data(), T, d, d}, {y.data(), T, d, d}, stats);
  } else {
    const gattn::index k = args.integer("--decode-from", 0, 0);
    if (k > T) throw usage_error("--decode-from " + std::to_string(k) + " is past the input's " + std::to_string(T) + " tokens");
    gattn::detail::require<gattn::cache_error>(layer.causal(), "--decode-from needs a causal layer (the config says causal=false)");
    gattn::kv_cache cache = layer.make_cache(T);
    if (k > 0) layer.prefill({x.data(), k, d, d}, cache, {y.data(), k, d, d}, stats);
    for (gattn::index t = k; t < T; ++t)
      layer.decode({x.data() + t * d, 1, d, d}, cache, {y.data() + t * d, 1, d, d}, stats);
  }
  gattn::io::write_safetensors(output_path, {{"y", gattn::io::dtype::f32, {T, d}, y.data()}},
                               {{"producer", std::string("gattn ") + GATTN_VERSION}});
  if (stats) {
    const std::string path = args.values.at("--stats");
    std::ofstream out(path);
    gattn::detail::require<gattn::format_error>(bool(out), path, ": cannot open for writing");
    out << observer.result().to_json().dump(2) << "\n";
    gattn::detail::require<gattn::format_error>(bool(out), path, ": write error");
  }
  return 0;
}

int cost_command(int argc, char** argv) {
  const arguments args(argc, argv, 2, {"--config", "--layers", "--context", "--tokens"}, {});
  const gattn::layer_config cfg = gattn::io::load_layer_config(args.need("--config"));
  const gattn::index layers = args.integer("--layers", 1, 1);
  const gattn::index context = args.integer("--context", 4096, 0);
  const gattn::index tokens = args.integer("--tokens", 4096, 0);
  const gattn::layer_cost c = std::visit([](const auto& l) { return gattn::cost(l); }, cfg);
  std::cout << gattn::format_cost_report(c, layers, context, tokens);
  return 0;
}

int info_command(int argc, char** argv) {
  const arguments args(argc, argv, 2, {"--weights"}, {});
  std::cout << "gattn " << GATTN_VERSION << "\n"
            << "simd arch: " << gattn::default_arch_name() << "\n"
#ifdef _OPENMP
            << "threads: OpenMP, " << omp_get_max_threads() << " available\n";
#else
            << "threads: serial build (no OpenMP)\n";
#endif
  if (args.has("--weights")) {
    const auto file = gattn::io::checkpoint::open(args.values.at("--weights"));
    std::cout << args.values.at("--weights") << ": " << file.tensors().size() << " tensors\n";
    for (const auto& t : file.tensors())
      std::cout << "  " << t.name << "  " << gattn::io::dtype_name(t.type) << "  "
                << gattn::io::detail::shape_string(t.shape) << "\n";
    for (const auto& [k, v] : file.metadata())
      std::cout << "  metadata " << k << ": " << (v.size() > 120 ? v.substr(0, 117) + "..." : v) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) throw usage_error("missing command");
    const std::string cmd = argv[1];
    if (cmd == "run") return run_command(argc, argv);
    if (cmd == "cost") return cost_command(argc, argv);
    if (cmd == "info") return info_command(argc, argv);
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      std::cout << usage_text;
      return 0;
    }
    throw usage_error("unknown command '" + cmd + "'");
  } catch (const usage_error& e) {
    std::cerr << "gattn: " << e.what() << "\n" << usage_text;
    return 2;
  } catch (const gattn::error& e) {
    std::cerr << "gattn: error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "gattn: error: out of memory\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "gattn: internal error: " << e.what() << "\n";
    return 3;
  }
}
