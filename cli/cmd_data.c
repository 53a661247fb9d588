/* cpt data gen TASK --n N --seed S [--format sft|rl|tool-sft] [--split all|train|eval|sft|rl] [--out FILE]
 *     writes synthetic instances as JSONL to stdout (or atomically to FILE)
 * cpt data check FILE [--format F] [--skip-bad-lines]
 *     reads a dataset as training would and prints its format, record count and bad lines */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/dataset.h"
#include "core/fs.h"
#include "core/synth.h"

static int usage(void) {
    fprintf(stderr,
            "usage: cpt data gen arithmetic|arithmetic-1digit|multiply-2digit|countdown --n N --seed S\n"
            "                    [--format sft|rl|tool-sft]\n"
            "                    [--split all|train|eval|sft|rl] [--out FILE]\n"
            "       cpt data check FILE [--format auto|prompt_completion|messages|preference|rl_prompt]\n"
            "                           [--skip-bad-lines]\n");
    return 2;
}

static int parse_u64(const char *flag, const char *s, unsigned long long max, unsigned long long *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || s[0] == '-' || v > max) {
        fprintf(stderr, "cpt data: %s expects an integer in [0, %llu], got '%s'\n", flag, max, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int cmd_gen(int argc, char **argv) {
    if (argc < 1) return usage();
    cpt_synth_task task;
    if (cpt_synth_task_parse(argv[0], &task)) {
        fprintf(stderr, "cpt data gen: unknown task '%s' (arithmetic, arithmetic-1digit, "
                        "multiply-2digit, countdown)\n", argv[0]);
        return 2;
    }
    unsigned long long n = 0, seed = 0;
    int have_n = 0, have_seed = 0;
    cpt_synth_format format = CPT_SYNTH_SFT;
    cpt_synth_split split = CPT_SYNTH_ALL;
    const char *out_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "cpt data gen: '%s' needs a value\n", a);
            return usage();
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--n")) {
            if (parse_u64("--n", v, 100000000ULL, &n)) return 2;
            have_n = 1;
        } else if (!strcmp(a, "--seed")) {
            if (parse_u64("--seed", v, UINT64_MAX, &seed)) return 2;
            have_seed = 1;
        } else if (!strcmp(a, "--format")) {
            if (cpt_synth_format_parse(v, &format)) {
                fprintf(stderr, "cpt data gen: --format is sft, rl or tool-sft, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--split")) {
            if (cpt_synth_split_parse(v, &split)) {
                fprintf(stderr, "cpt data gen: --split is all, train, eval, sft or rl, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--out")) {
            out_path = v;
        } else {
            fprintf(stderr, "cpt data gen: unknown option '%s'\n", a);
            return usage();
        }
    }
    if (!have_n || !have_seed) {
        fprintf(stderr, "cpt data gen: --n and --seed are required\n");
        return usage();
    }
    cpt_err err = {{0}};
    if (!out_path) {
        if (cpt_synth_write(stdout, task, format, split, (long)n, seed, &err)) {
            fprintf(stderr, "cpt data gen: %s\n", err.msg);
            return 1;
        }
        return 0;
    }
    cpt_atomic_file af;
    if (cpt_atomic_open(&af, out_path, &err)) {
        fprintf(stderr, "cpt data gen: %s\n", err.msg);
        return 1;
    }
    if (cpt_synth_write(af.fp, task, format, split, (long)n, seed, &err)) {
        cpt_atomic_abort(&af);
        fprintf(stderr, "cpt data gen: %s\n", err.msg);
        return 1;
    }
    if (cpt_atomic_commit(&af, &err)) {
        fprintf(stderr, "cpt data gen: %s\n", err.msg);
        return 1;
    }
    return 0;
}

static int cmd_check(int argc, char **argv) {
    if (argc < 1) return usage();
    cpt_dataset_opts o = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--skip-bad-lines")) {
            o.skip_bad_lines = 1;
        } else if (!strcmp(argv[i], "--format") && i + 1 < argc) {
            if (cpt_data_format_parse(argv[++i], &o.format)) {
                fprintf(stderr, "cpt data check: unknown format '%s'\n", argv[i]);
                return 2;
            }
        } else {
            return usage();
        }
    }
    cpt_err err = {{0}};
    cpt_dataset *ds = cpt_dataset_load(argv[0], &o, &err);
    if (!ds) {
        fprintf(stderr, "cpt data check: %s\n", err.msg);
        return 1;
    }
    printf("%s: %zu records, format %s, %zu bad lines\n", argv[0], cpt_dataset_count(ds),
           cpt_data_format_name(cpt_dataset_format(ds)), cpt_dataset_bad_lines(ds));
    cpt_dataset_free(ds);
    return 0;
}

int cmd_data(int argc, char **argv) {
    if (argc < 2) return usage();
    if (!strcmp(argv[1], "gen")) return cmd_gen(argc - 2, argv + 2);
    if (!strcmp(argv[1], "check")) return cmd_check(argc - 2, argv + 2);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage();
        return 0;
    }
    fprintf(stderr, "cpt data: unknown subcommand '%s'\n", argv[1]);
    return usage();
}
