/* Slurm time limits as sbatch --time takes them (scheduler/satellite.h), for the preflight check that a satellite's
 * USR2 (slurm.satellite_warn_s before its end) does not come at its start. */
#include "scheduler/satellite.h"
#include "tests/check.h"

int main(void) {
    CHECK_EQ_INT(cpt_slurm_time_seconds("30"), 1800);
    CHECK_EQ_INT(cpt_slurm_time_seconds("1"), 60);
    CHECK_EQ_INT(cpt_slurm_time_seconds("0:45"), 45);
    CHECK_EQ_INT(cpt_slurm_time_seconds("1:30:00"), 5400);
    CHECK_EQ_INT(cpt_slurm_time_seconds("2-0"), 172800);
    CHECK_EQ_INT(cpt_slurm_time_seconds("1-2:30"), 95400);
    CHECK_EQ_INT(cpt_slurm_time_seconds("1-00:00:10"), 86410);
    CHECK_EQ_INT(cpt_slurm_time_seconds(""), -1);
    CHECK_EQ_INT(cpt_slurm_time_seconds("UNLIMITED"), -1);
    CHECK_EQ_INT(cpt_slurm_time_seconds("1:2:3:4"), -1);
    CHECK_EQ_INT(cpt_slurm_time_seconds("1-2-3"), -1);
    CHECK_EQ_INT(cpt_slurm_time_seconds("10:"), -1);
    CHECK_EQ_INT(cpt_slurm_time_seconds("-5"), -1);
    CHECK_EQ_INT(cpt_slurm_time_seconds("5m"), -1);
    return check_summary("test_slurm_time");
}
