// What README.md's C++ blocks use without declaring it: the buffers and sizes the Usage section
// describes in prose, and what its earlier blocks declared (the blocks continue one another).
// tests/readme/check_snippets.cmake compiles every block as the body of a function after this header.
#pragma once

#include <gattn/gattn.hpp>
#include <gattn/io.hpp>

extern float* x;      // [T, d] input rows, row-major
extern float* y;      // [T, d] output rows
extern float* token;  // one input row [1, d]
extern float* out;    // one output row [1, d]
extern gattn::index T;
extern gattn::index d;
extern gattn::weight_map weights;  // the layer's weights by name, without a checkpoint prefix
extern int argc;
extern char** argv;

// Declared by the "layer from files" block.
extern gattn::io::checkpoint file;

// Declared by the "layer in code" block, used by the batch and thread blocks after it.
extern gattn::gqa_config cfg;
extern const gattn::gated_gqa<gattn::qwen3_next_gate>& layer;
extern gattn::kv_cache cache;

// An engine's own thread pool, as the thread block assumes one: run_chunks(n, f) calls
// f(begin, end) over ranges covering [0, n) on its threads and returns when all are done.
struct thread_pool {
  int size() const;
  template <class F>
  void run_chunks(gattn::index n, F&& f) {  // a template used with a local lambda needs a body
    f(0, n);
  }
};
extern thread_pool engine_pool;
