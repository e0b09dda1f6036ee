// gattn: run a gated attention layer from files, print its cost model, or describe the build.
//
//   gattn run  --config C.json --weights W.safetensors --input X.safetensors [--output Y.safetensors]
//              [--layer N] [--prefix P] [--decode-from K] [--stats S.json] [--check [--tol R]]
//              [--reference] [--mla-form F] [--kv-dtype T] [--kv-numerics M] [--numerics M] [--quiet]
//              [--batch-lengths L1,L2,... [--block-size B]]
//   gattn cost --config C.json [--layers L] [--context N] [--tokens N] [--weight-dtype T] [--kv-dtype T]
//   gattn info [--weights W.safetensors]
//   gattn --version | gattn --help | gattn <command> --help
//
// Exit status: 0 success, 1 bad input (file, config, weights, failed write, failed --check),
// 2 bad usage, 3 internal error.
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "gattn/baseline/sdpa_backend.hpp"
#include "gattn/core/cpu.hpp"
#include "gattn/simd/bf16_dot.hpp"
#include "gattn/io.hpp"
#include "gattn/linalg/packed_gemm_fast.hpp"
#include "gattn/simd/dispatch.hpp"
#include "cli_batch.hpp"
#include "cli_entry.hpp"
#include "cli_layers.hpp"
#include "cli_tp.hpp"

#ifndef GATTN_VERSION
#define GATTN_VERSION "unknown"
#endif

namespace {

/// Bad usage: the message, then a pointer to the command's --help (exit 2).
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Bad input that is not the library's to report: an unwritable output, a failed --check (exit 1).
struct run_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* const overview_text =
    "usage: gattn <command> [options]\n"
    "  run    run a layer on an input file and write its output\n"
    "  cost   print a layer's parameter, FLOP and cache cost\n"
    "  info   print the build (version, SIMD arch, threads) and a safetensors file's tensors\n"
    "'gattn <command> --help' describes a command; 'gattn --version' prints the version.\n";

const char* const run_help =
    "usage: gattn run --config C.json --weights W --input X.safetensors [--output Y.safetensors]\n"
    "  Runs the layer on 'x' [T, d] from the input file and writes 'y' [T, d] (F32).\n"
    "  --config C           gattn config, or a Hugging Face config.json (has 'model_type')\n"
    "  --weights W          the checkpoint: one .safetensors file, a sharded model.safetensors.index.json\n"
    "                       (its shards beside it), or a directory holding either (the index, else\n"
    "                       model.safetensors, else its one *.safetensors file)\n"
    "  --layer N            Hugging Face models: layer N (a softmax-attention layer, weights\n"
    "                       model.layers.N.self_attn.*, or a Gated DeltaNet / KDA layer, weights\n"
    "                       model.layers.N.linear_attn.* (Qwen3-Next, Qwen3.5) or .self_attn.* (Kimi);\n"
    "                       a Qwen3.5 multimodal checkpoint's under model.language_model.layers.N.). A\n"
    "                       hybrid model (Qwen3-Next, Qwen3.5, Kimi Linear) needs it unless the weights\n"
    "                       hold one layer\n"
    "  --prefix P           weight-name prefix (default: the layer's, else found when the file holds one layer)\n"
    "  --output Y           where to write 'y'; optional with --check\n"
    "  --decode-from K      prefill K tokens, then decode the rest one at a time through the KV cache\n"
    "                       (a delta-rule layer: through its recurrent state)\n"
    "  --stats S.json       write the paper's statistics (docs/spec.md §6) as JSON\n"
    "  --check              compare with 'y' in the input file: prints max|dy|/max|y|, exit 1 above --tol\n"
    "  --tol R              --check tolerance (default docs/spec.md §10's for the cache: 5e-4 for a bf16\n"
    "                       cache, 1e-2 with --kv-numerics fast on a bf16/f16 cache or with numerics\n"
    "                       fast, else 1e-4)\n"
    "  --reference          run SDPA on the double-precision oracle\n"
    "  --mla-form F         automatic, absorbed or expanded (MLA)\n"
    "  --kv-dtype T         KV-cache element type f32, bf16 or f16 (overrides the config's kv_cache_dtype)\n"
    "  --kv-numerics M      exact or fast (docs/spec.md §10)\n"
    "  --numerics M         exact or fast: fast runs the layer's projections in bf16 operands, fp32\n"
    "                       accumulation (docs/spec.md §10; overrides the config's numerics)\n"
    "  --quiet              no summary line on stderr\n"
    "  --batch-lengths L,.. run the prefixes x[:L1], x[:L2], ... as one batch (each L in 1..T): a batched\n"
    "                       prefill of ceil(L/2) tokens, then batched decode steps; writes y.0, y.1, ...\n"
    "                       and --check compares y.s with y[:L_s]\n"
    "  --block-size B       paged KV-cache block size for --batch-lengths (default 16; a block longer than\n"
    "                       the longest length is clamped to it; a delta-rule layer keeps one state slot\n"
    "                       per sequence instead)\n";

const char* const cost_help =
    "usage: gattn cost --config C.json [--layers L] [--context N] [--tokens N] [--weight-dtype T] [--kv-dtype T]\n"
    "  Prints parameters per projection, gate parameters x layers (the paper's Table 1), weight bytes,\n"
    "  FLOPs per token at N keys of context, KV-cache bytes per token and gate activation bytes for N tokens.\n"
    "  A hybrid model (softmax and gated delta-rule layers) is counted by kind, then in total, with the\n"
    "  memory one sequence holds at N keys of context (KV caches beside the fixed recurrent states).\n"
    "  --layers L         layers to count (default: the config's gattn layers when it says which, else 1)\n"
    "  --context N        keys of context for FLOPs per token (default 4096)\n"
    "  --tokens N         tokens of one sequence for activation bytes (default 4096)\n"
    "  --weight-dtype T   weight element type f32, bf16 or f16 for the weight bytes (default: a Hugging\n"
    "                     Face config's torch_dtype, else f32)\n"
    "  --kv-dtype T       KV-cache element type f32, bf16 or f16 (overrides the config's kv_cache_dtype)\n";

const char* const info_help =
    "usage: gattn info [--weights W]\n"
    "  Prints the version, the SIMD arch, the CPU features the build uses and this CPU has, and the\n"
    "  threads; with --weights, the file's tensors and metadata, the layers they hold (each found by its\n"
    "  output projection, with its kind), and the layer types of the config.json beside the weights\n"
    "  (softmax attention, Gated DeltaNet, KDA).\n";

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
  double positive_number(const std::string& k, double fallback) const {
    auto it = values.find(k);
    if (it == values.end()) return fallback;
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(it->second, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != it->second.size() || used == 0 || !(v > 0) || !std::isfinite(v))
      throw usage_error("option " + k + " needs a positive number, got '" + it->second + "'");
    return v;
  }
  /// The value of option `k` spelled as one of `values` (their to_string()), else `fallback`.
  template <class Enum>
  Enum choice(const std::string& k, std::initializer_list<Enum> choices, Enum fallback) const {
    auto it = values.find(k);
    if (it == values.end()) return fallback;
    if (const auto v = gattn::io::detail::enum_named(it->second, choices)) return *v;
    throw usage_error("option " + k + " must be " + gattn::io::detail::enum_names(choices) + ", got '" +
                      it->second + "'");
  }
};

/// The checkpoint prefix: --prefix, else that of the one layer the weights hold (tools/cli_layers.hpp:
/// every layer kind is found by its own weights).
std::string find_prefix(const gattn::io::checkpoint& file, const arguments& args) {
  if (args.has("--prefix")) return args.values.at("--prefix");
  const std::vector<gattn::cli::held_layer> found = gattn::cli::layers_in(file);
  if (found.size() == 1) return found[0].prefix;
  if (found.empty()) return "";  // the layer then names the missing weight
  std::string list;
  for (std::size_t i = 0; i < found.size() && i < 4; ++i) list += (i ? ", '" : "'") + found[i].prefix + "'";
  throw gattn::weight_error("the weights hold " + std::to_string(found.size()) + " layers (prefixes " + list +
                            (found.size() > 4 ? ", ..." : "") + "); choose one with --prefix or --layer");
}

/// The config file as JSON, for what the layer config does not carry (a model's layer count, its
/// torch_dtype, whether it needs a layer index), read and checked as load_layer_config reads it.
nlohmann::json read_config_json(const std::string& path) { return gattn::io::read_config_json(path); }

/// Refuses, before any computation, an output path that cannot be written: a directory, a missing
/// or unwritable parent directory, an existing unwritable file. (The write itself is checked too.)
void check_writable(const std::string& option, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string what = option + " '" + path + "'";
  if (fs::is_directory(path, ec)) throw run_failure(what + ": is a directory");
  if (fs::exists(path, ec)) {
    if (::access(path.c_str(), W_OK) != 0) throw run_failure(what + ": is not writable");
    return;
  }
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (!fs::is_directory(dir, ec)) throw run_failure(what + ": directory '" + dir + "' does not exist");
  if (::access(dir.c_str(), W_OK) != 0) throw run_failure(what + ": directory '" + dir + "' is not writable");
}

/// Writes `text` to `path` whole or not at all (gattn::io::detail::write_file_replacing): a failed
/// write (ENOSPC on /dev/full, a full disk) is an error naming the option and path.
void write_text_file(const std::string& option, const std::string& path, const std::string& text) {
  gattn::io::detail::write_file_replacing(path, text.data(), text.size(), option + " '" + path + "'");
}

/// A file the run reads, with the words that name it in a refusal.
struct named_file {
  std::string what, path;
};

/// Whether `a` and `b` are one file: the same device and inode (so links, hard links and other
/// spellings count), or, when neither exists yet, the same place once links are resolved.
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  const bool has_a = ::stat(a.c_str(), &sa) == 0, has_b = ::stat(b.c_str(), &sb) == 0;
  if (has_a && has_b) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (has_a || has_b) return false;
  namespace fs = std::filesystem;
  std::error_code ea, eb;
  const fs::path ra = fs::weakly_canonical(fs::absolute(gattn::io::detail::write_target(a)), ea);
  const fs::path rb = fs::weakly_canonical(fs::absolute(gattn::io::detail::write_target(b)), eb);
  return !ea && !eb && ra == rb;
}

/// Refuses, before anything is computed, an --output or --stats that is the same file as one the
/// run reads (`inputs`) or as the other output: the write would destroy it.
void refuse_overwriting_inputs(const arguments& args, const std::vector<named_file>& inputs) {
  std::vector<named_file> outputs;
  for (const char* option : {"--output", "--stats"})
    if (args.has(option)) outputs.push_back({std::string(option) + " '" + args.values.at(option) + "'", args.values.at(option)});
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (const named_file& in : inputs)
      if (same_file(outputs[i].path, in.path))
        throw run_failure(outputs[i].what + " is the same file as " + in.what + ": writing it would destroy an input");
    for (std::size_t j = 0; j < i; ++j)
      if (same_file(outputs[i].path, outputs[j].path))
        throw run_failure(outputs[i].what + " is the same file as " + outputs[j].what);
  }
}

using run_clock = std::chrono::steady_clock;

double milliseconds_since(run_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(run_clock::now() - start).count();
}

/// "decode 120/4096" on one rewritten stderr line, once a run has taken ~2 s, when stderr is a terminal.
class progress_line {
 public:
  explicit progress_line(bool enabled) : enabled_(enabled && ::isatty(STDERR_FILENO) == 1) {}
  void update(const char* phase, gattn::index done, gattn::index total) {
    if (!enabled_) return;
    const auto now = run_clock::now();
    if (now - start_ < std::chrono::seconds(2) || now - last_ < std::chrono::milliseconds(250)) return;
    last_ = now;
    shown_ = true;
    std::fprintf(stderr, "\rgattn: run: %s %lld/%lld tokens", phase, static_cast<long long>(done),
                 static_cast<long long>(total));
    std::fflush(stderr);
  }
  void clear() {
    if (shown_) std::fputs("\r\033[K", stderr);
    shown_ = false;
  }

 private:
  bool enabled_;
  bool shown_ = false;
  run_clock::time_point start_ = run_clock::now(), last_ = start_;
};

int available_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/// "3.14e-05": three significant digits, as %g writes them.
std::string short_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

/// What --check measures: max|y - y_ref| / max|y_ref| (0 when both are 0; NaN anywhere gives NaN).
double relative_error(const std::vector<float>& y, const std::vector<double>& y_ref) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double d = std::fabs(double(y[i]) - y_ref[i]);
    if (std::isnan(d)) return std::nan("");
    diff = std::max(diff, d);
    scale = std::max(scale, std::fabs(y_ref[i]));
  }
  return diff == 0 ? 0.0 : diff / scale;
}

/// Options that change how the layer computes, passed on to it.
struct run_options {
  std::optional<gattn::storage_type> kv_dtype;
  gattn::kv_numerics kv_numerics = gattn::kv_numerics::exact;
  std::optional<gattn::numerics> numerics;  ///< --numerics: every family's projections
};

/// The --check tolerance, and what a failure says about it when it is not the user's.
struct check_tolerance {
  double value = 1e-4;
  std::string hint;  ///< appended to a failure's message (empty when --tol was given or the cache is f32)
};

/// docs/spec.md §10's layer tolerance for the layer's cache (a delta-rule layer's state is fp32),
/// unless --tol gives one. A low-precision cache also explains a failure: the reference must round
/// K and V the same way, and an fp32 reference misses by more than the tolerance.
check_tolerance check_tolerance_for(const arguments& args, const gattn::layer_config& cfg) {
  check_tolerance t;
  gattn::storage_type kv = gattn::storage_type::f32;
  gattn::kv_numerics numerics = gattn::kv_numerics::exact;
  bool fast_layer = false;
  std::visit(
      [&](const auto& c) {
        fast_layer = c.numerics == gattn::numerics::fast;
        if constexpr (!std::is_same<std::decay_t<decltype(c)>, gattn::delta_config>::value) {
          kv = c.kv_cache_type;
          numerics = c.kv_numerics;
        }
      },
      cfg);
  const bool low = kv != gattn::storage_type::f32;
  t.value = fast_layer || (low && numerics == gattn::kv_numerics::fast) ? 1e-2
            : kv == gattn::storage_type::bf16                            ? 5e-4
                                                                          : 1e-4;
  if (args.has("--tol")) {
    t.value = args.positive_number("--tol", t.value);
    return t;
  }
  if (low)
    t.hint = std::string(" (the default for a ") + gattn::to_string(kv) + " cache, docs/spec.md §10: 'y' must come from a "
             "reference that rounds K and V to " + gattn::to_string(kv) + " as well; against an fp32 reference a " +
             gattn::to_string(kv) + " cache misses by about " + (kv == gattn::storage_type::bf16 ? "1e-3 to 2e-3" : "2e-4 to 3e-4") +
             ": give --tol)";
  return t;
}

/// --batch-lengths and --block-size, checked with the other usage errors (before any file is read).
struct batch_options {
  std::vector<gattn::index> lengths;  ///< empty: not a batch run
  gattn::index block_size = 16;
};

batch_options parse_batch_options(const arguments& args) {
  batch_options b;
  b.block_size = args.integer("--block-size", 16, 1);
  if (!args.has("--batch-lengths")) {
    if (args.has("--block-size")) throw usage_error("option --block-size needs --batch-lengths");
    return b;
  }
  for (const char* other : {"--decode-from", "--stats"})
    if (args.has(other)) throw usage_error(std::string("option --batch-lengths cannot be combined with ") + other);
  try {
    b.lengths = gattn::cli::parse_batch_lengths(args.values.at("--batch-lengths"));
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  return b;
}

/// The batch mode of `run` (tools/cli_batch.cpp), once the layer and the input are loaded.
int run_batch_command(const arguments& args, const batch_options& batch, const check_tolerance& tol,
                      const gattn::cli::run_layer& layer, const std::vector<float>& x, gattn::index T,
                      const std::vector<double>& y_ref, int rank, int ranks) {
  for (gattn::index L : batch.lengths)
    if (L > T) throw usage_error("--batch-lengths: length " + std::to_string(L) + " is past the input's " + std::to_string(T) + " tokens");
  gattn::detail::require<gattn::cache_error>(layer.causal(), "--batch-lengths needs a causal layer (the config says causal=false)");
  const gattn::index d = layer.hidden();
  const auto start = run_clock::now();
  const auto y = gattn::cli::run_batch(layer, x, d, batch.lengths, batch.block_size);
  const double ms = milliseconds_since(start);
  if (rank != 0) return 0;  // under mpirun, rank 0 writes and checks
  if (args.has("--output")) gattn::cli::write_batch_output(args.values.at("--output"), y, d, std::string("gattn ") + GATTN_VERSION);
  if (!args.flag("--quiet"))
    std::fprintf(stderr, "gattn: run: batch=%zu tokens=%lld time=%.3fms arch=%s threads=%d%s\n", y.size(),
                 static_cast<long long>(std::accumulate(batch.lengths.begin(), batch.lengths.end(), gattn::index(0))), ms,
                 gattn::default_arch_name().c_str(), available_threads(),
                 ranks > 1 ? (" ranks=" + std::to_string(ranks)).c_str() : "");
  if (!args.flag("--check")) return 0;
  const double tolerance = tol.value;
  double worst = 0;
  for (std::size_t s = 0; s < y.size(); ++s) {
    const double rel = relative_error(y[s], std::vector<double>(y_ref.begin(), y_ref.begin() + std::ptrdiff_t(y[s].size())));
    std::cout << "check: y." << s << " max|y-y_ref|/max|y_ref|=" << short_number(rel) << " tol=" << short_number(tolerance)
              << " " << (rel <= tolerance ? "ok" : "FAILED") << "\n";
    worst = std::isnan(rel) || std::isnan(worst) ? std::nan("") : std::max(worst, rel);
  }
  if (!(worst <= tolerance))
    throw run_failure("--check: relative error " + short_number(worst) + " is above --tol " + short_number(tolerance) +
                      " for a sequence of --batch-lengths" + tol.hint);
  return 0;
}

/// What `run` was asked to do: every option checked, before any file is read.
struct run_request {
  std::string config_path, input_path;
  bool check = false;
  check_tolerance tolerance;  ///< set once the layer's config is known
  gattn::index layer_index = -1, decode_from = -1;
  gattn::mla_form form = gattn::mla_form::automatic;
  run_options options;
  batch_options batch;
};

/// The request; `root`: this rank writes the outputs (under mpirun only rank 0 does, so only it
/// checks them: an output directory may exist on the head node alone).
run_request parse_run_request(const arguments& args, bool root) {
  run_request r;
  r.config_path = args.need("--config");
  args.need("--weights");
  r.input_path = args.need("--input");
  r.check = args.flag("--check");
  if (!r.check) args.need("--output");
  if (args.has("--tol") && !r.check) throw usage_error("option --tol needs --check");
  (void)args.positive_number("--tol", 1e-4);  // a malformed --tol is a usage error before any file is read
  r.layer_index = args.integer("--layer", -1, 0);
  r.decode_from = args.integer("--decode-from", -1, 0);
  r.form = args.choice("--mla-form", {gattn::mla_form::automatic, gattn::mla_form::absorbed, gattn::mla_form::expanded},
                       gattn::mla_form::automatic);
  if (args.has("--kv-dtype"))
    r.options.kv_dtype = args.choice("--kv-dtype", gattn::io::detail::storage_types, gattn::storage_type::f32);
  r.options.kv_numerics =
      args.choice("--kv-numerics", {gattn::kv_numerics::exact, gattn::kv_numerics::fast}, gattn::kv_numerics::exact);
  if (args.has("--numerics"))
    r.options.numerics = args.choice("--numerics", {gattn::numerics::exact, gattn::numerics::fast}, gattn::numerics::exact);
  r.batch = parse_batch_options(args);
  if (root && args.has("--output")) check_writable("--output", args.values.at("--output"));
  if (root && args.has("--stats")) check_writable("--stats", args.values.at("--stats"));
  return r;
}

/// The layer's config, with the request's cache type and numerics.
gattn::layer_config run_config(const arguments& args, const run_request& r) {
  gattn::layer_config cfg = gattn::io::load_layer_config(r.config_path, r.layer_index);
  if (r.options.numerics) std::visit([&](auto& c) { c.numerics = *r.options.numerics; }, cfg);
  const bool kv_options = r.options.kv_dtype || args.has("--kv-numerics");
  if (std::holds_alternative<gattn::delta_config>(cfg)) {
    if (kv_options)
      throw usage_error("--kv-dtype and --kv-numerics do not apply to a gated delta-rule layer (its state is fp32)");
    return cfg;
  }
  std::visit(
      [&](auto& c) {
        if constexpr (!std::is_same<std::decay_t<decltype(c)>, gattn::delta_config>::value) {
          if (r.options.kv_dtype) c.kv_cache_type = *r.options.kv_dtype;
          if (args.has("--kv-numerics")) c.kv_numerics = r.options.kv_numerics;
        }
      },
      cfg);
  return cfg;
}

/// The layer's weights: views of the checkpoint's mapping (a file, an index or a directory).
gattn::weight_map run_weights(const arguments& args, const run_request& r, const gattn::io::checkpoint& weights_file) {
  const std::string prefix = r.layer_index >= 0 && !args.has("--prefix")
                                 ? gattn::io::hf_layer_prefix(read_config_json(r.config_path), r.layer_index)
                                 : find_prefix(weights_file, args);
  gattn::io::load_options options;
  options.skip_non_float = true;
  options.fp8 = gattn::io::load_quantization(r.config_path);  // the block size of FP8 weights, if any
  return gattn::io::load_weights(weights_file, prefix, options);
}

/// The input file's x [T, d], and its y when --check compares with it.
struct run_input {
  std::vector<float> x;
  std::vector<double> y_ref;
  gattn::index tokens = 0;
};

run_input read_run_input(const run_request& r, gattn::index d) {
  const auto input = gattn::io::safetensors_file::open(r.input_path);
  const auto& xi = input.info("x");
  gattn::detail::require<gattn::shape_error>(xi.shape.size() == 2 && xi.shape[1] == d, r.input_path, ": 'x' has shape ",
                                             gattn::io::detail::shape_string(xi.shape), ", expected [T, ", d, "]");
  run_input in;
  in.tokens = xi.shape[0];
  if (r.check) {
    gattn::detail::require<gattn::shape_error>(input.contains("y"), r.input_path,
                                               ": --check needs a tensor 'y' [T, d] in the input file; it has none");
    const auto& yi = input.info("y");
    gattn::detail::require<gattn::shape_error>(yi.shape.size() == 2 && yi.shape[0] == in.tokens && yi.shape[1] == d,
                                               r.input_path, ": 'y' has shape ", gattn::io::detail::shape_string(yi.shape),
                                               ", expected [", in.tokens, ", ", d, "] for --check");
    in.y_ref = input.read_f64("y");
  }
  if (r.decode_from > in.tokens)
    throw usage_error("--decode-from " + std::to_string(r.decode_from) + " is past the input's " +
                      std::to_string(in.tokens) + " tokens");
  in.x = input.read_f32("x");
  return in;
}

/// Wall time of a single-sequence run: the prefill (or the whole forward) and the decode steps.
struct run_timing {
  gattn::index prefilled = 0;
  double prefill_ms = 0, decode_ms = 0;
};

/// The prefill of t.prefilled tokens through `memory` (a KV cache or a recurrent state), then one
/// decode step per token.
template <class Memory>
run_timing run_steps(const gattn::cli::run_layer& layer, Memory& cache, const run_input& in, run_timing t, float* y,
                     gattn::statistics_observer* stats, progress_line& progress) {
  const gattn::index T = in.tokens, d = layer.hidden();
  const float* x = in.x.data();
  const auto prefill_start = run_clock::now();
  if (t.prefilled > 0) layer.prefill({x, t.prefilled, d, d}, cache, {y, t.prefilled, d, d}, stats);
  t.prefill_ms = milliseconds_since(prefill_start);
  const auto decode_start = run_clock::now();
  for (gattn::index i = t.prefilled; i < T; ++i) {
    layer.decode({x + i * d, 1, d, d}, cache, {y + i * d, 1, d, d}, stats);
    progress.update("decode", i + 1 - t.prefilled, T - t.prefilled);
  }
  t.decode_ms = milliseconds_since(decode_start);
  progress.clear();
  return t;
}

/// One sequence: the whole input at once, or (--decode-from K) a prefill of K tokens through a KV
/// cache and then one decode step per token.
run_timing run_sequence(const gattn::cli::run_layer& layer, const run_input& in, gattn::index decode_from, float* y,
                        gattn::statistics_observer* stats, bool quiet) {
  const gattn::index T = in.tokens, d = layer.hidden();
  const float* x = in.x.data();
  progress_line progress(!quiet);
  run_timing t;
  t.prefilled = decode_from < 0 ? T : decode_from;
  const auto prefill_start = run_clock::now();
  if (decode_from < 0) {
    layer.forward({x, T, d, d}, {y, T, d, d}, stats);
    t.prefill_ms = milliseconds_since(prefill_start);
    return t;
  }
  gattn::detail::require<gattn::cache_error>(layer.causal(), "--decode-from needs a causal layer (the config says causal=false)");
  if (layer.is_delta()) {
    gattn::delta_state state = layer.make_state();
    return run_steps(layer, state, in, t, y, stats, progress);
  }
  gattn::kv_cache cache = layer.make_cache(T);
  return run_steps(layer, cache, in, t, y, stats, progress);
}

/// --check: prints the relative error and throws run_failure above the tolerance (NaN fails).
void check_run_output(const run_request& r, const std::vector<float>& y, const std::vector<double>& y_ref) {
  const double rel = relative_error(y, y_ref), tol = r.tolerance.value;
  const bool ok = rel <= tol;
  std::cout << "check: max|y-y_ref|/max|y_ref|=" << short_number(rel) << " tol=" << short_number(tol) << " "
            << (ok ? "ok" : "FAILED") << "\n";
  if (!ok)
    throw run_failure("--check: relative error " + short_number(rel) + " is above --tol " + short_number(tol) +
                      " (against 'y' in " + r.input_path + ")" + r.tolerance.hint);
}

/// The files a run reads: the config, the input, and the checkpoint's index and shards.
std::vector<named_file> run_inputs(const run_request& r, const std::string& weights_arg, const gattn::io::checkpoint& w) {
  std::vector<named_file> files = {{"--config '" + r.config_path + "'", r.config_path},
                                   {"--input '" + r.input_path + "'", r.input_path}};
  std::error_code ec;
  if (!std::filesystem::is_directory(w.origin(), ec)) files.push_back({"--weights '" + weights_arg + "'", w.origin()});
  for (const auto& shard : w.shards())
    if (shard.origin() != w.origin())
      files.push_back({"shard '" + shard.origin() + "' of --weights '" + weights_arg + "'", shard.origin()});
  return files;
}

/// Everything a run needs before it computes, read and checked.
struct prepared_run {
  run_request request;
  std::optional<gattn::cli::run_layer> layer;
  run_input input;
};

/// A hybrid model's config (softmax and gated delta-rule layers) does not say which layer to run:
/// without --layer, the layer is the one the weights hold (their prefix model.layers.N., or
/// model.language_model.layers.N.), else the run is refused with the layers of each kind.
void resolve_layer(const arguments& args, const gattn::io::checkpoint& weights, run_request& r) {
  if (r.layer_index >= 0) return;
  const nlohmann::json j = read_config_json(r.config_path);
  if (!j.contains("model_type") || !gattn::io::needs_layer_index(j)) return;
  const std::string prefix = find_prefix(weights, args);
  // A prefix no tensor has is a wrong prefix, whatever layer its digits would name.
  const auto& tensors = weights.tensors();
  if (std::none_of(tensors.begin(), tensors.end(), [&](const auto& t) { return t.name.rfind(prefix, 0) == 0; }))
    (void)gattn::io::load_weights(weights, prefix);  // throws, naming the file and the prefixes present
  if (const auto layer = gattn::cli::hf_layer_number(prefix)) {
    r.layer_index = *layer;
    return;
  }
  try {
    (void)gattn::io::load_layer_config(r.config_path);  // refuses, naming the layers of each kind
  } catch (const gattn::config_error& e) {
    throw gattn::config_error(std::string(e.what()) + " (choose one with --layer N)");
  }
}

void prepare_run(const arguments& args, gattn::cli::tp_group& group, prepared_run& p) {
  p.request = parse_run_request(args, group.root());
  run_request& r = p.request;
  const auto weights = gattn::io::checkpoint::open(args.need("--weights"));
  resolve_layer(args, weights, r);
  const gattn::layer_config cfg = run_config(args, r);
  r.tolerance = check_tolerance_for(args, cfg);
  if (group.root()) refuse_overwriting_inputs(args, run_inputs(r, args.need("--weights"), weights));
  const gattn::weight_map w = run_weights(args, r, weights);
  // Weights the checkpoint does not let gattn view in place take memory of their own: say so.
  const gattn::io::weight_report report = gattn::io::load_report(w);
  if (!report.all_in_place() && group.root() && !args.flag("--quiet"))
    std::fprintf(stderr, "gattn: note: --weights: %s\n", report.summary().c_str());
  p.layer.emplace(cfg, w, group);
  if (args.flag("--reference")) p.layer->set_sdpa(&gattn::reference_sdpa);
  if (r.form != gattn::mla_form::automatic) p.layer->set_mla_form(r.form);
  p.input = read_run_input(r, p.layer->hidden());
}

/// 64-bit FNV-1a over `n` bytes, 8 at a time, continuing from `h`: enough to tell the inputs of
/// two ranks apart (the ranks are one job, not adversaries).
std::uint64_t digest(const void* data, std::size_t n, std::uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/// What this rank is about to compute, for the agreement of the ranks: T, the config file, x, and
/// the options that change the computation.
gattn::cli::rank_state rank_state_of(const arguments& args, const prepared_run& p) {
  gattn::cli::rank_state s;
  s.tokens = std::uint64_t(p.input.tokens);
  const std::string config = gattn::io::detail::read_capped_file(p.request.config_path, "--config '" + p.request.config_path + "'",
                                                                 gattn::io::detail::max_config_bytes);
  s.config = digest(config.data(), config.size());
  s.input = digest(p.input.x.data(), p.input.x.size() * sizeof(float));
  std::string options;
  for (const char* k : {"--layer", "--prefix", "--decode-from", "--mla-form", "--kv-dtype", "--kv-numerics", "--numerics",
                        "--batch-lengths", "--block-size", "--stats"})
    options += std::string(k) + (args.has(k) ? "=" + args.values.at(k) : std::string()) + "\n";
  options += args.flag("--reference") ? "--reference\n" : "";
  s.options = digest(options.data(), options.size());
  return s;
}

/// Every rank's outcome so far, agreed in one collective before any rank computes: a failure on
/// any rank ends every rank (this one with its own error, the others naming the rank that failed),
/// and ranks given different inputs all refuse, instead of hanging in the layer's collectives or
/// writing a wrong y.
void agree_before_computing(gattn::cli::tp_group& group, const std::exception_ptr& failure,
                            const gattn::cli::rank_state& mine) {
  const std::vector<gattn::cli::rank_state> all = group.gather(mine);
  if (failure) std::rethrow_exception(failure);
  const std::string of = " of " + std::to_string(all.size());
  for (std::size_t k = 0; k < all.size(); ++k)
    if (all[k].failed)
      throw run_failure("rank " + std::to_string(k) + of + " failed before computing (its own error line says why), so no rank computes");
  for (std::size_t k = 1; k < all.size(); ++k) {
    const gattn::cli::rank_state &a = all[0], &b = all[k];
    const std::string rank = "the ranks were given different inputs: rank " + std::to_string(k) + of;
    if (b.tokens != a.tokens)
      throw run_failure(rank + " has x with T=" + std::to_string(b.tokens) + " tokens, rank 0 T=" + std::to_string(a.tokens));
    if (b.input != a.input) throw run_failure(rank + " has a different x than rank 0 (of the same shape)");
    if (b.config != a.config) throw run_failure(rank + " has a different config file than rank 0");
    if (b.options != a.options) throw run_failure(rank + " was given different run options than rank 0");
  }
}

int run_command(int argc, char** argv) {
  gattn::cli::tp_group& group = gattn::cli::tp_group::current();  // under mpirun: this rank's heads
  std::optional<arguments> parsed;
  prepared_run prepared;
  gattn::cli::rank_state mine;
  std::exception_ptr failure;
  try {
    parsed.emplace(argc, argv, 2,
                   std::vector<std::string>{"--config", "--weights", "--input", "--output", "--prefix", "--decode-from",
                                            "--stats", "--mla-form", "--layer", "--kv-dtype", "--kv-numerics", "--numerics",
                                            "--tol",
                                            "--batch-lengths", "--block-size"},
                   std::vector<std::string>{"--reference", "--check", "--quiet"});
    prepare_run(*parsed, group, prepared);
    mine = rank_state_of(*parsed, prepared);
  } catch (...) {
    failure = std::current_exception();
    mine.failed = 1;
  }
  agree_before_computing(group, failure, mine);
  const arguments& args = *parsed;
  const run_request& r = prepared.request;
  const gattn::cli::run_layer& layer = *prepared.layer;
  const run_input& in = prepared.input;
  const gattn::index d = layer.hidden();
  if (!r.batch.lengths.empty())
    return run_batch_command(args, r.batch, r.tolerance, layer, in.x, in.tokens, in.y_ref, group.root() ? 0 : 1,
                             group.size());

  gattn::statistics_observer observer;
  gattn::statistics_observer* stats = args.has("--stats") ? &observer : nullptr;
  const bool quiet = args.flag("--quiet") || !group.root();
  std::vector<float> y(std::size_t(in.tokens * d));
  const run_timing t = run_sequence(layer, in, r.decode_from, y.data(), stats, quiet);
  if (args.has("--output") && group.root()) {
    gattn::io::write_safetensors(args.values.at("--output"), {{"y", gattn::io::dtype::f32, {in.tokens, d}, y.data()}},
                                 {{"producer", std::string("gattn ") + GATTN_VERSION}});
  }
  if (stats) {
    nlohmann::json j = observer.result().to_json();
    if (layer.is_delta()) j.erase("first_token_attention");  // a delta-rule layer has no attention weights
    write_text_file("--stats", args.values.at("--stats"), j.dump(2) + "\n");
  }
  if (!quiet) {
    // One greppable line of key=value fields; new fields are appended, never reordered.
    const double seconds = (t.prefill_ms + t.decode_ms) / 1000;
    std::fprintf(stderr, "gattn: run: tokens=%lld prefill=%lld/%.3fms decode=%lld/%.3fms tok/s=%.3g arch=%s threads=%d%s\n",
                 static_cast<long long>(in.tokens), static_cast<long long>(t.prefilled), t.prefill_ms,
                 static_cast<long long>(in.tokens - t.prefilled), t.decode_ms,
                 seconds > 0 ? double(in.tokens) / seconds : 0.0, gattn::default_arch_name().c_str(), available_threads(),
                 group.mpi() ? (" ranks=" + std::to_string(group.size())).c_str() : "");
  }
  if (r.check && group.root()) check_run_output(r, y, in.y_ref);
  return 0;
}

/// The weight type `cost` counts: --weight-dtype, else f8_e4m3 for a Hugging Face config with an FP8
/// quantization_config, else its torch_dtype (newer transformers: dtype; a Qwen3.5 wrapper may keep it
/// in its text_config), else f32. A torch_dtype
/// that is none of f32, bf16, f16 is said, not guessed.
gattn::storage_type cost_weight_type(const arguments& args, const nlohmann::json& j) {
  if (args.has("--weight-dtype"))
    return args.choice("--weight-dtype", gattn::io::detail::storage_types, gattn::storage_type::f32);
  if (j.contains("model_type") && gattn::io::parse_quantization(j)) return gattn::storage_type::f8_e4m3;
  const bool nested = j.contains("text_config") && j.at("text_config").is_object();
  for (const char* key : {"torch_dtype", "dtype"}) {
    const nlohmann::json& at = !j.contains(key) && nested ? j.at("text_config") : j;
    if (!j.contains("model_type") || !at.contains(key) || !at.at(key).is_string()) continue;
    const std::string name = at.at(key).get<std::string>();
    if (name == "bfloat16" || name == "bf16") return gattn::storage_type::bf16;
    if (name == "float16" || name == "f16" || name == "half") return gattn::storage_type::f16;
    if (name == "float32" || name == "f32" || name == "float") return gattn::storage_type::f32;
    std::fprintf(stderr, "gattn: note: cost: '%s'=\"%s\" is not f32, bf16 or f16: weight bytes are counted in f32 "
                 "(--weight-dtype chooses)\n", key, name.c_str());
    return gattn::storage_type::f32;
  }
  return gattn::storage_type::f32;
}

/// What `cost` counts of a config file: its layer config (a Hugging Face model's first softmax
/// layer, when it has one) and, for a Hugging Face model, its layers by kind when the config says.
struct cost_plan {
  std::optional<gattn::layer_config> softmax;
  std::optional<gattn::io::detail::hf_layer_census> census;
};

cost_plan plan_cost(const std::string& path, const nlohmann::json& j) {
  cost_plan p;
  if (!j.contains("model_type")) {
    p.softmax = gattn::io::load_layer_config(path);
    return p;
  }
  try {
    p.census = gattn::io::attention_layers(j);
    if (!p.census) p.softmax = gattn::io::parse_layer_config(j, gattn::io::first_attention_layer(j));
    else if (!p.census->attention.empty()) p.softmax = gattn::io::parse_layer_config(j, p.census->attention.front());
  } catch (const gattn::config_error& e) {
    throw gattn::config_error(path + ": " + e.what());  // as load_layer_config names the file
  }
  if (!p.softmax && (!p.census || p.census->linear.empty()))
    throw gattn::config_error(path + ": the model has no layer gattn computes");
  return p;
}

/// Layer `layer` of a Hugging Face model, refused with the file's name.
gattn::layer_config layer_of(const std::string& path, const nlohmann::json& j, gattn::index layer) {
  try {
    return gattn::io::parse_layer_config(j, layer);
  } catch (const gattn::config_error& e) {
    throw gattn::config_error(path + ": " + e.what());
  }
}

int cost_command(int argc, char** argv) {
  const arguments args(argc, argv, 2, {"--config", "--layers", "--context", "--tokens", "--weight-dtype", "--kv-dtype"}, {});
  const std::string config_path = args.need("--config");
  const gattn::index context = args.integer("--context", 4096, 0);
  const gattn::index tokens = args.integer("--tokens", 4096, 0);
  gattn::index layers = args.integer("--layers", 1, 1);
  if (args.has("--weight-dtype")) (void)cost_weight_type(args, nlohmann::json::object());  // usage errors first
  const std::optional<gattn::storage_type> kv_dtype =
      args.has("--kv-dtype") ? std::optional(args.choice("--kv-dtype", gattn::io::detail::storage_types, gattn::storage_type::f32))
                             : std::nullopt;
  const nlohmann::json j = read_config_json(config_path);
  const gattn::storage_type weights = cost_weight_type(args, j);
  const cost_plan plan = plan_cost(config_path, j);
  // Gated DeltaNet projections are listed as the model's checkpoints store them (docs/spec.md §14).
  const gattn::gdn_layout layout = j.contains("model_type") ? gattn::io::hf_gdn_layout(j) : gattn::gdn_layout::fused;
  const auto layer_cost_of = [&](const gattn::layer_config& c) {
    gattn::layer_cost lc = std::holds_alternative<gattn::delta_config>(c)
                               ? gattn::cost(std::get<gattn::delta_config>(c), layout)
                               : std::visit([](const auto& l) { return gattn::cost(l); }, c);
    if (kv_dtype && !lc.is_delta) lc.kv_cache_type = *kv_dtype;
    return lc;
  };
  // A hybrid model (Qwen3-Next, Kimi Linear) has softmax and gated delta-rule layers: each kind is
  // counted with its own layer count, then the model's totals. --layers counts the softmax layer.
  const auto& census = plan.census;
  if (!census || census->linear.empty() || args.has("--layers")) {
    if (census) {
      std::cout << "model: " << census->attention.size() + census->linear.size() << " of " << census->total
                << " layers are gattn layers (" << gattn::io::detail::hf_layer_list(census->attention) << ")";
      if (!args.has("--layers")) layers = gattn::index(census->attention.size());
      std::cout << (args.has("--layers") ? "; counting --layers " : "; counting ") << layers << "\n\n";
    }
    if (!plan.softmax) throw gattn::config_error(config_path + ": --layers counts softmax-attention layers; the model has none");
    std::cout << gattn::format_cost_report(layer_cost_of(*plan.softmax), layers, context, tokens, weights);
    return 0;
  }
  const gattn::layer_cost linear = layer_cost_of(layer_of(config_path, j, census->linear.front()));
  const gattn::index n_soft = gattn::index(census->attention.size()), n_lin = gattn::index(census->linear.size());
  std::cout << "model: " << census->total << " layers: " << n_soft << " softmax-attention ("
            << gattn::io::detail::hf_layer_list(census->attention) << "), " << n_lin << " gated delta-rule ("
            << gattn::io::detail::hf_layer_list(census->linear) << ")\n\n";
  std::vector<std::pair<gattn::layer_cost, gattn::index>> kinds;
  if (n_soft > 0) {
    kinds.emplace_back(layer_cost_of(*plan.softmax), n_soft);
    std::cout << gattn::format_cost_report(kinds.back().first, n_soft, context, tokens, weights) << "\n";
  }
  kinds.emplace_back(linear, n_lin);
  std::cout << gattn::format_cost_report(linear, n_lin, context, tokens, weights) << "\n";
  std::cout << gattn::format_model_summary(kinds, context, weights);
  return 0;
}

/// The instruction-set features that matter to gattn's kernels, as /proc/cpuinfo spells them.
const char* const cpu_feature_names[] = {"avx512f", "avx512bw", "avx512_bf16", "avx2", "fma", "f16c"};

/// Whether the compiler generated code for feature `name` (the -m flags of this build, -march=native
/// included): what the binary needs from the CPU it runs on.
bool built_for(const std::string& name) {
  const std::pair<const char*, bool> built[] = {
#ifdef __AVX512F__
      {"avx512f", true},
#endif
#ifdef __AVX512BW__
      {"avx512bw", true},
#endif
#ifdef __AVX512BF16__
      {"avx512_bf16", true},
#endif
#ifdef __AVX2__
      {"avx2", true},
#endif
#ifdef __FMA__
      {"fma", true},
#endif
#ifdef __F16C__
      {"f16c", true},
#endif
      {"", false}};
  for (const auto& [n, on] : built)
    if (on && name == n) return true;
  return false;
}

/// The "flags" of /proc/cpuinfo's first processor, space-separated with a space at each end ("" when
/// there is no such file: not Linux, or a sandbox).
std::string cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, 5, "flags") == 0 && line.find(':') != std::string::npos)
      return " " + line.substr(line.find(':') + 1) + " ";
  return "";
}

/// Whether this CPU has feature `name`: GCC's __builtin_cpu_supports for the names every GCC we
/// build with knows (it also checks that the OS saves the AVX/AVX-512 state), else /proc/cpuinfo.
bool cpu_has(const std::string& name, const std::string& flags) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  if (name == "avx512f") return __builtin_cpu_supports("avx512f");
  if (name == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (name == "avx2") return __builtin_cpu_supports("avx2");
  if (name == "fma") return __builtin_cpu_supports("fma");
#endif
  return flags.find(" " + name + " ") != std::string::npos;
}

/// "features: built for avx512f ...; this CPU has avx512f ..." ("none" for an empty list).
std::string features_line() {
  const std::string flags = cpuinfo_flags();
  std::string built, has;
  for (const char* n : cpu_feature_names) {
    if (built_for(n)) built += std::string(" ") + n;
    if (cpu_has(n, flags)) has += std::string(" ") + n;
  }
  return "features: built for" + (built.empty() ? std::string(" none") : built) + "; this CPU has" +
         (has.empty() ? std::string(" none") : has) + "\n";
}

/// "dispatch: ..." : whether the arch was chosen at run time (tools/CMakeLists.txt), and among which.
std::string dispatch_line() {
#if defined(GATTN_CLI_DISPATCHED)
  std::string built;
  gattn::dispatch_arches::for_each([&](auto arch) { built += std::string(built.empty() ? "" : ", ") + arch.name(); });
  return std::string("dispatch: at run time, ") + gattn::dispatch_target::name() + " chosen (built for " + built +
         "); code namespace gattn::" + gattn::arch_namespace_name() + "\n";
#else
  return std::string("dispatch: at compile time; code namespace gattn::") + gattn::arch_namespace_name() + "\n";
#endif
}

/// The vendor-dependent kernel choices this process makes (core/cpu.hpp).
std::string kernel_choices_line() {
  const bool built = gattn::simd::has_bf16_dot<gattn::default_arch>;
  const char* dots = !built                              ? "off (not in this build)"
                     : !gattn::avx512_bf16_usable()      ? "off (not on this CPU)"
                     : gattn::bf16_dot_products_wanted() ? "on"
                                                         : "off";
  return std::string("kernel choices (cpu vendor ") + gattn::cpu_vendor_name(gattn::this_cpu_vendor()) +
         "): decode prefetch " + (gattn::decode_prefetch_wanted() ? "on" : "off") +
         "; kv_numerics fast: bf16 dot products " + dots + "\n";
}

/// "bf16 engine (numerics = fast): ..." : what runs the projections' cache-blocked GEMM with bf16
/// operands (linalg/packed_gemm_fast.hpp).
std::string fast_engine_line() {
  return std::string("bf16 engine (numerics = fast): ") + gattn::fast_gemm_engine_name<gattn::default_arch>() + "\n";
}

/// The gattn kind of layer `layer` of a Hugging Face config ("gqa", "mla", "kda", "gated_deltanet"
/// with the layout the model's checkpoints give its projections), or why it cannot be built.
std::string layer_kind_of(const nlohmann::json& j, gattn::index layer) {
  try {
    const gattn::layer_config c = gattn::io::parse_layer_config(j, layer);
    if (const auto* d = std::get_if<gattn::delta_config>(&c))
      return d->kind == gattn::delta_kind::kda ? "kda"
                                               : std::string("gated_deltanet, ") +
                                                     gattn::to_string(gattn::io::hf_gdn_layout(j)) + " input projections";
    return std::holds_alternative<gattn::mla_config>(c) ? "mla" : "gqa";
  } catch (const gattn::error& e) {
    return std::string("not loadable: ") + e.what();
  }
}

/// `info --weights`: the layer types of the checkpoint's config.json (beside the weights), by kind.
void print_layer_kinds(const std::string& weights) {
  namespace fs = std::filesystem;
  const fs::path where = fs::is_directory(weights) ? fs::path(weights) : fs::path(weights).parent_path();
  const fs::path config = where / "config.json";
  if (!fs::is_regular_file(config)) return;
  const nlohmann::json j = read_config_json(config.string());
  if (!j.contains("model_type")) return;
  const auto census = gattn::io::attention_layers(j);
  if (!census) return;
  std::cout << config.string() << ": " << census->total << " layers\n";
  for (const auto* kind : {&census->attention, &census->linear}) {
    if (kind->empty()) continue;
    std::cout << "  " << kind->size() << " " << (kind == &census->linear ? "linear-attention" : "softmax-attention")
              << " (" << layer_kind_of(j, kind->front()) << "): " << gattn::io::detail::hf_layer_list(*kind) << "\n";
  }
}

int info_command(int argc, char** argv) {
  const arguments args(argc, argv, 2, {"--weights"}, {});
  std::cout << "gattn " << GATTN_VERSION << "\n"
            << "simd arch: " << gattn::default_arch_name() << "\n"
            << dispatch_line() << features_line() << kernel_choices_line() << fast_engine_line()
#ifdef _OPENMP
            << "threads: OpenMP, " << omp_get_max_threads() << " available\n";
#else
            << "threads: serial build (no OpenMP)\n";
#endif
  if (args.has("--weights")) {
    const auto file = gattn::io::checkpoint::open(args.values.at("--weights"));
    std::cout << args.values.at("--weights") << ": " << file.tensors().size() << " tensors\n";
    std::size_t fp8 = 0;
    for (const auto& t : file.tensors()) {
      std::cout << "  " << t.name << "  " << gattn::io::dtype_name(t.type) << "  "
                << gattn::io::detail::shape_string(t.shape) << "\n";
      fp8 += t.type == gattn::io::dtype::f8_e4m3;
    }
    if (fp8 > 0) std::cout << "  " << fp8 << " tensors are block-scaled FP8 (F8_E4M3 with <name>_scale_inv)\n";
    for (const auto& [k, v] : file.metadata())
      std::cout << "  metadata " << k << ": " << (v.size() > 120 ? v.substr(0, 117) + "..." : v) << "\n";
    for (const gattn::cli::held_layer& l : gattn::cli::layers_in(file))
      std::cout << "  layer " << (l.prefix.empty() ? "(no prefix)" : "'" + l.prefix + "'") << ": " << l.kind << "\n";
    print_layer_kinds(args.values.at("--weights"));
  }
  return 0;
}

/// The command named by argv[1], or "" when there is none (the pointer then names plain --help).
std::string command_of(int argc, char** argv) {
  if (argc < 2) return "";
  const std::string cmd = argv[1];
  return cmd == "run" || cmd == "cost" || cmd == "info" ? cmd : "";
}

bool asks_for_help(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return true;
  return false;
}

int dispatch(int argc, char** argv) {
  if (argc < 2) throw usage_error("missing command");
  const std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "-V") {
    std::cout << "gattn " << GATTN_VERSION << "\n";
    return 0;
  }
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << overview_text;
    return 0;
  }
  struct command {
    const char* name;
    const char* help;
    int (*run)(int, char**);
  };
  for (const command& c : {command{"run", run_help, run_command}, command{"cost", cost_help, cost_command},
                           command{"info", info_help, info_command}}) {
    if (cmd != c.name) continue;
    if (asks_for_help(argc, argv)) {
      std::cout << c.help;
      return 0;
    }
    return c.run(argc, argv);
  }
  throw usage_error("unknown command '" + cmd + "'");
}

/// The run's exit status; every error is reported here, on this rank's stderr.
/// One stderr line in one write, so that the lines of several ranks under mpirun never interleave.
void say_line(const std::string& text) {
  const std::string line = text + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

int run_main(int argc, char** argv) {
  try {
    const int status = dispatch(argc, argv);
    // Output on stdout that cannot be written (a closed pipe, a full disk) is a failed run too.
    std::cout.flush();
    if (!std::cout) {
      std::fprintf(stderr, "gattn: error: writing to standard output failed\n");
      return 1;
    }
    return status;
  } catch (const usage_error& e) {
    const std::string cmd = command_of(argc, argv);
    say_line("gattn: " + std::string(e.what()) + " (see 'gattn " + (cmd.empty() ? "" : cmd + " ") + "--help')");
    return 2;
  } catch (const run_failure& e) {
    say_line("gattn: error: " + std::string(e.what()));
    return 1;
  } catch (const gattn::error& e) {
    say_line("gattn: error: " + std::string(e.what()));
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "gattn: error: out of memory\n";
    return 3;
  } catch (const std::exception& e) {
    say_line("gattn: internal error: " + std::string(e.what()));
    return 3;
  }
}

}  // namespace

template <class Arch>
int cli_entry::operator()(Arch, int argc, char** argv) const {
  // A write past the file size limit (ulimit -f) then fails with EFBIG and is reported like a full
  // disk, instead of killing the process halfway through the file.
  std::signal(SIGXFSZ, SIG_IGN);
  std::unique_ptr<gattn::cli::tp_group> group;
  try {
    group = std::make_unique<gattn::cli::tp_group>(&argc, &argv);  // MPI only under mpirun (cli_tp.hpp)
  } catch (const std::exception& e) {
    say_line("gattn: error: " + std::string(e.what()));
    return 1;
  }
  const int status = run_main(argc, argv);
  if (status != 0) group->fail(status);
  return status;
}

#if defined(GATTN_CLI_DISPATCHED)
// This translation unit's arch; cli_main.cpp picks among them (tools/CMakeLists.txt).
template int cli_entry::operator()(gattn::dispatch_target, int, char**) const;
#else
int main(int argc, char** argv) { return cli_entry{}(gattn::default_arch{}, argc, argv); }
#endif
