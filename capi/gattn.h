/* gattn's C API: gated attention and gated delta-rule layers from checkpoint files, their caches,
 * states and pools, one-sequence and batched calls. Plain C99; the library behind it (CMake target
 * gattn::c) is one compiled C++ translation unit, so a program links it instead of compiling
 * gattn's templates. No exception crosses this interface: every function that can fail returns a
 * gattn_status, and gattn_last_error() says why.
 *
 * Rows are dense, row-major fp32: x and y of a call are [tokens, hidden] with hidden = the layer's
 * gattn_layer_hidden(). Sizes and sequence ids are int64_t. Handles are not copied; each is
 * released by its own function (NULL is accepted there and ignored).
 *
 * Threads: a layer may be called from several threads at once, each call with its own cache (or
 * its own sequences of a pool) and its own workspace. A pool may be shared by threads: its
 * operations are serialised; each sequence is in one call at a time. The message of
 * gattn_last_error() is per thread. */
#ifndef GATTN_H
#define GATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a call returns. The refusals mirror the C++ library's exception classes. */
typedef enum gattn_status {
  GATTN_OK = 0,
  GATTN_ERROR_CONFIG = 1,   /* a config is inconsistent or unsupported; a hybrid model without a layer index */
  GATTN_ERROR_SHAPE = 2,    /* rows, cu_seqlens or a size that does not fit */
  GATTN_ERROR_WEIGHT = 3,   /* a weight missing, mis-shaped, or a prefix that matches nothing */
  GATTN_ERROR_CACHE = 4,    /* a full cache or pool, an unknown or released sequence id, a cache of another layer */
  GATTN_ERROR_FORMAT = 5,   /* a file that cannot be read or is malformed */
  GATTN_ERROR_ARGUMENT = 6, /* a NULL handle or pointer, a negative size */
  GATTN_ERROR_MEMORY = 7,   /* out of memory */
  GATTN_ERROR_INTERNAL = 8  /* anything else (a bug) */
} gattn_status;

/* The message of the last call on this thread that did not return GATTN_OK ("" before any);
 * valid until this thread's next failing call. */
const char* gattn_last_error(void);
/* "ok", "config", "shape", "weight", "cache", "format", "argument", "memory", "internal". */
const char* gattn_status_name(gattn_status status);
/* The library's version, e.g. "0.1.0". */
const char* gattn_version(void);

/* ---- Checkpoints: a .safetensors file, a model.safetensors.index.json, or a directory holding
 * either; mapped read-only. */
typedef struct gattn_checkpoint gattn_checkpoint;

gattn_status gattn_checkpoint_open(const char* path, gattn_checkpoint** out);
void gattn_checkpoint_close(gattn_checkpoint* checkpoint);
/* The shape of tensor `name`: its rank into *rank and up to `capacity` dimensions into dims. */
gattn_status gattn_checkpoint_shape(const gattn_checkpoint* checkpoint, const char* name, int64_t* dims,
                                    int capacity, int* rank);
/* Tensor `name` (any float type) rounded or widened to fp32 into out[0 .. count), count = its elements. */
gattn_status gattn_checkpoint_read(const gattn_checkpoint* checkpoint, const char* name, float* out, int64_t count);

/* ---- Layers. */
typedef struct gattn_layer gattn_layer;

typedef enum gattn_layer_kind {
  GATTN_LAYER_GQA = 0,
  GATTN_LAYER_MLA = 1,
  GATTN_LAYER_GATED_DELTANET = 2,
  GATTN_LAYER_KDA = 3
} gattn_layer_kind;

/* A layer from a config file (a gattn config, or a Hugging Face config.json) and its weights.
 * layer_index: the layer of a Hugging Face model (-1: the model's one kind of layer; a hybrid
 * model such as Qwen3-Next or Qwen3.5 needs an index, and a gattn config takes none). prefix: the
 * weights' name prefix; NULL means the Hugging Face layer's own ("model.layers.{i}.self_attn." or
 * ".linear_attn.", under "model.language_model." for a Qwen3.5 multimodal checkpoint) or, for a
 * gattn config, none. The layer keeps the weights it needs mapped: the checkpoint may be closed
 * afterwards. */
gattn_status gattn_layer_create(const char* config_path, int64_t layer_index, const gattn_checkpoint* weights,
                                const char* prefix, gattn_layer** out);
void gattn_layer_destroy(gattn_layer* layer);
int64_t gattn_layer_hidden(const gattn_layer* layer);
gattn_layer_kind gattn_layer_kind_of(const gattn_layer* layer);
/* The threads the layer's calls use: 0 (the default) all of OpenMP's, 1 the calling thread only.
 * Set it before the layer is in use. */
gattn_status gattn_layer_set_threads(gattn_layer* layer, int threads);

/* ---- One sequence: a KV cache (softmax layers) or a recurrent state (delta-rule layers). */
typedef struct gattn_cache gattn_cache;

/* A cache of `capacity` tokens (a delta-rule layer's state has a fixed size: capacity is ignored). */
gattn_status gattn_cache_create(const gattn_layer* layer, int64_t capacity, gattn_cache** out);
void gattn_cache_destroy(gattn_cache* cache);
/* Tokens the sequence holds. */
int64_t gattn_cache_tokens(const gattn_cache* cache);
/* Forgets every token. */
gattn_status gattn_cache_clear(gattn_cache* cache);
/* Sizes the cache's own workspace for calls of up to max_tokens rows over at most max_context
 * cached tokens, so that decode allocates nothing. */
gattn_status gattn_cache_reserve(const gattn_layer* layer, gattn_cache* cache, int64_t max_tokens, int64_t max_context);

/* Appends x's `tokens` rows to the sequence and writes their outputs into y. A chunked prefill and
 * a decode step are the same call; gattn_decode refuses a non-causal layer. */
gattn_status gattn_prefill(const gattn_layer* layer, gattn_cache* cache, const float* x, int64_t tokens, float* y);
gattn_status gattn_decode(const gattn_layer* layer, gattn_cache* cache, const float* x, int64_t tokens, float* y);

/* ---- Many sequences: a pool (a paged KV cache of blocks, or delta-rule state slots). */
typedef struct gattn_pool gattn_pool;
typedef struct gattn_workspace gattn_workspace;

/* A paged pool of num_blocks blocks of block_size tokens (a delta-rule layer: num_blocks state
 * slots, block_size ignored), for sequences of `layer`. */
gattn_status gattn_pool_create(const gattn_layer* layer, int64_t num_blocks, int64_t block_size, gattn_pool** out);
void gattn_pool_destroy(gattn_pool* pool);
/* A new empty sequence; a copy of `parent` sharing its blocks (copy on write); the end of one.
 * The id of a released sequence is refused from then on, also once its slot is reused. */
gattn_status gattn_sequence_create(gattn_pool* pool, int64_t* id);
gattn_status gattn_sequence_fork(gattn_pool* pool, int64_t parent, int64_t* id);
gattn_status gattn_sequence_release(gattn_pool* pool, int64_t id);
gattn_status gattn_sequence_tokens(const gattn_pool* pool, int64_t id, int64_t* tokens);
/* Free blocks (slots) of the pool. */
int64_t gattn_pool_free(const gattn_pool* pool);

/* The scratch of a batched call: one per call in flight. */
gattn_status gattn_workspace_create(gattn_workspace** out);
void gattn_workspace_destroy(gattn_workspace* workspace);
/* Sizes a workspace for steps of up to max_tokens rows in max_batch sequences of at most
 * max_context cached tokens: such steps then allocate nothing. */
gattn_status gattn_reserve(const gattn_layer* layer, gattn_workspace* workspace, int64_t max_tokens,
                           int64_t max_batch, int64_t max_context);

/* One batched call over sequences ids[0 .. batch) of `pool`: sequence s owns rows
 * [cu_seqlens[s], cu_seqlens[s + 1]) of x and y (a prefill chunk or decode tokens), cu_seqlens
 * has batch + 1 entries from 0 up to the rows of x. Every check passes before anything is
 * appended to any sequence. */
gattn_status gattn_step(const gattn_layer* layer, gattn_pool* pool, const int64_t* ids, int64_t batch,
                        const int64_t* cu_seqlens, const float* x, float* y, gattn_workspace* workspace);

#ifdef __cplusplus
}
#endif

#endif /* GATTN_H */
