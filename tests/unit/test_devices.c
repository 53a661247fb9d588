/* Device and transport resolution (weights/devices.h): "auto" for train.device / rollout.device by the GPUs seen,
 * weights.transport = auto over every combination of devices, own GPUs and random init, explicit values kept, the
 * launcher's views (local, Slurm from slurm.*_gpus) on real configs, and the checks of an explicit choice. */
#include <string.h>

#include "cli/config_keys.h"
#include "tests/check.h"
#include "weights/devices.h"

static int str_is(const char *a, const char *b) { return a && !strcmp(a, b); }
static const char *shown(const char *a) { return a ? a : "(null)"; }
#define CHECK_STR(a, b) CHECK_MSG(str_is((a), (b)), "%s = \"%s\", expected \"%s\"", #a, shown(a), (b))

static cpt_config *load(const char *const *ov, int n) {
    cpt_err err = {{0}};
    static const char text[] = "[algo]\ntype = \"grpo\"\n";
    cpt_config *c = cpt_config_load_text(text, strlen(text), "test.toml", n, (char *const *)ov, &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    return c;
}

static void resolve(const char *const *ov, int n, int slurm, int gpus, const char *train, const char *rollout,
                    const char *transport, int own, int shares) {
    cpt_config *c = load(ov, n);
    if (!c) return;
    cpt_devices d;
    cpt_devices_view v = {.slurm = slurm, .gpus = gpus};
    cpt_err err = {{0}};
    CHECK_MSG(cpt_devices_resolve(c, &v, &d, &err) == 0, "%s", err.msg);
    CHECK_STR(d.train, train);
    CHECK_STR(d.rollout, rollout);
    CHECK_STR(d.reward, "cpu");
    CHECK_STR(d.transport, transport);
    CHECK_EQ_INT(d.rollout_own_gpus, own);
    CHECK_EQ_INT(d.rollout_shares_gpu, shares);
    cpt_config_free(c);
}

int main(void) {
    /* devices: auto by the GPUs seen, explicit values as given, anything else refused */
    CHECK_STR(cpt_device_pick("auto", 0), "cpu");
    CHECK_STR(cpt_device_pick("auto", 1), "cuda");
    CHECK_STR(cpt_device_pick("auto", 8), "cuda");
    CHECK_STR(cpt_device_pick("cpu", 4), "cpu");
    CHECK_STR(cpt_device_pick("cuda", 0), "cuda");
    CHECK(cpt_device_pick("gpu", 1) == NULL);
    CHECK(cpt_device_pick(NULL, 1) == NULL);

    /* transport auto, every combination: file unless both sides are on cuda with a model at start; then nccl
     * when the workers hold GPUs of their own, else cuda_ipc */
    static const char *devs[2] = {"cpu", "cuda"};
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < 2; r++)
            for (int own = 0; own < 2; own++)
                for (int rnd = 0; rnd < 2; rnd++) {
                    const char *want = (t && r && !rnd) ? (own ? "nccl" : "cuda_ipc") : "file";
                    const char *got = cpt_transport_pick("auto", devs[t], devs[r], own, rnd);
                    CHECK_MSG(got && !strcmp(got, want), "train %s rollout %s own %d random %d: %s, expected %s",
                              devs[t], devs[r], own, rnd, got ? got : "(null)", want);
                    /* an explicit value is kept whatever the devices */
                    CHECK_STR(cpt_transport_pick("file", devs[t], devs[r], own, rnd), "file");
                    CHECK_STR(cpt_transport_pick("nccl", devs[t], devs[r], own, rnd), "nccl");
                    CHECK_STR(cpt_transport_pick("cuda_ipc", devs[t], devs[r], own, rnd), "cuda_ipc");
                }
    CHECK(cpt_transport_pick("shm", "cuda", "cuda", 0, 0) == NULL);

    /* the defaults are auto */
    cpt_config *c = load(NULL, 0);
    if (c) {
        CHECK_STR(cpt_cfg_str(c, "train.device"), "auto");
        CHECK_STR(cpt_cfg_str(c, "rollout.device"), "auto");
        CHECK_STR(cpt_cfg_str(c, "weights.transport"), "auto");
        /* role-time: this build's GPUs (none without CUDA) */
#ifndef CPT_HAVE_CUDA
        CHECK_STR(cpt_device_resolve(c, "train.device"), "cpu");
        CHECK_STR(cpt_transport_resolve(c), "file");
#endif
        cpt_config_free(c);
    }

    /* local views: a machine with no GPU, with one (trainer and rollout share GPU 0 over cuda_ipc) */
    resolve(NULL, 0, 0, 0, "cpu", "cpu", "file", 0, 0);
    resolve(NULL, 0, 0, 1, "cuda", "cuda", "cuda_ipc", 0, 1);
    resolve(NULL, 0, 0, 4, "cuda", "cuda", "cuda_ipc", 0, 1);
    const char *rollout_cpu[] = {"rollout.device=cpu"};
    resolve(rollout_cpu, 1, 0, 1, "cuda", "cpu", "file", 0, 0);
    const char *random_init[] = {"model.init=random"};
    resolve(random_init, 1, 0, 1, "cuda", "cuda", "file", 0, 1);
    const char *forced[] = {"weights.transport=file"};
    resolve(forced, 1, 0, 1, "cuda", "cuda", "file", 0, 1);

    /* where a GPU trainer validates: its GPU (auto, cuda) or the host (cpu); nothing without validation.data or on
     * a CPU trainer */
    static const struct {
        const char *ov[2];
        int n, gpus;
        const char *want;
    } vals[] = {{{"validation.data=v.jsonl", ""}, 1, 1, "cuda"},
                {{"validation.data=v.jsonl", "validation.device=cuda"}, 2, 1, "cuda"},
                {{"validation.data=v.jsonl", "validation.device=cpu"}, 2, 1, "cpu"},
                {{"validation.data=v.jsonl", ""}, 1, 0, NULL},
                {{"validation.data=", ""}, 1, 1, NULL}};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        cpt_config *c = load(vals[i].ov, vals[i].n);
        if (!c) continue;
        cpt_devices d;
        cpt_devices_view v = {.slurm = 0, .gpus = vals[i].gpus};
        cpt_err err = {{0}};
        CHECK_MSG(cpt_devices_resolve(c, &v, &d, &err) == 0, "%s", err.msg);
        CHECK_MSG(vals[i].want ? str_is(d.validation, vals[i].want) : d.validation == NULL,
                  "case %zu: validation %s, expected %s", i, shown(d.validation), shown(vals[i].want));
        cpt_config_free(c);
    }

    /* Slurm: by what each step asks, whatever the batch step sees */
    resolve(NULL, 0, 1, 8, "cpu", "cpu", "file", 0, 0); /* slurm.*_gpus = 0 */
    const char *four[] = {"slurm.trainer_gpus=1", "slurm.rollout_gpus=1"};
    resolve(four, 2, 1, 0, "cuda", "cuda", "nccl", 1, 0);
    const char *one[] = {"slurm.trainer_gpus=1", "slurm.rollout_gpus=0", "rollout.device=cuda"};
    resolve(one, 3, 1, 0, "cuda", "cuda", "cuda_ipc", 0, 1);
    const char *trainer_only[] = {"slurm.trainer_gpus=1"};
    resolve(trainer_only, 1, 1, 0, "cuda", "cpu", "file", 0, 0);
    const char *rollout_only[] = {"slurm.rollout_gpus=1"};
    resolve(rollout_only, 1, 1, 0, "cpu", "cuda", "file", 0, 0);

    /* a value outside the choices cannot come through the config; the resolver names the key if it does */
    cpt_err err = {{0}};
    const char *bad[] = {"train.device=gpu"};
    cpt_config *b = cpt_config_load_text("", 0, "test.toml", 1, (char *const *)bad, &err);
    CHECK(b == NULL);
    CHECK(strstr(err.msg, "train.device") != NULL);

    /* explicit choices checked against the devices and the build */
    CHECK(cpt_weights_choice_check("file", "cpu", "cpu", 1, &err) == 0);
    CHECK(cpt_weights_choice_check("shm", "cuda", "cuda", 0, &err) != 0);
    CHECK(strstr(err.msg, "weights.transport") != NULL);
#ifdef CPT_HAVE_CUDA
    CHECK(cpt_weights_choice_check("cuda_ipc", "cuda", "cuda", 0, &err) == 0);
    CHECK(cpt_weights_choice_check("nccl", "cpu", "cuda", 0, &err) != 0);
    CHECK(strstr(err.msg, "train.device = \"cpu\"") != NULL);
    CHECK(cpt_weights_choice_check("nccl", "cuda", "cpu", 0, &err) != 0);
    CHECK(strstr(err.msg, "rollout.device = \"cpu\"") != NULL);
    CHECK(cpt_weights_choice_check("cuda_ipc", "cuda", "cuda", 1, &err) != 0);
    CHECK(strstr(err.msg, "model.init") != NULL);
#else
    CHECK(cpt_weights_choice_check("cuda_ipc", "cuda", "cuda", 0, &err) != 0);
    CHECK(strstr(err.msg, "built without") != NULL);
#endif

    /* the start line */
    cpt_devices d = {.train = "cuda", .rollout = "cuda", .reward = "cpu", .transport = "cuda_ipc", .train_gpu = 0,
                     .rollout_shares_gpu = 1};
    char line[256];
    cpt_devices_describe(&d, line, sizeof line);
    CHECK_STR(line, "trainer cuda (GPU 0), rollout cuda (beside the trainer), reward cpu; weights over cuda_ipc");
    d.validation = "cuda";
    cpt_devices_describe(&d, line, sizeof line);
    CHECK_STR(line, "trainer cuda (GPU 0), rollout cuda (beside the trainer), reward cpu; weights over cuda_ipc; "
                    "validation on the trainer's GPU");
    d.validation = "cpu";
    cpt_devices_describe(&d, line, sizeof line);
    CHECK_STR(line, "trainer cuda (GPU 0), rollout cuda (beside the trainer), reward cpu; weights over cuda_ipc; "
                    "validation on the host");
    d.validation = NULL;
    d.reward = "cuda";
    d.train_gpu = 1;
    d.teacher_gpu = 1;
    cpt_devices_describe(&d, line, sizeof line);
    CHECK_STR(line, "trainer cuda (GPU 1), rollout cuda (beside the trainer), reward cuda (the OPD teacher on GPU 1); "
                    "weights over cuda_ipc");
    d.reward_model_gpu = 1;
    cpt_devices_describe(&d, line, sizeof line);
    CHECK_STR(line, "trainer cuda (GPU 1), rollout cuda (beside the trainer), reward cuda (the OPD teacher and the "
                    "reward model on GPU 1); weights over cuda_ipc");
    d.teacher_gpu = 0;
    cpt_devices_describe(&d, line, sizeof line);
    CHECK_STR(line, "trainer cuda (GPU 1), rollout cuda (beside the trainer), reward cuda (the reward model on GPU "
                    "1); weights over cuda_ipc");

    /* the OPD teacher (teacher.device): auto on the GPU when seen locally, never under Slurm (its reward steps hold
     * no GPU), explicit values kept; without OPD or a teacher.path the reward is on the CPU whatever the key says;
     * the reward model (reward.model_device) likewise */
    static const struct {
        const char *ov[3];
        int slurm, gpus;
        const char *want;
    } tc[] = {
        {{"algo.type=opd", "teacher.path=/t", "teacher.device=auto"}, 0, 1, "cuda"},
        {{"algo.type=opd", "teacher.path=/t", "teacher.device=auto"}, 0, 0, "cpu"},
        {{"algo.type=opd", "teacher.path=/t", "teacher.device=auto"}, 1, 8, "cpu"},
        {{"algo.type=opd", "teacher.path=/t", "teacher.device=cpu"}, 0, 1, "cpu"},
        {{"algo.type=opd", "teacher.path=/t", "teacher.device=cuda"}, 1, 0, "cuda"},
        {{"algo.type=grpo", "teacher.path=/t", "teacher.device=cuda"}, 0, 1, "cpu"},
        {{"algo.type=opd", "teacher.path=", "teacher.device=cuda"}, 0, 1, "cpu"},
        /* the reward model (reward.model_device), the same rules, for any method */
        {{"reward.model_path=/rm", "reward.model_device=auto", ""}, 0, 1, "cuda"},
        {{"reward.model_path=/rm", "reward.model_device=auto", ""}, 1, 4, "cpu"},
        {{"reward.model_path=/rm", "reward.model_device=cpu", ""}, 0, 1, "cpu"},
        {{"reward.model_path=", "reward.model_device=cuda", ""}, 0, 1, "cpu"},
        {{"algo.type=opd", "teacher.path=/t", "reward.model_path=/rm"}, 0, 1, "cuda"},
    };
    for (size_t i = 0; i < sizeof tc / sizeof tc[0]; i++) {
        cpt_config *c = load(tc[i].ov, tc[i].ov[2][0] ? 3 : 2);
        if (!c) continue;
        cpt_devices_view v = {.slurm = tc[i].slurm, .gpus = tc[i].gpus};
        CHECK_MSG(cpt_devices_resolve(c, &v, &d, &err) == 0, "case %zu: %s", i, err.msg);
        CHECK_MSG(str_is(d.reward, tc[i].want), "case %zu: reward %s, expected %s", i, shown(d.reward), tc[i].want);
        CHECK_MSG(str_is(d.reward, "cuda") == (d.teacher_gpu || d.reward_model_gpu), "case %zu: flags", i);
        cpt_config_free(c);
    }
    return check_summary("test_devices");
}
