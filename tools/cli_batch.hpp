// `gattn run --batch-lengths L1,L2,...`: B prefixes of the input's x run together as one batch
// (docs/spec.md §11), to show and check that a batched step gives each sequence what it gets alone.
#pragma once

#include <string>
#include <vector>

#include "gattn/attention/any_layer.hpp"
#include "cli_tp.hpp"

GATTN_NAMESPACE_BEGIN namespace cli {

/// "L1,L2,..." as lengths >= 1. Throws std::invalid_argument naming the bad item (empty list or
/// item, not a number, 0 or negative).
std::vector<index> parse_batch_lengths(const std::string& text);

/// Runs sequences s = 0..B-1 with inputs x[:L_s] (x is [T, d], every L_s <= T) through one paged
/// pool of `block_size`-token blocks (docs/spec.md §11; a block size above the longest L_s is
/// clamped to it, so the pool holds sum ceil(L_s / block) blocks and no more), one sequence each:
/// all prefill their first ceil(L_s/2) tokens in one batched call, then advance together by
/// batched decode steps of one token per sequence, each leaving the batch when done. Returns y_s
/// [L_s, d] per sequence.
std::vector<std::vector<float>> run_batch(const run_layer& layer, const std::vector<float>& x, index d,
                                          const std::vector<index>& lengths, index block_size);

/// Writes y.0 ... y.{B-1} (F32, [L_s, d]) to a safetensors file.
void write_batch_output(const std::string& path, const std::vector<std::vector<float>>& y, index d,
                        const std::string& producer);

}  GATTN_NAMESPACE_END  // namespace gattn::cli
