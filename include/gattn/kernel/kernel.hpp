// Umbrella header of gattn/kernel: arch dispatch, the SIMD surface, vector ops, online softmax,
// tile traits and the fused SDPA-then-gate kernel.
#pragma once

#include "gattn/simd/arch.hpp"
#include "gattn/simd/simd.hpp"
#include "gattn/simd/vector_ops.hpp"
#include "gattn/kernel/online_softmax.hpp"
#include "gattn/kernel/kernel_traits.hpp"
#include "gattn/kernel/fused_sdpa.hpp"
