/* cpt config show [--resolved [--slurm]] [CONFIG] [section.key=value ...]   prints the resolved config as TOML;
 *                                                   --resolved: with every auto device and transport as the launcher
 *                                                   resolves it (`cpt run`; --slurm: cpt-sched, from slurm.*_gpus)
 * cpt config docs                                   prints the markdown reference of every declared key
 * cpt config hash [CONFIG] [overrides]              prints the config hash checkpoints record */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "core/config.h"
#include "core/redact.h"
#include "weights/devices.h"

static int usage(void) {
    fprintf(stderr,
            "usage: cpt config show [--resolved [--slurm]] [CONFIG] [section.key=value ...]\n"
            "       cpt config hash [CONFIG] [section.key=value ...]\n"
            "       cpt config docs   (the reference: build/cpt config docs > docs/config.md)\n");
    return 2;
}

static cpt_config *load_args(int argc, char **argv) {
    /* The first argument is the config file unless it is an override (has '='). */
    const char *path = NULL;
    int i = 0;
    if (argc > 0 && !strchr(argv[0], '=')) path = argv[i++];
    cpt_err err = {{0}};
    cpt_config *cfg = cpt_config_load(path, argc - i, argv + i, &err);
    if (!cfg) fprintf(stderr, "cpt config: %s\n", err.msg);
    return cfg;
}

/* The config again with every auto of train.device, rollout.device and weights.transport replaced by what the
 * launcher would write into RUN_DIR/config.toml (weights/devices.h); the devices line goes to stderr. */
static cpt_config *load_resolved(int argc, char **argv, int slurm) {
    cpt_config *cfg = load_args(argc, argv);
    if (!cfg) return NULL;
    cpt_devices d;
    cpt_devices_view v = {.slurm = slurm, .gpus = slurm ? 0 : cpt_gpus_visible()};
    cpt_err err = {{0}};
    if (cpt_devices_resolve(cfg, &v, &d, &err)) {
        fprintf(stderr, "cpt config: %s\n", err.msg);
        cpt_config_free(cfg);
        return NULL;
    }
    static const char *keys[3] = {"train.device", "rollout.device", "weights.transport"};
    const char *vals[3] = {d.train, d.rollout, d.transport};
    char extra[3][64];
    char **av = calloc((size_t)argc + 4, sizeof *av);
    if (!av) {
        cpt_config_free(cfg);
        return NULL;
    }
    int n = 0;
    for (int i = 0; i < argc; i++) av[n++] = argv[i];
    for (int k = 0; k < 3; k++)
        if (!strcmp(cpt_cfg_str(cfg, keys[k]), "auto")) {
            snprintf(extra[k], sizeof extra[k], "%s=%s", keys[k], vals[k]);
            av[n++] = extra[k];
        }
    char line[256];
    cpt_devices_describe(&d, line, sizeof line);
    fprintf(stderr, "devices: %s (%s)\n", line, slurm ? "cpt-sched, from slurm.*_gpus" : "cpt run, from the GPUs seen");
    cpt_config_free(cfg);
    cfg = load_args(n, av);
    free(av);
    return cfg;
}

/* The dump line by line with any URL secret hidden (core/redact.h): printed text never shows a password, whatever
 * key holds it. A line with several URLs may lose more than the secret, never less. */
static void print_redacted(const char *text) {
    while (*text) {
        size_t n = strcspn(text, "\n");
        char *line = strndup(text, n);
        size_t cap = n + 28;
        char *shown = malloc(cap);
        if (line && shown) {
            cpt_redact_url(line, shown, cap);
            fputs(shown, stdout);
        }
        free(line);
        free(shown);
        text += n;
        if (*text == '\n') {
            fputc('\n', stdout);
            text++;
        }
    }
}

int cmd_config(int argc, char **argv) {
    if (argc < 2) return usage();
    const char *sub = argv[1];
    if (!strcmp(sub, "docs")) {
        if (argc != 2) return usage();
        char *md = cpt_config_docs_markdown();
        if (!md) {
            fprintf(stderr, "cpt config docs: out of memory\n");
            return 1;
        }
        fputs(md, stdout);
        free(md);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    if (!strcmp(sub, "show") || !strcmp(sub, "hash")) {
        int resolved = 0, slurm = 0, n = 0;
        char **rest = calloc((size_t)argc, sizeof *rest);
        if (!rest) return 1;
        for (int i = 2; i < argc; i++) {
            if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
                free(rest);
                return usage();
            }
            if (!strcmp(argv[i], "--resolved")) resolved = 1;
            else if (!strcmp(argv[i], "--slurm")) slurm = 1;
            else rest[n++] = argv[i];
        }
        if (slurm && !resolved) {
            free(rest);
            fprintf(stderr, "cpt config: --slurm goes with --resolved\n");
            return usage();
        }
        cpt_config *cfg = resolved ? load_resolved(n, rest, slurm) : load_args(n, rest);
        free(rest);
        if (!cfg) return 1;
        if (!strcmp(sub, "hash")) {
            printf("%016llx\n", (unsigned long long)cpt_config_hash(cfg));
        } else {
            char *text = cpt_config_dump(cfg);
            if (!text) {
                fprintf(stderr, "cpt config show: out of memory\n");
                cpt_config_free(cfg);
                return 1;
            }
            print_redacted(text);
            free(text);
        }
        cpt_config_free(cfg);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help")) {
        usage();
        return 0;
    }
    fprintf(stderr, "cpt config: unknown subcommand '%s'\n", sub);
    return usage();
}
