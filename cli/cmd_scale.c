/* cpt-scale [rollout=N] [reward=M] [--run RUN_DIR | --job JOBID]: sets the desired worker counts of a live run (with
 * neither option: $CPT_RUN, else the user's one live run, scheduler/run_registry.h); the launcher
 * (cpt run or cpt-sched) applies them within seconds. With no counts it prints, per role, the running count
 * (steps inside the allocation plus satellite jobs Slurm runs), the desired one, how many are inside and how many
 * are satellites, and the satellites' job ids with their states (launcher.c, write_counts). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "scheduler/placement.h"
#include "scheduler/run_dir.h"
#include "scheduler/run_registry.h"

static const char *field(const redisReply *r, const char *name) {
    if (!r || r->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (!strcmp(r->element[i]->str, name)) return r->element[i + 1]->str;
    return NULL;
}

int cmd_scale(int argc, char **argv) {
    const char *run = NULL, *job = NULL;
    const char *set_argv[8];
    char values[2][32];
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
        int v = -1;
        int role = !eq ? -1 : !strncmp(argv[i], "rollout=", 8) ? 0 : !strncmp(argv[i], "reward=", 7) ? 1 : -1;
        if (role < 0 || cpt_parse_worker_count(eq + 1, &v) != 0) {
            fprintf(stderr, "cpt-scale: '%s': expected rollout=N or reward=N (N a whole number 0..%d)\n"
                            "usage: cpt-scale [rollout=N] [reward=M] [--run RUN_DIR | --job JOBID]\n", argv[i], CPT_MAX_WORKERS);
            return 2;
        }
        snprintf(values[role], sizeof values[role], "%d", v);
        set_argv[2 + 2 * nset] = role == 0 ? "rollout" : "reward";
        set_argv[3 + 2 * nset] = values[role];
        nset++;
    }
    cpt_config *cfg;
    cpt_redis *r;
    cpt_err err;
    char dir[2048];
    if (cpt_run_choose("cpt-scale", run, job, dir, sizeof dir, &err) != 0) cpt_die(&err);
    if (cpt_run_dir_open(dir, &cpt_config_table, &cfg, &r, &err) != 0) cpt_die(&err);
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
            for (int i = 0; i < nset; i++) printf(" %s=%s", set_argv[2 + 2 * i], set_argv[3 + 2 * i]);
            printf("\n");
        }
    } else {
        const char *hg[] = {"HGETALL", key};
        redisReply *rep = cpt_redis_command(r, 2, hg, NULL, key, 0, &err);
        if (!rep) {
            fprintf(stderr, "cpt-scale: %s\n", err.msg);
            status = 1;
        } else {
            static const char *roles[2] = {"rollout", "reward"};
            printf("role      running  desired  inside  satellite  satellite jobs\n");
            for (int role = 0; role < 2; role++) {
                char f[64], cfg_want[32];
                snprintf(cfg_want, sizeof cfg_want, "%lld",
                         (long long)cpt_cfg_int(cfg, role == 0 ? "roles.rollout" : "roles.reward"));
                const char *want = field(rep, roles[role]);
                snprintf(f, sizeof f, "running_%s", roles[role]);
                const char *running = field(rep, f);
                snprintf(f, sizeof f, "inside_%s", roles[role]);
                const char *inside = field(rep, f);
                snprintf(f, sizeof f, "satellite_%s", roles[role]);
                const char *sat = field(rep, f);
                snprintf(f, sizeof f, "satellite_jobs_%s", roles[role]);
                const char *jobs = field(rep, f);
                printf("%-8s %8s %8s %7s %10s  %s\n", roles[role], running ? running : "?", want ? want : cfg_want,
                       inside ? inside : "?", sat ? sat : "?", jobs ? jobs : "-");
            }
            freeReplyObject(rep);
        }
    }
    cpt_redis_close(r);
    cpt_config_free(cfg);
    return status;
}
