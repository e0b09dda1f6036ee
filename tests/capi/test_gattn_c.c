/* The C API (capi/gattn.h) from C: tests/data/hf_qwen3_next (layer 3, a gated GQA layer),
 * tests/data/hf_qwen3_next_linear (layer 0, Gated DeltaNet), and their Qwen3.5 counterparts
 * hf_qwen3_5 and hf_qwen3_5_linear (a multimodal wrapper's text_config, split projections) with a
 * text-only Qwen3.5 folder, reproduced through a cache (prefill, then decode token by token) and
 * through batched steps over a pool, plus the refusals a caller meets: a hybrid model without a
 * layer index, a released sequence, NULL handles.
 * Usage: test_gattn_c <tests/data>. Exit 0 when every check passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gattn.h"

static int failures = 0;

#define CHECK(cond, ...)                                 \
  do {                                                   \
    if (!(cond)) {                                       \
      ++failures;                                        \
      fprintf(stderr, "FAILED %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                      \
      fprintf(stderr, " (last error: %s)\n", gattn_last_error()); \
    }                                                    \
  } while (0)

#define CHECK_OK(call) CHECK((call) == GATTN_OK, "%s", #call)

/* A tensor of a file, read as fp32 (NULL on failure); its element count into *count. */
static float* read_tensor(const gattn_checkpoint* file, const char* name, int64_t* rows, int64_t* cols) {
  int64_t dims[2] = {0, 0};
  int rank = 0;
  if (gattn_checkpoint_shape(file, name, dims, 2, &rank) != GATTN_OK || rank != 2) return NULL;
  float* values = malloc((size_t)(dims[0] * dims[1]) * sizeof(float));
  if (values == NULL || gattn_checkpoint_read(file, name, values, dims[0] * dims[1]) != GATTN_OK) {
    free(values);
    return NULL;
  }
  *rows = dims[0];
  *cols = dims[1];
  return values;
}

/* max|y - y_ref| / max|y_ref| over n values. */
static double relative_error(const float* y, const float* y_ref, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = fabs((double)y[i] - (double)y_ref[i]);
    if (d != d) return INFINITY;
    if (d > diff) diff = d;
    if (fabs((double)y_ref[i]) > scale) scale = fabs((double)y_ref[i]);
  }
  return scale > 0 ? diff / scale : diff;
}

/* One sequence through a cache: a prefill of `prompt` rows, then one decode step per row. */
static void run_cache(const gattn_layer* layer, const float* x, const float* y_ref, int64_t T, int64_t d,
                      int64_t prompt, const char* name) {
  gattn_cache* cache = NULL;
  float* y = calloc((size_t)(T * d), sizeof(float));
  CHECK_OK(gattn_cache_create(layer, T, &cache));
  CHECK_OK(gattn_cache_reserve(layer, cache, prompt, T));
  CHECK_OK(gattn_prefill(layer, cache, x, prompt, y));
  for (int64_t t = prompt; t < T; ++t) CHECK_OK(gattn_decode(layer, cache, x + t * d, 1, y + t * d));
  CHECK(gattn_cache_tokens(cache) == T, "%s: the cache holds %lld tokens", name, (long long)gattn_cache_tokens(cache));
  const double err = relative_error(y, y_ref, T * d);
  printf("%s, cache: max|y-y_ref|/max|y_ref| = %.3g\n", name, err);
  CHECK(err <= 1e-4, "%s: cache run off by %.3g", name, err);
  gattn_cache_destroy(cache);
  free(y);
}

/* Two sequences of one pool in batched steps: a prefills x[:a], b prefills x[:b] (a > b), then
 * each decodes one row per step until it holds all T rows; every row is compared with y_ref. */
static void run_pool(const gattn_layer* layer, const float* x, const float* y_ref, int64_t T, int64_t d,
                     const char* name) {
  gattn_pool* pool = NULL;
  gattn_workspace* ws = NULL;
  int64_t ids[2] = {-1, -1}, done[2] = {T / 2, T / 3};
  float* xb = malloc((size_t)(2 * T * d) * sizeof(float));
  float* yb = malloc((size_t)(2 * T * d) * sizeof(float));
  float* y[2] = {calloc((size_t)(T * d), sizeof(float)), calloc((size_t)(T * d), sizeof(float))};
  CHECK_OK(gattn_pool_create(layer, 16, 4, &pool));
  CHECK_OK(gattn_workspace_create(&ws));
  CHECK_OK(gattn_reserve(layer, ws, 2 * T, 2, T));
  for (int s = 0; s < 2; ++s) CHECK_OK(gattn_sequence_create(pool, &ids[s]));
  int64_t first[2] = {0, 0};
  for (int step = 0; failures == 0 && (step == 0 || first[0] < T || first[1] < T); ++step) {
    int64_t cu[3] = {0, 0, 0}, batch_ids[2], batch = 0, from[2];
    for (int s = 0; s < 2; ++s) {
      const int64_t n = step == 0 ? done[s] : (first[s] < T ? 1 : 0);
      if (n == 0) continue;
      memcpy(xb + cu[batch] * d, x + first[s] * d, (size_t)(n * d) * sizeof(float));
      from[batch] = s;
      batch_ids[batch] = ids[s];
      cu[batch + 1] = cu[batch] + n;
      ++batch;
    }
    CHECK_OK(gattn_step(layer, pool, batch_ids, batch, cu, xb, yb, ws));
    for (int64_t b = 0; b < batch; ++b) {
      const int s = (int)from[b];
      memcpy(y[s] + first[s] * d, yb + cu[b] * d, (size_t)((cu[b + 1] - cu[b]) * d) * sizeof(float));
      first[s] += cu[b + 1] - cu[b];
    }
  }
  for (int s = 0; s < 2; ++s) {
    int64_t tokens = 0;
    CHECK_OK(gattn_sequence_tokens(pool, ids[s], &tokens));
    CHECK(tokens == T, "%s: sequence %d holds %lld tokens", name, s, (long long)tokens);
    const double err = relative_error(y[s], y_ref, T * d);
    printf("%s, pool sequence %d: max|y-y_ref|/max|y_ref| = %.3g\n", name, s, err);
    CHECK(err <= 1e-4, "%s: pool sequence %d off by %.3g", name, s, err);
  }
  /* A released sequence's id is refused, also once create() has reused its slot. */
  const int64_t stale = ids[1];
  CHECK_OK(gattn_sequence_release(pool, ids[1]));
  CHECK_OK(gattn_sequence_create(pool, &ids[1]));
  CHECK(ids[1] != stale, "%s: create() handed out the released id again", name);
  const int64_t cu1[2] = {0, 1};
  CHECK(gattn_step(layer, pool, &stale, 1, cu1, x, yb, ws) == GATTN_ERROR_CACHE, "%s: a stale id was accepted", name);
  for (int s = 0; s < 2; ++s) CHECK_OK(gattn_sequence_release(pool, ids[s]));
  CHECK(gattn_pool_free(pool) == 16, "%s: %lld of 16 free after release", name, (long long)gattn_pool_free(pool));
  gattn_workspace_destroy(ws);
  gattn_pool_destroy(pool);
  free(xb);
  free(yb);
  free(y[0]);
  free(y[1]);
}

/* One Hugging Face folder: config.json, model.safetensors, io.safetensors (x, y). */
static void run_folder(const char* data, const char* folder, int64_t layer_index, gattn_layer_kind kind) {
  char dir[4096], config[4200], io[4200];
  snprintf(dir, sizeof dir, "%s/%s", data, folder);
  snprintf(config, sizeof config, "%s/config.json", dir);
  snprintf(io, sizeof io, "%s/io.safetensors", dir);
  gattn_checkpoint *weights = NULL, *vectors = NULL;
  gattn_layer* layer = NULL;
  CHECK_OK(gattn_checkpoint_open(dir, &weights));
  CHECK_OK(gattn_checkpoint_open(io, &vectors));
  /* A hybrid model's config does not say which layer is meant without an index. */
  CHECK(gattn_layer_create(config, -1, weights, NULL, &layer) == GATTN_ERROR_CONFIG && layer == NULL,
        "%s: a hybrid config without a layer index was accepted", folder);
  CHECK(strstr(gattn_last_error(), "layers") != NULL, "%s: the refusal names no layers", folder);
  CHECK_OK(gattn_layer_create(config, layer_index, weights, NULL, &layer));
  gattn_checkpoint_close(weights); /* the layer keeps what it needs mapped */
  if (layer == NULL) return;
  CHECK(gattn_layer_kind_of(layer) == kind, "%s: layer kind %d", folder, (int)gattn_layer_kind_of(layer));
  int64_t T = 0, d = 0, T2 = 0, d2 = 0;
  float* x = read_tensor(vectors, "x", &T, &d);
  float* y_ref = read_tensor(vectors, "y", &T2, &d2);
  CHECK(x != NULL && y_ref != NULL && T == T2 && d == d2 && d == gattn_layer_hidden(layer), "%s: x and y", folder);
  if (x != NULL && y_ref != NULL) {
    run_cache(layer, x, y_ref, T, d, T / 2, folder);
    run_pool(layer, x, y_ref, T, d, folder);
  }
  free(x);
  free(y_ref);
  gattn_layer_destroy(layer);
  gattn_checkpoint_close(vectors);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <tests/data>\n", argv[0]);
    return 2;
  }
  printf("gattn %s\n", gattn_version());
  run_folder(argv[1], "hf_qwen3_next", 3, GATTN_LAYER_GQA);
  run_folder(argv[1], "hf_qwen3_next_linear", 0, GATTN_LAYER_GATED_DELTANET);
  run_folder(argv[1], "hf_qwen3_5", 3, GATTN_LAYER_GQA);
  run_folder(argv[1], "hf_qwen3_5_linear", 0, GATTN_LAYER_GATED_DELTANET);
  run_folder(argv[1], "extra_hf_qwen3_5_text_linear_r4", 2, GATTN_LAYER_GATED_DELTANET);
  run_folder(argv[1], "hf_qwen3_next_fp8", 3, GATTN_LAYER_GQA); /* block-FP8 weights, block size from config.json */
  run_folder(argv[1], "hf_qwen3_next_linear_fp8", 0, GATTN_LAYER_GATED_DELTANET);
  /* NULL handles are argument errors, never crashes. */
  gattn_cache* cache = NULL;
  CHECK(gattn_cache_create(NULL, 4, &cache) == GATTN_ERROR_ARGUMENT && cache == NULL, "a NULL layer");
  CHECK(strstr(gattn_last_error(), "layer") != NULL, "the message names the layer");
  CHECK(gattn_checkpoint_open("/nonexistent/gattn", NULL) == GATTN_ERROR_ARGUMENT, "a NULL out");
  gattn_checkpoint* missing = NULL;
  CHECK(gattn_checkpoint_open("/nonexistent/gattn", &missing) == GATTN_ERROR_FORMAT && missing == NULL, "a missing file");
  CHECK(strcmp(gattn_status_name(GATTN_ERROR_CACHE), "cache") == 0, "status names");
  printf("%s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
