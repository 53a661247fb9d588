#include "scheduler/preflight.h"
#include "weights/weights_tx.h"

#include <dirent.h>
#include <stdarg.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/chat_template.h"
#include "core/dataset.h"
#include "core/fs.h"
#include "core/redact.h"
#include "core/safetensors.h"
#include "core/tokenizer.h"
#include "kernels/mpi/coll_mpi.h"
#include "model/model.h"
#include "queue/redis.h"
#include "queue/tls.h"
#include "reward/env.h"
#include "reward/plugin.h"
#include "reward/reward.h"
#include "scheduler/roles.h"
#include "scheduler/satellite.h"
#include "trainer/online_defaults.h"
#include "trainer/rl_data.h"
#include "trainer/train_memory.h"
#include "weights/devices.h"

static void line(cpt_preflight *p, const char *tag, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void line(cpt_preflight *p, const char *tag, const char *what, const char *fmt, ...) {
    if (!strcmp(tag, "FAIL")) p->problems++;
    if (!strcmp(tag, "warn")) p->warnings++;
    if (!p->out) return;
    fprintf(p->out, "  %-4s  %-10s ", tag, what);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->out, fmt, ap);
    va_end(ap);
    fputc('\n', p->out);
}

static int is_online(const char *algo) {
    return !strcmp(algo, "grpo") || !strcmp(algo, "ppo") || !strcmp(algo, "opd");
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* An HF folder, or a checkpoint step folder (its model/ holds the HF layout). */
static void model_folder(const char *path, char *out, size_t cap) {
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/model/config.json", path);
    if (cpt_path_exists(sub)) snprintf(out, cap, "%s/model", path);
    else snprintf(out, cap, "%s", path);
}

/* The GPU kernels the run would use take the model's shape: the trainer's models (the policy, PPO's critic) with
 * train.device = cuda, the policy in the GPU generation engine with rollout.device = cuda. A shape they do not take
 * would otherwise fail only when a role places the model. */
static void check_gpu_shape(cpt_preflight *p, const char *what, const cpt_model_config *mc) {
    const cpt_config *c = p->cfg;
    int policy = !strcmp(what, "model");
    if (!policy && strcmp(what, "critic")) return;
    cpt_err err;
    cpt_err_clear(&err);
    if (!p->dev_ok) return; /* the devices line says why */
    if (!strcmp(p->dev.train, "cuda") && cpt_model_cuda_shape_check(mc, 0, &err))
        line(p, "FAIL", what, "train.device = cuda: %s", err.msg);
    else if (policy && is_online(cpt_cfg_str(c, "algo.type")) && !strcmp(p->dev.rollout, "cuda") &&
             cpt_model_cuda_shape_check(mc, 1, &err))
        line(p, "FAIL", what, "rollout.device = cuda: %s", err.msg);
}

/* GPUs the job or this machine offers: the allocation's under Slurm, else what this process sees; a CUDA_VISIBLE_DEVICES
 * list counts too (a build without CUDA sees none, yet the GPUs are there). */
static long gpus_offered(const cpt_preflight *p) {
    long n = 0;
    if (p->slurm) {
        cpt_resources have;
        cpt_preflight_slurm_alloc(&have);
        n = have.gpus > 0 ? have.gpus : 0;
    } else {
        n = cpt_gpus_visible();
    }
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (!n && cvd && *cvd && strcmp(cvd, "-1") && strcasecmp(cvd, "none") && strcasecmp(cvd, "NoDevFiles")) {
        n = 1;
        for (const char *s = cvd; *s; s++) n += *s == ',';
    }
    return n;
}

/* Where each role runs with every auto resolved, as the launcher will write it into RUN_DIR/config.toml. A role on
 * cuda whose step gets no GPU is a problem under Slurm (cpt-sched gives a step only the GPUs slurm.*_gpus ask); a
 * GPU held but used by no role is a warning. */
static void check_devices(cpt_preflight *p) {
    const cpt_config *c = p->cfg;
    int online = is_online(cpt_cfg_str(c, "algo.type"));
    cpt_devices_view v = {.slurm = p->slurm, .gpus = p->slurm ? 0 : cpt_gpus_visible()};
    cpt_err err;
    cpt_err_clear(&err);
    p->dev_ok = cpt_devices_resolve(c, &v, &p->dev, &err) == 0;
    if (!p->dev_ok) {
        line(p, "FAIL", "devices", "%s", err.msg);
        return;
    }
    char d[256];
    if (online) cpt_devices_describe(&p->dev, d, sizeof d);
    else snprintf(d, sizeof d, "trainer %s", p->dev.train);
    line(p, "ok", "devices", "%s (%s)", d, p->slurm ? "from slurm.*_gpus" : "from the GPUs this process sees");
    long tg = (long)cpt_cfg_int(c, "slurm.trainer_gpus"), rg = online ? (long)cpt_cfg_int(c, "slurm.rollout_gpus") : 0;
    int t_gpu = !strcmp(p->dev.train, "cuda"), r_gpu = online && !strcmp(p->dev.rollout, "cuda");
    int teacher_gpu = online && p->dev.teacher_gpu, rm_gpu = online && p->dev.reward_model_gpu;
    const char *rkey = teacher_gpu ? "teacher.device" : "reward.model_device";
    if (p->slurm) {
        const char *frozen[2] = {"teacher.device", "reward.model_device"};
        const int on_gpu[2] = {teacher_gpu, rm_gpu};
        for (int i = 0; i < 2; i++)
            if (on_gpu[i])
                line(p, "FAIL", "devices", "%s = cuda, but a Slurm job's reward steps get no GPU: set %s=auto (the "
                     "CPU there)", frozen[i], frozen[i]);
        if (t_gpu && tg == 0)
            line(p, "FAIL", "devices", "train.device = cuda, but slurm.trainer_gpus = 0: the trainer's step gets no GPU; "
                 "set slurm.trainer_gpus=1 or train.device=auto");
        if (r_gpu && rg == 0 && !t_gpu)
            line(p, "FAIL", "devices", "rollout.device = cuda, but slurm.rollout_gpus = 0 and the trainer is on the CPU: "
                 "the rollout steps get no GPU; set slurm.rollout_gpus=1 or rollout.device=auto");
        if (tg > 0 && !t_gpu)
            line(p, "warn", "devices", "slurm.trainer_gpus = %ld, but train.device = cpu: the trainer's GPUs stay unused",
                 tg);
        if (rg > 0 && !r_gpu)
            line(p, "warn", "devices", "slurm.rollout_gpus = %ld, but rollout.device = cpu: each rollout step's GPUs stay "
                 "unused", rg);
    } else if (cpt_gpus_visible() == 0 && (t_gpu || r_gpu || teacher_gpu || rm_gpu)) {
        line(p, "warn", "devices", "%s = cuda, but this process sees no GPU%s: the role fails at start unless it "
             "sees one", t_gpu ? "train.device" : r_gpu ? "rollout.device" : rkey,
#ifdef CPT_HAVE_CUDA
             ""
#else
             " (this cpt is built without CUDA)"
#endif
        );
    }
    long offered = gpus_offered(p);
    if (offered > 0 && !t_gpu && !r_gpu && !teacher_gpu && !rm_gpu)
        line(p, "warn", "devices", "%s %ld GPU%s, but every role runs on the CPU%s", p->slurm ? "the allocation holds" :
             "this machine shows", offered, offered == 1 ? "" : "s",
#ifdef CPT_HAVE_CUDA
             " (train.device, rollout.device, slurm.*_gpus)"
#else
             " (this cpt is built without CUDA)"
#endif
        );
}

/* config.json parses and the weights open (headers only: the tensors are mapped, not read). */
static void check_model_dir(cpt_preflight *p, const char *what, const char *path) {
    if (!path[0]) {
        line(p, "FAIL", what, "no path given");
        return;
    }
    if (!is_dir(path)) {
        line(p, "FAIL", what, "%s: not a folder (expected a Hugging Face model folder or a checkpoint)", path);
        return;
    }
    char dir[4200];
    model_folder(path, dir, sizeof dir);
    cpt_model_config mc;
    cpt_err err;
    cpt_err_clear(&err);
    if (cpt_model_config_load(dir, &mc, &err) != 0) {
        line(p, "FAIL", what, "%s", err.msg);
        return;
    }
    cpt_st_file *st = cpt_st_open(dir, &err);
    if (!st) {
        line(p, "FAIL", what, "%s: weights: %s", dir, err.msg);
        return;
    }
    if (!strcmp(what, "model")) p->model_vocab = mc.vocab_size;
    line(p, "ok", what, "%s: %d layers, hidden %d, vocab %d, %zu tensors", dir, mc.num_layers, mc.hidden_size,
         mc.vocab_size, cpt_st_count(st));
    cpt_st_close(st);
    check_gpu_shape(p, what, &mc);
}

static void check_model(cpt_preflight *p) {
    const cpt_config *c = p->cfg;
    if (!strcmp(cpt_cfg_str(c, "model.init"), "random")) {
        p->model_vocab = (long)cpt_cfg_int(c, "model.vocab_size");
        line(p, "ok", "model", "random %s: %lld layers, hidden %lld", cpt_cfg_str(c, "model.arch"),
             (long long)cpt_cfg_int(c, "model.num_layers"), (long long)cpt_cfg_int(c, "model.hidden_size"));
        cpt_model_config mc = {0}; /* the shape trainer/sft.c builds a random model with */
        mc.hidden_size = (int)cpt_cfg_int(c, "model.hidden_size");
        mc.num_heads = (int)cpt_cfg_int(c, "model.num_heads");
        mc.num_kv_heads = (int)cpt_cfg_int(c, "model.num_kv_heads");
        if (!mc.num_kv_heads) mc.num_kv_heads = mc.num_heads;
        if (mc.num_heads > 0 && mc.hidden_size % mc.num_heads == 0) {
            mc.head_dim = mc.hidden_size / mc.num_heads;
            check_gpu_shape(p, "model", &mc);
        }
        return;
    }
    check_model_dir(p, "model", cpt_cfg_str(c, "model.path"));
}

/* The policy's shape as the trainer will build it: config.json of model.path, or the model.* keys (a random model's
 * vocabulary from model.vocab_size; 0 when the tokenizer gives it). -1 when it cannot be read (the model line says
 * why). */
static int policy_shape(cpt_preflight *p, cpt_model_config *mc) {
    const cpt_config *c = p->cfg;
    memset(mc, 0, sizeof *mc);
    if (strcmp(cpt_cfg_str(c, "model.init"), "random")) {
        char dir[4200];
        cpt_err err;
        model_folder(cpt_cfg_str(c, "model.path"), dir, sizeof dir);
        return is_dir(dir) && cpt_model_config_load(dir, mc, &err) == 0 ? 0 : -1;
    }
    const char *arch = cpt_cfg_str(c, "model.arch");
    mc->vocab_size = (int)(p->model_vocab > 0 ? p->model_vocab : cpt_cfg_int(c, "model.vocab_size"));
    mc->hidden_size = (int)cpt_cfg_int(c, "model.hidden_size");
    mc->intermediate_size = (int)cpt_cfg_int(c, "model.intermediate_size");
    mc->num_layers = (int)cpt_cfg_int(c, "model.num_layers");
    mc->num_heads = (int)cpt_cfg_int(c, "model.num_heads");
    mc->num_kv_heads = (int)cpt_cfg_int(c, "model.num_kv_heads");
    if (!mc->num_kv_heads) mc->num_kv_heads = mc->num_heads;
    if (mc->num_heads <= 0) return -1;
    mc->head_dim = mc->hidden_size / mc->num_heads;
    mc->tie_word_embeddings = cpt_cfg_bool(c, "model.tie_word_embeddings");
    mc->qkv_bias = strcmp(arch, "qwen3") && strcmp(arch, "llama");
    mc->qk_norm = !strcmp(arch, "qwen3");
    return 0;
}

/* Memory of CUDA device `dev` from nvidia-smi, 0 when unknown. No CUDA context is made here: the launcher that runs
 * preflight lives as long as the run and would hold it. The index is nvidia-smi's (CUDA_VISIBLE_DEVICES aside). */
static uint64_t gpu_memory(long dev) {
    char cmd[160], buf[64];
    snprintf(cmd, sizeof cmd, "nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i %ld 2>/dev/null",
             dev);
    FILE *f = popen(cmd, "r");
    if (!f) return 0;
    unsigned long long mib = 0;
    if (!fgets(buf, sizeof buf, f) || sscanf(buf, "%llu", &mib) != 1) mib = 0;
    pclose(f);
    return (uint64_t)mib << 20;
}

/* The trainer's model state (weights, gradients, AdamW) against the GPU's and the host's memory. */
static void check_train_memory(cpt_preflight *p) {
    const cpt_config *c = p->cfg;
    int offload = cpt_cfg_bool(c, "train.optimizer_offload");
    if (!p->dev_ok) return;
    if (strcmp(p->dev.train, "cuda")) {
        if (offload)
            line(p, "FAIL", "memory", "train.optimizer_offload = true needs train.device = cuda (it moves the GPU's "
                 "optimizer state to host memory; a CPU trainer's state is in host memory already): set it false");
        return;
    }
    if (offload && cpt_cfg_int(c, "train.zero")) {
        line(p, "FAIL", "memory", "train.optimizer_offload = true with train.zero = 1 is not supported: use one of them");
        return;
    }
    cpt_model_config mc;
    if (policy_shape(p, &mc)) return;
    int world = cpt_cfg_int(c, "train.zero") ? (int)cpt_cfg_int(c, "slurm.trainer_tasks") : 1;
    cpt_train_memory m;
    cpt_train_memory_estimate(cpt_model_config_numel(&mc, 0), offload, world, &m);
    long ps = sysconf(_SC_PAGESIZE), np = sysconf(_SC_PHYS_PAGES);
    uint64_t host = p->slurm || ps <= 0 || np <= 0 ? 0 : (uint64_t)ps * (uint64_t)np; /* under Slurm: another node */
    uint64_t gpu = p->slurm ? 0 : gpu_memory((long)cpt_cfg_int(c, "train.cuda_device"));
    char msg[512];
    cpt_mem_verdict v = cpt_train_memory_check(&m, gpu, host, msg, sizeof msg);
    const double G = 1 << 30;
    char staging[64] = "";
    if (offload) snprintf(staging, sizeof staging, ", staging buffers %.2f GiB (GPU)", m.staging / G);
    line(p, v == CPT_MEM_NO_FIT ? "FAIL" : v == CPT_MEM_TIGHT ? "warn" : "ok", "memory",
         "policy %.2fB params: GPU bf16 weights %.1f GiB, fp32 grads %.1f GiB, fp32 master %.1f GiB %s, AdamW moments "
         "%.1f GiB %s%s; %s", m.params / 1e9, m.weights_bf16 / G, m.grads / G, 4.0 * m.params / G,
         offload ? "(host, pinned)" : "(GPU)", 8.0 * m.params / G / (offload ? 1 : world),
         offload ? "(host, pinned)" : world > 1 ? "(GPU, this rank's shard)" : "(GPU)",
         staging, msg);
}

static void check_tokenizer(cpt_preflight *p) {
    const char *path = cpt_cfg_str(p->cfg, "tokenizer.path");
    char dir[4200];
    if (!path[0]) {
        path = cpt_cfg_str(p->cfg, "model.path");
        if (!path[0]) {
            line(p, "FAIL", "tokenizer", "neither tokenizer.path nor model.path is set");
            return;
        }
        model_folder(path, dir, sizeof dir);
        path = dir;
    }
    cpt_err err;
    cpt_err_clear(&err);
    cpt_tokenizer *tok = cpt_tokenizer_load(path, &err);
    if (!tok) {
        line(p, "FAIL", "tokenizer", "%s", err.msg);
        return;
    }
    long vocab = cpt_tokenizer_vocab_size(tok);
    if (p->model_vocab > 0 && vocab > p->model_vocab)
        line(p, "FAIL", "tokenizer", "%s has %ld token ids, the model's vocabulary only %ld: the model and the "
             "tokenizer do not belong together", path, vocab, p->model_vocab);
    else
        line(p, "ok", "tokenizer", "%s: %ld token ids", path, vocab);
    cpt_tokenizer_free(tok);
}

/* The formats each method reads. */
static int format_fits(const char *algo, cpt_data_format f) {
    if (!strcmp(algo, "sft")) return f == CPT_DATA_PROMPT_COMPLETION || f == CPT_DATA_MESSAGES || f == CPT_DATA_RL_PROMPT;
    if (!strcmp(algo, "dpo")) return f == CPT_DATA_PREFERENCE;
    return f == CPT_DATA_RL_PROMPT;
}

static const char *format_wanted(const char *algo) {
    if (!strcmp(algo, "sft")) return "prompt_completion, messages or rl_prompt (prompt -> answer)";
    if (!strcmp(algo, "dpo")) return "preference";
    return "rl_prompt";
}

/* The model's max_position_embeddings; 0: unknown (the model check says why). */
static long model_context(const cpt_config *c) {
    if (!strcmp(cpt_cfg_str(c, "model.init"), "random")) return (long)cpt_cfg_int(c, "model.max_position_embeddings");
    char dir[4200];
    model_folder(cpt_cfg_str(c, "model.path"), dir, sizeof dir);
    cpt_model_config mc;
    cpt_err err;
    return cpt_model_config_load(dir, &mc, &err) ? 0 : (long)mc.max_position_embeddings;
}

/* Online data: every prompt tokenized as the trainer issues it (tokenizer, data.chat_template) and compared with
 * what the roles accept: the rollout refuses one longer than its context, the trainer one that leaves no room
 * in train.max_seq_len. Such a group is skipped after its retries (queue.group_retries), so this is a warning. */
static void check_prompt_lengths(cpt_preflight *p, const char *key, const char *path, const cpt_dataset *ds,
                                 int validation) {
    const cpt_config *c = p->cfg;
    /* as the rollout engine and the trainer take them */
    long model_ctx = model_context(c);
    long ctx = cpt_cfg_int(c, "rollout.max_len") > 0 ? (long)cpt_cfg_int(c, "rollout.max_len") : model_ctx;
    long train_max = (long)cpt_cfg_int(c, "train.max_seq_len");
    if (model_ctx <= 0 || ctx <= 0) return; /* the model check already says why */
    if (train_max > model_ctx) train_max = model_ctx;
    const char *tp = cpt_cfg_str(c, "tokenizer.path");
    if (!*tp) tp = cpt_cfg_str(c, "model.path");
    cpt_err err;
    cpt_err_clear(&err);
    cpt_tokenizer *tok = cpt_tokenizer_load(tp, &err);
    if (!tok) return; /* the tokenizer check reports it */
    cpt_chat_template tpl;
    int have_tpl = strcmp(cpt_cfg_str(c, "data.chat_template"), "none") != 0;
    if (have_tpl && cpt_chat_template_load(tp, cpt_cfg_str(c, "data.chat_template"), &tpl, &err)) {
        line(p, "FAIL", "data", "%s: data.chat_template: %s", key, err.msg);
        cpt_tokenizer_free(tok);
        return;
    }
    size_t n = cpt_dataset_count(ds), over_ctx = 0, over_train = 0, longest = 0;
    int first_ctx = 0, first_train = 0, failed_line = 0;
    size_t first_ctx_len = 0, first_train_len = 0;
    for (size_t i = 0; i < n; i++) {
        const cpt_record *r = cpt_dataset_get(ds, i);
        int32_t *ids = NULL;
        size_t k = 0;
        if (cpt_rl_prompt_ids(have_tpl ? &tpl : NULL, tok, r, &ids, &k, &err)) {
            failed_line = r->line;
            break;
        }
        free(ids);
        if (k > longest) longest = k;
        if ((long)k > ctx) {
            if (!over_ctx++) first_ctx = r->line, first_ctx_len = k;
        } else if (!validation && (long)k >= train_max) {
            if (!over_train++) first_train = r->line, first_train_len = k;
        }
    }
    if (failed_line)
        line(p, "FAIL", "data", "%s: %s:%d: %s", key, path, failed_line, err.msg);
    /* validation generates from every prompt and has no group to skip: its run would fail at the first */
    if (over_ctx && validation)
        line(p, "FAIL", "data", "%s: %s:%d: a prompt of %zu tokens is longer than the context of %ld tokens (%zu such "
             "prompt%s): validation would fail", key, path, first_ctx, first_ctx_len, ctx, over_ctx,
             over_ctx == 1 ? "" : "s");
    else if (over_ctx)
        line(p, "warn", "data", "%s: %s: %zu prompt%s longer than the rollout's context of %ld tokens (first: line %d, "
             "%zu tokens): the rollout refuses such a prompt and the run skips its group", key, path, over_ctx,
             over_ctx == 1 ? "" : "s", ctx, first_ctx, first_ctx_len);
    if (over_train)
        line(p, "warn", "data", "%s: %s: %zu prompt%s of train.max_seq_len = %ld tokens or more (first: line %d, "
             "%zu tokens): the trainer refuses such a group and the run skips it", key, path, over_train,
             over_train == 1 ? "" : "s", train_max, first_train, first_train_len);
    if (!failed_line && !over_ctx && !over_train)
        line(p, "ok", "data", "%s: every prompt fits (longest %zu tokens; context %ld, train.max_seq_len %ld)", key,
             longest, ctx, train_max);
    if (have_tpl) cpt_chat_template_free(&tpl);
    cpt_tokenizer_free(tok);
}

static void check_data_file(cpt_preflight *p, const char *key, int required) {
    const char *path = cpt_cfg_str(p->cfg, key);
    const char *algo = cpt_cfg_str(p->cfg, "algo.type");
    if (!path[0]) {
        if (required) line(p, "FAIL", "data", "%s is not set", key);
        return;
    }
    cpt_err err;
    cpt_err_clear(&err);
    cpt_dataset *ds = cpt_dataset_load_config(path, p->cfg, &err);
    if (!ds) {
        line(p, "FAIL", "data", "%s: %s", key, err.msg);
        return;
    }
    cpt_data_format f = cpt_dataset_format(ds);
    if (f == CPT_DATA_MESSAGES && !strcmp(cpt_cfg_str(p->cfg, "data.chat_template"), "none"))
        line(p, "FAIL", "data", "%s: %s holds messages records, which need a chat template (data.chat_template is "
             "\"none\")", key, path);
    else if (!format_fits(algo, f))
        line(p, "FAIL", "data", "%s: %s holds %s records; algo.type = %s reads %s", key, path,
             cpt_data_format_name(f), algo, format_wanted(algo));
    else if (cpt_dataset_bad_lines(ds))
        line(p, "warn", "data", "%s: %s: %zu records, %zu bad lines skipped (first: %s)", key, path,
             cpt_dataset_count(ds), cpt_dataset_bad_lines(ds), cpt_dataset_first_bad(ds));
    else
        line(p, "ok", "data", "%s: %s: %zu %s records", key, path, cpt_dataset_count(ds), cpt_data_format_name(f));
    if ((!strcmp(key, "data.train") || !strcmp(key, "validation.data")) && is_online(algo) && f == CPT_DATA_RL_PROMPT)
        check_prompt_lengths(p, key, path, ds, !strcmp(key, "validation.data"));
    cpt_dataset_free(ds);
}

/* A plugin is checked as a file (ELF, its four symbols) and never loaded here: loading runs its constructors. */
static void check_reward(cpt_preflight *p) {
    cpt_err err;
    cpt_err_clear(&err);
    cpt_reward *r = cpt_reward_check_config(p->cfg, &err);
    if (!r) {
        line(p, "FAIL", "reward", "reward.type = %s: %s", cpt_cfg_str(p->cfg, "reward.type"), err.msg);
        return;
    }
    line(p, "ok", "reward", "%s", cpt_reward_name(r));
    cpt_reward_free(r);
    int plugin = !strcmp(cpt_cfg_str(p->cfg, "reward.type"), "plugin");
    for (size_t i = 0; !plugin && i < cpt_cfg_array_len(p->cfg, "reward.combine"); i++)
        plugin = !strcmp(cpt_cfg_str(p->cfg, "reward.type"), "combined") &&
                 !strncmp(cpt_cfg_array_str(p->cfg, "reward.combine", i), "plugin", 6);
    if (plugin) {
        char file[4200];
        if (cpt_plugin_resolve(cpt_cfg_str(p->cfg, "reward.plugin_path"), file, sizeof file, &err) == 0)
            line(p, "ok", "plugin", "%s: an ELF shared object exporting the plugin ABI; not loaded here (its init "
                 "runs first in the reward workers)", file);
    }
}

/* The tools of multi-turn rollouts: the environment opens (a plugin is loaded and inited once in its sandboxed
 * child, never in this process) and env workers are there to run it. */
static void check_env(cpt_preflight *p) {
    const char *type = cpt_cfg_str(p->cfg, "env.type");
    int workers = cpt_role_configured(p->cfg, CPT_ROLE_ENV);
    if (!strcmp(type, "none")) {
        if (workers > 0)
            line(p, "FAIL", "env", "roles.env = %d but env.type = none: the env workers would have no tool to run "
                 "(set env.type, or roles.env = 0)", workers);
        return;
    }
    if (workers < 1)
        line(p, "FAIL", "env", "env.type = %s needs at least one env worker (roles.env = 0): every tool call would "
             "wait env.reply_timeout_ms for nothing", type);
    cpt_err err;
    cpt_err_clear(&err);
    cpt_env *e = cpt_env_open(p->cfg, &err);
    if (!e) {
        line(p, "FAIL", "env", "env.type = %s: %s", type, err.msg);
        return;
    }
    int plugin = !strcmp(type, "plugin");
    line(p, "ok", "env", "%s%s%s, in a sandbox (seccomp strict%s, env.timeout_ms = %lld, env.memory_mb = %lld)",
         cpt_env_name(e), plugin ? " " : "", plugin ? cpt_cfg_str(p->cfg, "env.plugin") : "",
         plugin ? " unless the plugin asks for limits only" : "",
         (long long)cpt_cfg_int(p->cfg, "env.timeout_ms"), (long long)cpt_cfg_int(p->cfg, "env.memory_mb"));
    cpt_env_close(e);
}

static void check_program(cpt_preflight *p, const char *role, const char *program) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", p->bin_dir ? p->bin_dir : ".", program);
    if (access(path, X_OK) != 0) line(p, "FAIL", "roles", "%s: program %s is missing (build it)", role, path);
}

/* The redis-server the launcher will start: $CPT_REDIS_SERVER or /usr/bin/redis-server (queue/redis_server.h). */
static int find_redis_server(char *out, size_t cap) {
    const char *env = getenv("CPT_REDIS_SERVER");
    snprintf(out, cap, "%s", env && *env ? env : "/usr/bin/redis-server");
    return access(out, X_OK) == 0;
}

static void check_readable(cpt_preflight *p, const char *key) {
    const char *path = cpt_cfg_str(p->cfg, key);
    struct stat st;
    if (path[0] && (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || access(path, R_OK) != 0))
        line(p, "FAIL", "queue", "%s = %s: not a readable file", key, path);
}

/* TLS files, and satellites that would reach the queue over TCP in clear (docs/queue.md "TLS"). */
static void check_queue_tls(cpt_preflight *p) {
    const cpt_config *c = p->cfg;
    const char *url = cpt_cfg_str(c, "queue.url"), *cert = cpt_cfg_str(c, "queue.tls_cert");
    check_readable(p, "queue.tls_cert");
    check_readable(p, "queue.tls_key");
    check_readable(p, "queue.tls_ca");
    struct stat st;
    const char *key = cpt_cfg_str(c, "queue.tls_key");
    if (key[0] && stat(key, &st) == 0 && (st.st_mode & 077))
        line(p, "warn", "queue", "queue.tls_key %s has mode %04o: others may read the private key (chmod 600 %s)", key,
             (unsigned)(st.st_mode & 07777), key);
    if (!cert[0] != !key[0])
        line(p, "FAIL", "queue", "queue.tls_cert and queue.tls_key go together: set both or neither");
    int tls_wanted = !strncmp(url, "rediss://", 9) || cert[0];
    if (tls_wanted && !cpt_tls_available())
        line(p, "FAIL", "queue", "TLS is asked for (rediss:// or queue.tls_cert) but this cpt was built without OpenSSL "
             "(install libssl-dev and rebuild)");
    int satellites = p->slurm && !url[0] && is_online(cpt_cfg_str(c, "algo.type")) &&
                     cpt_cfg_int(c, "slurm.max_satellites") > 0;
    if (satellites && !cert[0])
        line(p, "warn", "queue", "satellite jobs would reach the queue on 0.0.0.0:slurm.satellite_port without TLS "
             "(the password and all queue traffic in clear); set queue.tls_cert, queue.tls_key and queue.tls_ca");
    else if (satellites)
        line(p, "ok", "queue", "satellites connect with TLS (rediss://, certificate %s)", cert);
    /* Slurm signals a satellite slurm.satellite_warn_s before its limit: at or above the limit, at once, and every
     * satellite would hand back as soon as it starts, over and over. */
    const char *limit = cpt_cfg_str(c, "slurm.satellite_time");
    long limit_s = limit[0] ? cpt_slurm_time_seconds(limit) : -1;
    long warn_s = (long)cpt_cfg_int(c, "slurm.satellite_warn_s");
    if (satellites && limit[0] && limit_s < 0)
        line(p, "FAIL", "slurm", "slurm.satellite_time = \"%s\" is not a Slurm time (M, M:S, H:M:S, D-H, D-H:M, "
             "D-H:M:S)", limit);
    else if (satellites && limit_s >= 0 && warn_s >= limit_s)
        line(p, "FAIL", "slurm", "slurm.satellite_warn_s = %ld is not below slurm.satellite_time = %s (%ld s): every "
             "satellite would hand back its work as soon as it starts; lower slurm.satellite_warn_s or lengthen the time",
             warn_s, limit, limit_s);
}

/* queue.url is printed redacted; a password in it is refused (it would reach config.toml and ps): the roles read
 * it from queue.password_file. */
static void check_queue_url(cpt_preflight *p) {
    const char *url = cpt_cfg_str(p->cfg, "queue.url");
    const char *pw_file = cpt_cfg_str(p->cfg, "queue.password_file");
    char shown[CPT_REDIS_URL_MAX + 32];
    cpt_redact_url(url, shown, sizeof shown);
    cpt_err err;
    cpt_err_clear(&err);
    cpt_redis_url u;
    if (url[0] && cpt_redis_parse_url(url, &u, &err)) {
        line(p, "FAIL", "queue", "queue.url: %s", err.msg);
        return;
    }
    int has_pw = url[0] && u.password[0];
    explicit_bzero(&u, sizeof u);
    if (has_pw)
        line(p, "FAIL", "queue", "queue.url %s carries a password: put it in a file (mode 0600) named by "
             "queue.password_file and remove it from the URL", shown);
    if (pw_file[0]) {
        char pw[CPT_REDIS_SECRET_MAX];
        if (cpt_redis_read_password_file(pw_file, pw, sizeof pw, &err)) line(p, "FAIL", "queue", "%s", err.msg);
        explicit_bzero(pw, sizeof pw);
    }
    if (url[0] && !has_pw) line(p, "ok", "queue", "%s (not started by cpt)", shown);
    check_queue_tls(p);
}

static int on_path(const char *prog) {
    const char *path = getenv("PATH");
    char buf[4200];
    for (const char *s = path ? path : ""; *s;) {
        const char *end = strchr(s, ':');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        snprintf(buf, sizeof buf, "%.*s/%s", (int)len, s, prog);
        if (len && access(buf, X_OK) == 0) return 1;
        s += len + (end ? 1 : 0);
    }
    return 0;
}

static long local_gpus(void);

/* Trainer ranks: what launches them and what they talk through must be there; what the trainer cannot do with
 * several ranks is refused here, never left to stall. */
static void check_trainer_ranks(cpt_preflight *p) {
    const cpt_config *c = p->cfg;
    long n = (long)cpt_cfg_int(c, "slurm.trainer_tasks");
    if (n <= 1) return;
    const char *algo = cpt_cfg_str(c, "algo.type");
    /* online: rank 0 owns the queue and the bookkeeping, the others follow it (docs/online.md "Trainer ranks") */
    const char *transport = p->dev_ok ? p->dev.transport : cpt_cfg_str(c, "weights.transport");
    if (is_online(algo) && !strcmp(transport, "cuda_ipc") &&
        cpt_cfg_int(c, "train.cuda_device") != 0) {
        line(p, "FAIL", "ranks", "%s with %ld trainer ranks: rank 0 runs on its local rank's GPU (0), but "
             "weights.transport = cuda_ipc announces train.cuda_device = %ld; set train.cuda_device = 0", algo, n,
             (long)cpt_cfg_int(c, "train.cuda_device"));
        return;
    }
    const char *how = p->slurm ? "srun --mpi=pmix" : NULL;
    if (!p->dev_ok) return; /* the devices line says what is wrong */
    if (!strcmp(p->dev.train, "cuda")) {
        long gpus = p->slurm ? n : local_gpus();
        if (gpus < n)
            line(p, "FAIL", "ranks", "%ld GPU trainer ranks need a GPU each (NCCL refuses two ranks on one GPU); this "
                 "machine has %ld (train.device = cpu: CPU ranks over Open MPI)", n, gpus);
        else
            line(p, "ok", "ranks", "%ld GPU trainer ranks over NCCL, started by %s", n, how ? how : "cpt local-ranks");
        return;
    }
    char plugin[4200];
    snprintf(plugin, sizeof plugin, "%s/%s", p->bin_dir ? p->bin_dir : ".", CPT_COLL_MPI_FILE);
    int bad = 0;
    if (access(plugin, R_OK) != 0) {
        line(p, "FAIL", "ranks", "%ld CPU trainer ranks need Open MPI through %s, which is absent (cpt was built "
             "without MPI: apt-get install libopenmpi-dev openmpi-bin, then rebuild), or GPU ranks (train.device = "
             "cuda)", n, plugin);
        bad = 1;
    }
    if (!p->slurm && !on_path("mpirun")) {
        line(p, "FAIL", "ranks", "%ld local CPU trainer ranks start under mpirun, which is not on PATH (apt-get "
             "install openmpi-bin)", n);
        bad = 1;
    }
    if (!bad) line(p, "ok", "ranks", "%ld CPU trainer ranks over Open MPI, started by %s", n, how ? how : "mpirun");
}

static void check_roles(cpt_preflight *p) {
    const cpt_config *c = p->cfg;
    const char *algo = cpt_cfg_str(c, "algo.type");
    check_program(p, "trainer", "cpt-train");
    if (!is_online(algo)) {
        line(p, "ok", "roles", "%s: trainer only", algo);
        return;
    }
    long rollout = (long)cpt_cfg_int(c, "roles.rollout"), reward = (long)cpt_cfg_int(c, "roles.reward");
    if (rollout < 1) line(p, "FAIL", "roles", "%s needs at least one rollout worker (roles.rollout = 0)", algo);
    if (reward < 1) line(p, "FAIL", "roles", "%s needs at least one reward worker (roles.reward = 0)", algo);
    check_program(p, "rollout", "cpt-rollout");
    check_program(p, "reward", "cpt-reward");
    int env = cpt_role_configured(c, CPT_ROLE_ENV);
    if (env > 0) check_program(p, "env", "cpt-env");
    check_env(p);
    cpt_err werr;
    if (p->dev_ok && cpt_weights_choice_check(p->dev.transport, p->dev.train, p->dev.rollout,
                                              !strcmp(cpt_cfg_str(c, "model.init"), "random"), &werr))
        line(p, "FAIL", "weights", "%s%s", strcmp(cpt_cfg_str(c, "weights.transport"), "auto") ? "" :
             "weights.transport = auto picks the GPU transport of the devices above: ", werr.msg);
    else if (p->dev_ok)
        line(p, "ok", "weights", "weights.transport = %s%s", p->dev.transport,
             strcmp(cpt_cfg_str(c, "weights.transport"), "auto") ? "" : " (auto)");
    if (!strcmp(algo, "opd")) {
        if (!cpt_cfg_str(c, "teacher.path")[0]) line(p, "FAIL", "roles", "opd needs a teacher: set teacher.path");
        else check_model_dir(p, "teacher", cpt_cfg_str(c, "teacher.path"));
    }
    if (!strcmp(algo, "ppo") && cpt_cfg_str(c, "critic.path")[0]) check_model_dir(p, "critic", cpt_cfg_str(c, "critic.path"));
    if (cpt_cfg_str(c, "reward.model_path")[0]) check_model_dir(p, "rm", cpt_cfg_str(c, "reward.model_path"));
    char env_part[64] = "", ref[64] = "";
    if (env > 0) snprintf(env_part, sizeof env_part, ", %d env", env);
    if (cpt_online_kl_beta(c) > 0) snprintf(ref, sizeof ref, ", reference (kl_beta %g)", cpt_online_kl_beta(c));
    int teacher_gpu = p->dev_ok && p->dev.teacher_gpu; /* teacher.device, weights/devices.h */
    line(p, "ok", "roles", "%s: trainer, %ld rollout, %ld reward%s%s%s%s", algo, rollout, reward, env_part,
         !strcmp(algo, "opd") ? ", teacher in the reward workers" : "",
         !strcmp(algo, "opd") ? (teacher_gpu ? " on the trainer's GPU (teacher.device)" : " on the CPU") : "", ref);
    check_queue_url(p);
    if (!cpt_cfg_str(c, "queue.url")[0]) {
        char path[4200];
        if (find_redis_server(path, sizeof path)) line(p, "ok", "queue", "private redis-server: %s", path);
        else line(p, "FAIL", "queue", "%s: redis-server not found (apt-get install redis-server, set "
                  "CPT_REDIS_SERVER, or name a server in queue.url)", path);
    }
}

void cpt_preflight_resources(const cpt_config *cfg, cpt_resources *out) {
    long tasks = (long)cpt_cfg_int(cfg, "slurm.trainer_tasks");
    out->tasks = tasks;
    out->cpus = tasks * (long)cpt_cfg_int(cfg, "slurm.trainer_cpus");
    out->gpus = tasks * (long)cpt_cfg_int(cfg, "slurm.trainer_gpus");
    if (is_online(cpt_cfg_str(cfg, "algo.type"))) {
        for (int r = 0; r < CPT_N_WORKER_ROLES; r++) {
            long n = cpt_role_configured(cfg, r);
            out->tasks += n;
            out->cpus += n * cpt_role_cpus(cfg, r);
            out->gpus += n * cpt_role_gpus(cfg, r);
        }
    }
}

/* "8", "8(x2),4": CPUs summed over nodes. */
static long parse_cpus_per_node(const char *s) {
    long total = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) return -1;
        long times = 1;
        if (!strncmp(end, "(x", 2)) {
            times = strtol(end + 2, &end, 10);
            if (*end != ')') return -1;
            end++;
        }
        total += v * times;
        if (*end == ',') end++;
        else if (*end) return -1;
        s = end;
    }
    return total;
}

/* "2", "a100:2", "0,1,3" (a list of ids): a count. */
static long parse_gpus(const char *s, int id_list) {
    if (id_list) {
        long n = 1;
        for (const char *c = s; *c; c++) n += *c == ',';
        return *s ? n : 0;
    }
    const char *colon = strrchr(s, ':');
    char *end;
    long v = strtol(colon ? colon + 1 : s, &end, 10);
    return *end ? -1 : v;
}

void cpt_preflight_slurm_alloc(cpt_resources *out) {
    out->cpus = out->gpus = out->tasks = -1;
    const char *v;
    long nodes = (v = getenv("SLURM_JOB_NUM_NODES")) ? atol(v) : 1;
    if (nodes < 1) nodes = 1;
    if ((v = getenv("SLURM_JOB_CPUS_PER_NODE"))) out->cpus = parse_cpus_per_node(v);
    else if ((v = getenv("SLURM_CPUS_ON_NODE"))) out->cpus = atol(v) * nodes;
    if ((v = getenv("SLURM_GPUS_ON_NODE"))) out->gpus = atol(v) * nodes;
    else if ((v = getenv("SLURM_GPUS"))) out->gpus = parse_gpus(v, 0);
    else if ((v = getenv("SLURM_JOB_GPUS"))) out->gpus = parse_gpus(v, 1);
    else if ((v = getenv("SLURM_STEP_GPUS"))) out->gpus = parse_gpus(v, 1);
    else out->gpus = 0; /* an allocation without GPUs says nothing about them */
    if ((v = getenv("SLURM_NTASKS"))) out->tasks = atol(v);
}

static long local_gpus(void) {
    long n = 0;
    DIR *d = opendir("/dev");
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *s = e->d_name;
        if (!strncmp(s, "nvidia", 6) && s[6] >= '0' && s[6] <= '9') n++;
    }
    closedir(d);
    return n;
}

/* Workers the allocation cannot hold once the trainer is placed (rollout first, as the launcher places them), when
 * satellite jobs can take them (an online method, slurm.max_satellites > 0, a queue other nodes reach): that many,
 * if slurm.max_satellites allows; else -1. */
static long satellite_overflow(const cpt_config *c, const cpt_resources *have) {
    if (!is_online(cpt_cfg_str(c, "algo.type")) || !strncmp(cpt_cfg_str(c, "queue.url"), "unix:", 5)) return -1;
    long max_sat = (long)cpt_cfg_int(c, "slurm.max_satellites");
    long tasks = (long)cpt_cfg_int(c, "slurm.trainer_tasks");
    long cpus = have->cpus - tasks * (long)cpt_cfg_int(c, "slurm.trainer_cpus");
    long gpus = have->gpus - tasks * (long)cpt_cfg_int(c, "slurm.trainer_gpus");
    if (max_sat <= 0 || cpus < 0 || gpus < 0) return -1;
    long over = 0;
    for (int r = 0; r < CPT_N_WORKER_ROLES; r++) {
        long n = cpt_role_configured(c, r), wc = cpt_role_cpus(c, r), wg = cpt_role_gpus(c, r);
        for (long k = 0; k < n; k++) {
            if (cpus >= wc && gpus >= wg) cpus -= wc, gpus -= wg;
            else over++;
        }
    }
    return over <= max_sat ? over : -1;
}

static void check_resources(cpt_preflight *p) {
    cpt_resources need, have;
    cpt_preflight_resources(p->cfg, &need);
    if (p->slurm) {
        cpt_preflight_slurm_alloc(&have);
        long over = have.cpus >= 0 && (need.cpus > have.cpus || need.gpus > have.gpus) ? satellite_overflow(p->cfg, &have)
                                                                                        : -1;
        if (over > 0) { /* backfill: the workers beyond the allocation are satellite jobs (docs/operations.md) */
            line(p, "ok", "resources", "roles ask %ld CPUs, %ld GPUs; the allocation has %ld CPUs, %ld GPUs: %ld "
                 "worker%s go%s to satellite jobs (slurm.max_satellites = %lld)", need.cpus, need.gpus, have.cpus,
                 have.gpus, over, over == 1 ? "" : "s", over == 1 ? "es" : "", (long long)cpt_cfg_int(p->cfg, "slurm.max_satellites"));
            return;
        }
        if (have.cpus < 0) {
            line(p, "warn", "resources", "the allocation's CPUs are unknown (no SLURM_CPUS_ON_NODE); roles ask %ld", need.cpus);
        } else if (need.cpus > have.cpus) {
            line(p, "FAIL", "resources", "the roles ask %ld CPUs (slurm.*_cpus x roles), the allocation has %ld: "
                 "raise --cpus-per-task/--ntasks in the sbatch script or lower slurm.*_cpus / roles.*",
                 need.cpus, have.cpus);
        }
        if (need.gpus > have.gpus)
            line(p, "FAIL", "resources", "the roles ask %ld GPUs (slurm.*_gpus x roles), the allocation has %ld: "
                 "raise --gres=gpu:N in the sbatch script or lower slurm.trainer_gpus / slurm.rollout_gpus",
                 need.gpus, have.gpus);
        if (need.cpus <= have.cpus && need.gpus <= have.gpus)
            line(p, "ok", "resources", "roles ask %ld CPUs, %ld GPUs; the allocation has %ld CPUs, %ld GPUs",
                 need.cpus, need.gpus, have.cpus, have.gpus);
        return;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN), gpus = local_gpus();
    if (need.gpus > gpus)
        line(p, "FAIL", "resources", "the roles ask %ld GPUs (slurm.*_gpus), this machine has %ld", need.gpus, gpus);
    else if (need.cpus > cpus)
        /* Local processes share the cores; slower, not wrong. */
        line(p, "warn", "resources", "the roles ask %ld CPUs, this machine has %ld: they will share cores",
             need.cpus, cpus);
    else
        line(p, "ok", "resources", "roles ask %ld CPUs, %ld GPUs; this machine has %ld CPUs, %ld GPUs", need.cpus,
             need.gpus, cpus, gpus);
}

int cpt_preflight_run(cpt_preflight *p) {
    p->problems = p->warnings = 0;
    p->model_vocab = 0;
    const cpt_config *c = p->cfg;
    const char *algo = cpt_cfg_str(c, "algo.type");
    line(p, "ok", "config", "algo.type = %s, run.name = %s, run.dir = %s", algo, cpt_cfg_str(c, "run.name"),
         cpt_cfg_str(c, "run.dir"));
    check_devices(p);
    check_model(p);
    check_tokenizer(p);
    check_train_memory(p);
    check_data_file(p, "data.train", 1);
    check_data_file(p, "data.eval", 0);
    if (is_online(algo)) {
        check_data_file(p, "validation.data", 0);
        check_reward(p);
    }
    check_roles(p);
    check_trainer_ranks(p);
    check_resources(p);
    return p->problems;
}
