/* The `cpt` command's subcommands. Each is implemented in its module (core/cmd_*.c, model/cmd_*.c, ...) as
 * int cmd_NAME(int argc, char **argv), where argv[0] is the subcommand name; it returns the exit status.
 * Declared weak while modules land one by one: the dispatcher reports a subcommand whose module is absent. */
#ifndef CPT_SCHEDULER_COMMANDS_H
#define CPT_SCHEDULER_COMMANDS_H

#define CPT_COMMAND(name) int name(int argc, char **argv) __attribute__((weak));
CPT_COMMAND(cmd_config)        /* cpt config show CONFIG [overrides]            core/cmd_config.c */
CPT_COMMAND(cmd_tokenize)      /* cpt tokenize --tokenizer PATH [--decode]       core/cmd_tokenize.c */
CPT_COMMAND(cmd_chat_template) /* cpt chat-template --tokenizer PATH             core/cmd_chat_template.c */
CPT_COMMAND(cmd_data)          /* cpt data gen TASK --n N --seed S               core/cmd_data.c */
CPT_COMMAND(cmd_forward)       /* cpt forward --model DIR --input F --out F      model/cmd_forward.c */
CPT_COMMAND(cmd_export)        /* cpt export CHECKPOINT OUT_DIR                  trainer/cmd_export.c */
CPT_COMMAND(cmd_train)         /* cpt train CONFIG [overrides] (= cpt-train)     trainer/cmd_train.c */
CPT_COMMAND(cmd_generate)      /* cpt generate --model DIR ...                   rollout/cmd_generate.c */
CPT_COMMAND(cmd_eval)          /* cpt eval --model DIR --data F --reward NAME    reward/cmd_eval.c */
CPT_COMMAND(cmd_rollout)       /* cpt-rollout worker                             rollout/cmd_rollout.c */
CPT_COMMAND(cmd_reward)        /* cpt-reward worker                              reward/cmd_reward.c */
CPT_COMMAND(cmd_queue)         /* cpt-queue stats|peek|dead                      queue/cmd_queue.c */
CPT_COMMAND(cmd_run)           /* cpt run CONFIG | --resume RUN_DIR              scheduler/cmd_run.c */
CPT_COMMAND(cmd_preflight)     /* cpt preflight CONFIG                           scheduler/cmd_preflight.c */
CPT_COMMAND(cmd_plot)          /* cpt plot RUN_DIR                               scheduler/cmd_plot.c */
CPT_COMMAND(cmd_sched)         /* cpt-sched (Slurm batch step)                   scheduler/cmd_sched.c */
CPT_COMMAND(cmd_scale)         /* cpt-scale rollout=N                            scheduler/cmd_scale.c */
CPT_COMMAND(cmd_check_bootstrap) /* cpt check-bootstrap [--kind K] [--dir D]    scheduler/cmd_check_bootstrap.c */
#undef CPT_COMMAND

typedef struct cpt_command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} cpt_command;

/* Runs fn if its module is built, else prints a clear error. */
int cpt_run_command(const char *name, int (*fn)(int, char **), int argc, char **argv);

#endif
