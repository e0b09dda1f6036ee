// gattn: gated attention layers for CPU inference. This umbrella header includes the whole library.
#pragma once

#define GATTN_VERSION_MAJOR 0
#define GATTN_VERSION_MINOR 1
#define GATTN_VERSION_PATCH 0

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/core/weights.hpp"

#include "gattn/gate/activation.hpp"
#include "gattn/gate/gate.hpp"
#include "gattn/gate/policy.hpp"

#include "gattn/kernel/kernel.hpp"

#include "gattn/reference/gqa_layer.hpp"
#include "gattn/reference/mla_layer.hpp"
#include "gattn/reference/sdpa.hpp"

#include "gattn/attention/any_layer.hpp"
#include "gattn/attention/epilogue.hpp"
#include "gattn/attention/gate_source.hpp"
#include "gattn/attention/gqa_layer.hpp"
#include "gattn/attention/kv_cache.hpp"
#include "gattn/attention/mla_layer.hpp"
#include "gattn/attention/rope.hpp"

#include "gattn/backend/backend.hpp"
#include "gattn/backend/unfused_sdpa.hpp"

#include "gattn/diagnostics/cost_model.hpp"
#include "gattn/diagnostics/statistics.hpp"

#include "gattn/io/config_file.hpp"
#include "gattn/io/gattn_config.hpp"
#include "gattn/io/hf_config.hpp"
#include "gattn/io/load_weights.hpp"
#include "gattn/io/safetensors.hpp"
