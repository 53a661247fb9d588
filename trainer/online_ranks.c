#include "trainer/online_ranks.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/checksum.h"

void cpt_ranks_groups_free(cpt_ranks_groups *gs) {
    for (size_t i = 0; i < gs->n; i++) cpt_rollout_group_free(&gs->g[i]);
    free(gs->g);
    memset(gs, 0, sizeof *gs);
}

static int decode_groups(const unsigned char *p, size_t len, int64_t n, cpt_ranks_groups *out, cpt_err *err) {
    memset(out, 0, sizeof *out);
    if (n < 0 || (uint64_t)n > len / sizeof(uint64_t))
        return cpt_errf(err, "ranks: %" PRId64 " groups in %zu bytes", n, len);
    out->g = calloc(n > 0 ? (size_t)n : 1, sizeof *out->g);
    if (!out->g) return cpt_errf(err, "ranks: out of memory for %" PRId64 " groups", n);
    size_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t k;
        if (len - at < sizeof k) return cpt_errf(err, "ranks: the step's payload ends inside group %" PRId64, i);
        memcpy(&k, p + at, sizeof k);
        at += sizeof k;
        if (k > len - at)
            return cpt_errf(err, "ranks: group %" PRId64 " of %" PRIu64 " bytes overruns the payload", i, k);
        if (cpt_rollout_group_decode(p + at, (size_t)k, CPT_MSG_SCORED_GROUP, &out->g[i], err))
            return cpt_err_prefix(err, "ranks: group %" PRId64 " of the step", i);
        out->n++;
        at += (size_t)k;
    }
    if (at != len) return cpt_errf(err, "ranks: %zu bytes left after %" PRId64 " groups", len - at, n);
    return 0;
}

static int bcast_payload(cpt_dp *dp, const cpt_ranks_header *h, unsigned char *buf, cpt_ranks_groups *out,
                         cpt_err *err) {
    if (h->payload_bytes > 0 && cpt_dp_bcast_bytes(dp, buf, (size_t)h->payload_bytes, err))
        return cpt_err_prefix(err, "ranks: the groups of step %" PRId64, h->step);
    return decode_groups(buf, (size_t)h->payload_bytes, h->n_groups, out, err);
}

int cpt_ranks_send_step(cpt_dp *dp, int64_t step, const cpt_rollout_group *const *in, size_t n,
                        cpt_ranks_groups *out, cpt_err *err) {
    memset(out, 0, sizeof *out);
    cpt_buf *enc = calloc(n ? n : 1, sizeof *enc);
    if (!enc) return cpt_errf(err, "ranks: out of memory");
    size_t total = 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        rc = cpt_rollout_group_encode(in[i], &enc[i], err);
        total += sizeof(uint64_t) + enc[i].len;
    }
    unsigned char *buf = rc ? NULL : malloc(total ? total : 1);
    if (!rc && !buf) rc = cpt_errf(err, "ranks: out of memory for a payload of %zu bytes", total);
    if (!rc) {
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t k = enc[i].len;
            memcpy(buf + at, &k, sizeof k);
            memcpy(buf + at + sizeof k, enc[i].data, enc[i].len);
            at += sizeof k + enc[i].len;
        }
        cpt_ranks_header h = {.command = CPT_RANKS_TRAIN, .step = step, .n_groups = (int64_t)n,
                              .payload_bytes = (int64_t)total};
        rc = cpt_dp_bcast_bytes(dp, &h, sizeof h, err);
        if (rc) cpt_err_prefix(err, "ranks: the header of step %" PRId64, step);
        if (!rc) rc = bcast_payload(dp, &h, buf, out, err);
    }
    for (size_t i = 0; i < n; i++) cpt_buf_free(&enc[i]);
    free(enc);
    free(buf);
    return rc;
}

int cpt_ranks_recv(cpt_dp *dp, cpt_ranks_header *h, cpt_ranks_groups *out, cpt_err *err) {
    memset(out, 0, sizeof *out);
    memset(h, 0, sizeof *h);
    if (cpt_dp_bcast_bytes(dp, h, sizeof *h, err))
        return cpt_err_prefix(err, "ranks: waiting for rank 0's next step");
    if (h->command != CPT_RANKS_TRAIN) return 0;
    if (h->payload_bytes < 0 || (uint64_t)h->payload_bytes > (uint64_t)SIZE_MAX / 2)
        return cpt_errf(err, "ranks: a payload of %" PRId64 " bytes", h->payload_bytes);
    unsigned char *buf = malloc(h->payload_bytes > 0 ? (size_t)h->payload_bytes : 1);
    if (!buf) return cpt_errf(err, "ranks: out of memory for a payload of %" PRId64 " bytes", h->payload_bytes);
    int rc = bcast_payload(dp, h, buf, out, err);
    free(buf);
    return rc;
}

int cpt_ranks_send(cpt_dp *dp, int64_t command, int64_t step, int64_t status, cpt_err *err) {
    cpt_ranks_header h = {.command = command, .step = step, .status = status};
    return cpt_dp_bcast_bytes(dp, &h, sizeof h, err);
}

int cpt_ranks_agree_stop(cpt_dp *dp, int local_stop, int *any, cpt_err *err) {
    float f = local_stop ? 1.0f : 0.0f;
    if (cpt_dp_sum_floats(dp, &f, 1, err)) return cpt_err_prefix(err, "ranks: agreeing on a stop");
    *any = f > 0;
    return 0;
}

int cpt_ranks_check_replicas(cpt_dp *dp, cpt_model *const *models, size_t n_models, int64_t step, cpt_err *err) {
    int world = cpt_dp_size(dp);
    if (world <= 1) return 0;
    /* 16-bit pieces: a sum over up to 256 ranks stays exact in a float */
    float mine[16], sum[16];
    size_t n = 0;
    for (size_t i = 0; i < n_models && i < 4; i++) {
        if (cpt_model_sync_to_host(models[i], err)) return cpt_err_prefix(err, "ranks: checksum of the weights");
        uint64_t h = cpt_checksum64(cpt_model_data(models[i]), cpt_model_numel(models[i]) * sizeof(float));
        for (int k = 0; k < 4; k++) mine[n++] = (float)((h >> (16 * k)) & 0xffff);
    }
    memcpy(sum, mine, n * sizeof *sum);
    if (cpt_dp_sum_floats(dp, sum, n, err)) return cpt_err_prefix(err, "ranks: comparing the weights' checksums");
    for (size_t k = 0; k < n; k++)
        if (sum[k] != (float)world * mine[k])
            return cpt_errf(err, "step %" PRId64 ": rank %d's weights differ from another rank's (model %zu's "
                            "checksum): the data-parallel replicas diverged",
                            step, cpt_dp_rank(dp), k / 4);
    return 0;
}
