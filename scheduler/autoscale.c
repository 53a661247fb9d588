#include "scheduler/autoscale.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/placement.h"

double cpt_autoscale_wait_fraction(const cpt_autoscale_obs *o) {
    double t = o->trainer_time_s > 0 ? o->trainer_time_s : o->period_s;
    if (t <= 0) return 0;
    double f = o->trainer_wait_s / t;
    return f < 0 ? 0 : f > 1 ? 1 : f;
}

static void figures(const cpt_autoscale_obs *o, char *out, size_t cap) {
    double t = o->trainer_time_s > 0 ? o->trainer_time_s : o->period_s;
    char steps[64];
    if (o->steps > 0) snprintf(steps, sizeof steps, " over %d step%s", o->steps, o->steps == 1 ? "" : "s");
    else snprintf(steps, sizeof steps, " (no step finished)");
    snprintf(out, cap, "trainer waited %.1f s of %.1f s%s, prompts backlog %lld -> %lld (min %lld, max %lld)",
             o->trainer_wait_s, t, steps, o->backlog_start, o->backlog_end, o->backlog_min, o->backlog_max);
}

int cpt_autoscale_decide(const cpt_autoscale_params *p, cpt_autoscale_state *s, const cpt_autoscale_obs *o,
                         int current, double now, char *why, size_t cap) {
    char fig[320];
    figures(o, fig, sizeof fig);
    if (current < p->min || current > p->max) { /* bounds changed live: come inside at once */
        int to = current < p->min ? p->min : p->max;
        snprintf(why, cap, "outside the bounds %d..%d", p->min, p->max);
        s->grow_streak = s->shrink_streak = 0;
        s->changed = 1;
        s->last_change = now;
        return to;
    }
    double f = cpt_autoscale_wait_fraction(o);
    int starved = f >= p->grow_wait && o->backlog_min > 0;
    int idle = f < p->shrink_wait && o->backlog_max == 0;
    s->grow_streak = starved ? s->grow_streak + 1 : 0;
    s->shrink_streak = idle ? s->shrink_streak + 1 : 0;
    if (s->changed && now - s->last_change < p->cooldown_s) {
        snprintf(why, cap, "hold (cool-down, %.0f s left): %s", p->cooldown_s - (now - s->last_change), fig);
        return current;
    }
    int to = current;
    if (s->grow_streak >= p->periods) {
        if (current < p->max) to = current + 1;
        else snprintf(why, cap, "hold (at max %d): %s", p->max, fig);
    } else if (s->shrink_streak >= p->periods) {
        if (current > p->min) to = current - 1;
        else snprintf(why, cap, "hold (at min %d): %s", p->min, fig);
    } else {
        snprintf(why, cap, "hold (%s %d of %d periods): %s",
                 s->grow_streak ? "starved" : s->shrink_streak ? "idle" : "steady",
                 s->grow_streak ? s->grow_streak : s->shrink_streak, p->periods, fig);
    }
    if (to != current) {
        snprintf(why, cap, "%s %d period%s: %s", to > current ? "trainer starved for" : "rollouts idle for",
                 to > current ? s->grow_streak : s->shrink_streak,
                 (to > current ? s->grow_streak : s->shrink_streak) == 1 ? "" : "s", fig);
        s->grow_streak = s->shrink_streak = 0;
        s->changed = 1;
        s->last_change = now;
    }
    return to;
}

int cpt_autoscale_parse_spec(const char *s, int *min, int *max) {
    if (strncmp(s, "auto", 4)) return 0;
    *min = *max = -1;
    if (s[4] == '\0') return 1;
    if (s[4] != ':') return -1;
    char lo[16], hi[16];
    const char *dash = strchr(s + 5, '-');
    if (!dash || (size_t)(dash - (s + 5)) >= sizeof lo || strlen(dash + 1) >= sizeof hi) return -1;
    memcpy(lo, s + 5, (size_t)(dash - (s + 5)));
    lo[dash - (s + 5)] = '\0';
    snprintf(hi, sizeof hi, "%s", dash + 1);
    if (cpt_parse_worker_count(lo, min) || cpt_parse_worker_count(hi, max) || *min > *max) return -1;
    return 1;
}

int cpt_autoscale_params_from_config(const cpt_config *cfg, cpt_autoscale_params *p, cpt_err *err) {
    memset(p, 0, sizeof *p);
    p->min = (int)cpt_cfg_int(cfg, "roles.rollout_min");
    p->max = (int)cpt_cfg_int(cfg, "roles.rollout_max");
    p->periods = (int)cpt_cfg_int(cfg, "roles.autoscale_periods");
    p->cooldown_s = cpt_cfg_float(cfg, "roles.autoscale_cooldown_s");
    p->grow_wait = cpt_cfg_float(cfg, "roles.autoscale_grow_wait");
    p->shrink_wait = cpt_cfg_float(cfg, "roles.autoscale_shrink_wait");
    if (p->min > p->max)
        return cpt_errf(err, "roles.rollout_min = %d is above roles.rollout_max = %d", p->min, p->max);
    if (p->shrink_wait > p->grow_wait)
        return cpt_errf(err, "roles.autoscale_shrink_wait = %g is above roles.autoscale_grow_wait = %g: the autoscaler "
                        "could grow and shrink on the same figures", p->shrink_wait, p->grow_wait);
    return 0;
}
