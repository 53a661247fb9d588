/* Env messages: the requests a rollout worker sends to the run's cpt-env workers, one per tool call, and the
 * replies they send back (docs/queue.md, "Env streams").
 *
 *   request  cpt:RUN:env (consumer group "env"): {"schema", "type": "env_request", "run", "worker" (the rollout
 *            worker id: where to reply), "id": {"epoch", "index"} (the group), "sample" (< CPT_MAX_SAMPLES),
 *            "turn" (1..CPT_ENV_MAX_TURNS), "call" (the call text, 1..CPT_ENV_MAX_TEXT bytes), "extra" (the prompt
 *            group's extra JSON, or nil)}
 *   reply    cpt:RUN:env:WORKER (read with XREAD by that rollout worker; MAXLEN ~ CPT_ENV_REPLY_MAXLEN):
 *            {"schema", "type": "env_reply", "run", "id", "sample", "turn", "ok" (false: the tool failed and the
 *            observation says why), "observation" (at most CPT_ENV_MAX_TEXT bytes), "env" (the env worker id)}
 *
 * Decoding is as strict as queue/schema.h's: one map, every key once, no unknown key, types and bounds checked; a
 * failure names the field. Decoded structs own their strings: free them with the matching *_free (safe on a zeroed
 * or partially decoded struct). */
#ifndef CPT_QUEUE_ENV_MSG_H
#define CPT_QUEUE_ENV_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "queue/schema.h"

#define CPT_ENV_MAX_TURNS 64          /* tool calls per sample */
#define CPT_ENV_MAX_TEXT (16u << 10)  /* bytes of a call, and of an observation */
#define CPT_ENV_GROUP "env"           /* the consumer group of the request stream */
#define CPT_ENV_REPLY_MAXLEN 10000    /* approximate MAXLEN of a reply stream */
#define CPT_ENV_KEY_MAX (CPT_RUN_ID_MAX + CPT_NAME_MAX + 16)

typedef struct cpt_env_request {
    char run[CPT_RUN_ID_MAX];
    char worker[CPT_NAME_MAX]; /* the rollout worker that waits for the reply */
    cpt_group_id id;           /* the prompt group */
    uint32_t sample;           /* completion index in the group, < CPT_MAX_SAMPLES */
    uint32_t turn;             /* 1-based tool call of this sample, <= CPT_ENV_MAX_TURNS */
    char *call;                /* the call text, from call_start up to and including call_end */
    char *extra;               /* the prompt group's extra JSON; NULL: none */
} cpt_env_request;

typedef struct cpt_env_reply {
    char run[CPT_RUN_ID_MAX];
    cpt_group_id id;
    uint32_t sample, turn;
    int ok;                    /* 0: the tool failed; the observation says why */
    char *observation;         /* never NULL in a decoded reply (may be "") */
    char env[CPT_NAME_MAX];    /* the env worker that answered */
} cpt_env_reply;

/* Encoders check the struct against the bounds the decoders enforce. They return 0 and fill out (malloc'd), or
 * -1. */
int cpt_env_request_encode(const cpt_env_request *m, cpt_buf *out, cpt_err *err);
int cpt_env_reply_encode(const cpt_env_reply *m, cpt_buf *out, cpt_err *err);
int cpt_env_request_decode(const void *data, size_t len, cpt_env_request *m, cpt_err *err);
int cpt_env_reply_decode(const void *data, size_t len, cpt_env_reply *m, cpt_err *err);
void cpt_env_request_free(cpt_env_request *m);
void cpt_env_reply_free(cpt_env_reply *m);

/* Stream keys into buf[CPT_ENV_KEY_MAX]: "cpt:RUN:env" and "cpt:RUN:env:WORKER". They return buf, or NULL when
 * run is not a valid run id or worker not a valid name. */
const char *cpt_env_stream(const char *run, char *buf);
const char *cpt_env_reply_stream(const char *run, const char *worker, char *buf);

#endif
