/* cpt config show [CONFIG] [section.key=value ...]   prints the resolved config as TOML
 * cpt config docs                                   prints the markdown reference of every declared key
 * cpt config hash [CONFIG] [overrides]              prints the config hash checkpoints record */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "core/config.h"
#include "core/redact.h"

static int usage(void) {
    fprintf(stderr,
            "usage: cpt config show [CONFIG] [section.key=value ...]\n"
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
        for (int i = 2; i < argc; i++)
            if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage();
        cpt_config *cfg = load_args(argc - 2, argv + 2);
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
