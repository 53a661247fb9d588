/* The rollout autoscaler: `cpt-scale rollout=auto[:MIN-MAX]`, or roles.rollout_auto = true in the config.
 *
 * Once per control period (roles.autoscale_period_s) the launcher observes two figures and this policy turns them into
 * a desired rollout count, one worker at a time, between MIN and MAX:
 *   - grow when the trainer waited on scored groups for at least roles.autoscale_grow_wait of its time AND prompts sat
 *     in the queue, not yet taken by a rollout worker, at every look during the period (the backlog never emptied):
 *     the rollouts are what the trainer waits for;
 *   - shrink when the prompts stream was empty at every look AND the trainer waited less than
 *     roles.autoscale_shrink_wait of its time: the rollouts wait on the trainer (its staleness bound stops it issuing
 *     more, or it has issued its last prompts);
 *   - otherwise hold.
 * Hysteresis: a condition must hold for roles.autoscale_periods consecutive periods, and after each change nothing
 * changes for roles.autoscale_cooldown_s; an interrupted streak starts again from zero, so alternating figures never
 * move the count. A count outside MIN..MAX (bounds changed live) is brought inside at once.
 *
 * The policy (cpt_autoscale_decide) is a pure function of the figures; the probe (autoscale_probe.c) gathers them from
 * RUN_DIR/metrics.jsonl (the trainer's time/wait_scored, time/train, time/weight_sync per step) and from the prompts
 * stream's consumer group (its lag: entries not yet delivered to any rollout worker). */
#ifndef CPT_SCHEDULER_AUTOSCALE_H
#define CPT_SCHEDULER_AUTOSCALE_H

#include <stddef.h>

#include "core/config.h"
#include "core/error.h"
#include "queue/redis.h"

typedef struct cpt_autoscale_params {
    int min, max;
    int periods;        /* consecutive periods a condition must hold */
    double cooldown_s;  /* no change for this long after a change */
    double grow_wait;   /* trainer wait fraction at or above which it is starved */
    double shrink_wait; /* trainer wait fraction below which it is not waiting */
} cpt_autoscale_params;

/* One period's figures. */
typedef struct cpt_autoscale_obs {
    double period_s;       /* how long the period lasted */
    double trainer_wait_s; /* seconds the trainer waited on scored groups, over trainer_time_s of its time */
    double trainer_time_s; /* the trainer time those seconds are out of (its steps' wall time; 0: period_s) */
    int steps;             /* trainer steps finished in the period (0: the wait was inferred from the queue) */
    long long backlog_start, backlog_end, backlog_min, backlog_max; /* prompts not yet taken by a rollout worker */
} cpt_autoscale_obs;

typedef struct cpt_autoscale_state {
    int grow_streak, shrink_streak;
    int changed;        /* a change was made (last_change is valid) */
    double last_change; /* when (cpt_now seconds) */
} cpt_autoscale_state;

/* The desired count after this period (current: hold); why gets the figures that made the decision (for a change,
 * the text the launcher logs after "autoscale rollout A -> B: "). */
int cpt_autoscale_decide(const cpt_autoscale_params *p, cpt_autoscale_state *s, const cpt_autoscale_obs *o,
                         int current, double now, char *why, size_t cap);

/* The trainer's wait fraction of a period, in [0, 1]. */
double cpt_autoscale_wait_fraction(const cpt_autoscale_obs *o);

/* "auto" or "auto:MIN-MAX" (MIN <= MAX, each a worker count): 1 with min and max set (-1 each when not given), 0 when s
 * is not an auto spec at all, -1 when it starts with "auto" but is malformed. */
int cpt_autoscale_parse_spec(const char *s, int *min, int *max);

/* The params from roles.* keys; an error names the keys when roles.rollout_min > roles.rollout_max. */
int cpt_autoscale_params_from_config(const cpt_config *cfg, cpt_autoscale_params *p, cpt_err *err);

/* ---- the launcher's side: observing and deciding once per period ---- */

typedef struct cpt_autoscaler {
    int on;                       /* auto mode (config, or cpt-scale rollout=auto) */
    cpt_autoscale_params p;
    cpt_autoscale_state s;
    double period_s;
    char control_key[512];        /* cpt:{run}:control */
    char prompts_key[512], scored_key[512];
    char metrics_path[2200];
    long metrics_off;             /* metrics.jsonl bytes already read */
    double period_start, next_sample;
    long long b_start, b_min, b_max, b_last;
    int n_samples;
    char last[512];               /* the last change, as logged ("" before the first) */
    char mode_seen[64];           /* the control hash's rollout_mode last applied */
} cpt_autoscaler;

/* Reads roles.rollout_auto and the bounds; starts the first period at now. */
int cpt_autoscaler_init(cpt_autoscaler *A, const cpt_config *cfg, const char *run_dir, double now, cpt_err *err);

/* Follows the control hash's rollout_mode (auto | fixed), rollout_min and rollout_max fields (cpt-scale writes them);
 * returns 1 when auto mode is on after the read. *want is the current rollout count; a launcher's first read of an
 * auto mode (a resumed or requeued run) sets it to the count the autoscaler had reached. */
int cpt_autoscaler_read_control(cpt_autoscaler *A, cpt_redis *r, int *want);

/* Called on every launcher tick: samples the backlog, and at the end of a period decides; *want changes only on a
 * decision, which is logged on stderr with its figures and published in the control hash (autoscale_* fields). */
void cpt_autoscaler_tick(cpt_autoscaler *A, cpt_redis *r, double now, int *want);

#endif
