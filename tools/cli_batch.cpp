// See cli_batch.hpp.
#include "cli_batch.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "gattn/io.hpp"

GATTN_NAMESPACE_BEGIN namespace cli {

std::vector<index> parse_batch_lengths(const std::string& text) {
  std::vector<index> out;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    bool digits = !item.empty() && item.size() <= 12;
    for (char c : item) digits = digits && c >= '0' && c <= '9';
    if (!digits) throw std::invalid_argument("--batch-lengths needs positive integers L1,L2,..., got '" + item + "' in '" + text + "'");
    const index v = index(std::stoll(item));
    if (v < 1) throw std::invalid_argument("--batch-lengths: length " + item + " must be >= 1");
    out.push_back(v);
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

namespace {

// The sequences' memory: one paged pool (docs/spec.md §11) with exactly the blocks they need, or,
// for a delta-rule layer, one pool with a state slot per sequence (docs/spec.md §13).
struct batch_caches {
  std::optional<paged_kv_cache> pool;
  std::vector<paged_kv_cache::sequence_id> ids;
  std::optional<delta_state_pool> states;
  std::vector<delta_state_pool::sequence_id> state_ids;
};

batch_caches make_caches(const run_layer& layer, const std::vector<index>& lengths, index block_size) {
  batch_caches c;
  if (layer.is_delta()) {
    c.states.emplace(layer.make_state_pool(index(lengths.size())));
    for (std::size_t s = 0; s < lengths.size(); ++s) c.state_ids.push_back(c.states->create());
    return c;
  }
  // A block longer than the longest sequence would only hold unused rows: the pool is bounded by
  // the lengths, whatever block size was asked for.
  block_size = std::min(block_size, *std::max_element(lengths.begin(), lengths.end()));
  index blocks = 0;
  for (index L : lengths) blocks += (L + block_size - 1) / block_size;
  c.pool.emplace(layer.make_paged_cache(blocks, block_size));
  for (std::size_t s = 0; s < lengths.size(); ++s) c.ids.push_back(c.pool->create());
  return c;
}

// The rows of one batched call: sequence s takes `take(s)` rows from where it stands.
struct batch_call {
  std::vector<index> cu{0}, members;
  std::vector<sequence_cache> handles;
  std::vector<delta_sequence> states;
  std::vector<float> x, y;

  void add(batch_caches& c, index s) {
    members.push_back(s);
    if (c.states) states.emplace_back(*c.states, c.state_ids[std::size_t(s)]);
    else handles.emplace_back(*c.pool, c.ids[std::size_t(s)]);
  }
  void run(const run_layer& layer, index d, layer_workspace& ws) {
    const index N = cu.back(), B = index(members.size());
    y.resize(std::size_t(N * d));
    if (!states.empty()) layer.step({x.data(), N, d, d}, cu.data(), B, states.data(), {y.data(), N, d, d}, ws);
    else layer.step({x.data(), N, d, d}, cu.data(), B, handles.data(), {y.data(), N, d, d}, ws);
  }
};

}  // namespace

std::vector<std::vector<float>> run_batch(const run_layer& layer, const std::vector<float>& x, index d,
                                          const std::vector<index>& lengths, index block_size) {
  const index B = index(lengths.size());
  batch_caches caches = make_caches(layer, lengths, block_size);
  std::vector<std::vector<float>> y(lengths.size());
  for (index s = 0; s < B; ++s) y[std::size_t(s)].resize(std::size_t(lengths[std::size_t(s)] * d));
  std::vector<index> done(lengths.size(), 0);
  layer_workspace ws;
  for (bool prefill = true;; prefill = false) {
    batch_call call;
    for (index s = 0; s < B; ++s) {
      const index L = lengths[std::size_t(s)], at = done[std::size_t(s)];
      const index n = prefill ? (L + 1) / 2 : std::min<index>(1, L - at);
      if (n == 0) continue;
      call.add(caches, s);
      call.cu.push_back(call.cu.back() + n);
      call.x.insert(call.x.end(), x.begin() + at * d, x.begin() + (at + n) * d);
    }
    if (call.members.empty()) return y;
    call.run(layer, d, ws);
    for (std::size_t i = 0; i < call.members.size(); ++i) {
      const index s = call.members[i], n = call.cu[i + 1] - call.cu[i];
      std::memcpy(y[std::size_t(s)].data() + done[std::size_t(s)] * d, call.y.data() + call.cu[i] * d,
                  sizeof(float) * std::size_t(n * d));
      done[std::size_t(s)] += n;
    }
  }
}

void write_batch_output(const std::string& path, const std::vector<std::vector<float>>& y, index d,
                        const std::string& producer) {
  std::vector<io::tensor_to_write> tensors;
  for (std::size_t s = 0; s < y.size(); ++s)
    tensors.push_back({"y." + std::to_string(s), io::dtype::f32, {index(y[s].size()) / d, d}, y[s].data()});
  io::write_safetensors(path, tensors, {{"producer", producer}});
}

}  GATTN_NAMESPACE_END  // namespace gattn::cli
