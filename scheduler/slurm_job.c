#include "scheduler/slurm_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/satellite.h"

static int all_digits(const char *s, size_t n) {
    if (n == 0 || n > 9) return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

long cpt_slurm_duration_s(const char *s) {
    long days = 0, parts[3];
    int n = 0;
    const char *dash = strchr(s, '-');
    if (dash) {
        if (!all_digits(s, (size_t)(dash - s))) return -1;
        days = strtol(s, NULL, 10);
        s = dash + 1;
    }
    for (;;) {
        size_t len = strcspn(s, ":");
        if (n == 3 || !all_digits(s, len)) return -1;
        parts[n++] = strtol(s, NULL, 10);
        if (s[len] == '\0') break;
        s += len + 1;
    }
    if (n == 3) return days * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2];
    if (dash) return -1; /* D-HH:MM:SS only, as Slurm prints it */
    if (n == 2) return parts[0] * 60 + parts[1];
    return -1;
}

/* The value of the one token "key=..." of text (space-separated), copied into out. 0 found once, -1 otherwise. */
static int field_once(const char *text, const char *key, char *out, size_t cap) {
    size_t klen = strlen(key);
    int found = 0;
    for (const char *p = text; *p;) {
        p += strspn(p, " \t\r\n");
        size_t len = strcspn(p, " \t\r\n");
        if (len > klen && !strncmp(p, key, klen) && p[klen] == '=') {
            if (found++) return -1;
            size_t vlen = len - klen - 1;
            if (vlen >= cap) return -1;
            memcpy(out, p + klen + 1, vlen);
            out[vlen] = '\0';
        }
        p += len;
    }
    return found == 1 ? 0 : -1;
}

int cpt_slurm_job_parse(const char *text, const char *job, cpt_slurm_job *out, cpt_err *err) {
    memset(out, 0, sizeof *out);
    char id[64], state[64], restarts[32], run[64], limit[64];
    if (field_once(text, "JobId", id, sizeof id) || strcmp(id, job))
        return cpt_errf(err, "scontrol show job %s: no single JobId=%s in its answer", job, job);
    if (field_once(text, "JobState", state, sizeof state) || !state[0] || strlen(state) >= sizeof out->state ||
        strspn(state, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") != strlen(state))
        return cpt_errf(err, "scontrol show job %s: no single JobState=STATE in its answer", job);
    if (field_once(text, "Restarts", restarts, sizeof restarts) || !all_digits(restarts, strlen(restarts)))
        return cpt_errf(err, "scontrol show job %s: no single Restarts=N in its answer", job);
    if (field_once(text, "RunTime", run, sizeof run) || (out->run_s = cpt_slurm_duration_s(run)) < 0)
        return cpt_errf(err, "scontrol show job %s: no single RunTime=[D-]HH:MM:SS in its answer", job);
    if (field_once(text, "TimeLimit", limit, sizeof limit))
        return cpt_errf(err, "scontrol show job %s: no single TimeLimit= in its answer", job);
    snprintf(out->state, sizeof out->state, "%s", state);
    out->restarts = strtol(restarts, NULL, 10);
    out->limit_s = cpt_slurm_duration_s(limit);
    return 0;
}

int cpt_slurm_job_query(const char *job, cpt_slurm_job *out, cpt_err *err) {
    if (!cpt_slurm_job_id_valid(job)) return cpt_errf(err, "\"%.64s\" is not a Slurm job id", job);
    char text[16384];
    char *argv[] = {"scontrol", "show", "job", "-o", (char *)job, NULL};
    int rc = cpt_sat_run_program(argv, NULL, text, sizeof text);
    if (rc != 0) return cpt_errf(err, "scontrol show job -o %s failed (status %d)", job, rc);
    return cpt_slurm_job_parse(text, job, out, err);
}

cpt_slurm_stop cpt_slurm_stop_kind(const cpt_slurm_job *j, long restart_count) {
    static const char *requeue_states[] = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT",
                                           NULL};
    if (j->restarts > restart_count) return CPT_SLURM_STOP_REQUEUED;
    for (int i = 0; requeue_states[i]; i++)
        if (!strcmp(j->state, requeue_states[i])) return CPT_SLURM_STOP_REQUEUED;
    if (!strcmp(j->state, "CANCELLED")) return CPT_SLURM_STOP_CANCELLED;
    /* Ending without a requeue: a scancel, unless the time limit is what ends it (its USR1 came late). */
    if (!strcmp(j->state, "COMPLETING")) return j->limit_s >= 0 && j->run_s >= j->limit_s ? CPT_SLURM_STOP_REQUEUE
                                                                                        : CPT_SLURM_STOP_CANCELLED;
    return CPT_SLURM_STOP_REQUEUE;
}
