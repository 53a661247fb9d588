/* The command front ends: `cpt COMMAND ...` and the role binaries (cpt-train, cpt-rollout, cpt-reward, cpt-queue,
 * cpt-sched, cpt-scale). Each command is int cmd_NAME(int argc, char **argv) in cli/cmd_NAME.c, where argv[0] is
 * the command's name; it parses argv, calls its module and returns the exit status. */
#ifndef CPT_CLI_COMMANDS_H
#define CPT_CLI_COMMANDS_H

int cmd_config(int argc, char **argv);          /* cpt config show CONFIG [overrides] */
int cmd_tokenize(int argc, char **argv);        /* cpt tokenize --tokenizer PATH [--decode] */
int cmd_chat_template(int argc, char **argv);   /* cpt chat-template --tokenizer PATH */
int cmd_data(int argc, char **argv);            /* cpt data gen TASK --n N --seed S */
int cmd_forward(int argc, char **argv);         /* cpt forward --model DIR --input F --out F */
int cmd_export(int argc, char **argv);          /* cpt export CHECKPOINT OUT_DIR */
int cmd_train(int argc, char **argv);           /* cpt train CONFIG [overrides] (= cpt-train) */
int cmd_generate(int argc, char **argv);        /* cpt generate --model DIR ... */
int cmd_eval(int argc, char **argv);            /* cpt eval --model DIR --data F --reward NAME */
int cmd_rollout(int argc, char **argv);         /* cpt-rollout worker */
int cmd_reward(int argc, char **argv);          /* cpt-reward worker */
int cmd_env(int argc, char **argv);             /* cpt-env worker (tool calls) */
int cmd_queue(int argc, char **argv);           /* cpt-queue stats|peek|dead */
int cmd_run(int argc, char **argv);             /* cpt run CONFIG | --resume RUN_DIR */
int cmd_preflight(int argc, char **argv);       /* cpt preflight CONFIG */
int cmd_plot(int argc, char **argv);            /* cpt plot RUN_DIR */
int cmd_sched(int argc, char **argv);           /* cpt-sched (Slurm batch step) */
int cmd_scale(int argc, char **argv);           /* cpt-scale rollout=N */
int cmd_check_bootstrap(int argc, char **argv); /* cpt check-bootstrap [--kind K] [--dir D] */
int cmd_check_collective(int argc, char **argv); /* cpt check-collective [--backend B] [--device D] */
int cmd_local_ranks(int argc, char **argv);      /* cpt local-ranks N [--clear DIR] -- PROGRAM ARGS */

#endif
