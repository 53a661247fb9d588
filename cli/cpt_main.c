/* cpt: the user's front door. `cpt COMMAND ...` dispatches to COMMAND's front end (cli/commands.h). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

typedef struct cpt_command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} cpt_command;

static const cpt_command commands[] = {
    {"run", cmd_run, "run CONFIG [k=v ...] | --resume RUN_DIR   run a job on this machine"},
    {"train", cmd_train, "train CONFIG [k=v ...]                    the trainer (same as cpt-train)"},
    {"preflight", cmd_preflight, "preflight CONFIG [k=v ...]            check everything before a run"},
    {"config", cmd_config, "config show CONFIG [k=v ...]              print the resolved config"},
    {"generate", cmd_generate, "generate --model DIR [--prompt TEXT]     sample a model"},
    {"eval", cmd_eval, "eval --model DIR --data F --reward NAME     score a model on a dataset"},
    {"forward", cmd_forward, "forward --model DIR --input F --out F   logits, logprobs, loss, grads"},
    {"export", cmd_export, "export CHECKPOINT OUT_DIR                 write a Hugging Face folder"},
    {"tokenize", cmd_tokenize, "tokenize --tokenizer PATH [--decode]     JSONL text <-> ids"},
    {"chat-template", cmd_chat_template, "chat-template --tokenizer PATH    JSONL messages -> text, ids"},
    {"data", cmd_data, "data gen TASK --n N --seed S               synthetic datasets"},
    {"plot", cmd_plot, "plot RUN_DIR                               metrics as PNG"},
    {"queue", cmd_queue, "queue stats|peek|dead                     (same as cpt-queue)"},
    {"check-bootstrap", cmd_check_bootstrap, "check-bootstrap [--kind auto|pmix|file] [--dir D]  test rank bootstrap"},
    {"check-collective", cmd_check_collective, "check-collective [--backend B] [--device D]  test the dp collectives"},
    {"local-ranks", cmd_local_ranks, "local-ranks N [--clear DIR] -- PROG ARGS  N local GPU trainer ranks as one"},
    {"scale", cmd_scale, "scale rollout=N [reward=M]                (same as cpt-scale)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: cpt COMMAND [args]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) fprintf(f, "  %s\n", commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "cpt: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
