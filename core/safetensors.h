/* safetensors: read (mmap, single file or sharded through model.safetensors.index.json) and write (atomic).
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets"}, ...,
 * "__metadata__": {str: str}}, then the data. Every header is validated before any tensor is touched: offsets
 * in range, contiguous-or-not but never overlapping, size == prod(shape) * dtype size, known dtype, unique names. */
#ifndef CPT_CORE_SAFETENSORS_H
#define CPT_CORE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum { CPT_DT_F32 = 0, CPT_DT_BF16, CPT_DT_F16, CPT_DT_I32, CPT_DT_I64, CPT_DT_U8, CPT_DT_F64 } cpt_dtype;

size_t cpt_dtype_size(cpt_dtype dt);
const char *cpt_dtype_name(cpt_dtype dt); /* "F32", "BF16", ... as safetensors spells them */
int cpt_dtype_from_name(const char *name, cpt_dtype *out); /* 0, or -1 for a name not in cpt_dtype */

#define CPT_ST_MAX_DIMS 8

typedef struct cpt_st_tensor {
    char *name;
    cpt_dtype dtype;
    int ndim;
    int64_t shape[CPT_ST_MAX_DIMS];
    size_t nbytes;
    const void *data; /* points into the mapping; valid while the file is open */
} cpt_st_tensor;

/* An open safetensors file or a sharded set of them; tensors sorted by name. */
typedef struct cpt_st_file cpt_st_file;

/* path: a .safetensors file, a model.safetensors.index.json, or a folder holding either. */
cpt_st_file *cpt_st_open(const char *path, cpt_err *err);
/* Validates a header held in memory (the whole file's bytes): the fuzzed entry point. The bytes are not copied:
 * they must outlive the returned file. */
cpt_st_file *cpt_st_open_memory(const void *bytes, size_t len, const char *name_for_errors, cpt_err *err);
void cpt_st_close(cpt_st_file *f);

size_t cpt_st_count(const cpt_st_file *f);
const cpt_st_tensor *cpt_st_at(const cpt_st_file *f, size_t i);
const cpt_st_tensor *cpt_st_find(const cpt_st_file *f, const char *name); /* NULL if absent */
const char *cpt_st_metadata(const cpt_st_file *f, const char *key);       /* NULL if absent */
/* Metadata in key order: the file's __metadata__ (sharded: the index's "metadata", numbers as decimal text, then
 * each shard's keys not already present). Returns -1 when i is out of range. */
size_t cpt_st_metadata_count(const cpt_st_file *f);
int cpt_st_metadata_at(const cpt_st_file *f, size_t i, const char **key, const char **value);
/* The path (or name_for_errors) of the file a tensor of f lives in: for messages about sharded sets. */
const char *cpt_st_tensor_file(const cpt_st_file *f, const cpt_st_tensor *t);
size_t cpt_st_numel(const cpt_st_tensor *t); /* product of the shape; 1 for a scalar */

/* Copies a tensor into float32 (converting BF16/F16/F64/ints); n must equal its element count. */
int cpt_st_read_f32(const cpt_st_tensor *t, float *out, size_t n, cpt_err *err);
/* Copies a floating-point tensor (F32, BF16, F16, F64) into bf16, rounding to nearest even. */
int cpt_st_read_bf16(const cpt_st_tensor *t, uint16_t *out, size_t n, cpt_err *err);

/* Writer: add tensors (data copied or referenced until finish), then finish writes the file atomically. */
typedef struct cpt_st_writer cpt_st_writer;
cpt_st_writer *cpt_st_writer_new(void);
/* data is referenced, not copied: it must stay valid until cpt_st_writer_finish. */
int cpt_st_writer_add(cpt_st_writer *w, const char *name, cpt_dtype dt, int ndim, const int64_t *shape,
                      const void *data, cpt_err *err);
/* The same, but the data are copied now (for temporaries). */
int cpt_st_writer_add_copy(cpt_st_writer *w, const char *name, cpt_dtype dt, int ndim, const int64_t *shape,
                           const void *data, cpt_err *err);
/* A repeated key replaces the value. */
int cpt_st_writer_meta(cpt_st_writer *w, const char *key, const char *value, cpt_err *err);
/* Atomic; frees w. The data are laid out back to back, widest dtype first, then by name (as the Python
 * safetensors package does: readable by it, and with the header padded with spaces to a multiple of 8 every
 * tensor starts aligned to its element size). A repeated tensor name is an error here. */
int cpt_st_writer_finish(cpt_st_writer *w, const char *path, cpt_err *err);
/* The same, and gives the file's checksum (cpt_checksum64, XXH64 seed 0, as cpt_checksum_file would compute)
 * and size, computed while writing: for weight announcements and checkpoint manifests without a re-read. */
int cpt_st_writer_finish_checksum(cpt_st_writer *w, const char *path, uint64_t *checksum, uint64_t *bytes,
                                  cpt_err *err);
void cpt_st_writer_free(cpt_st_writer *w);
/* The header cpt_st_writer_finish would write (JSON, space-padded; *len its length without the 8-byte prefix),
 * malloc'd; w stays usable and no tensor data is read: the offsets of tensors too large to allocate are testable. */
char *cpt_st_writer_header(cpt_st_writer *w, size_t *len, cpt_err *err);

/* Sharded output, as transformers' save_pretrained writes it. The tensors are cut into shards in the order they
 * were added, a shard holding tensors up to max_shard_bytes in all (a tensor is never split: one larger than the
 * limit gets a shard of its own). One shard: DIR/model.safetensors, as cpt_st_writer_finish writes it. Several:
 * DIR/model-00001-of-0000N.safetensors ... each written atomically with the writer's metadata, then
 * DIR/model.safetensors.index.json ({"metadata": {"total_size": bytes of all tensors}, "weight_map": {tensor:
 * file}}) last. On an error the shards already written are removed. max_shard_bytes 0: no limit. Frees w. */
int cpt_st_writer_finish_sharded(cpt_st_writer *w, const char *dir, uint64_t max_shard_bytes, cpt_err *err);
/* The plan behind it, a pure function: shard_of[i] gets the shard of tensor i (sizes nbytes[i], in order);
 * returns the number of shards (0 when n is 0). */
size_t cpt_st_shard_plan(const uint64_t *nbytes, size_t n, uint64_t max_shard_bytes, size_t *shard_of);
/* "model-00002-of-00005.safetensors" (i counts from 0). */
void cpt_st_shard_name(char *buf, size_t cap, size_t i, size_t n_shards);
/* A size as save_pretrained's max_shard_size spells it: bytes ("1048576"), or a number with a unit KB/MB/GB/TB
 * (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024), case ignored ("5GB", "500MB", "2GiB", "1.5GB"). The result
 * must be at least 1 byte and fit 63 bits. */
int cpt_parse_byte_size(const char *text, uint64_t *out, cpt_err *err);

/* bf16/f16 <-> f32 helpers (round to nearest even; f16 subnormals, infinities and NaN handled; NaN stays a quiet
 * NaN with its sign; f32 values past the largest finite bf16/f16 round to infinity). */
float cpt_bf16_to_f32(uint16_t h);
uint16_t cpt_f32_to_bf16(float f);
float cpt_f16_to_f32(uint16_t h);
uint16_t cpt_f32_to_f16(float f);
/* Bulk forms; the 16-bit sources may be unaligned. */
void cpt_bf16_to_f32_n(const void *in, float *out, size_t n);
void cpt_f16_to_f32_n(const void *in, float *out, size_t n);
void cpt_f32_to_bf16_n(const float *in, uint16_t *out, size_t n);
void cpt_f32_to_f16_n(const float *in, uint16_t *out, size_t n);

#endif
