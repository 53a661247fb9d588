#include "scheduler/placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends `times` nodes of v to out (cpus or gpus); -1 on a malformed list. */
static int parse_per_node(const char *s, int *out, int *n, const char *what, cpt_err *err) {
    *n = 0;
    while (s && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        long times = 1;
        if (end == s || v < 0 || v > 1 << 20) return cpt_errf(err, "%s \"%s\": expected N or N(xK),...", what, s);
        if (!strncmp(end, "(x", 2)) {
            times = strtol(end + 2, &end, 10);
            if (*end != ')' || times < 1) return cpt_errf(err, "%s \"%s\": expected N(xK)", what, s);
            end++;
        }
        for (long k = 0; k < times; k++) {
            if (*n >= CPT_ALLOC_MAX_NODES) return cpt_errf(err, "%s: more than %d nodes", what, CPT_ALLOC_MAX_NODES);
            out[(*n)++] = (int)v;
        }
        if (*end == ',') end++;
        else if (*end) return cpt_errf(err, "%s \"%s\": unexpected '%c'", what, s, *end);
        s = end;
    }
    return 0;
}

int cpt_alloc_parse(cpt_alloc *a, const char *cpus_per_node, const char *gpus_per_node, cpt_err *err) {
    memset(a, 0, sizeof *a);
    int ng = 0;
    if (parse_per_node(cpus_per_node, a->cpus, &a->n_nodes, "CPUs per node", err)) return -1;
    if (a->n_nodes == 0) return cpt_errf(err, "CPUs per node: empty");
    if (gpus_per_node && *gpus_per_node) {
        if (parse_per_node(gpus_per_node, a->gpus, &ng, "GPUs per node", err)) return -1;
        /* Slurm gives one count for every node (SLURM_GPUS_ON_NODE): the same on each. */
        for (int i = ng; i < a->n_nodes; i++) a->gpus[i] = a->gpus[ng - 1];
    }
    return 0;
}

int cpt_alloc_from_env(cpt_alloc *a, cpt_err *err) {
    const char *cpus = getenv("SLURM_JOB_CPUS_PER_NODE");
    if (!cpus || !*cpus) cpus = getenv("SLURM_CPUS_ON_NODE");
    if (!cpus || !*cpus)
        return cpt_errf(err, "the allocation's CPUs are unknown (no SLURM_JOB_CPUS_PER_NODE or SLURM_CPUS_ON_NODE)");
    /* GPUs per node: SLURM_GPUS_ON_NODE, else the ids in SLURM_JOB_GPUS ("0,1,2,3"); none: no GPUs. */
    char gpus[32] = "";
    const char *g = getenv("SLURM_GPUS_ON_NODE");
    if (g && *g) {
        snprintf(gpus, sizeof gpus, "%s", g);
    } else if ((g = getenv("SLURM_JOB_GPUS")) && *g) {
        int n = 1;
        for (const char *c = g; *c; c++) n += *c == ',';
        snprintf(gpus, sizeof gpus, "%d", n);
    }
    if (cpt_alloc_parse(a, cpus, gpus, err)) return cpt_err_prefix(err, "the allocation");
    return 0;
}

static int take_task(cpt_alloc *a, int cpus, int gpus) {
    for (int i = 0; i < a->n_nodes; i++)
        if (a->cpus[i] >= cpus && a->gpus[i] >= gpus) {
            a->cpus[i] -= cpus;
            a->gpus[i] -= gpus;
            return 0;
        }
    return -1;
}

int cpt_alloc_take(cpt_alloc *a, int tasks, int cpus, int gpus) {
    cpt_alloc tmp = *a;
    for (int t = 0; t < tasks; t++)
        if (take_task(&tmp, cpus, gpus)) return -1;
    *a = tmp;
    return 0;
}

int cpt_alloc_room(const cpt_alloc *a, int cpus, int gpus) {
    int n = 0;
    for (int i = 0; i < a->n_nodes; i++) {
        int by_cpu = cpus > 0 ? a->cpus[i] / cpus : 1 << 20;
        int by_gpu = gpus > 0 ? a->gpus[i] / gpus : 1 << 20;
        n += by_cpu < by_gpu ? by_cpu : by_gpu;
    }
    return n;
}

cpt_scale_move cpt_plan_role(int want, int inside, int satellites, int room, int satellites_left) {
    cpt_scale_move m = {0, 0, 0, 0, 0};
    int have = inside + satellites;
    if (want > have) {
        int need = want - have;
        m.start_inside = need < room ? need : room;
        need -= m.start_inside;
        m.submit = need < satellites_left ? need : satellites_left;
        m.unplaced = need - m.submit;
    } else if (want < have) {
        int extra = have - want;
        m.stop_satellite = extra < satellites ? extra : satellites;
        m.stop_inside = extra - m.stop_satellite;
    }
    return m;
}

void cpt_plan_scale(cpt_alloc *room, int n, const int *want, const int *base, const int *inside,
                    const int *satellites, const int *cpus, const int *gpus, int satellites_left,
                    cpt_scale_move *out) {
    int first[CPT_PLAN_MAX_ROLES] = {0};
    if (n > CPT_PLAN_MAX_ROLES) n = CPT_PLAN_MAX_ROLES;
    for (int r = 0; r < n; r++) {
        int target = want[r] < base[r] ? want[r] : base[r];
        while (inside[r] + first[r] < target && cpt_alloc_take(room, 1, cpus[r], gpus[r]) == 0) first[r]++;
    }
    for (int r = 0; r < n; r++) {
        out[r] = cpt_plan_role(want[r], inside[r] + first[r], satellites[r], cpt_alloc_room(room, cpus[r], gpus[r]),
                               satellites_left);
        for (int k = 0; k < out[r].start_inside; k++) cpt_alloc_take(room, 1, cpus[r], gpus[r]);
        out[r].start_inside += first[r];
        satellites_left -= out[r].submit;
    }
}

int cpt_parse_worker_count(const char *s, int *out) {
    if (!s) return -1;
    size_t n = strspn(s, "0123456789");
    if (n == 0 || s[n] != '\0' || n > 6) return -1;
    long v = strtol(s, NULL, 10);
    if (v > CPT_MAX_WORKERS) return -1;
    *out = (int)v;
    return 0;
}
