// gattn's loaders: safetensors checkpoints, gattn and Hugging Face config files, weight maps.
// Separate from <gattn/gattn.hpp> so that code that only runs layers compiles no JSON parsing.
#pragma once

#include "gattn/gattn.hpp"

#include "gattn/io/checkpoint.hpp"
#include "gattn/io/config_file.hpp"
#include "gattn/io/gattn_config.hpp"
#include "gattn/io/hf_config.hpp"
#include "gattn/io/load_weights.hpp"
#include "gattn/io/quantization.hpp"
#include "gattn/io/safetensors.hpp"
