/* cpt-scale [rollout=N | rollout=auto[:MIN-MAX]] [reward=M] [env=K] [--run RUN_DIR | --job JOBID]: sets the desired
 * worker counts of a live run (env: the cpt-env workers of multi-turn rollouts; with
 * neither option: $CPT_RUN, else the user's one live run, scheduler/run_registry.h); the launcher
 * (cpt run or cpt-sched) applies them within seconds. With no counts it prints, per role, the running count
 * (steps inside the allocation plus satellite jobs Slurm runs), the desired one, how many are inside and how many
 * are satellites, and the satellites' job ids with their states (launcher.c, write_counts), then the rollout mode
 * (fixed, or auto MIN-MAX with the autoscaler's last change and its figures). rollout=auto hands the rollout count to
 * the launcher's autoscaler (scheduler/autoscale.h); rollout=N ends auto mode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "scheduler/autoscale.h"
#include "scheduler/placement.h"
#include "scheduler/roles.h"
#include "scheduler/run_dir.h"
#include "scheduler/run_registry.h"

static const char USAGE[] =
    "usage: cpt-scale [rollout=N | rollout=auto[:MIN-MAX]] [reward=M] [env=K] [--run RUN_DIR | --job JOBID]\n";

static const char *field(const redisReply *r, const char *name) {
    if (!r || r->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (!strcmp(r->element[i]->str, name)) return r->element[i + 1]->str;
    return NULL;
}

int cmd_scale(int argc, char **argv) {
    const char *run = NULL, *job = NULL;
    enum { MAX_SET = 12 };
    const char *set_argv[2 + 2 * MAX_SET];
    char values[CPT_N_WORKER_ROLES][32], bounds[2][32];
    int nset = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--run") && i + 1 < argc) {
            run = argv[++i];
            continue;
        }
        if (!strcmp(argv[i], "--job") && i + 1 < argc) {
            job = argv[++i];
            continue;
        }
        const char *eq = strchr(argv[i], '=');
        int v = -1, lo = -1, hi = -1;
        char name[16] = "";
        if (eq && (size_t)(eq - argv[i]) < sizeof name)
            snprintf(name, sizeof name, "%.*s", (int)(eq - argv[i]), argv[i]);
        int role = eq ? cpt_role_from_name(name) : -1;
        int is_auto = role == 0 ? cpt_autoscale_parse_spec(eq + 1, &lo, &hi) : 0;
        if (role < 0 || is_auto < 0 || (!is_auto && cpt_parse_worker_count(eq + 1, &v) != 0)) {
            fprintf(stderr, "cpt-scale: '%s': expected rollout=N, rollout=auto, rollout=auto:MIN-MAX, reward=N or env=N "
                            "(N, MIN <= MAX whole numbers 0..%d)\n%s", argv[i], CPT_MAX_WORKERS, USAGE);
            return 2;
        }
        if (nset + 3 > MAX_SET) {
            fprintf(stderr, "cpt-scale: too many counts\n%s", USAGE);
            return 2;
        }
        if (is_auto) { /* the launcher's autoscaler takes over the rollout count (scheduler/autoscale.h) */
            set_argv[2 + 2 * nset] = "rollout_mode";
            set_argv[3 + 2 * nset] = "auto";
            nset++;
            if (lo >= 0) {
                snprintf(bounds[0], sizeof bounds[0], "%d", lo);
                snprintf(bounds[1], sizeof bounds[1], "%d", hi);
                set_argv[2 + 2 * nset] = "rollout_min";
                set_argv[3 + 2 * nset] = bounds[0];
                set_argv[4 + 2 * nset] = "rollout_max";
                set_argv[5 + 2 * nset] = bounds[1];
                nset += 2;
            }
            continue;
        }
        snprintf(values[role], sizeof values[role], "%d", v);
        set_argv[2 + 2 * nset] = cpt_role_name(role);
        set_argv[3 + 2 * nset] = values[role];
        nset++;
        if (role == 0) { /* a fixed count ends auto mode */
            set_argv[2 + 2 * nset] = "rollout_mode";
            set_argv[3 + 2 * nset] = "fixed";
            nset++;
        }
    }
    cpt_config *cfg;
    cpt_redis *r;
    cpt_err err;
    char dir[2048];
    if (cpt_run_choose("cpt-scale", run, job, dir, sizeof dir, &err) != 0) cpt_die(&err);
    if (cpt_run_dir_open(dir, &cpt_config_table, &cfg, &r, &err) != 0) cpt_die(&err);
    for (int i = 0; i < nset; i++)
        if (!strcmp(set_argv[2 + 2 * i], "env") && strcmp(set_argv[3 + 2 * i], "0") &&
            !strcmp(cpt_cfg_str(cfg, "env.type"), "none")) {
            fprintf(stderr, "cpt-scale: env=%s: the run %s has no tool (env.type = none), so env workers would have "
                            "nothing to run\n", set_argv[3 + 2 * i], dir);
            cpt_redis_close(r);
            cpt_config_free(cfg);
            return 2;
        }
    char key[512];
    snprintf(key, sizeof key, "cpt:%s:control", cpt_cfg_str(cfg, "run.name"));
    int status = 0;
    if (nset) {
        set_argv[0] = "HSET";
        set_argv[1] = key;
        redisReply *rep = cpt_redis_command(r, 2 + 2 * nset, set_argv, NULL, key, 0, &err);
        if (!rep) {
            fprintf(stderr, "cpt-scale: %s\n", err.msg);
            status = 1;
        } else {
            freeReplyObject(rep);
            printf("desired:");
            for (int i = 0; i < nset; i++)
                if (strcmp(set_argv[2 + 2 * i], "rollout_mode") || strcmp(set_argv[3 + 2 * i], "fixed"))
                    printf(" %s=%s", set_argv[2 + 2 * i], set_argv[3 + 2 * i]);
            printf("\n");
        }
    } else {
        const char *hg[] = {"HGETALL", key};
        redisReply *rep = cpt_redis_command(r, 2, hg, NULL, key, 0, &err);
        if (!rep) {
            fprintf(stderr, "cpt-scale: %s\n", err.msg);
            status = 1;
        } else {
            printf("role      running  desired  inside  satellite  satellite jobs\n");
            for (int role = 0; role < CPT_N_WORKER_ROLES; role++) {
                char f[64], cfg_want[32];
                const char *name = cpt_role_name(role);
                snprintf(cfg_want, sizeof cfg_want, "%d", cpt_role_configured(cfg, role));
                const char *want = field(rep, name);
                snprintf(f, sizeof f, "running_%s", name);
                const char *running = field(rep, f);
                snprintf(f, sizeof f, "inside_%s", name);
                const char *inside = field(rep, f);
                snprintf(f, sizeof f, "satellite_%s", name);
                const char *sat = field(rep, f);
                snprintf(f, sizeof f, "satellite_jobs_%s", name);
                const char *jobs = field(rep, f);
                /* a run without tools shows no env row */
                if (role == CPT_ROLE_ENV && cpt_role_configured(cfg, role) == 0 && !want &&
                    (!running || !strcmp(running, "0")))
                    continue;
                const char *mode = role == 0 ? field(rep, "autoscale_rollout") : NULL;
                if (mode && !strncmp(mode, "auto", 4)) want = field(rep, "autoscale_want_rollout");
                printf("%-8s %8s %8s %7s %10s  %s\n", name, running ? running : "?", want ? want : cfg_want,
                       inside ? inside : "?", sat ? sat : "?", jobs ? jobs : "-");
            }
            /* The autoscaler's mode and its last change, with the figures that made it (scheduler/autoscale.h). */
            const char *mode = field(rep, "autoscale_rollout"), *last = field(rep, "autoscale_last_rollout");
            if (mode) printf("rollout mode: %s%s%s\n", mode, last && strcmp(last, "-") ? "; last change " : "",
                             last && strcmp(last, "-") ? last : "");
            freeReplyObject(rep);
        }
    }
    cpt_redis_close(r);
    cpt_config_free(cfg);
    return status;
}
