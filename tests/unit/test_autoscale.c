/* The rollout autoscaler's policy (scheduler/autoscale.h): grow, shrink, hold, the hysteresis (streaks, cool-down,
 * no flapping on alternating figures), the MIN/MAX bounds, and the cpt-scale rollout=auto[:MIN-MAX] spec. */
#include <string.h>

#include "scheduler/autoscale.h"
#include "tests/check.h"

/* A period of 10 s: the trainer waited `wait` s of it; the prompts backlog went start -> end with that min and max. */
static cpt_autoscale_obs obs(double wait, long long start, long long end, long long min, long long max) {
    cpt_autoscale_obs o = {.period_s = 10, .trainer_wait_s = wait, .trainer_time_s = 10, .steps = 3,
                           .backlog_start = start, .backlog_end = end, .backlog_min = min, .backlog_max = max};
    return o;
}

int main(void) {
    cpt_autoscale_params p = {.min = 1, .max = 3, .periods = 2, .cooldown_s = 25, .grow_wait = 0.5, .shrink_wait = 0.2};
    cpt_autoscale_state s;
    memset(&s, 0, sizeof s);
    char why[512];
    cpt_autoscale_obs starved = obs(8, 40, 64, 40, 64), idle = obs(0.5, 0, 0, 0, 0), busy = obs(3, 2, 0, 0, 4);
    double t = 100;

    /* grow: the trainer waits and the backlog never empties, for 2 periods */
    CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &starved, 1, t += 10, why, sizeof why), 1);
    CHECK(strstr(why, "hold (starved 1 of 2") != NULL);
    CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &starved, 1, t += 10, why, sizeof why), 2);
    CHECK(strstr(why, "trainer waited 8.0 s of 10.0 s") != NULL);
    CHECK(strstr(why, "prompts backlog 40 -> 64") != NULL);
    /* cool-down: the same figures do not move it for 25 s */
    CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &starved, 2, t += 10, why, sizeof why), 2);
    CHECK(strstr(why, "cool-down") != NULL);
    CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &starved, 2, t += 10, why, sizeof why), 2);
    CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &starved, 2, t += 10, why, sizeof why), 3); /* 30 s after, streak 3 */
    /* max bound */
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &starved, 3, t += 10, why, sizeof why), 3);
    CHECK(strstr(why, "at max 3") != NULL);

    /* the backlog emptied once in the period: the rollouts keep up, no grow however long the trainer waits */
    memset(&s, 0, sizeof s);
    cpt_autoscale_obs caught_up = obs(9, 10, 10, 0, 12);
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &caught_up, 2, t += 10, why, sizeof why), 2);
    /* a trainer that waits little: no grow although prompts are queued */
    cpt_autoscale_obs fed = obs(4.9, 10, 10, 5, 12);
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &fed, 2, t += 10, why, sizeof why), 2);
    /* in between (busy): hold */
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &busy, 2, t += 10, why, sizeof why), 2);
    CHECK(strstr(why, "steady") != NULL);

    /* shrink: the prompts stream stays empty and the trainer hardly waits */
    memset(&s, 0, sizeof s);
    CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &idle, 3, t += 10, why, sizeof why), 3);
    CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &idle, 3, t += 10, why, sizeof why), 2);
    CHECK(strstr(why, "rollouts idle for 2 periods") != NULL);
    t += 30;
    CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &idle, 2, t += 10, why, sizeof why), 2);
    CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &idle, 2, t += 10, why, sizeof why), 1);
    t += 30;
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &idle, 1, t += 10, why, sizeof why), 1);
    CHECK(strstr(why, "at min 1") != NULL);
    /* an empty prompts stream while the trainer starves (its issue window is out in the rollouts): hold */
    memset(&s, 0, sizeof s);
    cpt_autoscale_obs window = obs(9, 0, 0, 0, 0);
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &window, 2, t += 10, why, sizeof why), 2);

    /* no flapping: alternating figures never complete a streak */
    memset(&s, 0, sizeof s);
    for (int i = 0; i < 20; i++) {
        cpt_autoscale_obs *o = i % 2 ? &idle : &starved;
        CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, o, 2, t += 10, why, sizeof why), 2);
    }
    /* with periods = 1 a change each period is possible, but the cool-down still spaces them */
    cpt_autoscale_params q = p;
    q.periods = 1;
    memset(&s, 0, sizeof s);
    int n = 2, changes = 0;
    for (int i = 0; i < 20; i++) {
        int to = cpt_autoscale_decide(&q, &s, i % 2 ? &idle : &starved, n, t += 10, why, sizeof why);
        changes += to != n;
        n = to;
    }
    CHECK(changes <= 7); /* at most one per 30 s of 200 s */

    /* bounds changed live: brought inside at once */
    memset(&s, 0, sizeof s);
    CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &busy, 5, t += 10, why, sizeof why), 3);
    CHECK(strstr(why, "outside the bounds 1..3") != NULL);
    CHECK_EQ_INT(cpt_autoscale_decide(&p, &s, &busy, 0, t += 10, why, sizeof why), 1);

    /* no step finished: the wait is the period's when nothing scored was left (trainer_time_s 0: period_s) */
    cpt_autoscale_obs stuck = {.period_s = 10, .trainer_wait_s = 10, .backlog_min = 3, .backlog_max = 5};
    CHECK(cpt_autoscale_wait_fraction(&stuck) > 0.99);

    /* cpt-scale's spec */
    int lo, hi;
    CHECK_EQ_INT(cpt_autoscale_parse_spec("auto", &lo, &hi), 1);
    CHECK_EQ_INT(lo, -1);
    CHECK_EQ_INT(cpt_autoscale_parse_spec("auto:2-6", &lo, &hi), 1);
    CHECK_EQ_INT(lo, 2);
    CHECK_EQ_INT(hi, 6);
    CHECK_EQ_INT(cpt_autoscale_parse_spec("auto:0-0", &lo, &hi), 1);
    CHECK_EQ_INT(cpt_autoscale_parse_spec("4", &lo, &hi), 0);
    CHECK_EQ_INT(cpt_autoscale_parse_spec("auto:6-2", &lo, &hi), -1);
    CHECK_EQ_INT(cpt_autoscale_parse_spec("auto:2", &lo, &hi), -1);
    CHECK_EQ_INT(cpt_autoscale_parse_spec("auto:-3", &lo, &hi), -1);
    CHECK_EQ_INT(cpt_autoscale_parse_spec("autox", &lo, &hi), -1);
    CHECK_EQ_INT(cpt_autoscale_parse_spec("auto:1-99999999", &lo, &hi), -1);
    return check_summary("autoscale");
}
