/* cpt export CHECKPOINT OUT_DIR [--bf16] [--max-shard-size SIZE] */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "core/fs.h"
#include "core/safetensors.h"
#include "trainer/checkpoint.h"
#include "trainer/export.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: cpt export CHECKPOINT OUT_DIR [--bf16] [--max-shard-size SIZE]\n"
            "  CHECKPOINT  a checkpoint folder (RUN_DIR/checkpoints/step-N), or a run folder (its newest good one)\n"
            "  OUT_DIR     new Hugging Face folder: config.json, model.safetensors, tokenizer files\n"
            "  --bf16      store weights as BF16 (default F32)\n"
            "  --max-shard-size SIZE  largest weights file, e.g. 500MB, 5GB, 2GiB or bytes; past it the weights are\n"
            "              model-0000K-of-0000N.safetensors + model.safetensors.index.json (default: the run's\n"
            "              export.max_shard_size, else " CPT_EXPORT_MAX_SHARD_DEFAULT ")\n");
}

/* The run's export.max_shard_size from the checkpoint's config.toml; the default when it has none or cannot be
 * read (a config of another cpt version: the export still works). */
static const char *run_shard_size(const char *checkpoint, cpt_config **cfg_out) {
    char ckpt[CPT_CKPT_PATH_MAX], path[CPT_CKPT_PATH_MAX + 32];
    cpt_err err;
    *cfg_out = NULL;
    if (cpt_ckpt_resolve(checkpoint, ckpt, sizeof ckpt, &err)) return CPT_EXPORT_MAX_SHARD_DEFAULT;
    snprintf(path, sizeof path, "%s/config.toml", ckpt);
    if (!cpt_path_exists(path)) return CPT_EXPORT_MAX_SHARD_DEFAULT;
    *cfg_out = cpt_config_load_file(&cpt_config_table, path, 0, NULL, &err);
    if (!*cfg_out) return CPT_EXPORT_MAX_SHARD_DEFAULT;
    return cpt_cfg_str(*cfg_out, "export.max_shard_size");
}

int cmd_export(int argc, char **argv) {
    const char *pos[2] = {NULL, NULL}, *shard = NULL;
    int npos = 0, bf16 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bf16")) bf16 = 1;
        else if (!strcmp(argv[i], "--max-shard-size") && i + 1 < argc) shard = argv[++i];
        else if (!strncmp(argv[i], "--max-shard-size=", 17)) shard = argv[i] + 17;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "cpt export: unknown option %s (or a missing value)\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (npos < 2) pos[npos++] = argv[i];
        else { fprintf(stderr, "cpt export: unexpected argument %s\n", argv[i]); usage(stderr); return 2; }
    }
    if (npos != 2) { usage(stderr); return 2; }
    cpt_err err;
    cpt_config *cfg = NULL;
    const char *size_text = shard ? shard : run_shard_size(pos[0], &cfg);
    uint64_t max_shard = 0;
    if (cpt_parse_byte_size(size_text, &max_shard, &err)) {
        fprintf(stderr, "cpt export: %s %s\n", shard ? "--max-shard-size:" : "export.max_shard_size:", err.msg);
        cpt_config_free(cfg);
        return 2;
    }
    cpt_config_free(cfg);
    if (cpt_export_hf(pos[0], pos[1], bf16, max_shard, &err)) {
        fprintf(stderr, "cpt export: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "cpt export: wrote %s\n", pos[1]);
    return 0;
}
