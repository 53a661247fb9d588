/* Queue messages: msgpack maps with strict decoding.
 *
 * Every message is a map with "schema" (int, CPT_SCHEMA_VERSION), "type" (string naming the message) and "run"
 * (the run id) plus the fields of its type (docs/queue.md lists them). Token ids and per-token floats travel as
 * msgpack bin of little-endian int32 / float32 (compact, and a length check is one division); per-completion
 * scalars as msgpack arrays.
 *
 * Decoding is strict: the whole buffer must be exactly one map; every required key present once; no unknown or
 * duplicate keys; types, lengths and bounds checked; lengths that must agree between fields agree (tokens and
 * logprobs, completions and rewards); an unknown schema version is rejected. A failure returns -1 with a reason
 * that names the field ("completions[3].logprobs: 12 values for 13 tokens"); the caller dead-letters the
 * message. Decoded structs own their memory: free them with the matching *_free (safe on a zeroed or partially
 * decoded struct). */
#ifndef CPT_QUEUE_SCHEMA_H
#define CPT_QUEUE_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define CPT_SCHEMA_VERSION 1

/* Bounds enforced by the decoders. */
#define CPT_MSG_MAX_BYTES (256u << 20) /* whole message */
#define CPT_RUN_ID_MAX 128             /* run id: [A-Za-z0-9._-], 1..127 chars */
#define CPT_NAME_MAX 128               /* worker ids, hosts, roles, reward part names */
#define CPT_MAX_PROMPT_TOKENS (1u << 20)
#define CPT_MAX_COMPLETION_TOKENS (1u << 20)
#define CPT_MAX_SAMPLES 4096           /* completions per group */
#define CPT_MAX_STOP 64                /* stop token ids, stop strings */
#define CPT_MAX_STOP_STR 1024          /* bytes per stop string */
#define CPT_MAX_EXTRA (16u << 20)      /* extra JSON */
#define CPT_MAX_REWARD_PARTS 64
#define CPT_MAX_ROLES 16
#define CPT_MAX_LOCATION 4096

typedef enum {
    CPT_MSG_NONE = 0,
    CPT_MSG_PROMPT_GROUP,
    CPT_MSG_ROLLOUT_GROUP,
    CPT_MSG_SCORED_GROUP,
    CPT_MSG_WEIGHTS,
    CPT_MSG_CONTROL,
    CPT_MSG_HEARTBEAT,
    CPT_MSG_ENV_REQUEST, /* queue/env_msg.h */
    CPT_MSG_ENV_REPLY,
} cpt_msg_type;

const char *cpt_msg_type_name(cpt_msg_type t); /* "prompt_group", ... */

typedef struct cpt_group_id {
    uint64_t epoch, index;
} cpt_group_id;

typedef struct cpt_sampling {
    float temperature;       /* [0, 100]; 0 = greedy */
    float top_p;             /* (0, 1] */
    int32_t top_k;           /* 0 = off */
    float min_p;             /* [0, 1) */
    uint32_t max_new_tokens; /* [1, CPT_MAX_COMPLETION_TOKENS] */
    uint64_t seed;
    uint32_t n_stop_ids;
    int32_t *stop_ids;
    uint32_t n_stop_strs;
    char **stop_strs;
} cpt_sampling;

typedef struct cpt_prompt_group {
    char run[CPT_RUN_ID_MAX];
    cpt_group_id id;
    uint32_t n_prompt;
    int32_t *prompt;        /* token ids >= 0 */
    uint32_t n_samples;     /* G, [1, CPT_MAX_SAMPLES] */
    cpt_sampling sampling;
    uint64_t min_version;   /* the oldest weight version allowed to answer */
    char *extra;            /* JSON text for the reward (e.g. {"answer": "42"}); NULL: none */
} cpt_prompt_group;

typedef enum { CPT_FINISH_STOP = 0, CPT_FINISH_LENGTH, CPT_FINISH_ABORT } cpt_finish;
const char *cpt_finish_name(cpt_finish f);

typedef struct cpt_completion {
    uint32_t n_tokens;
    int32_t *tokens;
    float *logprobs;         /* behaviour logprobs, n_tokens, finite, <= 0 (+1e-3 slack) */
    cpt_finish finish;
    float *teacher_logprobs; /* scored groups only, optional: n_tokens */
    uint8_t *mask;           /* optional, n_tokens: 1 = a model token, 0 = not the model's (a tool's observation,
                                behaviour logprob 0): the trainer gives it no weight. NULL: all model tokens. On
                                the wire only when some entry is 0. */
} cpt_completion;

typedef struct cpt_timings {
    double started;   /* unix seconds the worker took the group */
    double gen_s;     /* generation wall time */
    double queue_s;   /* time the prompt waited in the queue */
} cpt_timings;

/* A rollout group, and with has_rewards set, a scored group (rollout group + rewards). */
typedef struct cpt_rollout_group {
    char run[CPT_RUN_ID_MAX];
    cpt_group_id id;
    uint32_t n_prompt;
    int32_t *prompt;
    uint32_t n_completions;
    cpt_completion *completions;
    uint64_t weight_version;
    char worker[CPT_NAME_MAX];
    cpt_timings timings;
    char *extra;              /* NULL: none */
    /* scored group */
    int has_rewards;
    double *rewards;          /* n_completions, finite */
    uint32_t n_parts;
    char **part_names;        /* n_parts, distinct */
    double *part_values;      /* n_parts * n_completions, row per part */
} cpt_rollout_group;

typedef struct cpt_weights_msg {
    char run[CPT_RUN_ID_MAX];
    uint64_t version;
    char transport[16];             /* "file" | "nccl" | "cuda_ipc" (weights/weights_ann.h) */
    char location[CPT_MAX_LOCATION]; /* file path, or the nccl / cuda_ipc line of weights/weights_ann.h */
    uint64_t bytes;
    char checksum[160];             /* e.g. "xxh64:..." or "sha256:..." */
    uint64_t membership_epoch;
} cpt_weights_msg;

typedef struct cpt_role_count {
    char role[CPT_NAME_MAX];
    uint32_t count;
} cpt_role_count;

typedef struct cpt_control_msg {
    char run[CPT_RUN_ID_MAX];
    char state[32];   /* "running" | "draining" | "stopping" | "stopped" */
    uint32_t n_roles;
    cpt_role_count roles[CPT_MAX_ROLES];
} cpt_control_msg;

typedef struct cpt_heartbeat_msg {
    char run[CPT_RUN_ID_MAX];
    char worker[CPT_NAME_MAX];
    char role[CPT_NAME_MAX];
    char host[CPT_NAME_MAX];
    uint64_t version;      /* weight version the worker holds */
    double tokens_per_s;   /* >= 0 */
    double occupancy;      /* batch occupancy, [0, 1] */
    double time;           /* unix seconds */
} cpt_heartbeat_msg;

/* A malloc'd encoded message. */
typedef struct cpt_buf {
    char *data;
    size_t len;
} cpt_buf;
void cpt_buf_free(cpt_buf *b);

/* Encoders check the struct against the same bounds the decoders enforce, so a bad message is refused where it is
 * made. They return 0 and fill out (malloc'd), or -1. */
int cpt_prompt_group_encode(const cpt_prompt_group *m, cpt_buf *out, cpt_err *err);
int cpt_rollout_group_encode(const cpt_rollout_group *m, cpt_buf *out, cpt_err *err); /* scored if has_rewards */
int cpt_weights_encode(const cpt_weights_msg *m, cpt_buf *out, cpt_err *err);
int cpt_control_encode(const cpt_control_msg *m, cpt_buf *out, cpt_err *err);
int cpt_heartbeat_encode(const cpt_heartbeat_msg *m, cpt_buf *out, cpt_err *err);

int cpt_prompt_group_decode(const void *data, size_t len, cpt_prompt_group *m, cpt_err *err);
/* want: CPT_MSG_ROLLOUT_GROUP or CPT_MSG_SCORED_GROUP (the "type" must match). */
int cpt_rollout_group_decode(const void *data, size_t len, cpt_msg_type want, cpt_rollout_group *m, cpt_err *err);
int cpt_weights_decode(const void *data, size_t len, cpt_weights_msg *m, cpt_err *err);
int cpt_control_decode(const void *data, size_t len, cpt_control_msg *m, cpt_err *err);
int cpt_heartbeat_decode(const void *data, size_t len, cpt_heartbeat_msg *m, cpt_err *err);

void cpt_prompt_group_free(cpt_prompt_group *m);
void cpt_rollout_group_free(cpt_rollout_group *m);

/* What a role checks of a decoded group against its run, beyond the schema's own bounds: a forged or corrupt
 * message that passes decoding must still not make a role wait for ever, die or do absurd work; it is dead-lettered
 * with the reason. A bound of 0 (has_max_version 0) is not checked. */
typedef struct cpt_group_bounds {
    int32_t vocab_size;   /* token ids (prompt, completions) in [0, vocab_size) */
    uint32_t max_samples; /* n_samples / n_completions at most this (the run's rollout.group_size) */
    int has_max_version;
    uint64_t max_version; /* min_version / weight_version at most this: the newest version announced */
} cpt_group_bounds;
int cpt_prompt_group_check_bounds(const cpt_prompt_group *m, const cpt_group_bounds *b, cpt_err *err);
int cpt_rollout_group_check_bounds(const cpt_rollout_group *m, const cpt_group_bounds *b, cpt_err *err);

/* Reads only the envelope (schema, type, run and, for groups, the group id) without validating the rest: for
 * routing, dead-letter reasons and cpt-queue. Returns -1 if even that is not readable. */
typedef struct cpt_msg_header {
    int64_t schema;
    cpt_msg_type type;
    char run[CPT_RUN_ID_MAX];
    int has_id;
    cpt_group_id id;
    int has_version;
    uint64_t version; /* min_version (prompt) or weight_version (rollout, scored) or version (weights) */
} cpt_msg_header;
int cpt_msg_peek_header(const void *data, size_t len, cpt_msg_header *h, cpt_err *err);

/* 1 if s is a valid run id. */
int cpt_run_id_valid(const char *s);
/* 1 if s is a valid name (worker, host, role, reward part): 1..CPT_NAME_MAX-1 visible ASCII characters. */
int cpt_name_valid(const char *s);

#endif
