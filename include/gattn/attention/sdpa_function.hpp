// What a layer calls to run attention. The fused kernel by default; the CLI and the tests substitute
// the float64 oracle or the unfused baseline (gattn/baseline/) without the layers including them.
#pragma once

#include "gattn/kernel/fused_sdpa.hpp"

GATTN_NAMESPACE_BEGIN

/// Runs one SDPA problem with its epilogue (same contract as fused_sdpa).
using sdpa_function = void (*)(const sdpa_params&);

/// The fused kernel on the arch the translation unit was compiled for.
inline void kernel_sdpa(const sdpa_params& p) { fused_sdpa<default_arch>(p); }

GATTN_NAMESPACE_END  // namespace gattn
