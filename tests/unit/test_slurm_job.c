/* Why a Slurm job stops, from `scontrol show job -o` (scheduler/slurm_job.h): lines recorded on Slurm 22.05 during a
 * scancel, a scontrol requeue and a running job; the strict parse refuses doubled or missing fields. */
#include <stdio.h>
#include <string.h>

#include "scheduler/slurm_job.h"
#include "tests/check.h"

static const char *line(const char *state, const char *restarts, const char *run, const char *limit,
                        const char *name) {
    static char buf[2048];
    snprintf(buf, sizeof buf,
             "JobId=12 JobName=%s UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901758 Nice=0 "
             "Account=(null) QOS=(null) JobState=%s Reason=None Dependency=(null) Requeue=1 Restarts=%s BatchFlag=1 "
             "Reboot=0 ExitCode=0:0 RunTime=%s TimeLimit=%s TimeMin=N/A SubmitTime=2026-12-04T21:34:34 "
             "Command=/tmp/a b/job.sh WorkDir=/tmp/a b Comment=cpt-run:/tmp/a b Power= \n",
             name, state, restarts, run, limit);
    return buf;
}

static int kind(const char *text, long restart) {
    cpt_slurm_job j;
    cpt_err err;
    if (cpt_slurm_job_parse(text, "12", &j, &err) != 0) {
        fprintf(stderr, "parse: %s\n", err.msg);
        return -1;
    }
    return (int)cpt_slurm_stop_kind(&j, restart);
}

int main(void) {
    CHECK_EQ_INT(cpt_slurm_duration_s("00:00:02"), 2);
    CHECK_EQ_INT(cpt_slurm_duration_s("01:02:03"), 3723);
    CHECK_EQ_INT(cpt_slurm_duration_s("365-00:00:00"), 365L * 86400);
    CHECK_EQ_INT(cpt_slurm_duration_s("05:00"), 300);
    const char *bad[] = {"UNLIMITED", "Partition_Limit", "", "1:2:3:4", "1-02:03", "-1:00", "a:00", "1::2", NULL};
    for (int i = 0; bad[i]; i++) CHECK_MSG(cpt_slurm_duration_s(bad[i]) == -1, "'%s' accepted", bad[i]);

    /* scancel: COMPLETING at once, Restarts unchanged -> for good (first start and a requeued attempt alike) */
    CHECK_EQ_INT(kind(line("COMPLETING", "0", "00:00:02", "365-00:00:00", "cpt-grpo"), 0), CPT_SLURM_STOP_CANCELLED);
    CHECK_EQ_INT(kind(line("COMPLETING", "1", "00:00:02", "UNLIMITED", "cpt-grpo"), 1), CPT_SLURM_STOP_CANCELLED);
    CHECK_EQ_INT(kind(line("CANCELLED", "0", "00:00:02", "UNLIMITED", "cpt-grpo"), 0), CPT_SLURM_STOP_CANCELLED);
    /* scontrol requeue (and preemption past its grace): Restarts one more than this attempt's count */
    CHECK_EQ_INT(kind(line("COMPLETING", "1", "00:00:02", "365-00:00:00", "cpt-grpo"), 0), CPT_SLURM_STOP_REQUEUED);
    CHECK_EQ_INT(kind(line("PENDING", "3", "00:00:00", "01:00:00", "cpt-grpo"), 2), CPT_SLURM_STOP_REQUEUED);
    CHECK_EQ_INT(kind(line("REQUEUE_HOLD", "0", "00:00:00", "01:00:00", "cpt-grpo"), 0), CPT_SLURM_STOP_REQUEUED);
    /* warnings before the time limit or a preemption: still RUNNING -> requeue ourselves */
    CHECK_EQ_INT(kind(line("RUNNING", "0", "00:58:00", "01:00:00", "cpt-grpo"), 0), CPT_SLURM_STOP_REQUEUE);
    CHECK_EQ_INT(kind(line("PREEMPTED", "0", "00:10:00", "01:00:00", "cpt-grpo"), 0), CPT_SLURM_STOP_REQUEUE);
    /* the time limit itself (a late warning): ending at the limit is not a scancel */
    CHECK_EQ_INT(kind(line("COMPLETING", "0", "01:00:00", "01:00:00", "cpt-grpo"), 0), CPT_SLURM_STOP_REQUEUE);
    CHECK_EQ_INT(kind(line("TIMEOUT", "0", "01:00:01", "01:00:00", "cpt-grpo"), 0), CPT_SLURM_STOP_REQUEUE);

    /* strict: a job name carrying a field, another job, missing or malformed fields */
    cpt_slurm_job j;
    cpt_err err;
    CHECK(cpt_slurm_job_parse(line("RUNNING", "0", "00:00:01", "UNLIMITED", "x JobState=CANCELLED"), "12", &j,
                              &err) == -1);
    CHECK(strstr(err.msg, "JobState") != NULL);
    CHECK(cpt_slurm_job_parse(line("RUNNING", "0", "00:00:01", "UNLIMITED", "x"), "13", &j, &err) == -1);
    CHECK(cpt_slurm_job_parse(line("running", "0", "00:00:01", "UNLIMITED", "x"), "12", &j, &err) == -1);
    CHECK(cpt_slurm_job_parse(line("RUNNING", "-1", "00:00:01", "UNLIMITED", "x"), "12", &j, &err) == -1);
    CHECK(cpt_slurm_job_parse(line("RUNNING", "0", "soon", "UNLIMITED", "x"), "12", &j, &err) == -1);
    CHECK(cpt_slurm_job_parse("slurm_load_jobs error: Invalid job id specified\n", "12", &j, &err) == -1);
    CHECK(cpt_slurm_job_parse("", "12", &j, &err) == -1);
    CHECK(cpt_slurm_job_parse(line("RUNNING", "4", "1-00:00:01", "UNLIMITED", "x"), "12", &j, &err) == 0);
    CHECK_EQ_STR(j.state, "RUNNING");
    CHECK_EQ_INT(j.restarts, 4);
    CHECK_EQ_INT(j.run_s, 86401);
    CHECK_EQ_INT(j.limit_s, -1);
    return check_summary("test_slurm_job");
}
