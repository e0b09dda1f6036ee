// gattn: gated attention layers for CPU inference. This umbrella header brings the layers and what
// they are made of (configs, SIMD layer, linear maps, gates, kernel, caches, diagnostics). It
// compiles no JSON or safetensors parsing: the loaders are in <gattn/io.hpp>; the float64 oracle
// and the unfused baseline, which only tests and tools compose, in gattn/reference/ and
// gattn/baseline/.
#pragma once

#define GATTN_VERSION_MAJOR 0
#define GATTN_VERSION_MINOR 1
#define GATTN_VERSION_PATCH 0

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/execution.hpp"
#include "gattn/core/scratch_span.hpp"
#include "gattn/core/types.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/core/weights.hpp"

#include "gattn/simd/arch.hpp"
#include "gattn/simd/simd.hpp"
#include "gattn/simd/vector_ops.hpp"

#include "gattn/linalg/linear_map.hpp"

#include "gattn/gate/activation.hpp"
#include "gattn/gate/apply.hpp"
#include "gattn/gate/gate.hpp"
#include "gattn/gate/policy.hpp"
#include "gattn/gate/rounding.hpp"
#include "gattn/gate/shape.hpp"
#include "gattn/gate/source.hpp"

#include "gattn/kernel/kernel.hpp"

#include "gattn/cache/kv_cache.hpp"
#include "gattn/cache/paged_kv_cache.hpp"
#include "gattn/cache/paged_kv_view.hpp"
#include "gattn/cache/sequence_cache.hpp"
#include "gattn/cache/workspace.hpp"

#include "gattn/attention/any_layer.hpp"
#include "gattn/attention/batch.hpp"
#include "gattn/attention/gqa_layer.hpp"
#include "gattn/attention/mla_layer.hpp"
#include "gattn/attention/rope.hpp"
#include "gattn/attention/sdpa_function.hpp"

#include "gattn/diagnostics/cost_model.hpp"
#include "gattn/diagnostics/statistics.hpp"
