// Umbrella header of gattn/kernel: arch dispatch, the SIMD surface, vector ops, online softmax,
// tile traits and the fused SDPA-then-gate kernel.
#pragma once

#include "gattn/kernel/arch.hpp"
#include "gattn/kernel/simd.hpp"
#include "gattn/kernel/vector_ops.hpp"
#include "gattn/kernel/online_softmax.hpp"
#include "gattn/kernel/kernel_traits.hpp"
#include "gattn/kernel/fused_sdpa.hpp"
