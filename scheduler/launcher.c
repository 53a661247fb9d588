#include "scheduler/launcher.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "queue/redis.h"
#include "scheduler/preflight.h"
#include "scheduler/run_dir.h"

static const char *role_names[2] = {"rollout", "reward"};

static int is_online(const char *algo) {
    return !strcmp(algo, "grpo") || !strcmp(algo, "ppo") || !strcmp(algo, "opd");
}

int cpt_launcher_prepare(cpt_launcher *L, cpt_executor exec, const char *config_path, int n_overrides,
                         char *const *overrides, const char *resume_dir, cpt_err *err) {
    memset(L, 0, sizeof *L);
    L->exec = exec;
    cpt_sup_init(&L->sup);
    if (cpt_find_bin_dir(L->bin_dir, sizeof L->bin_dir, err) != 0) return -1;
    if (resume_dir) {
        char path[2100];
        snprintf(path, sizeof path, "%s/config.toml", resume_dir);
        if (!cpt_path_exists(path))
            return cpt_errf(err, "%s: not a run directory (no config.toml); start a run with `cpt run CONFIG`",
                            resume_dir);
        L->cfg = cpt_config_load(path, n_overrides, overrides, err);
    } else {
        L->cfg = cpt_config_load(config_path, n_overrides, overrides, err);
    }
    if (!L->cfg) return -1;
    /* Preflight before anything is created or started: every problem at once, not the first crash of a role. */
    fprintf(stderr, "cpt: preflight\n");
    cpt_preflight p = {.cfg = L->cfg, .bin_dir = L->bin_dir, .slurm = exec == CPT_EXEC_SLURM, .out = stderr};
    int problems = cpt_preflight_run(&p);
    if (problems)
        return cpt_errf(err, "preflight: %d problem%s (listed above); nothing was started", problems,
                        problems == 1 ? "" : "s");
    fprintf(stderr, "preflight: ok\n");
    const char *dir = resume_dir ? resume_dir : cpt_cfg_str(L->cfg, "run.dir");
    if (cpt_mkdir_p(dir, 0755, err) != 0) return -1;
    if (!realpath(dir, L->run_dir)) return cpt_errno(err, "%s", dir);
    snprintf(L->config_path, sizeof L->config_path, "%s/config.toml", L->run_dir);
    /* The resolved config is what every role reads, so a restart or a requeue sees the same run. */
    char *text = cpt_config_dump(L->cfg);
    if (!text) return cpt_errf(err, "out of memory");
    int rc = cpt_write_file_atomic(L->config_path, text, strlen(text), err);
    free(text);
    if (rc != 0) return -1;
    char logs[2100];
    snprintf(logs, sizeof logs, "%s/logs", L->run_dir);
    if (cpt_mkdir_p(logs, 0755, err) != 0) return -1;
    L->online = is_online(cpt_cfg_str(L->cfg, "algo.type"));
    L->sup.max_restarts = (int)cpt_cfg_int(L->cfg, "roles.max_restarts");
    L->sup.max_quick_fails = 3;
    /* srun ends its step on SIGTERM (the tasks may be killed before they checkpoint) but forwards SIGUSR1, which
     * every role treats like SIGTERM: finish the step or the group in hand, save, exit. */
    if (exec == CPT_EXEC_SLURM) L->sup.stop_signal = SIGUSR1;
    L->want[CPT_ROLE_ROLLOUT] = L->online ? (int)cpt_cfg_int(L->cfg, "roles.rollout") : 0;
    L->want[CPT_ROLE_REWARD] = L->online ? (int)cpt_cfg_int(L->cfg, "roles.reward") : 0;
    return 0;
}

/* argv for a role, wrapped in an srun step under Slurm. */
static int add_role(cpt_launcher *L, const char *name, const char *program, const char *worker_id, int tasks,
                    int cpus, int gpus, int pmix, cpt_restart_policy policy, cpt_err *err) {
    char prog[2300], log[2200], env_run[2200], env_role[128], ntasks[32], ncpus[32], ngpus[48], jobname[96];
    snprintf(prog, sizeof prog, "%s/%s", L->bin_dir, program);
    snprintf(log, sizeof log, "%s/logs/%s.log", L->run_dir, name);
    snprintf(env_run, sizeof env_run, "CPT_RUN=%s", L->run_dir);
    snprintf(env_role, sizeof env_role, "CPT_ROLE=%s", name);
    snprintf(ntasks, sizeof ntasks, "--ntasks=%d", tasks);
    snprintf(ncpus, sizeof ncpus, "--cpus-per-task=%d", cpus);
    snprintf(ngpus, sizeof ngpus, "--gpus-per-task=%d", gpus);
    snprintf(jobname, sizeof jobname, "--job-name=cpt-%s", name);
    const char *argv[24];
    int n = 0;
    if (L->exec == CPT_EXEC_SLURM) {
        argv[n++] = "srun";
        argv[n++] = "--exact";
        argv[n++] = ntasks;
        argv[n++] = ncpus;
        if (gpus > 0) argv[n++] = ngpus;
        /* PMIx only where ranks must meet: a one-rank trainer needs no bootstrap, and skipping the PMIx server
         * removes a launch path that was seen failing under load ("task 0 launch failed"). */
        argv[n++] = pmix && tasks > 1 ? "--mpi=pmix" : "--mpi=none";
        argv[n++] = "--kill-on-bad-exit=1";
        argv[n++] = jobname;
    }
    argv[n++] = prog;
    argv[n++] = L->config_path;
    if (worker_id) {
        argv[n++] = "--worker-id";
        argv[n++] = worker_id;
    }
    argv[n] = NULL;
    char *env[] = {env_run, env_role, NULL};
    int i = cpt_sup_add(&L->sup, name, (char *const *)argv, env, log, policy, err);
    if (i < 0) return -1;
    return cpt_sup_start(&L->sup, i, err) == 0 ? i : -1;
}

static int count_role(const cpt_launcher *L, int role, int *highest) {
    int n = 0;
    *highest = -1;
    for (int i = 0; i < L->sup.n; i++) {
        const cpt_proc *p = &L->sup.procs[i];
        size_t len = strlen(role_names[role]);
        if (strncmp(p->name, role_names[role], len) || p->name[len] != '-') continue;
        if (p->state == CPT_PROC_RUNNING || p->state == CPT_PROC_BACKOFF) {
            n++;
            *highest = i;
        }
    }
    return n;
}

/* Starts or drains workers until each role has its desired count. Worker names are never reused within a run,
 * so a drained worker's pending messages are claimed by the others, not by a namesake. */
static int apply_scale(cpt_launcher *L, cpt_err *err) {
    for (int role = 0; role < 2; role++) {
        int highest;
        int have = count_role(L, role, &highest);
        while (have < L->want[role]) {
            char name[64];
            int k = 0;
            do snprintf(name, sizeof name, "%s-%d", role_names[role], k++);
            while (cpt_sup_find(&L->sup, name) >= 0);
            const char *prog = role == CPT_ROLE_ROLLOUT ? "cpt-rollout" : "cpt-reward";
            int cpus = (int)cpt_cfg_int(L->cfg, role == CPT_ROLE_ROLLOUT ? "slurm.rollout_cpus" : "slurm.reward_cpus");
            int gpus = role == CPT_ROLE_ROLLOUT ? (int)cpt_cfg_int(L->cfg, "slurm.rollout_gpus") : 0;
            if (add_role(L, name, prog, name, 1, cpus, gpus, 0, CPT_RESTART_ON_FAILURE, err) < 0) return -1;
            fprintf(stderr, "cpt: started %s\n", name);
            have++;
        }
        while (have > L->want[role] && highest >= 0) {
            fprintf(stderr, "cpt: draining %s\n", L->sup.procs[highest].name);
            cpt_sup_stop(&L->sup, highest, cpt_cfg_float(L->cfg, "roles.drain_grace_s"));
            have = count_role(L, role, &highest);
        }
    }
    return 0;
}

/* Desired counts from cpt:{run}:control (written by cpt-scale); absent fields keep the current ones. */
static void read_control(cpt_launcher *L, cpt_redis *r) {
    char key[512];
    snprintf(key, sizeof key, "cpt:%s:control", cpt_cfg_str(L->cfg, "run.name"));
    for (int role = 0; role < 2; role++) {
        const char *argv[] = {"HGET", key, role_names[role]};
        cpt_err err;
        redisReply *rep = cpt_redis_command(r, 3, argv, NULL, key, 0, &err);
        if (!rep) {
            fprintf(stderr, "cpt: reading scale requests: %s\n", err.msg);
            return;
        }
        if (rep->type == REDIS_REPLY_STRING) {
            int v = atoi(rep->str);
            if (v >= 0 && v <= 4096 && v != L->want[role]) {
                fprintf(stderr, "cpt: scale %s %d -> %d\n", role_names[role], L->want[role], v);
                L->want[role] = v;
            }
        }
        freeReplyObject(rep);
    }
}

/* Publishes the current and desired counts into control, for `cpt-scale` with no arguments. */
static void write_counts(cpt_launcher *L, cpt_redis *r) {
    char key[512], cur[2][32];
    snprintf(key, sizeof key, "cpt:%s:control", cpt_cfg_str(L->cfg, "run.name"));
    for (int role = 0; role < 2; role++) {
        int hi;
        snprintf(cur[role], sizeof cur[role], "%d", count_role(L, role, &hi));
    }
    const char *argv[] = {"HSET", key, "running_rollout", cur[0], "running_reward", cur[1]};
    cpt_err err;
    redisReply *rep = cpt_redis_command(r, 6, argv, NULL, key, 0, &err);
    if (rep) freeReplyObject(rep);
}

static void print_progress(cpt_launcher *L, double started) {
    char path[2200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", L->run_dir);
    FILE *f = fopen(path, "r");
    char line[8192], last[8192] = "";
    if (f) {
        while (fgets(line, sizeof line, f))
            if (line[0] == '{') memcpy(last, line, sizeof last);
        fclose(f);
    }
    int secs = (int)(cpt_now() - started);
    fprintf(stderr, "cpt: %dm%02ds", secs / 60, secs % 60);
    json_t *j = last[0] ? json_loads(last, 0, NULL) : NULL;
    if (j) {
        json_t *step = json_object_get(j, "step");
        if (json_is_integer(step))
            fprintf(stderr, "  step %lld/%lld", (long long)json_integer_value(step),
                    (long long)cpt_cfg_int(L->cfg, "train.steps"));
        static const char *keys[] = {"reward/mean", "train/loss", "loss/policy", "eval/loss", "perf/train_tok_s"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            json_t *v = json_object_get(j, keys[k]);
            if (json_is_number(v)) fprintf(stderr, "  %s %.4g", keys[k], json_number_value(v));
        }
        json_decref(j);
    }
    if (L->online) {
        int hi;
        fprintf(stderr, "  rollout %d reward %d", count_role(L, 0, &hi), count_role(L, 1, &hi));
    }
    fprintf(stderr, "\n");
}

static void redis_opts(cpt_launcher *L, cpt_redis_server_opts *o) {
    memset(o, 0, sizeof *o);
    o->dir = L->run_dir;
    o->appendfsync = cpt_cfg_str(L->cfg, "queue.appendfsync");
}

/* The private redis-server is supervised like a role: if it dies it restarts on the same folder, so it reloads
 * its append-only file and the roles (which reconnect) find the queue as it was. */
static void supervise_redis(cpt_launcher *L) {
    if (!L->redis_owned) return;
    if (L->redis.pid > 0) {
        int status;
        if (waitpid(L->redis.pid, &status, WNOHANG) != L->redis.pid) return;
        fprintf(stderr, "cpt: redis-server exited (%s %d); restarting it on %s\n",
                WIFSIGNALED(status) ? "signal" : "status", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                L->run_dir);
        L->redis.pid = -1;
        L->redis_next_start = cpt_now();
    }
    if (cpt_now() < L->redis_next_start) return;
    cpt_redis_server_opts o;
    redis_opts(L, &o);
    cpt_err err;
    cpt_err_clear(&err);
    if (cpt_redis_server_start(&o, &L->redis, &err) != 0) {
        fprintf(stderr, "cpt: restarting redis-server: %s; retrying in 2 s\n", err.msg);
        L->redis.pid = -1;
        L->redis_next_start = cpt_now() + 2.0;
        return;
    }
    L->redis_restarts++;
}

static int start_queue(cpt_launcher *L, cpt_redis **control, cpt_err *err) {
    const char *url = cpt_cfg_str(L->cfg, "queue.url");
    char queue_json[2200];
    snprintf(queue_json, sizeof queue_json, "%s/queue.json", L->run_dir);
    char urlbuf[700];
    if (!url[0]) {
        cpt_redis_server_opts o;
        redis_opts(L, &o);
        if (cpt_redis_server_start(&o, &L->redis, err) != 0) return -1;
        L->redis_owned = 1;
        snprintf(urlbuf, sizeof urlbuf, "%s", L->redis.url);
        url = urlbuf;
        /* Roles find the queue through the run directory. */
        json_t *j = json_pack("{s:s}", "url", url);
        char *text = json_dumps(j, JSON_INDENT(2));
        json_decref(j);
        int rc = text ? cpt_write_file_atomic(queue_json, text, strlen(text), err) : cpt_errf(err, "out of memory");
        free(text);
        if (rc != 0) return -1;
    }
    cpt_redis_opts ro = {.url = url, .password_file = cpt_cfg_str(L->cfg, "queue.password_file"),
                         .reconnect_ms = 2000};
    *control = cpt_redis_open(&ro, err);
    return *control ? 0 : -1;
}

int cpt_launcher_run(cpt_launcher *L, cpt_err *err) {
    cpt_redis *control = NULL;
    int status = 1;
    double started = cpt_now();
    double grace = cpt_cfg_float(L->cfg, "roles.drain_grace_s");
    if (L->online && start_queue(L, &control, err) != 0) goto done;
    int trainer = add_role(L, "trainer", "cpt-train", NULL, (int)cpt_cfg_int(L->cfg, "slurm.trainer_tasks"),
                           (int)cpt_cfg_int(L->cfg, "slurm.trainer_cpus"), (int)cpt_cfg_int(L->cfg, "slurm.trainer_gpus"),
                           1, CPT_RESTART_ON_FAILURE, err);
    if (trainer < 0) goto done;
    if (apply_scale(L, err) != 0) goto done;
    fprintf(stderr, "cpt: run %s in %s (logs in %s/logs)\n", cpt_cfg_str(L->cfg, "run.name"), L->run_dir, L->run_dir);
    double progress_every = cpt_cfg_float(L->cfg, "run.progress_every_s");
    for (;;) {
        cpt_sup_poll(&L->sup, 0.2);
        supervise_redis(L);
        cpt_proc *t = &L->sup.procs[trainer];
        if (L->stop_flag && *L->stop_flag) {
            fprintf(stderr, "cpt: stopping: the trainer checkpoints, then the workers drain\n");
            cpt_sup_stop(&L->sup, trainer, grace);
            cpt_sup_stop_all(&L->sup, grace);
            status = CPT_EXIT_STOPPED;
            break;
        }
        if (t->state == CPT_PROC_EXITED) {
            status = t->exit_status == 0 ? 0 : CPT_EXIT_STOPPED;
            break;
        }
        if (t->state == CPT_PROC_FAILED) {
            cpt_errf(err, "the trainer failed (exit status %d); see %s/logs/trainer.log", t->exit_status, L->run_dir);
            status = 1;
            break;
        }
        double now = cpt_now();
        if (control && now - L->last_control >= 2.0) {
            L->last_control = now;
            read_control(L, control);
            if (apply_scale(L, err) != 0) cpt_errf(err, "scaling: %s", err->msg);
            write_counts(L, control);
        }
        if (progress_every > 0 && now - L->last_progress >= progress_every) {
            L->last_progress = now;
            print_progress(L, started);
        }
    }
    print_progress(L, started);
    cpt_sup_stop_all(&L->sup, grace);
done:
    if (status == 1 && !err->msg[0]) cpt_errf(err, "the run failed");
    if (control) cpt_redis_close(control);
    if (L->redis_owned) {
        cpt_err e2;
        if (cpt_redis_server_stop(&L->redis, &e2) != 0) fprintf(stderr, "cpt: stopping redis-server: %s\n", e2.msg);
        L->redis_owned = 0;
    }
    return status;
}

void cpt_launcher_free(cpt_launcher *L) {
    cpt_sup_free(&L->sup);
    if (L->cfg) cpt_config_free(L->cfg);
    L->cfg = NULL;
}
