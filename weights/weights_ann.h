/* What a cuda_ipc or nccl weight announcement carries (docs/weights.md), inside the `location` field of the
 * weights hash's message (queue/schema.h), as one line of text "key=value;..." so the queue schema stays as it was:
 *
 *   cuda_ipc: ipc;slot=S;dev=D;pid=P;host=H;layout=HEX16;tensors=N;handle=HEX128
 *   nccl:     nccl;epoch=E;ranks=R;bucket=BYTES;layout=HEX16;tensors=N;uid=HEX256
 *
 * `bytes` of the message is the size of the bf16 weights; `checksum` is "sum64:HEX16" of those bytes
 * (cpt_weights_sum64: order-independent, so the GPU computes it with one reduction on either side); the message's
 * membership_epoch is the nccl epoch (0 for cuda_ipc).
 *
 * Layout: the bf16 weights are the model's parameters in cpt_model_param order, back to back, numel each (the flat
 * order of the model's weight arrays, the same on the trainer and on the worker for one config). The announcement
 * carries a digest of that list (XXH64 of "name:numel\n" per tensor) and its length, so a worker whose model differs
 * refuses the version naming the mismatch instead of loading garbage. */
#ifndef CPT_WEIGHTS_WEIGHTS_ANN_H
#define CPT_WEIGHTS_WEIGHTS_ANN_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "model/model.h"
#include "queue/schema.h"

#define CPT_IPC_HANDLE_BYTES 64 /* sizeof(cudaIpcMemHandle_t) */
#define CPT_WG_UID_BYTES 128    /* sizeof(ncclUniqueId) */

typedef enum { CPT_WT_FILE = 0, CPT_WT_NCCL, CPT_WT_CUDA_IPC } cpt_weights_transport;

/* "file" | "nccl" | "cuda_ipc" -> the enum; -1 for anything else. */
int cpt_weights_transport_parse(const char *s);
const char *cpt_weights_transport_name(cpt_weights_transport t);

typedef struct cpt_weights_layout {
    uint64_t digest;   /* XXH64 of "name:numel\n" over the tensors */
    uint32_t n_tensors;
    uint64_t numel;    /* all tensors */
} cpt_weights_layout;

void cpt_weights_layout_of(cpt_model *m, cpt_weights_layout *l);
/* 0 if equal, else -1 with err naming what differs. */
int cpt_weights_layout_check(const cpt_weights_layout *want, const cpt_weights_layout *have, cpt_err *err);

typedef struct cpt_weights_ann {
    cpt_weights_transport transport; /* CPT_WT_NCCL or CPT_WT_CUDA_IPC */
    cpt_weights_layout layout;
    /* cuda_ipc */
    int slot;                        /* 0 or 1 (double buffer) */
    int device;                      /* the trainer's CUDA device */
    long pid;                        /* the trainer's process (for messages) */
    char host[CPT_NAME_MAX];         /* IPC handles only open on the same host */
    unsigned char handle[CPT_IPC_HANDLE_BYTES];
    /* nccl */
    uint64_t epoch;
    int ranks;                       /* trainer rank 0 + the epoch's workers */
    uint64_t bucket_bytes;
    unsigned char uid[CPT_WG_UID_BYTES];
} cpt_weights_ann;

/* Into out (cap >= CPT_MAX_LOCATION is always enough). */
int cpt_weights_ann_format(const cpt_weights_ann *a, char *out, size_t cap, cpt_err *err);
/* Strict: every key of the transport present once, no unknown key, hex of the right length. transport is the
 * message's transport field, which must agree with the line's first word. */
int cpt_weights_ann_parse(const char *transport, const char *location, cpt_weights_ann *a, cpt_err *err);

/* The checksum of the bf16 bytes: sum over 8-byte little-endian words w_i (the tail zero-padded) of
 * mix64(w_i + (i + 1) * 0x9E3779B97F4A7C15), mod 2^64. Order-independent, so kernels/cuda/weights_ipc.cu computes
 * the same value with one parallel reduction; any single changed word changes it. */
uint64_t cpt_weights_sum64(const void *data, size_t bytes);
/* "sum64:HEX16" */
void cpt_weights_sum64_str(uint64_t h, char *out, size_t cap);
/* Parses "sum64:HEX16"; -1 if it is not that form. */
int cpt_weights_sum64_parse(const char *s, uint64_t *h);

/* Hex helpers (lowercase). */
void cpt_hex_encode(const unsigned char *b, size_t n, char *out);
int cpt_hex_decode(const char *s, unsigned char *b, size_t n); /* exactly 2n hex digits; -1 otherwise */

#endif
