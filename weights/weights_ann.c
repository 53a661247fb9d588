/* cuda_ipc and nccl announcements (weights/weights_ann.h). */
#include "weights/weights_ann.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checksum.h"

int cpt_weights_transport_parse(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "file")) return CPT_WT_FILE;
    if (!strcmp(s, "nccl")) return CPT_WT_NCCL;
    if (!strcmp(s, "cuda_ipc")) return CPT_WT_CUDA_IPC;
    return -1;
}

const char *cpt_weights_transport_name(cpt_weights_transport t) {
    return t == CPT_WT_NCCL ? "nccl" : t == CPT_WT_CUDA_IPC ? "cuda_ipc" : "file";
}

void cpt_weights_layout_of(cpt_model *m, cpt_weights_layout *l) {
    cpt_xxh64_state s;
    cpt_xxh64_init(&s, 0);
    memset(l, 0, sizeof *l);
    for (size_t i = 0; i < cpt_model_num_params(m); i++) {
        const cpt_param *p = cpt_model_param(m, i);
        char line[512];
        int n = snprintf(line, sizeof line, "%s:%zu\n", p->name, p->numel);
        cpt_xxh64_update(&s, line, (size_t)n);
        l->numel += p->numel;
        l->n_tensors++;
    }
    l->digest = cpt_xxh64_final(&s);
}

int cpt_weights_layout_check(const cpt_weights_layout *want, const cpt_weights_layout *have, cpt_err *err) {
    if (want->n_tensors != have->n_tensors)
        return cpt_errf(err, "layout: %u tensors announced, this model has %u", want->n_tensors, have->n_tensors);
    if (want->digest != have->digest)
        return cpt_errf(err, "layout: tensor names or sizes differ from this model's (digest %016" PRIx64
                             " announced, %016" PRIx64 " here): the trainer and the worker load different configs",
                        want->digest, have->digest);
    return 0;
}

void cpt_hex_encode(const unsigned char *b, size_t n, char *out) {
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) out[2 * i] = d[b[i] >> 4], out[2 * i + 1] = d[b[i] & 15];
    out[2 * n] = 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int cpt_hex_decode(const char *s, unsigned char *b, size_t n) {
    if (strlen(s) != 2 * n) return -1;
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        b[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t cpt_weights_sum64(const void *data, size_t bytes) {
    const unsigned char *p = data;
    uint64_t sum = 0;
    size_t n = bytes / 8;
    for (size_t i = 0; i < n; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8); /* little-endian hosts only (x86-64, aarch64), as the GPU side */
        sum += mix64(w + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull);
    }
    if (bytes % 8) {
        uint64_t w = 0;
        memcpy(&w, p + 8 * n, bytes % 8);
        sum += mix64(w + (uint64_t)(n + 1) * 0x9E3779B97F4A7C15ull);
    }
    return sum;
}

void cpt_weights_sum64_str(uint64_t h, char *out, size_t cap) { snprintf(out, cap, "sum64:%016" PRIx64, h); }

int cpt_weights_sum64_parse(const char *s, uint64_t *h) {
    unsigned char b[8];
    if (strncmp(s, "sum64:", 6) || cpt_hex_decode(s + 6, b, 8)) return -1;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | b[i];
    *h = v;
    return 0;
}

int cpt_weights_ann_format(const cpt_weights_ann *a, char *out, size_t cap, cpt_err *err) {
    int n;
    if (a->transport == CPT_WT_CUDA_IPC) {
        char hh[2 * CPT_IPC_HANDLE_BYTES + 1];
        cpt_hex_encode(a->handle, CPT_IPC_HANDLE_BYTES, hh);
        if (a->slot < 0 || a->slot > 1) return cpt_errf(err, "cuda_ipc announcement: slot %d (0 or 1)", a->slot);
        if (!a->host[0] || strpbrk(a->host, ";="))
            return cpt_errf(err, "cuda_ipc announcement: host \"%s\" is empty or holds ';' or '='", a->host);
        n = snprintf(out, cap, "ipc;slot=%d;dev=%d;pid=%ld;host=%s;layout=%016" PRIx64 ";tensors=%u;handle=%s", a->slot,
                     a->device, a->pid, a->host, a->layout.digest, a->layout.n_tensors, hh);
    } else if (a->transport == CPT_WT_NCCL) {
        char uh[2 * CPT_WG_UID_BYTES + 1];
        cpt_hex_encode(a->uid, CPT_WG_UID_BYTES, uh);
        if (a->ranks < 1) return cpt_errf(err, "nccl announcement: %d ranks", a->ranks);
        n = snprintf(out, cap, "nccl;epoch=%" PRIu64 ";ranks=%d;bucket=%" PRIu64 ";layout=%016" PRIx64 ";tensors=%u;uid=%s",
                     a->epoch, a->ranks, a->bucket_bytes, a->layout.digest, a->layout.n_tensors, uh);
    } else {
        return cpt_errf(err, "weights announcement: transport %s carries a file path, not this form",
                        cpt_weights_transport_name(a->transport));
    }
    if (n < 0 || (size_t)n >= cap) return cpt_errf(err, "weights announcement: %d bytes, room for %zu", n, cap);
    return 0;
}

/* key=value fields of the line; each known key seen once. */
typedef struct field {
    const char *key;
    char val[300];
    int seen;
} field;

static int parse_u64(const char *key, const char *s, uint64_t lo, uint64_t hi, uint64_t *out, cpt_err *err) {
    char *end;
    if (!*s || *s == '-') return cpt_errf(err, "%s = \"%s\": not a number", key, s);
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v < lo || v > hi) return cpt_errf(err, "%s = \"%s\": expected %" PRIu64 "..%" PRIu64, key, s, lo, hi);
    *out = v;
    return 0;
}

int cpt_weights_ann_parse(const char *transport, const char *location, cpt_weights_ann *a, cpt_err *err) {
    memset(a, 0, sizeof *a);
    int t = cpt_weights_transport_parse(transport);
    const char *word = t == CPT_WT_CUDA_IPC ? "ipc" : t == CPT_WT_NCCL ? "nccl" : NULL;
    if (!word) return cpt_errf(err, "weights announcement: transport \"%s\" has no ipc/nccl location", transport);
    a->transport = (cpt_weights_transport)t;
    field ipc[] = {{.key = "slot"}, {.key = "dev"}, {.key = "pid"}, {.key = "host"}, {.key = "layout"}, {.key = "tensors"}, {.key = "handle"}};
    field nccl[] = {{.key = "epoch"}, {.key = "ranks"}, {.key = "bucket"}, {.key = "layout"}, {.key = "tensors"}, {.key = "uid"}};
    field *f = t == CPT_WT_CUDA_IPC ? ipc : nccl;
    int nf = t == CPT_WT_CUDA_IPC ? 7 : 6;
    size_t wl = strlen(word);
    if (strncmp(location, word, wl) || location[wl] != ';')
        return cpt_errf(err, "%s announcement: location does not start with \"%s;\"", transport, word);
    const char *p = location + wl + 1;
    while (*p) {
        const char *semi = strchr(p, ';'), *end = semi ? semi : p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        if (!eq) return cpt_errf(err, "%s announcement: \"%.*s\" is not key=value", transport, (int)(end - p), p);
        int k = 0;
        while (k < nf && (strlen(f[k].key) != (size_t)(eq - p) || strncmp(f[k].key, p, (size_t)(eq - p)))) k++;
        if (k == nf) return cpt_errf(err, "%s announcement: unknown key \"%.*s\"", transport, (int)(eq - p), p);
        if (f[k].seen) return cpt_errf(err, "%s announcement: key %s twice", transport, f[k].key);
        if ((size_t)(end - eq - 1) >= sizeof f[k].val)
            return cpt_errf(err, "%s announcement: %s too long", transport, f[k].key);
        memcpy(f[k].val, eq + 1, (size_t)(end - eq - 1));
        f[k].val[end - eq - 1] = 0;
        f[k].seen = 1;
        p = semi ? semi + 1 : end;
    }
    for (int k = 0; k < nf; k++)
        if (!f[k].seen) return cpt_errf(err, "%s announcement: key %s missing", transport, f[k].key);
    uint64_t v = 0; /* set by parse_u64 on success; gcc -O3 cannot see it */
    unsigned char lb[8];
    const char *lay = f[t == CPT_WT_CUDA_IPC ? 4 : 3].val, *ten = f[t == CPT_WT_CUDA_IPC ? 5 : 4].val;
    if (cpt_hex_decode(lay, lb, 8)) return cpt_errf(err, "%s announcement: layout \"%s\" is not 16 hex digits", transport, lay);
    for (int i = 0; i < 8; i++) a->layout.digest = a->layout.digest << 8 | lb[i];
    if (parse_u64("tensors", ten, 1, 1u << 24, &v, err)) return cpt_err_prefix(err, "%s announcement", transport);
    a->layout.n_tensors = (uint32_t)v;
    if (t == CPT_WT_CUDA_IPC) {
        if (parse_u64("slot", f[0].val, 0, 1, &v, err)) return cpt_err_prefix(err, "%s announcement", transport);
        a->slot = (int)v;
        if (parse_u64("dev", f[1].val, 0, 1023, &v, err)) return cpt_err_prefix(err, "%s announcement", transport);
        a->device = (int)v;
        if (parse_u64("pid", f[2].val, 1, 1u << 30, &v, err)) return cpt_err_prefix(err, "%s announcement", transport);
        a->pid = (long)v;
        if (!f[3].val[0] || strlen(f[3].val) >= sizeof a->host || strchr(f[3].val, '='))
            return cpt_errf(err, "%s announcement: host empty, too long or holding '='", transport);
        snprintf(a->host, sizeof a->host, "%s", f[3].val);
        if (cpt_hex_decode(f[6].val, a->handle, CPT_IPC_HANDLE_BYTES))
            return cpt_errf(err, "%s announcement: handle is not %d hex digits", transport, 2 * CPT_IPC_HANDLE_BYTES);
    } else {
        if (parse_u64("epoch", f[0].val, 1, UINT64_MAX, &a->epoch, err)) return cpt_err_prefix(err, "%s announcement", transport);
        if (parse_u64("ranks", f[1].val, 1, 65536, &v, err)) return cpt_err_prefix(err, "%s announcement", transport);
        a->ranks = (int)v;
        if (parse_u64("bucket", f[2].val, 1, UINT64_MAX, &a->bucket_bytes, err))
            return cpt_err_prefix(err, "%s announcement", transport);
        if (cpt_hex_decode(f[5].val, a->uid, CPT_WG_UID_BYTES))
            return cpt_errf(err, "%s announcement: uid is not %d hex digits", transport, 2 * CPT_WG_UID_BYTES);
    }
    return 0;
}
