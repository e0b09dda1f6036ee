// Umbrella header of gattn/kernel: the fused SDPA-then-gate kernel (fused_sdpa over an
// sdpa_params problem, fused_sdpa_batch), its epilogue, online softmax and tile traits.
#pragma once

#include "gattn/kernel/epilogue.hpp"
#include "gattn/kernel/fused_sdpa.hpp"
#include "gattn/kernel/kernel_traits.hpp"
#include "gattn/kernel/online_softmax.hpp"
#include "gattn/kernel/sdpa_params.hpp"
