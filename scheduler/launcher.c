#include "scheduler/launcher.h"

#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "queue/conn.h"
#include "queue/redis.h"
#include "scheduler/preflight.h"
#include "scheduler/run_dir.h"
#include "scheduler/run_history.h"
#include "scheduler/run_registry.h"
#include "scheduler/run_lock.h"
#include "weights/checkpoint_dir.h"


static int is_online(const char *algo) {
    return !strcmp(algo, "grpo") || !strcmp(algo, "ppo") || !strcmp(algo, "opd");
}

/* A fresh random password in path (mode 0600 from the start), unless the file already exists (a requeued job
 * keeps its password, so workers that reconnect keep working). */
static int ensure_password_file(const char *path, cpt_err *err) {
    if (cpt_path_exists(path)) return 0;
    unsigned char raw[24];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cpt_errno(err, "/dev/urandom");
    ssize_t got = read(fd, raw, sizeof raw);
    close(fd);
    if (got != (ssize_t)sizeof raw) return cpt_errf(err, "/dev/urandom: short read");
    char hex[2 * sizeof raw + 2];
    for (size_t i = 0; i < sizeof raw; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    hex[2 * sizeof raw] = '\n';
    hex[2 * sizeof raw + 1] = '\0';
    explicit_bzero(raw, sizeof raw);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return cpt_errno(err, "%s", path);
    int ok = write(fd, hex, strlen(hex)) == (ssize_t)strlen(hex);
    explicit_bzero(hex, sizeof hex);
    if (close(fd) != 0 || !ok) return cpt_errno(err, "%s", path);
    return 0;
}

static int real_dir(const char *dir, char *out, size_t cap, cpt_err *err) {
    char real[PATH_MAX];
    if (!realpath(dir, real)) return cpt_errno(err, "%s", dir);
    if (strlen(real) >= cap) return cpt_errf(err, "%s: path too long (at most %zu bytes)", real, cap - 1);
    snprintf(out, cap, "%s", real);
    return 0;
}

/* (Re)loads L->cfg from L->src_path with the user's overrides, then the launcher's own (run.dir, ...), which win. */
static int load_config(cpt_launcher *L, cpt_err *err) {
    int n = L->n_user + L->n_extra;
    char **ov = calloc((size_t)n + 1, sizeof *ov);
    if (!ov) return cpt_errf(err, "out of memory");
    for (int i = 0; i < L->n_user; i++) ov[i] = L->user_overrides[i];
    for (int i = 0; i < L->n_extra; i++) ov[L->n_user + i] = L->extra[i];
    cpt_config *cfg = cpt_config_load_file(L->keys, L->src_path, n, ov, err);
    free(ov);
    if (!cfg) return -1;
    if (L->cfg) cpt_config_free(L->cfg);
    L->cfg = cfg;
    return 0;
}

static int add_override(cpt_launcher *L, const char *key, const char *value, cpt_err *err) {
    if (L->n_extra >= CPT_LAUNCHER_MAX_EXTRA) return cpt_errf(err, "too many launcher overrides");
    int n = snprintf(L->extra[L->n_extra], sizeof L->extra[0], "%s=%s", key, value);
    if (n < 0 || (size_t)n >= sizeof L->extra[0]) return cpt_errf(err, "%s = %s: too long", key, value);
    L->n_extra++;
    return 0;
}

static int user_set(const cpt_launcher *L, const char *key) {
    size_t len = strlen(key);
    for (int i = 0; i < L->n_user; i++)
        if (!strncmp(L->user_overrides[i], key, len) && L->user_overrides[i][len] == '=') return 1;
    return 0;
}

/* The part of path below folder old ("" for old itself), or NULL when path is not inside it. */
static const char *below(const char *path, const char *old) {
    size_t n = strlen(old);
    if (!n || strncmp(path, old, n)) return NULL;
    if (path[n] == '\0') return "";
    return path[n] == '/' ? path + n : NULL;
}

/* A run directory is self-locating: whatever run.dir config.toml recorded (the folder may have been copied or moved),
 * the run is the folder the launcher was given, and every path recorded inside the old folder follows it. A queue
 * server outside the folder would be shared with the original run, so that is refused unless the user names one. */
static int relocate(cpt_launcher *L, cpt_err *err) {
    const char *recorded = cpt_cfg_str(L->cfg, "run.dir");
    char old[PATH_MAX];
    if (!realpath(recorded, old)) snprintf(old, sizeof old, "%s", recorded);
    if (!strcmp(old, L->run_dir)) /* the same folder; a relative run.dir becomes absolute */
        return add_override(L, "run.dir", L->run_dir, err) || load_config(L, err) ? -1 : 0;
    if (L->resuming) {
        fprintf(stderr, "cpt: %s records run.dir = %s; resuming in %s (the folder's own queue, checkpoints and logs)\n",
                L->src_path, recorded, L->run_dir);
        L->relocated = 1;
    }
    if (add_override(L, "run.dir", L->run_dir, err)) return -1;
    const char *url = cpt_cfg_str(L->cfg, "queue.url");
    const char *rest;
    if (!strncmp(url, "unix://", 7) && (rest = below(url + 7, old)) && !user_set(L, "queue.url")) {
        char v[PATH_MAX + 16];
        snprintf(v, sizeof v, "unix://%s%s", L->run_dir, rest);
        if (add_override(L, "queue.url", v, err)) return -1;
    } else if (L->resuming && url[0] && !user_set(L, "queue.url")) {
        return cpt_errf(err, "%s was recorded as run.dir = %s and its queue is queue.url = %s, outside the folder: a "
                        "copy would share the original run's queue. Resume the original folder, or pass "
                        "queue.url=... naming a queue for this copy; nothing was started", L->run_dir, recorded, url);
    }
    const char *pw = cpt_cfg_str(L->cfg, "queue.password_file");
    if (pw[0] && (rest = below(pw, old)) && !user_set(L, "queue.password_file")) {
        char v[PATH_MAX + 16];
        snprintf(v, sizeof v, "%s%s", L->run_dir, rest);
        if (add_override(L, "queue.password_file", v, err)) return -1;
    }
    return load_config(L, err);
}

/* Under Slurm: the allocation's room, and whether satellites are possible. They are when slurm.max_satellites > 0,
 * the allocation is known, and the queue can be reached from another node: a private redis-server then also
 * listens on TCP with a password (queue.password_file, else RUN_DIR/redis.pass, generated and added to the
 * resolved config so every role authenticates); a queue.url on a unix socket rules them out. */
static int setup_satellites(cpt_launcher *L, cpt_err *err) {
    cpt_err e;
    cpt_err_clear(&e);
    if (cpt_alloc_from_env(&L->alloc, &e) == 0) {
        L->limited = 1;
    } else {
        fprintf(stderr, "cpt: %s; worker steps are not counted against it and no satellite is submitted\n", e.msg);
        return 0;
    }
    if (!is_online(cpt_cfg_str(L->cfg, "algo.type")) || cpt_cfg_int(L->cfg, "slurm.max_satellites") == 0 ||
        !getenv("SLURM_JOB_ID"))
        return 0;
    const char *url = cpt_cfg_str(L->cfg, "queue.url");
    if (!strncmp(url, "unix:", 5)) {
        fprintf(stderr, "cpt: queue.url %s is a unix socket: no satellite jobs (other nodes cannot reach it)\n", url);
        return 0;
    }
    L->satellites_on = 1;
    if (url[0] || cpt_cfg_str(L->cfg, "queue.password_file")[0]) return 0;
    char pw[2200];
    snprintf(pw, sizeof pw, "%s/redis.pass", L->run_dir);
    if (ensure_password_file(pw, err)) return cpt_err_prefix(err, "the queue's password for satellites");
    if (add_override(L, "queue.password_file", pw, err)) return -1;
    return load_config(L, err);
}

/* Every auto of train.device, rollout.device and weights.transport becomes the concrete value (weights/devices.h), so
 * each role, a restart and a requeue read the same; under Slurm also teacher.device and reward.model_device (the
 * CPU); said in one line. */
static int resolve_devices(cpt_launcher *L, cpt_err *err) {
    cpt_devices_view v = {.slurm = L->exec == CPT_EXEC_SLURM, .gpus = L->exec == CPT_EXEC_SLURM ? 0 : cpt_gpus_visible()};
    if (cpt_devices_resolve(L->cfg, &v, &L->dev, err)) return -1;
    const char *keys[3] = {"train.device", "rollout.device", "weights.transport"};
    const char *vals[3] = {L->dev.train, L->dev.rollout, L->dev.transport};
    int added = 0;
    for (int i = 0; i < 3; i++)
        if (!strcmp(cpt_cfg_str(L->cfg, keys[i]), "auto")) {
            if (add_override(L, keys[i], vals[i], err)) return -1;
            added = 1;
        }
    /* A Slurm job's reward steps (and reward satellites) are given no GPU, but where the cluster does not fence
     * devices they would still see the node's: the reward worker's own auto could then take a GPU of another
     * step or job. The CPU, as the devices line says, is written down. */
    const char *frozen[2] = {"teacher.device", "reward.model_device"};
    for (int i = 0; i < 2 && L->exec == CPT_EXEC_SLURM; i++)
        if (!strcmp(cpt_cfg_str(L->cfg, frozen[i]), "auto")) {
            if (add_override(L, frozen[i], "cpu", err)) return -1;
            added = 1;
        }
    char line[256];
    if (is_online(cpt_cfg_str(L->cfg, "algo.type"))) cpt_devices_describe(&L->dev, line, sizeof line);
    else snprintf(line, sizeof line, "trainer %s", L->dev.train);
    fprintf(stderr, "cpt: devices: %s\n", line);
    return added ? load_config(L, err) : 0;
}

/* `--resume` continues from a checkpoint: a run folder without a good one would silently start over at step 0. */
static int check_resumable(cpt_launcher *L, int from_scratch, cpt_err *err) {
    char ckpt[CPT_CKPT_PATH_MAX];
    cpt_err e;
    cpt_err_clear(&e);
    int found = cpt_ckpt_find_latest(L->run_dir, ckpt, sizeof ckpt, &e);
    if (found == 1) {
        const char *base = strrchr(ckpt, '/');
        L->resume_step = cpt_ckpt_step_of(base ? base + 1 : ckpt);
        if (L->resume_step < 0) L->resume_step = 0;
        return 0;
    }
    if (found < 0 && from_scratch) /* the trainer refuses those too: say what to do instead of failing there */
        return cpt_errf(err, "%s: checkpoints exist but none verifies (%s); move %s/checkpoints away to train again "
                        "from step 0; nothing was started", L->run_dir, e.msg, L->run_dir);
    if (from_scratch) {
        fprintf(stderr, "cpt: %s has no valid checkpoint; --from-scratch: training starts again at step 0\n",
                L->run_dir);
        return 0;
    }
    if (found == 0)
        return cpt_errf(err, "%s has no checkpoint to resume from (%s/checkpoints/latest is absent); pass "
                        "--from-scratch to train it again from step 0; nothing was started", L->run_dir, L->run_dir);
    return cpt_errf(err, "%s: no checkpoint verifies (%s); pass --from-scratch to train it again from step 0; nothing "
                    "was started", L->run_dir, e.msg);
}

/* A launch into a folder that holds a run (run_history.h). The run.fresh the user passed is acted on once here: the
 * resolved config records run.fresh=false, so a restart or a requeue reading it resumes. */
static int check_history(cpt_launcher *L, cpt_executor exec, cpt_err *err) {
    const char *rc = getenv("SLURM_RESTART_COUNT");
    int requeue = exec == CPT_EXEC_SLURM && rc && strtol(rc, NULL, 10) > 0;
    int fresh = cpt_cfg_bool(L->cfg, "run.fresh");
    if (!cpt_cfg_bool(L->cfg, "train.resume") && !fresh) /* the trainer starts at step 0 by itself */
        return requeue ? 0 : cpt_ckpt_refuse_restart(L->run_dir, err);
    char moved[4300];
    int64_t step;
    int h = cpt_run_history_check(L->run_dir, cpt_cfg_int(L->cfg, "train.steps"), requeue, fresh, &step, moved,
                                  sizeof moved, err);
    if (h < 0) return -1;
    if (moved[0]) fprintf(stderr, "cpt: run.fresh=true: the earlier run in %s moved to %s\n", L->run_dir, moved);
    if (h == CPT_RUN_DONE_ON_REQUEUE) {
        fprintf(stderr, "cpt: %s finished (step %lld of %lld) before this requeue; nothing to do\n", L->run_dir,
                (long long)step, (long long)cpt_cfg_int(L->cfg, "train.steps"));
        L->done_on_requeue = 1;
        return 0;
    }
    if (h == CPT_RUN_RESUME) L->resume_step = step;
    return fresh ? add_override(L, "run.fresh", "false", err) || load_config(L, err) : 0;
}

int cpt_launcher_prepare(cpt_launcher *L, cpt_executor exec, const cpt_key_table *keys, const char *config_path,
                         int n_overrides, char *const *overrides, const char *resume_dir, int from_scratch, cpt_err *err) {
    memset(L, 0, sizeof *L);
    L->lock_fd = -1;
    L->exec = exec;
    L->keys = keys;
    L->user_overrides = overrides;
    L->n_user = n_overrides;
    cpt_sup_init(&L->sup);
    /* This launch attempt starts now: queue entries delivered before it belong to consumers of an earlier attempt
     * (a requeue, a resume), which are all gone, so the roles started from here (inheriting the variable, as do the
     * satellites' sbatch jobs) claim them at once instead of after queue.claim_idle_ms (queue/stream.h). */
    struct timespec start;
    clock_gettime(CLOCK_REALTIME, &start);
    char start_s[48];
    snprintf(start_s, sizeof start_s, "%.3f", (double)start.tv_sec + start.tv_nsec / 1e9);
    setenv("CPT_QUEUE_ORPHAN_BEFORE", start_s, 1);
    if (cpt_find_bin_dir(L->bin_dir, sizeof L->bin_dir, err) != 0) return -1;
    if (resume_dir) {
        /* The folder given is the run, and it is ours before anything is read from it for use. */
        if (real_dir(resume_dir, L->run_dir, sizeof L->run_dir, err)) return -1;
        L->resuming = 1;
        snprintf(L->src_path, sizeof L->src_path, "%s/config.toml", L->run_dir);
        if (!cpt_path_exists(L->src_path))
            return cpt_errf(err, "%s: not a run directory (no config.toml); start a run with `cpt run CONFIG`",
                            resume_dir);
        if ((L->lock_fd = cpt_run_lock_take(L->run_dir, err)) < 0) return -1;
    } else {
        snprintf(L->src_path, sizeof L->src_path, "%s", config_path);
    }
    if (load_config(L, err)) return -1;
    if (resume_dir && relocate(L, err)) return -1;
    /* Preflight before anything is created or started: every problem at once, not the first crash of a role. */
    fprintf(stderr, "cpt: preflight\n");
    cpt_preflight p = {.cfg = L->cfg, .bin_dir = L->bin_dir, .slurm = exec == CPT_EXEC_SLURM, .out = stderr};
    int problems = cpt_preflight_run(&p);
    if (problems)
        return cpt_errf(err, "preflight: %d problem%s (listed above); nothing was started", problems,
                        problems == 1 ? "" : "s");
    fprintf(stderr, "preflight: ok\n");
    if (resolve_devices(L, err)) return -1;
    if (!resume_dir) {
        const char *dir = cpt_cfg_str(L->cfg, "run.dir");
        if (cpt_mkdir_p(dir, 0700, err) != 0) return -1;
        if (real_dir(dir, L->run_dir, sizeof L->run_dir, err)) return -1;
        /* Nothing is written into the folder before the lock: a refused launch leaves a live run untouched. */
        if ((L->lock_fd = cpt_run_lock_take(L->run_dir, err)) < 0) return -1;
        if (check_history(L, exec, err)) return -1;
        if (L->done_on_requeue) return 0;
        if (relocate(L, err)) return -1;
    } else if (check_resumable(L, from_scratch, err)) {
        return -1;
    }
    snprintf(L->config_path, sizeof L->config_path, "%s/config.toml", L->run_dir);
    if (exec == CPT_EXEC_SLURM && setup_satellites(L, err) != 0) return -1;
    /* The resolved config is what every role reads, so a restart or a requeue sees the same run. */
    char *text = cpt_config_dump(L->cfg);
    if (!text) return cpt_errf(err, "out of memory");
    int rc = cpt_write_file_atomic(L->config_path, text, strlen(text), err);
    free(text);
    if (rc != 0) return -1;
    char logs[2100];
    snprintf(logs, sizeof logs, "%s/logs", L->run_dir);
    if (cpt_mkdir_p(logs, 0700, err) != 0) return -1;
    L->online = is_online(cpt_cfg_str(L->cfg, "algo.type"));
    L->sup.max_restarts = (int)cpt_cfg_int(L->cfg, "roles.max_restarts");
    L->sup.max_quick_fails = 3;
    /* A trainer that cannot write checkpoints would retrain from its last good one on every restart. */
    L->sup.no_restart_status = CPT_EXIT_NO_RESTART;
    /* srun ends its step on SIGTERM (the tasks may be killed before they checkpoint) but forwards SIGUSR1, which
     * every role treats like SIGTERM: finish the step or the group in hand, save, exit. */
    if (exec == CPT_EXEC_SLURM) L->sup.stop_signal = SIGUSR1;
    for (int role = 0; role < CPT_N_WORKER_ROLES; role++)
        L->want[role] = L->online ? cpt_role_configured(L->cfg, role) : 0;
    if (cpt_autoscaler_init(&L->autoscale, L->cfg, L->run_dir, cpt_now(), err)) return -1;
    cpt_autoscale_params *ap = &L->autoscale.p; /* auto from the start: roles.rollout within the bounds */
    if (L->online && L->autoscale.on && (L->want[0] < ap->min || L->want[0] > ap->max))
        L->want[0] = L->want[0] < ap->min ? ap->min : ap->max;
    return 0;
}

/* argv for a role, wrapped in an srun step under Slurm, or in a local launcher of trainer ranks. */
static int add_role(cpt_launcher *L, const char *name, const char *program, const char *worker_id, int tasks,
                    int cpus, int gpus, int pmix, cpt_restart_policy policy, cpt_err *err) {
    char prog[2300], log[2200], env_run[2200], env_role[128], ntasks[32], ncpus[32], ngpus[48], jobname[96];
    /* a rollout worker on the GPU with none of its own: beside the trainer, on the GPU its step holds */
    int beside = worker_id && !strncmp(name, "rollout-", 8) && gpus == 0 && L->dev.rollout_shares_gpu;
    snprintf(prog, sizeof prog, "%s/%s", L->bin_dir, program);
    snprintf(log, sizeof log, "%s/logs/%s.log", L->run_dir, name);
    snprintf(env_run, sizeof env_run, "CPT_RUN=%s", L->run_dir);
    snprintf(env_role, sizeof env_role, "CPT_ROLE=%s", name);
    snprintf(ntasks, sizeof ntasks, "--ntasks=%d", tasks);
    snprintf(ncpus, sizeof ncpus, "--cpus-per-task=%d", cpus);
    snprintf(ngpus, sizeof ngpus, "--gpus-per-task=%d", gpus);
    snprintf(jobname, sizeof jobname, "--job-name=cpt-%s", name);
    const char *argv[32];
    int n = 0, stop_signal = 0;
    char cpt_prog[2300], boot_dir[2200], nranks[16];
    if (L->exec != CPT_EXEC_SLURM && tasks > 1) {
        /* Local trainer ranks (slurm.trainer_tasks): one supervised process either way, so a stop reaches every rank
         * and every rank dies with the launcher. */
        snprintf(nranks, sizeof nranks, "%d", tasks);
        if (!strcmp(L->dev.train, "cuda")) { /* NCCL: N processes, the file bootstrap in RUN_DIR/bootstrap */
            snprintf(cpt_prog, sizeof cpt_prog, "%s/cpt", L->bin_dir);
            snprintf(boot_dir, sizeof boot_dir, "%s/bootstrap", L->run_dir);
            const char *pre[] = {cpt_prog, "local-ranks", nranks, "--clear", boot_dir, "--"};
            for (size_t k = 0; k < sizeof pre / sizeof pre[0]; k++) argv[n++] = pre[k];
        } else { /* CPU: Open MPI's launcher; it forwards SIGUSR1 and waits, but kills its ranks 2 s after a SIGTERM */
            const char *pre[] = {"mpirun", "-n", nranks, "--oversubscribe", "--bind-to", "none"};
            for (size_t k = 0; k < sizeof pre / sizeof pre[0]; k++) argv[n++] = pre[k];
            if (geteuid() == 0) argv[n++] = "--allow-run-as-root";
            stop_signal = SIGUSR1;
        }
    }
    if (L->exec == CPT_EXEC_SLURM) {
        argv[n++] = "srun";
        argv[n++] = "--exact";
        argv[n++] = ntasks;
        argv[n++] = ncpus;
        if (gpus > 0) {
            argv[n++] = ngpus;
        } else if (beside) {
            argv[n++] = "--overlap";
            argv[n++] = "--gpus-per-task=1";
        } else {
            argv[n++] = "--gres=none"; /* else the step would ask every GPU of the job (Slurm's default) */
        }
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
    L->sup.procs[i].stop_signal = stop_signal;
    return cpt_sup_start(&L->sup, i, err) == 0 ? i : -1;
}

/* A worker the supervisor gave up on (it failed right after starting, or past roles.max_restarts) keeps its place:
 * a new worker of the same program and config would fail the same way, and replacing it on every scaling pass
 * was an endless loop of starts. */
static int given_up(const cpt_proc *p) { return p->state == CPT_PROC_FAILED && !p->stop_requested; }

/* The first worker of role given up on, or -1. */
static int first_given_up(const cpt_launcher *L, int role) {
    for (int i = 0; i < L->sup.n; i++)
        if (cpt_role_of_worker(L->sup.procs[i].name) == role && given_up(&L->sup.procs[i])) return i;
    return -1;
}

/* Workers of role that hold a place: the live ones (the highest-numbered in *highest, -1 when none) and those given
 * up on; *live (may be NULL) gets the live ones alone, what `running` reports. */
static int count_role_live(const cpt_launcher *L, int role, int *highest, int *live) {
    int n = 0;
    *highest = -1;
    for (int i = 0; i < L->sup.n; i++) {
        const cpt_proc *p = &L->sup.procs[i];
        if (cpt_role_of_worker(p->name) != role) continue;
        if ((p->state == CPT_PROC_RUNNING && !p->stop_requested) || p->state == CPT_PROC_BACKOFF) {
            n++;
            *highest = i;
            if (live) (*live)++;
        } else if (given_up(p)) {
            n++;
        }
    }
    return n;
}

static int count_role(const cpt_launcher *L, int role, int *highest) {
    return count_role_live(L, role, highest, NULL);
}

static int count_live(const cpt_launcher *L, int role) {
    int hi, live = 0;
    count_role_live(L, role, &hi, &live);
    return live;
}

/* The run cannot go on when a role it needs has workers and every one of them was given up on (and no satellite
 * serves it): -1 with the first such worker and its log named. */
static int check_workers_alive(const cpt_launcher *L, cpt_err *err) {
    for (int role = 0; role < CPT_N_WORKER_ROLES; role++) {
        if (L->want[role] <= 0 || (L->satellites_on && cpt_sat_live(&L->sats, role) > 0)) continue;
        int alive = 0;
        const cpt_proc *failed = NULL;
        for (int i = 0; i < L->sup.n; i++) {
            const cpt_proc *p = &L->sup.procs[i];
            if (cpt_role_of_worker(p->name) != role) continue;
            if (p->state == CPT_PROC_RUNNING || p->state == CPT_PROC_BACKOFF) alive = 1;
            else if (given_up(p) && !failed) failed = p;
        }
        if (!alive && failed)
            return cpt_errf(err, "every %s worker failed (%s: exit status %d after %d restarts); see %s/logs/%s.log",
                            cpt_role_name(role), failed->name, failed->exit_status, failed->restarts, L->run_dir,
                            failed->name);
    }
    return 0;
}

static int role_cpus(const cpt_launcher *L, int role) { return cpt_role_cpus(L->cfg, role); }
static int role_gpus(const cpt_launcher *L, int role) { return cpt_role_gpus(L->cfg, role); }

/* What the allocation has left after the steps this launcher holds: the trainer, the workers, the workers in
 * backoff (they come back) and the ones still draining (they hold their CPUs until they exit). */
static void free_room(const cpt_launcher *L, cpt_alloc *room) {
    *room = L->alloc;
    for (int i = 0; i < L->sup.n; i++) {
        const cpt_proc *p = &L->sup.procs[i];
        if (p->state != CPT_PROC_RUNNING && p->state != CPT_PROC_BACKOFF) continue;
        if (!strcmp(p->name, "trainer")) {
            cpt_alloc_take(room, (int)cpt_cfg_int(L->cfg, "slurm.trainer_tasks"),
                           (int)cpt_cfg_int(L->cfg, "slurm.trainer_cpus"),
                           (int)cpt_cfg_int(L->cfg, "slurm.trainer_gpus"));
            continue;
        }
        int role = cpt_role_of_worker(p->name);
        if (role < 0) continue;
        cpt_alloc_take(room, 1, role_cpus(L, role), role_gpus(L, role));
    }
}

/* Moves each role toward its desired count (placement.h): new workers inside while the allocation has room, then
 * satellites; scale-down drains satellites first, then the highest-numbered steps. Nothing here waits for a
 * worker to exit. Worker names are never reused within a run, so a drained worker's pending messages are claimed
 * by the others, not by a namesake. */
static int apply_scale(cpt_launcher *L, cpt_err *err) {
    cpt_alloc room;
    if (L->limited) {
        free_room(L, &room);
    } else { /* local processes, or an allocation of unknown size: no limit (the old srun behaviour) */
        memset(&room, 0, sizeof room);
        room.n_nodes = 1;
        room.cpus[0] = room.gpus[0] = 1 << 20;
    }
    double grace = cpt_cfg_float(L->cfg, "roles.drain_grace_s");
    enum { N = CPT_N_WORKER_ROLES };
    int inside[N], sats[N], cpus[N], gpus[N], highest[N], base[N];
    for (int role = 0; role < N; role++) {
        base[role] = cpt_role_configured(L->cfg, role);
        inside[role] = count_role(L, role, &highest[role]);
        sats[role] = L->satellites_on ? cpt_sat_live(&L->sats, role) : 0;
        cpus[role] = role_cpus(L, role);
        gpus[role] = role_gpus(L, role);
    }
    int left = L->satellites_on ? L->sats.max - L->sats.n : 0;
    cpt_scale_move moves[N];
    cpt_plan_scale(&room, N, L->want, base, inside, sats, cpus, gpus, left < 0 ? 0 : left, moves);
    for (int role = 0; role < N; role++) {
        cpt_scale_move m = moves[role];
        /* backing off after a satellite failed; or rollout workers on the trainer's GPU, which a satellite on
         * another node cannot share (cuda_ipc is one host's) */
        if (m.submit && (!cpt_sat_may_submit(&L->sats, role) ||
                         (role == CPT_ROLE_ROLLOUT && L->dev.rollout_shares_gpu))) {
            m.unplaced += m.submit;
            m.submit = 0;
        }
        for (int k = 0; k < m.start_inside; k++) {
            char name[64];
            int idx = 0;
            do snprintf(name, sizeof name, "%s-%d", cpt_role_name(role), idx++);
            while (cpt_sup_find(&L->sup, name) >= 0);
            if (add_role(L, name, cpt_role_program(role), name, 1, role_cpus(L, role), role_gpus(L, role), 0, CPT_RESTART_ON_FAILURE,
                         err) < 0)
                return -1;
            fprintf(stderr, "cpt: started %s\n", name);
        }
        for (int k = 0; k < m.submit; k++) {
            cpt_err e;
            cpt_err_clear(&e);
            if (cpt_sat_submit(&L->sats, role, &e) != 0) {
                fprintf(stderr, "cpt: %s\n", e.msg);
                m.unplaced += m.submit - k;
                break;
            }
        }
        for (int k = 0; k < m.stop_satellite; k++) cpt_sat_drain_one(&L->sats, role, grace);
        int hi = highest[role];
        for (int k = 0; k < m.stop_inside; k++) {
            /* a worker given up on leaves the count first: stopping a live one in its place would keep the dead
             * one and lose a working one */
            int g = first_given_up(L, role);
            if (g >= 0) {
                fprintf(stderr, "cpt: %s (given up on) leaves the count\n", L->sup.procs[g].name);
                cpt_sup_request_stop(&L->sup, g, grace); /* not running: only marks it */
                continue;
            }
            if (hi < 0) break;
            fprintf(stderr, "cpt: draining %s\n", L->sup.procs[hi].name);
            cpt_sup_request_stop(&L->sup, hi, grace);
            count_role(L, role, &hi);
        }
        if (m.unplaced != L->unplaced[role] && (m.unplaced > 0 || L->unplaced[role] > 0)) {
            if (m.unplaced > 0)
                fprintf(stderr, "cpt: %d %s worker%s wanted but not placed: the allocation has no room%s; they start "
                                "when room frees\n", m.unplaced, cpt_role_name(role), m.unplaced == 1 ? "" : "s",
                        L->satellites_on ? " and no satellite may be submitted now (slurm.max_satellites, a "
                                           "backoff after a satellite failed, or rollout workers on the trainer's GPU)"
                                         : " and satellites are off (slurm.max_satellites = 0, or no TCP queue)");
            else
                fprintf(stderr, "cpt: every %s worker placed\n", cpt_role_name(role));
        }
        L->unplaced[role] = m.unplaced;
    }
    return 0;
}

/* Desired counts from cpt:{run}:control (written by cpt-scale); absent fields keep the current ones. A value that is
 * not a count (anyone who can reach the queue can write the hash) keeps the last good one and is reported once. */
static void read_control(cpt_launcher *L, cpt_redis *r) {
    char key[512];
    snprintf(key, sizeof key, "cpt:%s:control", cpt_cfg_str(L->cfg, "run.name"));
    int rollout_auto = L->online && cpt_autoscaler_read_control(&L->autoscale, r, &L->want[CPT_ROLE_ROLLOUT]);
    int no_tool = !strcmp(cpt_cfg_str(L->cfg, "env.type"), "none");
    /* auto: the autoscaler sets the rollout count */
    for (int role = rollout_auto ? 1 : 0; role < CPT_N_WORKER_ROLES; role++) {
        const char *argv[] = {"HGET", key, cpt_role_name(role)};
        cpt_err err;
        redisReply *rep = cpt_redis_command(r, 3, argv, NULL, key, 0, &err);
        if (!rep) {
            fprintf(stderr, "cpt: reading scale requests: %s\n", err.msg);
            return;
        }
        if (rep->type == REDIS_REPLY_STRING) {
            L->control_seen = 1;
            int v;
            int bad = cpt_parse_worker_count(rep->str, &v) != 0;
            /* env workers without a tool would fail at start, again and again, until the run gives up */
            int toolless = !bad && role == CPT_ROLE_ENV && v > 0 && no_tool;
            if (bad || toolless) {
                if (strncmp(L->bad_control[role], rep->str, sizeof L->bad_control[role] - 1)) {
                    snprintf(L->bad_control[role], sizeof L->bad_control[role], "%s", rep->str);
                    char why[64];
                    if (toolless) snprintf(why, sizeof why, "this run has no tool (env.type = none)");
                    else snprintf(why, sizeof why, "not a worker count (0..%d)", CPT_MAX_WORKERS);
                    fprintf(stderr, "cpt: ignoring %s field %s = \"%.40s\": %s; keeping %d\n", key,
                            cpt_role_name(role), rep->str, why, L->want[role]);
                }
            } else {
                L->bad_control[role][0] = '\0';
                if (v != L->want[role]) {
                    fprintf(stderr, "cpt: scale %s %d -> %d\n", cpt_role_name(role), L->want[role], v);
                    L->want[role] = v;
                }
            }
        }
        freeReplyObject(rep);
    }
}

/* Publishes the current counts into control, for `cpt-scale` with no arguments: running (inside steps plus
 * satellites Slurm runs), inside, satellite (submitted, not draining) and the satellites' job ids with states. */
static void write_counts(cpt_launcher *L, cpt_redis *r) {
    enum { N = CPT_N_WORKER_ROLES };
    char key[512], val[3][N][32], jobs[N][2048], fields[N][4][48];
    snprintf(key, sizeof key, "cpt:%s:control", cpt_cfg_str(L->cfg, "run.name"));
    const char *argv[2 + 2 * 4 * N];
    int n = 0;
    argv[n++] = "HSET";
    argv[n++] = key;
    static const char *const prefix[4] = {"running", "inside", "satellite", "satellite_jobs"};
    for (int role = 0; role < N; role++) {
        for (int f = 0; f < 4; f++)
            snprintf(fields[role][f], sizeof fields[role][f], "%s_%s", prefix[f], cpt_role_name(role));
        int hi, live = 0;
        int inside = count_role_live(L, role, &hi, &live); /* a worker given up on keeps its place, not running */
        int sat = L->satellites_on ? cpt_sat_live(&L->sats, role) : 0;
        int sat_run = L->satellites_on ? cpt_sat_running(&L->sats, role) : 0;
        snprintf(val[0][role], sizeof val[0][role], "%d", live + sat_run);
        snprintf(val[1][role], sizeof val[1][role], "%d", inside);
        snprintf(val[2][role], sizeof val[2][role], "%d", sat);
        if (L->satellites_on) cpt_sat_describe(&L->sats, role, jobs[role], sizeof jobs[role]);
        else jobs[role][0] = '\0';
        for (int f = 0; f < 3; f++) {
            argv[n++] = fields[role][f];
            argv[n++] = val[f][role];
        }
        argv[n++] = fields[role][3];
        argv[n++] = jobs[role][0] ? jobs[role] : "-";
    }
    cpt_err err;
    redisReply *rep = cpt_redis_command(r, n, argv, NULL, key, 0, &err);
    if (rep) freeReplyObject(rep);
}

/* What a resumed run carries over: the checkpoint and, for online runs, the worker counts. */
static void report_resume(const cpt_launcher *L) {
    fprintf(stderr, "cpt: resuming %s from step %lld (checkpoint %s/checkpoints/step-%lld)", L->run_dir,
            (long long)L->resume_step, L->run_dir, (long long)L->resume_step);
    if (L->online)
        fprintf(stderr, "; scale counts %s: rollout=%d reward=%d env=%d",
                L->control_seen ? "from the last run" : "from the config", L->want[CPT_ROLE_ROLLOUT],
                L->want[CPT_ROLE_REWARD], L->want[CPT_ROLE_ENV]);
    fprintf(stderr, "\n");
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
        fprintf(stderr, "  rollout %d reward %d", count_live(L, 0), count_live(L, 1));
        int env = count_live(L, CPT_ROLE_ENV);
        if (env || L->want[CPT_ROLE_ENV]) fprintf(stderr, " env %d", env);
        if (L->satellites_on && L->sats.n) {
            fprintf(stderr, " (satellites: rollout %d reward %d", cpt_sat_live(&L->sats, 0), cpt_sat_live(&L->sats, 1));
            if (cpt_sat_live(&L->sats, CPT_ROLE_ENV)) fprintf(stderr, " env %d", cpt_sat_live(&L->sats, CPT_ROLE_ENV));
            fprintf(stderr, ")");
        }
    }
    fprintf(stderr, "\n");
}

static void redis_opts(cpt_launcher *L, cpt_redis_server_opts *o) {
    memset(o, 0, sizeof *o);
    o->dir = L->run_dir;
    o->appendfsync = cpt_cfg_str(L->cfg, "queue.appendfsync");
    if (L->tcp_port) {
        /* Satellites on other nodes connect here: every address (their node's route to this one is not known), a
         * password required, and TLS when queue.tls_cert / queue.tls_key are set (docs/queue.md). */
        o->tcp_port = L->tcp_port;
        o->password_file = cpt_cfg_str(L->cfg, "queue.password_file");
        o->bind = "0.0.0.0";
        o->tls_cert = cpt_cfg_str(L->cfg, "queue.tls_cert");
        o->tls_key = cpt_cfg_str(L->cfg, "queue.tls_key");
        o->tls_ca = cpt_cfg_str(L->cfg, "queue.tls_ca");
    }
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

/* The URL satellites use: redis://HOST:PORT (rediss:// with queue.tls_cert), HOST from slurm.satellite_host or this
 * node's name. */
static int satellite_url(cpt_launcher *L, char *out, size_t cap, cpt_err *err) {
    char host[256];
    snprintf(host, sizeof host, "%s", cpt_cfg_str(L->cfg, "slurm.satellite_host"));
    if (!host[0] && gethostname(host, sizeof host - 1) != 0) return cpt_errno(err, "gethostname");
    host[sizeof host - 1] = '\0';
    snprintf(out, cap, "%s://%s:%d", cpt_cfg_str(L->cfg, "queue.tls_cert")[0] ? "rediss" : "redis", host, L->tcp_port);
    return 0;
}

static int start_queue(cpt_launcher *L, cpt_redis **control, cpt_err *err) {
    const char *url = cpt_cfg_str(L->cfg, "queue.url");
    char urlbuf[700], sat_url[700] = "";
    if (!url[0]) {
        if (L->satellites_on) {
            L->tcp_port = (int)cpt_cfg_int(L->cfg, "slurm.satellite_port");
            if (!L->tcp_port && (L->tcp_port = cpt_free_tcp_port(err)) < 0) return -1;
            if (satellite_url(L, sat_url, sizeof sat_url, err)) return -1;
        }
        cpt_redis_server_opts o;
        redis_opts(L, &o);
        if (cpt_redis_server_start(&o, &L->redis, err) != 0) return -1;
        L->redis_owned = 1;
        snprintf(urlbuf, sizeof urlbuf, "%s", L->redis.url);
        url = urlbuf;
        /* Roles on this node find the queue through the run directory (the unix socket); satellites get the TCP
         * URL on their command line. */
        cpt_queue_conn c;
        memset(&c, 0, sizeof c);
        snprintf(c.url, sizeof c.url, "%s", url);
        snprintf(c.password_file, sizeof c.password_file, "%s", cpt_cfg_str(L->cfg, "queue.password_file"));
        snprintf(c.run, sizeof c.run, "%s", cpt_cfg_str(L->cfg, "run.name"));
        if (cpt_queue_conn_write(L->run_dir, &c, err) != 0) return -1;
        if (L->satellites_on)
            fprintf(stderr, "cpt: queue on %s and %s (password in %s) for satellite jobs\n", url, sat_url,
                    c.password_file);
    }
    if (L->satellites_on) {
        if (cpt_sat_init(&L->sats, L->cfg, L->run_dir, L->bin_dir, L->config_path, sat_url,
                         sat_url[0] ? cpt_cfg_str(L->cfg, "queue.password_file") : NULL, err) != 0)
            return -1;
        cpt_sat_cancel_stale(&L->sats);
    }
    cpt_redis_opts ro = {.url = url, .password_file = cpt_cfg_str(L->cfg, "queue.password_file"),
                         .reconnect_ms = 2000};
    *control = cpt_redis_open(&ro, err);
    return *control ? 0 : -1;
}

/* A copied run's queue (its AOF) still announces the weights file of the original folder, which workers refuse (they
 * load only from their run's weights folder) and would not ask for again. Forget it: the resumed trainer announces
 * its checkpoint's version from this folder before it issues any prompt. */
static int forget_weights(cpt_launcher *L, cpt_redis *r, cpt_err *err) {
    char key[512];
    snprintf(key, sizeof key, "cpt:%s:weights", cpt_cfg_str(L->cfg, "run.name"));
    const char *argv[] = {"DEL", key};
    redisReply *rep = cpt_redis_command(r, 2, argv, NULL, key, 0, err);
    if (!rep) return cpt_err_prefix(err, "forgetting the original folder's weights announcement");
    freeReplyObject(rep);
    return 0;
}

static void drain_satellites(cpt_launcher *L, double grace) {
    if (!L->satellites_on) return;
    for (int role = 0; role < CPT_N_WORKER_ROLES; role++)
        while (cpt_sat_drain_one(&L->sats, role, grace) == 0) {}
}

/* Waits until process `only` (or, with -1, every process and satellite) is gone or limit passes, keeping the private
 * redis-server up meanwhile: Slurm's SIGTERM on a requeue reaches it too, and draining workers, here or in
 * satellites, need it to hand in what they hold. The supervisor escalates stops past their grace. */
static void wait_stopped(cpt_launcher *L, int only, double limit) {
    double next_refresh = 0;
    while (cpt_now() < limit) {
        int busy = only >= 0 ? L->sup.procs[only].state == CPT_PROC_RUNNING : cpt_sup_running(&L->sup) > 0;
        if (only < 0 && L->satellites_on) {
            if (cpt_now() >= next_refresh) {
                cpt_sat_refresh(&L->sats);
                next_refresh = cpt_now() + 1.0;
            }
            busy |= L->sats.n > 0;
        }
        if (!busy) return;
        cpt_sup_poll(&L->sup, 0.05);
        supervise_redis(L);
    }
}

/* Makes the run findable by cpt-scale and cpt-queue without --run (run_registry.h). Neither failure stops the run. */
static void announce_run(cpt_launcher *L) {
    const char *job = L->exec == CPT_EXEC_SLURM ? getenv("SLURM_JOB_ID") : NULL;
    if (job && !cpt_slurm_job_id_valid(job)) job = NULL;
    cpt_err e;
    cpt_err_clear(&e);
    if (cpt_run_registry_add(L->run_dir, job, L->registry_entry, sizeof L->registry_entry, &e) != 0)
        fprintf(stderr, "cpt: registering the live run: %s; cpt-scale and cpt-queue need --run %s\n", e.msg,
                L->run_dir);
    if (job && cpt_run_registry_tag_job(job, L->run_dir, &e) != 0)
        fprintf(stderr, "cpt: %s; cpt-scale on another node needs --run %s\n", e.msg, L->run_dir);
}

int cpt_launcher_run(cpt_launcher *L, cpt_err *err) {
    cpt_redis *control = NULL;
    int status = 1;
    double started = cpt_now();
    announce_run(L);
    double grace = cpt_cfg_float(L->cfg, "roles.drain_grace_s");
    if (L->online && start_queue(L, &control, err) != 0) goto done;
    if (control && L->relocated && L->redis_owned && forget_weights(L, control, err) != 0) goto done;
    int trainer = add_role(L, "trainer", "cpt-train", NULL, (int)cpt_cfg_int(L->cfg, "slurm.trainer_tasks"),
                           (int)cpt_cfg_int(L->cfg, "slurm.trainer_cpus"), (int)cpt_cfg_int(L->cfg, "slurm.trainer_gpus"),
                           1, CPT_RESTART_ON_FAILURE, err);
    if (trainer < 0) goto done;
    /* A requeued job continues with the counts cpt-scale asked for (the control hash lives in the AOF). */
    if (control) read_control(L, control);
    if (L->resume_step > 0) report_resume(L);
    if (apply_scale(L, err) != 0) {
        /* what did start (the trainer, workers, submitted satellites) stops in order, as after a failure */
        status = 1;
        goto stop_all;
    }
    fprintf(stderr, "cpt: run %s in %s (logs in %s/logs)\n", cpt_cfg_str(L->cfg, "run.name"), L->run_dir, L->run_dir);
    double progress_every = cpt_cfg_float(L->cfg, "run.progress_every_s");
    for (;;) {
        cpt_sup_poll(&L->sup, 0.2);
        supervise_redis(L);
        cpt_proc *t = &L->sup.procs[trainer];
        if (L->stop_flag && *L->stop_flag) {
            fprintf(stderr, "cpt: stopping: the trainer checkpoints, then the workers drain\n");
            drain_satellites(L, grace);
            cpt_sup_request_stop(&L->sup, trainer, grace);
            wait_stopped(L, trainer, cpt_now() + grace + 12.0);
            /* What the trainer did with the stop: finished its last step meanwhile (0), or could not write its
             * checkpoints (a resume or requeue would fail the same way); else it stopped, checkpointed or not, and a
             * resume continues from its last checkpoint */
            status = CPT_EXIT_STOPPED;
            if (t->state != CPT_PROC_RUNNING && t->exit_status == 0) {
                status = 0;
            } else if (t->state != CPT_PROC_RUNNING && t->exit_status == CPT_EXIT_NO_RESTART) {
                cpt_errf(err, "the trainer, asked to stop, could not write its checkpoint (exit status %d); see "
                         "%s/logs/trainer.log", t->exit_status, L->run_dir);
                status = 1;
            }
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
        if (control) cpt_autoscaler_tick(&L->autoscale, control, now, &L->want[CPT_ROLE_ROLLOUT]);
        if (control && now - L->last_control >= 2.0) {
            L->last_control = now;
            read_control(L, control);
            if (L->satellites_on) {
                cpt_sat_refresh(&L->sats);
                cpt_sat_release_ended(&L->sats, control, cpt_cfg_str(L->cfg, "run.name"),
                                      cpt_cfg_int(L->cfg, "queue.claim_idle_ms"));
            }
            cpt_err se; /* a worker that cannot start is said and keeps its place (given up on); the run goes on */
            cpt_err_clear(&se);
            if (apply_scale(L, &se) != 0) fprintf(stderr, "cpt: scaling: %s\n", se.msg);
            write_counts(L, control);
        }
        if (check_workers_alive(L, err)) {
            fprintf(stderr, "cpt: %s; stopping the run\n", err->msg);
            status = 1;
            break;
        }
        if (progress_every > 0 && now - L->last_progress >= progress_every) {
            L->last_progress = now;
            print_progress(L, started);
        }
    }
    print_progress(L, started);
stop_all:
    /* Satellites get their drain signal first so they drain while the steps do. */
    drain_satellites(L, grace);
    for (int i = 0; i < L->sup.n; i++) cpt_sup_request_stop(&L->sup, i, grace);
    wait_stopped(L, -1, cpt_now() + grace + 15.0);
    if (L->satellites_on) cpt_sat_cancel_rest(&L->sats);
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
    cpt_run_registry_remove(L->registry_entry);
    L->registry_entry[0] = '\0';
    cpt_sup_free(&L->sup);
    cpt_run_lock_release(L->lock_fd);
    L->lock_fd = -1;
    cpt_sat_free(&L->sats);
    if (L->cfg) cpt_config_free(L->cfg);
    L->cfg = NULL;
}
