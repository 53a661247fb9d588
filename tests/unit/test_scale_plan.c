/* The room and placement arithmetic behind cpt-scale under Slurm (scheduler/placement.h): Slurm's CPU lists, room
 * left after the steps held, first-fit per node, and where each new worker goes (inside, satellite, nowhere). */
#include <stdlib.h>

#include "scheduler/placement.h"
#include "tests/check.h"

int main(void) {
    cpt_err err;
    cpt_alloc a;

    /* Slurm's compressed per-node lists. */
    CHECK(cpt_alloc_parse(&a, "8(x2),4", "2", &err) == 0);
    CHECK_EQ_INT(a.n_nodes, 3);
    CHECK_EQ_INT(a.cpus[0], 8);
    CHECK_EQ_INT(a.cpus[1], 8);
    CHECK_EQ_INT(a.cpus[2], 4);
    CHECK_EQ_INT(a.gpus[2], 2); /* SLURM_GPUS_ON_NODE: the same count on every node */
    CHECK(cpt_alloc_parse(&a, "3", NULL, &err) == 0);
    CHECK_EQ_INT(a.n_nodes, 1);
    CHECK_EQ_INT(a.gpus[0], 0);
    CHECK(cpt_alloc_parse(&a, "8(x", NULL, &err) != 0);
    CHECK(cpt_alloc_parse(&a, "8,x", NULL, &err) != 0);
    CHECK(cpt_alloc_parse(&a, "", NULL, &err) != 0);

    /* From a batch step's environment. */
    setenv("SLURM_JOB_CPUS_PER_NODE", "48(x2)", 1);
    unsetenv("SLURM_GPUS_ON_NODE");
    setenv("SLURM_JOB_GPUS", "0,1,2,3", 1);
    CHECK(cpt_alloc_from_env(&a, &err) == 0);
    CHECK_EQ_INT(a.n_nodes, 2);
    CHECK_EQ_INT(a.cpus[1], 48);
    CHECK_EQ_INT(a.gpus[1], 4);
    setenv("SLURM_GPUS_ON_NODE", "8", 1);
    CHECK(cpt_alloc_from_env(&a, &err) == 0);
    CHECK_EQ_INT(a.gpus[0], 8);
    unsetenv("SLURM_GPUS_ON_NODE");
    unsetenv("SLURM_JOB_GPUS");
    CHECK(cpt_alloc_from_env(&a, &err) == 0);
    CHECK_EQ_INT(a.gpus[0], 0);
    unsetenv("SLURM_JOB_CPUS_PER_NODE");
    unsetenv("SLURM_CPUS_ON_NODE");
    CHECK(cpt_alloc_from_env(&a, &err) != 0);

    /* The test job's shape: 3 CPUs, trainer + rollout + reward of 1 CPU each leave no room. */
    CHECK(cpt_alloc_parse(&a, "3", NULL, &err) == 0);
    CHECK_EQ_INT(cpt_alloc_room(&a, 1, 0), 3);
    CHECK(cpt_alloc_take(&a, 1, 1, 0) == 0);
    CHECK(cpt_alloc_take(&a, 1, 1, 0) == 0);
    CHECK_EQ_INT(cpt_alloc_room(&a, 1, 0), 1);
    CHECK(cpt_alloc_take(&a, 1, 1, 0) == 0);
    CHECK_EQ_INT(cpt_alloc_room(&a, 1, 0), 0);
    CHECK(cpt_alloc_take(&a, 1, 1, 0) != 0);

    /* grpo_4gpu.sh's shape: 48 CPUs, 4 GPUs; trainer 8 CPU + 1 GPU, rollout 8 + 1, reward 4 + 0. GPUs bind first. */
    CHECK(cpt_alloc_parse(&a, "48", "4", &err) == 0);
    CHECK(cpt_alloc_take(&a, 1, 8, 1) == 0);
    CHECK_EQ_INT(cpt_alloc_room(&a, 8, 1), 3);
    for (int i = 0; i < 3; i++) CHECK(cpt_alloc_take(&a, 1, 8, 1) == 0);
    CHECK_EQ_INT(cpt_alloc_room(&a, 8, 1), 0); /* 16 CPUs left, but no GPU */
    CHECK_EQ_INT(cpt_alloc_room(&a, 4, 0), 4);

    /* A task never spans nodes: two nodes with 3 free CPUs each fit no 4-CPU step, and a failed take changes
     * nothing. */
    CHECK(cpt_alloc_parse(&a, "3(x2)", NULL, &err) == 0);
    CHECK_EQ_INT(cpt_alloc_room(&a, 4, 0), 0);
    CHECK_EQ_INT(cpt_alloc_room(&a, 1, 0), 6);
    CHECK(cpt_alloc_take(&a, 3, 2, 0) != 0); /* 3 tasks of 2: only one per node */
    CHECK_EQ_INT(a.cpus[0], 3);
    CHECK_EQ_INT(a.cpus[1], 3);
    CHECK(cpt_alloc_take(&a, 2, 2, 0) == 0); /* a 2-rank trainer: one task on each node */
    CHECK_EQ_INT(a.cpus[0], 1);
    CHECK_EQ_INT(a.cpus[1], 1);

    /* Placement: inside first, then satellites, then nowhere. */
    cpt_scale_move m = cpt_plan_role(4, 1, 0, 1, 8); /* want 4, 1 inside, room for 1 more */
    CHECK_EQ_INT(m.start_inside, 1);
    CHECK_EQ_INT(m.submit, 2);
    CHECK_EQ_INT(m.unplaced, 0);
    CHECK_EQ_INT(m.stop_inside + m.stop_satellite, 0);
    m = cpt_plan_role(5, 1, 0, 0, 2); /* no room, two satellites left */
    CHECK_EQ_INT(m.start_inside, 0);
    CHECK_EQ_INT(m.submit, 2);
    CHECK_EQ_INT(m.unplaced, 2);
    m = cpt_plan_role(3, 1, 2, 0, 0); /* already there */
    CHECK_EQ_INT(m.start_inside + m.submit + m.stop_inside + m.stop_satellite + m.unplaced, 0);
    /* Scale-down drains satellites before steps. */
    m = cpt_plan_role(1, 2, 2, 0, 0);
    CHECK_EQ_INT(m.stop_satellite, 2);
    CHECK_EQ_INT(m.stop_inside, 1);
    m = cpt_plan_role(2, 1, 2, 5, 5);
    CHECK_EQ_INT(m.stop_satellite, 1);
    CHECK_EQ_INT(m.stop_inside, 0);
    CHECK_EQ_INT(m.start_inside, 0);
    m = cpt_plan_role(0, 3, 0, 0, 0);
    CHECK_EQ_INT(m.stop_inside, 3);
    /* Satellites off (0 left): the rest stays unplaced. */
    m = cpt_plan_role(3, 1, 0, 1, 0);
    CHECK_EQ_INT(m.start_inside, 1);
    CHECK_EQ_INT(m.unplaced, 1);

    /* Both roles: the base counts go inside first. A requeued run with the test job's 3 CPUs (2 left after the
     * trainer) and desired rollout 2 (cpt-scale), reward 1: rollout 1 + reward 1 inside, the second rollout is a
     * satellite, not the reward worker. */
    cpt_scale_move mv[2];
    int cpus[2] = {1, 1}, gpus[2] = {0, 0}, base[2] = {1, 1}, zero[2] = {0, 0};
    CHECK(cpt_alloc_parse(&a, "2", NULL, &err) == 0);
    int want[2] = {2, 1};
    cpt_plan_scale(&a, 2, want, base, zero, zero, cpus, gpus, 4, mv);
    CHECK_EQ_INT(mv[0].start_inside, 1);
    CHECK_EQ_INT(mv[0].submit, 1);
    CHECK_EQ_INT(mv[1].start_inside, 1);
    CHECK_EQ_INT(mv[1].submit, 0);
    CHECK_EQ_INT(a.cpus[0], 0);
    /* Extra room goes to whoever asks first beyond the base; satellites_left is shared by the roles. */
    CHECK(cpt_alloc_parse(&a, "3", NULL, &err) == 0);
    int want2[2] = {3, 3};
    cpt_plan_scale(&a, 2, want2, base, zero, zero, cpus, gpus, 3, mv);
    CHECK_EQ_INT(mv[0].start_inside, 2);
    CHECK_EQ_INT(mv[0].submit, 1);
    CHECK_EQ_INT(mv[1].start_inside, 1);
    CHECK_EQ_INT(mv[1].submit, 2);
    CHECK_EQ_INT(mv[1].unplaced, 0);
    CHECK(cpt_alloc_parse(&a, "3", NULL, &err) == 0);
    cpt_plan_scale(&a, 2, want2, base, zero, zero, cpus, gpus, 2, mv);
    CHECK_EQ_INT(mv[0].submit + mv[1].submit, 2);
    CHECK_EQ_INT(mv[1].unplaced, 1);
    /* Scale-down with both present: satellites first, the room is not touched. */
    CHECK(cpt_alloc_parse(&a, "0", NULL, &err) == 0);
    int want3[2] = {1, 1}, in3[2] = {1, 1}, sat3[2] = {2, 0};
    cpt_plan_scale(&a, 2, want3, base, in3, sat3, cpus, gpus, 0, mv);
    CHECK_EQ_INT(mv[0].stop_satellite, 2);
    CHECK_EQ_INT(mv[0].stop_inside + mv[1].stop_inside + mv[1].stop_satellite, 0);
    /* Three roles (rollout, reward, env): each base count goes inside before any role's extra; with room for two,
     * the env worker is the one that goes to a satellite, in role order. */
    cpt_scale_move mv3[3];
    int c3[3] = {1, 1, 1}, g3[3] = {0, 0, 0}, b3[3] = {1, 1, 1}, z3[3] = {0, 0, 0}, w3[3] = {2, 1, 1};
    CHECK(cpt_alloc_parse(&a, "3", NULL, &err) == 0);
    cpt_plan_scale(&a, 3, w3, b3, z3, z3, c3, g3, 4, mv3);
    CHECK_EQ_INT(mv3[0].start_inside, 1);
    CHECK_EQ_INT(mv3[0].submit, 1);
    CHECK_EQ_INT(mv3[1].start_inside, 1);
    CHECK_EQ_INT(mv3[2].start_inside, 1);
    CHECK_EQ_INT(mv3[2].submit, 0);
    CHECK(cpt_alloc_parse(&a, "2", NULL, &err) == 0);
    int w4[3] = {1, 1, 1};
    cpt_plan_scale(&a, 3, w4, b3, z3, z3, c3, g3, 4, mv3);
    CHECK_EQ_INT(mv3[0].start_inside + mv3[1].start_inside, 2);
    CHECK_EQ_INT(mv3[2].start_inside, 0);
    CHECK_EQ_INT(mv3[2].submit, 1);
    return check_summary("test_scale_plan");
}
