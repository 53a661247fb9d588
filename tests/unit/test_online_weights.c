/* Weight versions over the file transport (weights/weights_pub.h): the file a worker loads gives back exactly the
 * trainer's weights, the announcement describes it (size, xxh64), config.json sits beside it, pruning keeps the
 * newest versions and removes leftover temp folders of dead writers, and a failed write leaves no vN file. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/checksum.h"
#include "core/fs.h"
#include "model/model.h"
#include "tests/check.h"
#include "weights/weights_pub.h"

static cpt_model *tiny(uint64_t seed) {
    cpt_model_config mc = {.arch = CPT_ARCH_QWEN2, .vocab_size = 20, .hidden_size = 16, .intermediate_size = 24,
                           .num_layers = 1, .num_heads = 2, .num_kv_heads = 2, .head_dim = 8, .rms_norm_eps = 1e-6f,
                           .rope_theta = 10000, .tie_word_embeddings = 0, .qkv_bias = 1,
                           .max_position_embeddings = 32, .bos_token_id = -1, .eos_token_id = -1};
    cpt_err err;
    return cpt_model_new_random(&mc, seed, &err);
}

int main(void) {
    cpt_err err;
    char dir[] = "/tmp/cpt-wpub-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    cpt_model *a = tiny(1), *b = tiny(2);
    CHECK(a && b);
    cpt_weights_msg w;
    char path[256];
    for (uint64_t v = 0; v < 5; v++) {
        for (size_t i = 0; i < cpt_model_numel(a); i++) cpt_model_data(a)[i] += 0.01f * (float)v;
        CHECK_EQ_INT(cpt_weights_write(a, dir, "runx", v, &w, &err), 0);
        CHECK_EQ_INT(cpt_weights_prune(dir, v, 2, &err), v >= 2 ? 1 : 0);
    }
    /* the announcement */
    cpt_weights_path(dir, 4, path, sizeof path);
    CHECK_EQ_STR(w.location, path);
    CHECK_EQ_STR(w.transport, "file");
    CHECK_EQ_STR(w.run, "runx");
    CHECK_EQ_INT(w.version, 4);
    uint64_t h, bytes;
    CHECK_EQ_INT(cpt_checksum_file(path, &h, &bytes, &err), 0);
    char want[64], hex[CPT_CHECKSUM_HEX_LEN + 1];
    snprintf(want, sizeof want, "xxh64:%s", cpt_checksum_hex(h, hex));
    CHECK_EQ_STR(w.checksum, want);
    CHECK_EQ_INT(w.bytes, bytes);
    /* a worker's load gives the trainer's weights bit for bit */
    CHECK_EQ_INT(cpt_model_load_weights(b, path, &err), 0);
    CHECK(memcmp(cpt_model_data(a), cpt_model_data(b), cpt_model_numel(a) * sizeof(float)) == 0);
    /* config.json beside the versions describes the model */
    char wdir[256];
    snprintf(wdir, sizeof wdir, "%s/weights", dir);
    cpt_model_config mc;
    CHECK_EQ_INT(cpt_model_config_load(wdir, &mc, &err), 0);
    CHECK_EQ_INT(mc.hidden_size, 16);
    CHECK_EQ_INT(mc.vocab_size, 20);
    /* retention: the newest 2 */
    for (uint64_t v = 0; v < 5; v++) {
        cpt_weights_path(dir, v, path, sizeof path);
        CHECK_EQ_INT(cpt_path_exists(path), v >= 3);
    }
    /* a dead writer's temp folder goes; other files stay */
    char tmp[300], other[300];
    snprintf(tmp, sizeof tmp, "%s/weights/.tmp-v9-999999", dir);
    snprintf(other, sizeof other, "%s/weights/notes.txt", dir);
    CHECK_EQ_INT(cpt_mkdir_p(tmp, 0755, &err), 0);
    CHECK_EQ_INT(cpt_write_file_atomic(other, "x", 1, &err), 0);
    CHECK_EQ_INT(cpt_weights_prune(dir, 4, 2, &err), 0);
    CHECK(!cpt_path_exists(tmp));
    CHECK(cpt_path_exists(other));
    /* an unwritable run folder: an error naming the path, and no vN file */
    char ro[300];
    snprintf(ro, sizeof ro, "%s/ro", dir);
    CHECK_EQ_INT(cpt_mkdir_p(ro, 0755, &err), 0);
    char rw[320];
    snprintf(rw, sizeof rw, "%s/weights", ro);
    CHECK_EQ_INT(cpt_write_file_atomic(rw, "not a folder", 12, &err), 0); /* weights/ is a file: mkdir fails */
    CHECK_EQ_INT(cpt_weights_write(a, ro, "runx", 7, &w, &err), -1);
    CHECK(strstr(err.msg, "weights") != NULL);
    cpt_model_free(a);
    cpt_model_free(b);
    cpt_remove_tree(dir, &err);
    return check_summary("test_online_weights");
}
