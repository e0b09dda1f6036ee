// Which heads a rank of a tensor-parallel group owns (docs/spec.md §12), and the rank-local config.
#pragma once

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/validate.hpp"

GATTN_NAMESPACE_BEGIN

/// Rank `rank` of `ranks`: its query heads [q_first, q_first + q_count) and the KV heads
/// [kv_first, kv_first + kv_count) they read (a slice when P divides H_kv, one replicated head
/// when H_kv divides P).
struct head_split {
  int rank = 0;
  int ranks = 1;
  index q_first = 0, q_count = 0;
  index kv_first = 0, kv_count = 0;
};

namespace detail {

inline void check_rank(int rank, int ranks) {
  require<config_error>(ranks >= 1 && rank >= 0 && rank < ranks, "tensor parallelism: rank ", rank,
                        " is not in [0, ranks=", ranks, ")");
}

}  // namespace detail

/// The split of `q_heads` query heads over `kv_heads` KV heads; config_error naming the heads and
/// P when H_q is not a multiple of P, or neither of P and H_kv divides the other. Every rank sees
/// the same numbers, so every rank refuses alike before any communication.
/// `q_name` and `kv_name` are the config keys the message names (a delta-rule layer splits its value
/// heads as query heads and the key heads they read as KV heads).
inline head_split split_heads(index q_heads, index kv_heads, int rank, int ranks,
                              const char* q_name = "num_attention_heads", const char* kv_name = "num_key_value_heads") {
  detail::check_rank(rank, ranks);
  detail::require<config_error>(q_heads > 0 && kv_heads > 0, "tensor parallelism: ", q_name, "=", q_heads, " and ",
                                kv_name, "=", kv_heads, " must be positive");
  const index P = ranks;
  detail::require<config_error>(q_heads % P == 0, "tensor parallelism: ", q_name, "=", q_heads,
                                " is not divisible by the ", P, " ranks (heads split evenly, docs/spec.md §12)");
  detail::require<config_error>(kv_heads % P == 0 || P % kv_heads == 0, "tensor parallelism: ", kv_name, "=",
                                kv_heads, " and ", P,
                                " ranks: the KV heads must split evenly (P divides H_kv) or be replicated "
                                "(H_kv divides P), docs/spec.md §12");
  head_split s;
  s.rank = rank;
  s.ranks = ranks;
  s.q_count = q_heads / P;
  s.q_first = s.q_count * rank;
  if (kv_heads % P == 0) {
    s.kv_count = kv_heads / P;
    s.kv_first = s.kv_count * rank;
  } else {
    s.kv_count = 1;
    s.kv_first = s.q_first / (q_heads / kv_heads);  // the one KV group this rank's heads sit in
  }
  return s;
}

inline head_split split_heads(const gqa_config& c, int rank, int ranks) {
  validate(c);
  return split_heads(c.q_heads, c.kv_heads, rank, ranks);
}
/// MLA: every head reads the shared latent; only the query heads split.
inline head_split split_heads(const mla_config& c, int rank, int ranks) {
  validate(c);
  return split_heads(c.heads, 1, rank, ranks);
}

/// Delta-rule layers (docs/spec.md §13): value heads split like query heads; the key heads they read
/// split with them or, when fewer than the ranks, are replicated.
inline head_split split_heads(const delta_config& c, int rank, int ranks) {
  validate(c);
  return split_heads(c.value_heads, c.key_heads, rank, ranks, "num_value_heads", "num_key_heads");
}

/// The layer rank `s.rank` runs: its heads only. A G5 gate acts after the all-reduce, in the
/// tensor-parallel wrapper, so the rank-local layer has none.
inline gqa_config shard_config(const gqa_config& c, const head_split& s) {
  gqa_config local = c;
  local.q_heads = s.q_count;
  local.kv_heads = s.kv_count;
  if (c.gate.enabled && c.gate.position == gate_position::g5) local.gate = gate_config{};
  return local;
}

inline mla_config shard_config(const mla_config& c, const head_split& s) {
  mla_config local = c;
  local.heads = s.q_count;
  return local;
}

inline delta_config shard_config(const delta_config& c, const head_split& s) {
  delta_config local = c;
  local.value_heads = s.q_count;
  local.key_heads = s.kv_count;
  return local;
}

GATTN_NAMESPACE_END  // namespace gattn
