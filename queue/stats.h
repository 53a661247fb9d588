/* A snapshot of a run's queue for cpt-queue stats: per stream length and groups (pending, lag, consumers and
 * their idle time), the weight version, staleness of queued groups, dead letters and workers; two snapshots
 * give produced/consumed rates. */
#ifndef CPT_QUEUE_STATS_H
#define CPT_QUEUE_STATS_H

#include <stdio.h>

#include "queue/env_msg.h"
#include "queue/stream.h"

#define CPT_STATS_MAX_GROUPS 8
#define CPT_STATS_MAX_CONSUMERS 64
#define CPT_STATS_MAX_WORKERS 256
#define CPT_STATS_STALE_SAMPLE 256 /* queued entries decoded for staleness */

typedef struct cpt_stats_consumer {
    char name[CPT_NAME_MAX];
    long long pending, idle_ms;
} cpt_stats_consumer;

typedef struct cpt_stats_group {
    char name[CPT_NAME_MAX];
    long long pending, lag, entries_read; /* lag -1: Redis cannot tell */
    char last_delivered[CPT_STREAM_ID_MAX];
    int n_consumers;
    cpt_stats_consumer consumers[CPT_STATS_MAX_CONSUMERS];
    double out_per_s; /* from two snapshots; -1 if unknown */
} cpt_stats_group;

/* prompts, rollouts, scored, and the env requests of multi-turn rollouts (queue/env_msg.h; shown when it exists) */
#define CPT_STATS_N_STREAMS 4
#define CPT_STATS_ENV 3

typedef struct cpt_stats_stream {
    cpt_stream stream; /* the queue's stream; the env stream is none of them: see name and key */
    char name[16];     /* "prompts", ..., "env" */
    char key[CPT_ENV_KEY_MAX];
    int exists;
    long long length, entries_added;
    int n_groups;
    cpt_stats_group groups[CPT_STATS_MAX_GROUPS];
    double in_per_s; /* -1 if unknown */
    /* staleness of queued (not yet delivered) groups, in weight versions behind the current one */
    int stale_sampled, stale_undecodable;
    long long stale_max;
    double stale_mean;
} cpt_stats_stream;

typedef struct cpt_stats_worker {
    cpt_heartbeat_msg hb;
    int ok;       /* 0: the heartbeat did not decode */
    double age_s; /* since its last heartbeat (both wall clock) */
    int gone;     /* no heartbeat for longer than the snapshot's gone_after_s: a crashed worker */
} cpt_stats_worker;

#define CPT_STATS_GONE_AFTER_S 60.0 /* 12 heartbeats at the default rollout/reward.heartbeat_s of 5 s */

typedef struct cpt_queue_snapshot {
    char run[CPT_RUN_ID_MAX];
    double time; /* unix seconds */
    double gone_after_s; /* set before take; 0: CPT_STATS_GONE_AFTER_S */
    double mono; /* cpt_now() */
    int has_version;
    unsigned long long weight_version;
    long long dead;
    cpt_stats_stream streams[CPT_STATS_N_STREAMS];
    int n_workers;
    cpt_stats_worker workers[CPT_STATS_MAX_WORKERS];
    /* The launcher's rollout autoscaler, from the control hash ("" when it never wrote): mode ("fixed" or
     * "auto MIN-MAX"), its desired count, and its last change with the figures that made it. */
    char autoscale_mode[64], autoscale_want[16], autoscale_last[512];
} cpt_queue_snapshot;

int cpt_queue_snapshot_take(cpt_queue *q, cpt_queue_snapshot *s, cpt_err *err);
/* The workers hash alone: at most cap heartbeats into out, aged against now (unix seconds), gone past gone_after
 * seconds; returns how many, or -1. */
int cpt_queue_workers_take(cpt_queue *q, double now, double gone_after, cpt_stats_worker *out, int cap, cpt_err *err);
/* Deletes the snapshot's gone workers from the workers hash; returns how many, or -1. */
int cpt_queue_prune_gone(cpt_queue *q, const cpt_queue_snapshot *s, cpt_err *err);
/* Fills the rates of cur from prev (same run). */
void cpt_queue_snapshot_rates(cpt_queue_snapshot *cur, const cpt_queue_snapshot *prev);

void cpt_queue_snapshot_print(FILE *f, const cpt_queue_snapshot *s, const char *url_shown);
/* One JSON object, one line. */
void cpt_queue_snapshot_json(FILE *f, const cpt_queue_snapshot *s);

#endif
