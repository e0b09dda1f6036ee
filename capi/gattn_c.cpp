// The C API (capi/gattn.h) over gattn's C++ layers: each handle owns the C++ object it names, and
// every entry point catches what the library throws and turns it into a gattn_status and a
// message for gattn_last_error(). The one translation unit that instantiates the templates.
#include "gattn.h"

#include <algorithm>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <gattn/io.hpp>

#ifndef GATTN_VERSION
#define GATTN_VERSION "unknown"
#endif

struct gattn_checkpoint {
  gattn::io::checkpoint file;
};

struct gattn_layer {
  gattn::any_layer layer;
  gattn::execution_context exec;
};

struct gattn_cache {
  std::variant<gattn::kv_cache, gattn::delta_state> memory;
};

struct gattn_pool {
  std::variant<gattn::paged_kv_cache, gattn::delta_state_pool> pool;
};

struct gattn_workspace {
  gattn::layer_workspace scratch;
  std::vector<gattn::sequence_cache> caches;  // a step's handles, kept so that steps do not allocate
  std::vector<gattn::delta_sequence> states;
  std::vector<gattn::index> offsets;          // cu_seqlens, where int64_t is not gattn::index
};

namespace {

/// A NULL handle or pointer, a negative size: the caller's mistake, not the library's refusal.
struct argument_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

thread_local std::string last_error;

gattn_status fail(gattn_status status, const char* what) {
  last_error = what;
  return status;
}

/// Runs `f`; what it throws becomes a status (and the message of gattn_last_error()).
template <class F>
gattn_status guarded(F&& f) noexcept {
  try {
    f();
    return GATTN_OK;
  } catch (const gattn::config_error& e) {
    return fail(GATTN_ERROR_CONFIG, e.what());
  } catch (const gattn::shape_error& e) {
    return fail(GATTN_ERROR_SHAPE, e.what());
  } catch (const gattn::weight_error& e) {
    return fail(GATTN_ERROR_WEIGHT, e.what());
  } catch (const gattn::cache_error& e) {
    return fail(GATTN_ERROR_CACHE, e.what());
  } catch (const gattn::format_error& e) {
    return fail(GATTN_ERROR_FORMAT, e.what());
  } catch (const argument_error& e) {
    return fail(GATTN_ERROR_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return fail(GATTN_ERROR_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(GATTN_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(GATTN_ERROR_INTERNAL, "an exception that is not a std::exception");
  }
}

/// The object a handle or out-parameter points to; argument_error naming it when it is NULL.
template <class T>
T& need(T* p, const char* what) {
  if (p == nullptr) throw argument_error(std::string(what) + " is NULL");
  return *p;
}
/// A string or an array the caller passes, checked the same way.
template <class T>
const T* need_array(const T* p, const char* what) {
  if (p == nullptr) throw argument_error(std::string(what) + " is NULL");
  return p;
}

void need_rows(const float* x, const float* y, int64_t tokens, const char* who) {
  if (tokens < 0) throw argument_error(std::string(who) + ": tokens=" + std::to_string(tokens) + " is negative");
  if (tokens > 0 && (x == nullptr || y == nullptr)) throw argument_error(std::string(who) + ": x or y is NULL");
}

/// The weights' prefix a layer of this config reads when the caller names none.
std::string default_prefix(const nlohmann::json& j, int64_t layer_index) {
  if (!j.contains("model_type")) return "";
  const gattn::index layer = layer_index >= 0 ? gattn::index(layer_index) : gattn::io::first_attention_layer(j);
  return gattn::io::hf_layer_prefix(j, layer);
}

/// cu_seqlens as gattn::index: the caller's array itself where the types agree, else a copy.
const gattn::index* offsets_of(const int64_t* cu, int64_t batch, gattn_workspace& ws) {
  if constexpr (std::is_same<int64_t, gattn::index>::value) {
    (void)batch;
    (void)ws;
    return cu;
  } else {
    ws.offsets.assign(cu, cu + batch + 1);
    return ws.offsets.data();
  }
}

}  // namespace

extern "C" {

const char* gattn_last_error(void) { return last_error.c_str(); }

const char* gattn_status_name(gattn_status status) {
  switch (status) {
    case GATTN_OK: return "ok";
    case GATTN_ERROR_CONFIG: return "config";
    case GATTN_ERROR_SHAPE: return "shape";
    case GATTN_ERROR_WEIGHT: return "weight";
    case GATTN_ERROR_CACHE: return "cache";
    case GATTN_ERROR_FORMAT: return "format";
    case GATTN_ERROR_ARGUMENT: return "argument";
    case GATTN_ERROR_MEMORY: return "memory";
    case GATTN_ERROR_INTERNAL: return "internal";
  }
  return "unknown";
}

const char* gattn_version(void) { return GATTN_VERSION; }

gattn_status gattn_checkpoint_open(const char* path, gattn_checkpoint** out) {
  return guarded([&] {
    need(out, "out") = nullptr;
    *out = new gattn_checkpoint{gattn::io::checkpoint::open(need_array(path, "path"))};
  });
}

void gattn_checkpoint_close(gattn_checkpoint* checkpoint) { delete checkpoint; }

gattn_status gattn_checkpoint_shape(const gattn_checkpoint* checkpoint, const char* name, int64_t* dims,
                                    int capacity, int* rank) {
  return guarded([&] {
    const gattn::io::tensor_info& t = need(checkpoint, "checkpoint").file.info(need_array(name, "name"));
    need(rank, "rank") = int(t.shape.size());
    if (capacity > 0) (void)need(dims, "dims");
    for (int i = 0; i < capacity && i < *rank; ++i) dims[i] = t.shape[std::size_t(i)];
  });
}

gattn_status gattn_checkpoint_read(const gattn_checkpoint* checkpoint, const char* name, float* out, int64_t count) {
  return guarded([&] {
    const gattn::io::checkpoint& file = need(checkpoint, "checkpoint").file;
    const std::int64_t n = file.info(need_array(name, "name")).numel();
    if (count != n)
      throw argument_error("gattn_checkpoint_read: tensor '" + std::string(name) + "' has " + std::to_string(n) +
                           " elements, count is " + std::to_string(count));
    const std::vector<float> values = file.read_f32(name);
    if (n > 0) std::copy(values.begin(), values.end(), &need(out, "out"));
  });
}

gattn_status gattn_layer_create(const char* config_path, int64_t layer_index, const gattn_checkpoint* weights,
                                const char* prefix, gattn_layer** out) {
  return guarded([&] {
    need(out, "out") = nullptr;
    const std::string path = need_array(config_path, "config_path");
    const gattn::io::checkpoint& file = need(weights, "weights").file;
    const gattn::layer_config cfg = gattn::io::load_layer_config(path, gattn::index(layer_index));
    const std::string from = prefix ? std::string(prefix) : default_prefix(gattn::io::read_config_json(path), layer_index);
    gattn::io::load_options options;
    options.skip_non_float = true;
    options.fp8 = gattn::io::load_quantization(path);
    *out = new gattn_layer{gattn::any_layer(cfg, gattn::io::load_weights(file, from, options)), {}};
  });
}

void gattn_layer_destroy(gattn_layer* layer) { delete layer; }

int64_t gattn_layer_hidden(const gattn_layer* layer) { return layer ? int64_t(layer->layer.hidden()) : 0; }

gattn_layer_kind gattn_layer_kind_of(const gattn_layer* layer) {
  if (layer == nullptr || layer->layer.kind() == std::string("gqa")) return GATTN_LAYER_GQA;
  if (layer->layer.is_mla()) return GATTN_LAYER_MLA;
  return layer->layer.kind() == std::string("kda") ? GATTN_LAYER_KDA : GATTN_LAYER_GATED_DELTANET;
}

gattn_status gattn_layer_set_threads(gattn_layer* layer, int threads) {
  return guarded([&] { need(layer, "layer").exec = gattn::execution_context::with_threads(threads); });
}

gattn_status gattn_cache_create(const gattn_layer* layer, int64_t capacity, gattn_cache** out) {
  return guarded([&] {
    need(out, "out") = nullptr;
    const gattn::any_layer& l = need(layer, "layer").layer;
    if (l.is_delta()) *out = new gattn_cache{l.make_state()};
    else *out = new gattn_cache{l.make_cache(gattn::index(capacity))};
  });
}

void gattn_cache_destroy(gattn_cache* cache) { delete cache; }

int64_t gattn_cache_tokens(const gattn_cache* cache) {
  if (cache == nullptr) return 0;
  if (const auto* kv = std::get_if<gattn::kv_cache>(&cache->memory)) return kv->size();
  return std::get<gattn::delta_state>(cache->memory).tokens();
}

gattn_status gattn_cache_clear(gattn_cache* cache) {
  return guarded([&] { std::visit([](auto& m) { m.clear(); }, need(cache, "cache").memory); });
}

gattn_status gattn_cache_reserve(const gattn_layer* layer, gattn_cache* cache, int64_t max_tokens, int64_t max_context) {
  return guarded([&] {
    const gattn_layer& l = need(layer, "layer");
    std::visit([&](auto& m) { l.layer.reserve(m.workspace(), max_tokens, 1, max_context, l.exec); },
               need(cache, "cache").memory);
  });
}

gattn_status gattn_prefill(const gattn_layer* layer, gattn_cache* cache, const float* x, int64_t tokens, float* y) {
  return guarded([&] {
    const gattn_layer& l = need(layer, "layer");
    need_rows(x, y, tokens, "gattn_prefill");
    const gattn::index d = l.layer.hidden(), T = tokens;
    std::visit([&](auto& m) { l.layer.prefill({x, T, d, d}, m, {y, T, d, d}, nullptr, l.exec); },
               need(cache, "cache").memory);
  });
}

gattn_status gattn_decode(const gattn_layer* layer, gattn_cache* cache, const float* x, int64_t tokens, float* y) {
  return guarded([&] {
    const gattn_layer& l = need(layer, "layer");
    need_rows(x, y, tokens, "gattn_decode");
    const gattn::index d = l.layer.hidden(), T = tokens;
    std::visit([&](auto& m) { l.layer.decode({x, T, d, d}, m, {y, T, d, d}, nullptr, l.exec); },
               need(cache, "cache").memory);
  });
}

gattn_status gattn_pool_create(const gattn_layer* layer, int64_t num_blocks, int64_t block_size, gattn_pool** out) {
  return guarded([&] {
    need(out, "out") = nullptr;
    const gattn::any_layer& l = need(layer, "layer").layer;
    if (l.is_delta()) *out = new gattn_pool{l.make_state_pool(gattn::index(num_blocks))};
    else *out = new gattn_pool{l.make_paged_cache(gattn::index(num_blocks), gattn::index(block_size))};
  });
}

void gattn_pool_destroy(gattn_pool* pool) { delete pool; }

gattn_status gattn_sequence_create(gattn_pool* pool, int64_t* id) {
  return guarded([&] { need(id, "id") = std::visit([](auto& p) { return int64_t(p.create()); }, need(pool, "pool").pool); });
}

gattn_status gattn_sequence_fork(gattn_pool* pool, int64_t parent, int64_t* id) {
  return guarded([&] {
    need(id, "id") = std::visit([&](auto& p) { return int64_t(p.fork(parent)); }, need(pool, "pool").pool);
  });
}

gattn_status gattn_sequence_release(gattn_pool* pool, int64_t id) {
  return guarded([&] { std::visit([&](auto& p) { p.release(id); }, need(pool, "pool").pool); });
}

gattn_status gattn_sequence_tokens(const gattn_pool* pool, int64_t id, int64_t* tokens) {
  return guarded([&] {
    const auto& variant = need(pool, "pool").pool;
    if (const auto* paged = std::get_if<gattn::paged_kv_cache>(&variant)) need(tokens, "tokens") = paged->size(id);
    else need(tokens, "tokens") = std::get<gattn::delta_state_pool>(variant).tokens(id);
  });
}

int64_t gattn_pool_free(const gattn_pool* pool) {
  if (pool == nullptr) return 0;
  if (const auto* paged = std::get_if<gattn::paged_kv_cache>(&pool->pool)) return paged->free_blocks();
  return std::get<gattn::delta_state_pool>(pool->pool).free_slots();
}

gattn_status gattn_workspace_create(gattn_workspace** out) {
  return guarded([&] { need(out, "out") = new gattn_workspace(); });
}

void gattn_workspace_destroy(gattn_workspace* workspace) { delete workspace; }

gattn_status gattn_reserve(const gattn_layer* layer, gattn_workspace* workspace, int64_t max_tokens, int64_t max_batch,
                           int64_t max_context) {
  return guarded([&] {
    const gattn_layer& l = need(layer, "layer");
    gattn_workspace& ws = need(workspace, "workspace");
    if (max_batch < 0) throw argument_error("gattn_reserve: max_batch=" + std::to_string(max_batch) + " is negative");
    l.layer.reserve(ws.scratch, max_tokens, max_batch, max_context, l.exec);
    ws.caches.reserve(std::size_t(max_batch));
    ws.states.reserve(std::size_t(max_batch));
    ws.offsets.reserve(std::size_t(max_batch) + 1);
  });
}

gattn_status gattn_step(const gattn_layer* layer, gattn_pool* pool, const int64_t* ids, int64_t batch,
                        const int64_t* cu_seqlens, const float* x, float* y, gattn_workspace* workspace) {
  return guarded([&] {
    const gattn_layer& l = need(layer, "layer");
    gattn_workspace& ws = need(workspace, "workspace");
    auto& variant = need(pool, "pool").pool;
    if (batch < 1) throw argument_error("gattn_step: batch=" + std::to_string(batch) + " must be >= 1");
    need_array(ids, "ids");
    const gattn::index rows = need_array(cu_seqlens, "cu_seqlens")[batch];
    need_rows(x, y, rows, "gattn_step");
    const gattn::index d = l.layer.hidden(), *cu = offsets_of(cu_seqlens, batch, ws);
    if (auto* paged = std::get_if<gattn::paged_kv_cache>(&variant)) {
      ws.caches.clear();
      for (int64_t s = 0; s < batch; ++s) ws.caches.emplace_back(*paged, ids[s]);
      l.layer.step({x, rows, d, d}, cu, batch, ws.caches.data(), {y, rows, d, d}, ws.scratch, nullptr, l.exec);
      return;
    }
    auto& states = std::get<gattn::delta_state_pool>(variant);
    ws.states.clear();
    for (int64_t s = 0; s < batch; ++s) ws.states.emplace_back(states, ids[s]);
    l.layer.step({x, rows, d, d}, cu, batch, ws.states.data(), {y, rows, d, d}, ws.scratch, nullptr, l.exec);
  });
}

}  // extern "C"
