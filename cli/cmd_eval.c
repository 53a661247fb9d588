/* cpt eval --model HF_DIR|CHECKPOINT --data FILE.jsonl --reward NAME [options] [reward.key=value ...] [env.key=value ...]
 * env.type=calculator|countdown|plugin answers tool calls in-process (reward/eval.h) so accuracy counts tool use.
 * --device auto (the default) generates on the GPU engine when this process sees a GPU (weights/devices.h). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "core/chat_template.h"
#include "core/config.h"
#include "core/dataset.h"
#include "reward/eval.h"
#include "reward/reward_model.h"
#include "reward/teacher.h"
#include "weights/devices.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: cpt eval --model HF_DIR|CHECKPOINT --data FILE.jsonl --reward NAME [options] [reward.key=value ...]\n"
            "  Generates for each rl_prompt record and reports accuracy (share of samples with reward > 0.5), the\n"
            "  mean reward and pass@k (unbiased estimator over --samples K). docs/evaluation.md.\n"
            "  NAME: math | countdown | format | length | plugin | combined | model (reward.* keys as overrides,\n"
            "  e.g. reward.format_regex=..., reward.combine=[\"math:1\"], reward.model_path=DIR).\n"
            "  env.type=calculator|countdown|plugin (and env.* keys): a sample that stops on env.call_end gets the\n"
            "  tool's answer, run in-process, and goes on (docs/env.md); tool use is reported.\n"
            "options:\n"
            "  --samples K            samples per prompt (default 1)\n"
            "  --max-new-tokens N     generation limit (default 64)\n"
            "  --temperature T        0 = greedy (default 0)\n"
            "  --seed S               sampling seed (default 1234)\n"
            "  --max-records N        only the first N records\n"
            "  --tokenizer PATH       default: the model folder\n"
            "  --chat-template NAME   auto | chatml | qwen3 | llama3 | none (default auto)\n"
            "  --device auto|cpu|cuda the GPU engine (bf16, GPU 0) or the CPU; auto: cuda when a GPU is seen (default)\n"
            "  --json                 print one JSON object instead of text\n");
}

static int parse_num(const char *opt, const char *v, double lo, double hi, double *out) {
    char *end;
    double x = v ? strtod(v, &end) : 0;
    if (!v || end == v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "cpt eval: %s needs a number in [%g, %g], got \"%s\"\n", opt, lo, hi, v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

int cmd_eval(int argc, char **argv) {
    const char *model = NULL, *data = NULL, *rname = NULL, *tokp = NULL, *tname = "auto", *device = "auto";
    int json_out = 0;
    cpt_eval_opts o;
    cpt_eval_opts_default(&o);
    o.verbose = 1;
    char **ov = calloc((size_t)argc + 3, sizeof *ov);
    int n_ov = 0;
    if (!ov) return 1;
    char type_ov[96], tpl_ov[96];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        int ok = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(ov);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json_out = 1;
            continue;
        } else if (!strncmp(a, "--", 2) && !v) {
            fprintf(stderr, "cpt eval: %s needs a value\n", a);
            free(ov);
            return 2;
        } else if (!strcmp(a, "--model")) model = v, ok = 1;
        else if (!strcmp(a, "--data")) data = v, ok = 1;
        else if (!strcmp(a, "--reward")) rname = v, ok = 1;
        else if (!strcmp(a, "--tokenizer")) tokp = v, ok = 1;
        else if (!strcmp(a, "--chat-template")) tname = v, ok = 1;
        else if (!strcmp(a, "--device")) {
            if (!cpt_device_pick(v, 0)) {
                fprintf(stderr, "cpt eval: --device %s: expected auto, cpu or cuda\n", v);
                goto bad;
            }
            device = v, ok = 1;
        }
        else if (!strcmp(a, "--samples")) {
            if (parse_num(a, v, 1, 1024, &x)) goto bad;
            o.samples = (int)x, ok = 1;
        } else if (!strcmp(a, "--max-new-tokens")) {
            if (parse_num(a, v, 1, 1e6, &x)) goto bad;
            o.max_new_tokens = (int)x, ok = 1;
        } else if (!strcmp(a, "--temperature")) {
            if (parse_num(a, v, 0, 100, &x)) goto bad;
            o.temperature = (float)x, ok = 1;
        } else if (!strcmp(a, "--seed")) {
            if (parse_num(a, v, 0, 4294967295.0, &x)) goto bad;
            o.seed = (uint64_t)x, ok = 1;
        } else if (!strcmp(a, "--max-records")) {
            if (parse_num(a, v, 1, 1e12, &x)) goto bad;
            o.max_records = (size_t)x, ok = 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "cpt eval: unknown option %s\n", a);
            goto bad;
        } else {
            ov[n_ov++] = argv[i];
            continue;
        }
        if (ok) i++;
    }
    if (!model || !data || !rname) {
        fprintf(stderr, "cpt eval: --model, --data and --reward are required\n");
        usage(stderr);
        goto bad;
    }

    cpt_err err;
    int rc = 1;
    cpt_config *cfg = NULL;
    cpt_model *m = NULL;
    cpt_tokenizer *tok = NULL;
    cpt_dataset *ds = NULL;
    cpt_reward *reward = NULL;
    cpt_chat_template tpl;
    int have_tpl = 0;
    cpt_eval_results res;
    memset(&res, 0, sizeof res);
    cpt_eval_tools tools;
    memset(&tools, 0, sizeof tools);
    int is_model = !strcmp(rname, "model");
    if (!is_model) {
        snprintf(type_ov, sizeof type_ov, "reward.type=%s", rname);
        ov[n_ov++] = type_ov;
    }
    /* the tools' default observation template follows the chat template in use */
    snprintf(tpl_ov, sizeof tpl_ov, "data.chat_template=%s", tname);
    memmove(ov + 1, ov, (size_t)n_ov * sizeof *ov);
    ov[0] = tpl_ov;
    n_ov++;
    cfg = cpt_config_load(NULL, n_ov, ov, &err);
    if (!cfg) goto fail;
    if (is_model && !*cpt_cfg_str(cfg, "reward.model_path")) {
        cpt_errf(&err, "--reward model needs reward.model_path=DIR");
        goto fail;
    }
    char mdir[4200];
    if (cpt_model_dir_resolve(model, mdir, sizeof mdir, &err)) goto fail;
    if (!tokp) tokp = mdir;
    if (!(tok = cpt_tokenizer_load(tokp, &err))) {
        cpt_err_prefix(&err, "tokenizer %s", tokp);
        goto fail;
    }
    if (strcmp(tname, "none")) {
        if (cpt_chat_template_load(tokp, tname, &tpl, &err)) {
            cpt_err_prefix(&err, "--chat-template %s (use none for raw prompts)", tname);
            goto fail;
        }
        have_tpl = 1;
        o.tpl = &tpl;
    }
    if (!(m = cpt_frozen_model_load(model, &err))) goto fail;
    if (!strcmp(cpt_device_pick(device, cpt_gpus_visible()), "cuda") && cpt_model_use_cuda_infer(m, 0, &err)) {
        cpt_err_prefix(&err, "--device %s", device);
        goto fail;
    }
    cpt_dataset_opts dopt = {.format = CPT_DATA_RL_PROMPT};
    if (!(ds = cpt_dataset_load(data, &dopt, &err))) goto fail;
    if (is_model) {
        reward = cpt_reward_model_load_on(cpt_cfg_str(cfg, "reward.model_path"), cpt_cfg_str(cfg, "tokenizer.path"),
                                          cpt_cfg_str(cfg, "reward.model_device"),
                                          (int)cpt_cfg_int(cfg, "train.cuda_device"), &err);
    } else {
        reward = cpt_reward_with_model_from_config(cfg, &err);
    }
    if (!reward) goto fail;
    if (cpt_eval_tools_open(cfg, tokp, &tools, &err)) goto fail;
    o.tools = &tools;
    o.verbose = !json_out;
    if (cpt_eval_run(m, tok, ds, reward, &o, &res, &err)) goto fail;
    if (json_out) {
        json_t *jo = json_pack("{s:s, s:s, s:s, s:I, s:i, s:f, s:f, s:f, s:f}", "model", model, "data", data, "reward",
                              rname, "prompts", (json_int_t)res.n_prompts, "samples", res.samples, "temperature",
                              (double)o.temperature, "accuracy", res.accuracy, "mean_reward", res.mean_reward,
                              "mean_tokens", res.mean_tokens);
        if (!jo) {
            cpt_errf(&err, "out of memory");
            goto fail;
        }
        for (int i = 0; i < res.n_k; i++) {
            char key[32];
            snprintf(key, sizeof key, "pass@%d", res.k[i]);
            json_object_set_new(jo, key, json_real(res.pass_at_k[i]));
        }
        if (res.with_tools) {
            json_object_set_new(jo, "env", json_string(cpt_env_name(tools.env)));
            json_object_set_new(jo, "tool_use", json_real(res.tool_use));
            json_object_set_new(jo, "tool_calls", json_real(res.tool_calls));
        }
        json_object_set_new(jo, "seconds", json_real(res.seconds));
        char *txt = json_dumps(jo, JSON_COMPACT);
        json_decref(jo);
        if (!txt) {
            cpt_errf(&err, "out of memory");
            goto fail;
        }
        printf("%s\n", txt);
        free(txt);
    } else {
        printf("eval: %zu prompts x %d samples (temperature %g), reward %s\n", res.n_prompts, res.samples,
               (double)o.temperature, rname);
        printf("accuracy     %.4f   (samples with reward > %.2f)\n", res.accuracy, o.correct_above);
        printf("mean reward  %.4f\n", res.mean_reward);
        printf("mean tokens  %.1f\n", res.mean_tokens);
        if (res.with_tools) {
            printf("tool use     %.4f   (samples that called %s)\n", res.tool_use, cpt_env_name(tools.env));
            printf("tool calls   %.3f   (per sample)\n", res.tool_calls);
        }
        for (int i = 0; i < res.n_k; i++) printf("pass@%-7d %.4f\n", res.k[i], res.pass_at_k[i]);
        printf("time         %.1f s\n", res.seconds);
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "cpt eval: %s\n", err.msg);
    cpt_eval_results_free(&res);
    cpt_eval_tools_close(&tools);
    cpt_reward_free(reward);
    cpt_dataset_free(ds);
    cpt_model_free(m);
    if (have_tpl) cpt_chat_template_free(&tpl);
    cpt_tokenizer_free(tok);
    cpt_config_free(cfg);
    free(ov);
    return rc;
bad:
    free(ov);
    return 2;
}
