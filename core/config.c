/* Config: loading a TOML file plus overrides against a table of declared keys (given by the caller) into resolved
 * values, typed getters, TOML dump, stable hash and the generated markdown reference. */
#include "core/config.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/redact.h"
#include "core/toml.h"

typedef struct value {
    int set;  /* set by the file or an override */
    int line; /* file line that set it (0: override or default) */
    int64_t i;
    double f;
    int b;
    char *s;
    size_t n; /* arrays */
    char **sa;
    int64_t *ia;
} value;

struct cpt_config {
    const cpt_key_decl *keys;
    size_t n;
    value *v;
};

const char *cpt_key_type_name(cpt_key_type t) {
    switch (t) {
    case CPT_KEY_T_INT: return "integer";
    case CPT_KEY_T_FLOAT: return "float";
    case CPT_KEY_T_BOOL: return "boolean";
    case CPT_KEY_T_STR: return "string";
    case CPT_KEY_T_STR_ARRAY: return "array of strings";
    case CPT_KEY_T_INT_ARRAY: return "array of integers";
    }
    return "?";
}

static int find_key(const cpt_key_decl *keys, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(keys[i].name, name)) return (int)i;
    return -1;
}

static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 200 || lb > 200) return (size_t)-1;
    size_t row[201];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *closest_key(const cpt_key_decl *keys, size_t n, const char *name) {
    const char *best = NULL;
    size_t bd = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(name, keys[i].name);
        if (d < bd) bd = d, best = keys[i].name;
    }
    return best;
}

static void value_clear(value *v) {
    free(v->s);
    for (size_t i = 0; v->sa && i < v->n; i++) free(v->sa[i]);
    free(v->sa);
    free(v->ia);
    memset(v, 0, sizeof *v);
}

static int set_defaults(cpt_config *cfg, cpt_err *err) {
    for (size_t k = 0; k < cfg->n; k++) {
        const cpt_key_decl *d = &cfg->keys[k];
        value *v = &cfg->v[k];
        v->i = d->idef;
        v->f = d->fdef;
        v->b = d->bdef;
        if (d->type == CPT_KEY_T_STR && !(v->s = strdup(d->sdef))) return cpt_errf(err, "out of memory");
    }
    return 0;
}

/* "a|b|c" contains s as a whole item? */
static int choice_ok(const char *choices, const char *s) {
    size_t n = strlen(s);
    for (const char *p = choices;;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !memcmp(p, s, n)) return 1;
        if (!bar) return 0;
        p = bar + 1;
    }
}

/* Writes "a, b, c" for messages. */
static void choices_list(const char *choices, char *out, size_t cap) {
    size_t o = 0;
    for (const char *p = choices; *p && o + 3 < cap; p++) {
        if (*p == '|') { out[o++] = ','; out[o++] = ' '; }
        else out[o++] = *p;
    }
    out[o] = '\0';
}

/* Assigns a parsed TOML value to key k after checking type, range and choices. where: "FILE:LINE" or
 * "override 'k=v'". */
static int assign(cpt_config *cfg, int k, const cpt_toml_value *tv, const char *where, cpt_err *err) {
    const cpt_key_decl *d = &cfg->keys[k];
    value nv;
    memset(&nv, 0, sizeof nv);
    nv.i = d->idef, nv.f = d->fdef, nv.b = d->bdef;
    switch (d->type) {
    case CPT_KEY_T_INT:
        if (tv->type != CPT_TOML_INT) goto wrong_type;
        if (tv->i < d->imin || tv->i > d->imax)
            return cpt_errf(err, "%s: %s = %lld is out of range [%lld, %lld]", where, d->name, (long long)tv->i,
                            (long long)d->imin, (long long)d->imax);
        nv.i = tv->i;
        break;
    case CPT_KEY_T_FLOAT: {
        double f;
        if (tv->type == CPT_TOML_FLOAT) f = tv->f;
        else if (tv->type == CPT_TOML_INT) f = (double)tv->i;
        else goto wrong_type;
        if (!(f >= d->fmin && f <= d->fmax))
            return cpt_errf(err, "%s: %s = %g is out of range [%g, %g]", where, d->name, f, d->fmin, d->fmax);
        nv.f = f;
        break;
    }
    case CPT_KEY_T_BOOL:
        if (tv->type != CPT_TOML_BOOL) goto wrong_type;
        nv.b = tv->b;
        break;
    case CPT_KEY_T_STR:
        if (tv->type != CPT_TOML_STR) goto wrong_type;
        if (d->choices[0] && !choice_ok(d->choices, tv->s)) {
            char list[512];
            choices_list(d->choices, list, sizeof list);
            return cpt_errf(err, "%s: %s = \"%.200s\" is not one of: %s", where, d->name, tv->s, list);
        }
        if (!(nv.s = strdup(tv->s))) return cpt_errf(err, "out of memory");
        break;
    case CPT_KEY_T_STR_ARRAY:
    case CPT_KEY_T_INT_ARRAY: {
        if (tv->type != CPT_TOML_ARRAY) goto wrong_type;
        cpt_toml_type want = d->type == CPT_KEY_T_STR_ARRAY ? CPT_TOML_STR : CPT_TOML_INT;
        if (tv->n && tv->items[0].type != want)
            return cpt_errf(err, "%s: %s expects an %s, got an array of %s values", where, d->name,
                            cpt_key_type_name(d->type), cpt_toml_type_name(tv->items[0].type));
        nv.n = tv->n;
        if (tv->n) {
            if (want == CPT_TOML_STR) {
                if (!(nv.sa = calloc(tv->n, sizeof *nv.sa))) return cpt_errf(err, "out of memory");
                for (size_t i = 0; i < tv->n; i++)
                    if (!(nv.sa[i] = strdup(tv->items[i].s))) {
                        value_clear(&nv);
                        return cpt_errf(err, "out of memory");
                    }
            } else {
                if (!(nv.ia = calloc(tv->n, sizeof *nv.ia))) return cpt_errf(err, "out of memory");
                for (size_t i = 0; i < tv->n; i++) nv.ia[i] = tv->items[i].i;
            }
        }
        break;
    }
    }
    value_clear(&cfg->v[k]);
    cfg->v[k] = nv;
    cfg->v[k].set = 1;
    return 0;
wrong_type:
    return cpt_errf(err, "%s: %s expects %s %s, got %s %s", where, d->name,
                    d->type == CPT_KEY_T_INT || d->type == CPT_KEY_T_STR_ARRAY || d->type == CPT_KEY_T_INT_ARRAY ? "an" : "a",
                    cpt_key_type_name(d->type), tv->type == CPT_TOML_INT || tv->type == CPT_TOML_ARRAY ? "an" : "a",
                    cpt_toml_type_name(tv->type));
}

static int unknown_key(const cpt_config *cfg, const char *where, const char *name, cpt_err *err) {
    const char *near = closest_key(cfg->keys, cfg->n, name);
    if (near) return cpt_errf(err, "%s: unknown key '%.200s' (did you mean '%s'?)", where, name, near);
    return cpt_errf(err, "%s: unknown key '%.200s'", where, name);
}

static int apply_override(cpt_config *cfg, const char *ov, cpt_err *err) {
    char where[300];
    snprintf(where, sizeof where, "override '%.200s'", ov);
    const char *eq = strchr(ov, '=');
    if (!eq) return cpt_errf(err, "%s: expected section.key=value", where);
    size_t kl = (size_t)(eq - ov);
    while (kl && (ov[kl - 1] == ' ' || ov[kl - 1] == '\t')) kl--;
    const char *ks = ov;
    while (kl && (*ks == ' ' || *ks == '\t')) ks++, kl--;
    char key[256];
    if (kl == 0 || kl >= sizeof key) return cpt_errf(err, "%s: expected section.key=value", where);
    memcpy(key, ks, kl);
    key[kl] = '\0';
    int k = find_key(cfg->keys, cfg->n, key);
    if (k < 0) return unknown_key(cfg, where, key, err);
    const char *val = eq + 1;
    while (*val == ' ' || *val == '\t') val++;
    const cpt_key_decl *d = &cfg->keys[k];
    cpt_toml_value tv;
    cpt_err verr;
    int rc;
    if (d->type == CPT_KEY_T_STR && *val != '"' && *val != '\'') {
        /* Strings may be given unquoted on the command line: the text after '=' as is. */
        tv = (cpt_toml_value){.type = CPT_TOML_STR, .s = (char *)val};
        return assign(cfg, k, &tv, where, err);
    }
    if (cpt_toml_parse_value(val, &tv, &verr)) {
        if (d->type == CPT_KEY_T_STR_ARRAY && *val == '[') {
            /* [a, b, c] with unquoted items: split on commas. */
            size_t len = strlen(val);
            while (len && (val[len - 1] == ' ' || val[len - 1] == '\t')) len--;
            if (len < 2 || val[len - 1] != ']') return cpt_errf(err, "%s: %s", where, verr.msg);
            cpt_toml_value arr = {.type = CPT_TOML_ARRAY};
            char *body = strndup(val + 1, len - 2);
            if (!body) return cpt_errf(err, "out of memory");
            size_t cap = 1;
            for (char *p = body; *p; p++) cap += *p == ',';
            arr.items = calloc(cap, sizeof *arr.items);
            if (!arr.items) { free(body); return cpt_errf(err, "out of memory"); }
            char *save = NULL;
            for (char *t = strtok_r(body, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                while (*t == ' ' || *t == '\t') t++;
                size_t tl = strlen(t);
                while (tl && (t[tl - 1] == ' ' || t[tl - 1] == '\t')) t[--tl] = '\0';
                if (!tl) continue;
                arr.items[arr.n++] = (cpt_toml_value){.type = CPT_TOML_STR, .s = t};
            }
            rc = assign(cfg, k, &arr, where, err);
            free(arr.items);
            free(body);
            return rc;
        }
        return cpt_errf(err, "%s: %s", where, verr.msg);
    }
    rc = assign(cfg, k, &tv, where, err);
    cpt_toml_value_free(&tv);
    return rc;
}

static int load_text(cpt_config *cfg, const char *text, size_t len, const char *name, cpt_err *err) {
    cpt_toml_doc doc;
    if (cpt_toml_parse(text, len, name, &doc, err)) return -1;
    for (size_t i = 0; i < doc.n; i++) {
        const cpt_toml_entry *e = &doc.entries[i];
        char where[4200];
        snprintf(where, sizeof where, "%s:%d", name, e->line);
        int k = find_key(cfg->keys, cfg->n, e->key);
        int rc = k < 0 ? unknown_key(cfg, where, e->key, err) : assign(cfg, k, &e->value, where, err);
        if (rc) {
            cpt_toml_free(&doc);
            return -1;
        }
        cfg->v[k].line = e->line;
    }
    cpt_toml_free(&doc);
    return 0;
}

cpt_config *cpt_config_load_table(const cpt_key_decl *keys, size_t n_keys, const char *text, size_t len,
                                  const char *name, int n_overrides, char *const *overrides, cpt_err *err) {
    cpt_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg || !(cfg->v = calloc(n_keys ? n_keys : 1, sizeof *cfg->v))) {
        free(cfg);
        cpt_errf(err, "out of memory");
        return NULL;
    }
    cfg->keys = keys;
    cfg->n = n_keys;
    if (set_defaults(cfg, err)) goto fail;
    if (text && load_text(cfg, text, len, name ? name : "<config>", err)) goto fail;
    for (int i = 0; i < n_overrides; i++)
        if (apply_override(cfg, overrides[i], err)) goto fail;
    return cfg;
fail:
    cpt_config_free(cfg);
    return NULL;
}

cpt_config *cpt_config_load_file(const cpt_key_table *t, const char *path, int n_overrides, char *const *overrides,
                                 cpt_err *err) {
    char *text = NULL;
    size_t len = 0;
    if (path && !(text = cpt_read_file(path, &len, err))) return NULL;
    cpt_config *cfg = cpt_config_load_table(t->keys, t->n, text, len, path, n_overrides, overrides, err);
    free(text);
    return cfg;
}

void cpt_config_free(cpt_config *cfg) {
    if (!cfg) return;
    for (size_t k = 0; k < cfg->n; k++) value_clear(&cfg->v[k]);
    free(cfg->v);
    free(cfg);
}

/* Reading an undeclared key or with the wrong type is a bug in the caller, not a user error. */
static int lookup(const cpt_config *cfg, const char *key, cpt_key_type want, const char *fn) {
    int k = find_key(cfg->keys, cfg->n, key);
    if (k < 0) {
        fprintf(stderr, "cpt: %s(\"%s\"): key not declared in any config_keys.def\n", fn, key);
        abort();
    }
    if (cfg->keys[k].type != want) {
        fprintf(stderr, "cpt: %s(\"%s\"): key is declared as %s\n", fn, key, cpt_key_type_name(cfg->keys[k].type));
        abort();
    }
    return k;
}

int64_t cpt_cfg_int(const cpt_config *cfg, const char *key) { return cfg->v[lookup(cfg, key, CPT_KEY_T_INT, __func__)].i; }
double cpt_cfg_float(const cpt_config *cfg, const char *key) { return cfg->v[lookup(cfg, key, CPT_KEY_T_FLOAT, __func__)].f; }
int cpt_cfg_bool(const cpt_config *cfg, const char *key) { return cfg->v[lookup(cfg, key, CPT_KEY_T_BOOL, __func__)].b; }
const char *cpt_cfg_str(const cpt_config *cfg, const char *key) { return cfg->v[lookup(cfg, key, CPT_KEY_T_STR, __func__)].s; }

size_t cpt_cfg_array_len(const cpt_config *cfg, const char *key) {
    int k = find_key(cfg->keys, cfg->n, key);
    if (k < 0 || (cfg->keys[k].type != CPT_KEY_T_STR_ARRAY && cfg->keys[k].type != CPT_KEY_T_INT_ARRAY)) {
        fprintf(stderr, "cpt: cpt_cfg_array_len(\"%s\"): not a declared array key\n", key);
        abort();
    }
    return cfg->v[k].n;
}

const char *cpt_cfg_array_str(const cpt_config *cfg, const char *key, size_t i) {
    const value *v = &cfg->v[lookup(cfg, key, CPT_KEY_T_STR_ARRAY, __func__)];
    if (i >= v->n) {
        fprintf(stderr, "cpt: cpt_cfg_array_str(\"%s\", %zu): index past the %zu items\n", key, i, v->n);
        abort();
    }
    return v->sa[i];
}

int64_t cpt_cfg_array_int(const cpt_config *cfg, const char *key, size_t i) {
    const value *v = &cfg->v[lookup(cfg, key, CPT_KEY_T_INT_ARRAY, __func__)];
    if (i >= v->n) {
        fprintf(stderr, "cpt: cpt_cfg_array_int(\"%s\", %zu): index past the %zu items\n", key, i, v->n);
        abort();
    }
    return v->ia[i];
}

int cpt_cfg_is_set(const cpt_config *cfg, const char *key) {
    int k = find_key(cfg->keys, cfg->n, key);
    if (k < 0) {
        fprintf(stderr, "cpt: cpt_cfg_is_set(\"%s\"): key not declared in any config_keys.def\n", key);
        abort();
    }
    return cfg->v[k].set;
}

int cpt_config_table_has_key(const cpt_key_table *t, const char *key) { return find_key(t->keys, t->n, key) >= 0; }

/* ---- dump, hash, docs ---- */

/* 1 for a connection URL key (NAME.url, NAME_url): its password belongs in a password file, and a URL that still
 * carries one is refused where it is used, so a dump may hide it without changing any config that runs. Other
 * strings are written as they are (a plugin's config may hold a URL it needs); `cpt config show` hides their
 * secrets when it prints them. */
static int is_url_key(const char *name) {
    size_t n = strlen(name);
    return n >= 4 && (!strcmp(name + n - 4, ".url") || !strcmp(name + n - 4, "_url"));
}

/* A connection URL's password never reaches a dump (config show, RUN_DIR/config.toml, checkpoints) nor the hash. */
static int write_string_redacted(cpt_strbuf *b, const char *key, const char *s) {
    if (!is_url_key(key) || !cpt_url_has_secret(s)) return cpt_toml_write_string(b, s);
    size_t cap = strlen(s) + 28; /* core/redact.h */
    char *shown = malloc(cap);
    if (!shown) return -1;
    cpt_redact_url(s, shown, cap);
    int rc = cpt_toml_write_string(b, shown);
    free(shown);
    return rc;
}

static int write_value(cpt_strbuf *b, const cpt_key_decl *d, const value *v) {
    switch (d->type) {
    case CPT_KEY_T_INT: return cpt_strbuf_printf(b, "%lld", (long long)v->i);
    case CPT_KEY_T_FLOAT: return cpt_toml_write_float(b, v->f);
    case CPT_KEY_T_BOOL: return cpt_strbuf_add(b, v->b ? "true" : "false", v->b ? 4 : 5);
    case CPT_KEY_T_STR: return write_string_redacted(b, d->name, v->s);
    case CPT_KEY_T_STR_ARRAY:
    case CPT_KEY_T_INT_ARRAY:
        if (cpt_strbuf_add(b, "[", 1)) return -1;
        for (size_t i = 0; i < v->n; i++) {
            if (i && cpt_strbuf_add(b, ", ", 2)) return -1;
            int rc = d->type == CPT_KEY_T_STR_ARRAY ? write_string_redacted(b, d->name, v->sa[i])
                                             : cpt_strbuf_printf(b, "%lld", (long long)v->ia[i]);
            if (rc) return -1;
        }
        return cpt_strbuf_add(b, "]", 1);
    }
    return -1;
}

/* Length of the table part of a key ("a.b" of "a.b.c"); 0 for a root key. */
static size_t table_len(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot ? (size_t)(dot - name) : 0;
}

static int same_table(const char *a, const char *b) {
    size_t la = table_len(a), lb = table_len(b);
    return la == lb && !memcmp(a, b, la);
}

char *cpt_config_dump(const cpt_config *cfg) {
    cpt_strbuf b = {0};
    int rc = cpt_strbuf_printf(&b, "# cpt resolved config (hash %016llx)\n", (unsigned long long)cpt_config_hash(cfg));
    /* Root keys first, then each table once, its keys in declaration order. */
    for (size_t k = 0; !rc && k < cfg->n; k++) {
        if (table_len(cfg->keys[k].name)) continue;
        rc = cpt_strbuf_printf(&b, "%s = ", cfg->keys[k].name) || write_value(&b, &cfg->keys[k], &cfg->v[k]) ||
             cpt_strbuf_add(&b, "\n", 1);
    }
    for (size_t k = 0; !rc && k < cfg->n; k++) {
        size_t tl = table_len(cfg->keys[k].name);
        if (!tl) continue;
        int seen = 0;
        for (size_t j = 0; j < k && !seen; j++) seen = same_table(cfg->keys[j].name, cfg->keys[k].name);
        if (seen) continue;
        rc = cpt_strbuf_printf(&b, "\n[%.*s]\n", (int)tl, cfg->keys[k].name);
        for (size_t j = k; !rc && j < cfg->n; j++) {
            if (!same_table(cfg->keys[j].name, cfg->keys[k].name)) continue;
            rc = cpt_strbuf_printf(&b, "%s = ", cfg->keys[j].name + tl + 1) || write_value(&b, &cfg->keys[j], &cfg->v[j]) ||
                 cpt_strbuf_add(&b, "\n", 1);
        }
    }
    if (rc) {
        free(b.data);
        return NULL;
    }
    return b.data;
}

uint64_t cpt_config_hash(const cpt_config *cfg) {
    /* FNV-1a over "name=value\n" lines in name order, values in their TOML text (floats exact): independent of
     * declaration order and of the platform. */
    size_t *order = malloc((cfg->n ? cfg->n : 1) * sizeof *order);
    if (!order) return 0;
    for (size_t k = 0; k < cfg->n; k++) { /* insertion sort by name: a few hundred keys */
        size_t j = k;
        while (j > 0 && strcmp(cfg->keys[order[j - 1]].name, cfg->keys[k].name) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = k;
    }
    uint64_t h = 1469598103934665603ULL;
    cpt_strbuf b = {0};
    for (size_t i = 0; i < cfg->n; i++) {
        size_t k = order[i];
        b.len = 0;
        if (cpt_strbuf_printf(&b, "%s=", cfg->keys[k].name) || write_value(&b, &cfg->keys[k], &cfg->v[k]) ||
            cpt_strbuf_add(&b, "\n", 1)) {
            h = 0;
            break;
        }
        for (size_t j = 0; j < b.len; j++) h = (h ^ (unsigned char)b.data[j]) * 1099511628211ULL;
    }
    free(b.data);
    free(order);
    return h;
}

/* Markdown table cell: escapes '|' so it does not split the cell. */
static int md_cell(cpt_strbuf *b, const char *s) {
    for (; *s; s++) {
        int rc = *s == '|' ? cpt_strbuf_add(b, "\\|", 2) : cpt_strbuf_add(b, s, 1);
        if (rc) return -1;
    }
    return 0;
}

char *cpt_config_docs_markdown_table(const cpt_key_decl *keys, size_t n_keys) {
    /* Modules in order of first appearance (the include order of the .def files). */
    const char *modules[64];
    size_t n_modules = 0;
    for (size_t k = 0; k < n_keys; k++) {
        size_t m = 0;
        while (m < n_modules && strcmp(modules[m], keys[k].module)) m++;
        if (m == n_modules && n_modules < 64) modules[n_modules++] = keys[k].module;
    }
    cpt_strbuf b = {0};
    int rc = cpt_strbuf_printf(
        &b,
        "# Configuration reference\n\n"
        "Generated by `cpt config docs` from the `config_keys.def` files; do not edit by hand.\n\n"
        "A config is a TOML file (a subset: tables, dotted keys, strings, integers, floats, booleans, arrays,\n"
        "comments), plus C99 hexadecimal floats (`0x1p-3` = 0.125). Every command that takes a config also takes\n"
        "`section.key=value` overrides after it, applied\n"
        "in order; override values are typed by the key (strings may be unquoted, arrays are written `[a, b]`).\n"
        "Unknown keys, wrong types, out-of-range values, bad choices and duplicate keys are errors naming the file\n"
        "and line. `cpt config show CONFIG [overrides]` prints the resolved config, with the password of any URL\n"
        "shown as `***`.\n");
    for (size_t m = 0; !rc && m < n_modules; m++) {
        rc = cpt_strbuf_printf(&b, "\n## %s\n\n", modules[m]);
        int any = 0;
        for (size_t k = 0; !rc && k < n_keys; k++) {
            const cpt_key_decl *d = &keys[k];
            if (strcmp(d->module, modules[m])) continue;
            if (!any)
                rc = cpt_strbuf_printf(&b, "| key | type | default | allowed | description |\n"
                                           "| --- | --- | --- | --- | --- |\n");
            any = 1;
            cpt_strbuf dv = {0};
            value def = {.i = d->idef, .f = d->fdef, .b = d->bdef, .s = (char *)d->sdef};
            rc = rc || write_value(&dv, d, &def);
            rc = rc || cpt_strbuf_printf(&b, "| `%s` | %s | `", d->name, cpt_key_type_name(d->type));
            rc = rc || md_cell(&b, dv.data ? dv.data : "");
            rc = rc || cpt_strbuf_add(&b, "` | ", 4);
            free(dv.data);
            if (!rc) {
                if (d->type == CPT_KEY_T_INT) rc = cpt_strbuf_printf(&b, "%lld .. %lld", (long long)d->imin, (long long)d->imax);
                else if (d->type == CPT_KEY_T_FLOAT) {
                    cpt_strbuf lo = {0}, hi = {0};
                    rc = cpt_toml_write_float(&lo, d->fmin) || cpt_toml_write_float(&hi, d->fmax) ||
                         cpt_strbuf_printf(&b, "%s .. %s", lo.data, hi.data);
                    free(lo.data);
                    free(hi.data);
                } else if (d->type == CPT_KEY_T_STR && d->choices[0]) {
                    char list[512];
                    choices_list(d->choices, list, sizeof list);
                    rc = md_cell(&b, list);
                } else if (d->type == CPT_KEY_T_BOOL)
                    rc = cpt_strbuf_add(&b, "true, false", 11);
                else
                    rc = cpt_strbuf_add(&b, "any", 3);
            }
            rc = rc || cpt_strbuf_add(&b, " | ", 3) || md_cell(&b, d->doc) || cpt_strbuf_add(&b, " |\n", 3);
        }
    }
    if (rc) {
        free(b.data);
        return NULL;
    }
    return b.data;
}

/* Consistency of the declared table itself: used by the unit test. Returns -1 with a message naming the key. */
int cpt_config_check_keys(const cpt_key_decl *keys, size_t n_keys, cpt_err *err) {
    for (size_t k = 0; k < n_keys; k++) {
        const cpt_key_decl *d = &keys[k];
        for (size_t j = 0; j < k; j++) {
            if (!strcmp(keys[j].name, d->name)) return cpt_errf(err, "key %s is declared twice", d->name);
            size_t lj = strlen(keys[j].name), lk = strlen(d->name);
            /* "a.b" and "a.b.c" cannot both be keys: a.b would be a value and a table. */
            if ((lj < lk && !strncmp(keys[j].name, d->name, lj) && d->name[lj] == '.') ||
                (lk < lj && !strncmp(keys[j].name, d->name, lk) && keys[j].name[lk] == '.'))
                return cpt_errf(err, "keys %s and %s clash (one is a table of the other)", keys[j].name, d->name);
        }
        for (const char *p = d->name; *p; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '.'))
                return cpt_errf(err, "key %s: names use a-z, 0-9, '_' and '.'", d->name);
        if (!d->doc || !d->doc[0]) return cpt_errf(err, "key %s has no doc", d->name);
        if (d->type == CPT_KEY_T_INT && (d->imin > d->imax || d->idef < d->imin || d->idef > d->imax))
            return cpt_errf(err, "key %s: default %lld outside [%lld, %lld]", d->name, (long long)d->idef,
                            (long long)d->imin, (long long)d->imax);
        if (d->type == CPT_KEY_T_FLOAT && !(d->fmin <= d->fdef && d->fdef <= d->fmax))
            return cpt_errf(err, "key %s: default %g outside [%g, %g]", d->name, d->fdef, d->fmin, d->fmax);
        if (d->type == CPT_KEY_T_STR && d->choices[0] && !choice_ok(d->choices, d->sdef))
            return cpt_errf(err, "key %s: default \"%s\" is not one of its choices", d->name, d->sdef);
    }
    return 0;
}
