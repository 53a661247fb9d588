/* cpt export CHECKPOINT OUT_DIR [--bf16] */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "trainer/export.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: cpt export CHECKPOINT OUT_DIR [--bf16]\n"
            "  CHECKPOINT  a checkpoint folder (RUN_DIR/checkpoints/step-N), or a run folder (its newest good one)\n"
            "  OUT_DIR     new Hugging Face folder: config.json, model.safetensors, tokenizer files\n"
            "  --bf16      store weights as BF16 (default F32)\n");
}

int cmd_export(int argc, char **argv) {
    const char *pos[2] = {NULL, NULL};
    int npos = 0, bf16 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bf16")) bf16 = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "cpt export: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (npos < 2) pos[npos++] = argv[i];
        else { fprintf(stderr, "cpt export: unexpected argument %s\n", argv[i]); usage(stderr); return 2; }
    }
    if (npos != 2) { usage(stderr); return 2; }
    cpt_err err;
    if (cpt_export_hf(pos[0], pos[1], bf16, &err)) {
        fprintf(stderr, "cpt export: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "cpt export: wrote %s\n", pos[1]);
    return 0;
}
