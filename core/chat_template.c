/* Chat templates: rendering (text + marks), tokenization with an assistant mask, family detection. */
#include "core/chat_template.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"

/* ---- rendered document: text plus where the special tokens and assistant spans are ---- */

typedef struct span {
    size_t begin, end;
} span;

typedef struct doc {
    char *text;
    size_t len, cap;
    span *specials; /* byte ranges of special tokens the template wrote */
    size_t n_specials, cap_specials;
    span *assistant; /* byte ranges of what the assistant writes (content through its end token) */
    size_t n_assistant, cap_assistant;
    int oom;
} doc;

static void doc_free(doc *d) {
    free(d->text);
    free(d->specials);
    free(d->assistant);
    memset(d, 0, sizeof *d);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem) return -1;
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static void emit(doc *d, const char *s, size_t n) {
    if (d->oom) return;
    if (n > SIZE_MAX - d->len - 1 || grow((void **)&d->text, &d->cap, d->len + n + 1, 1)) {
        d->oom = 1;
        return;
    }
    if (n) memcpy(d->text + d->len, s, n);
    d->len += n;
    d->text[d->len] = 0;
}

static void emits(doc *d, const char *s) { emit(d, s, strlen(s)); }

static void push_span(doc *d, span **arr, size_t *n, size_t *cap, size_t b, size_t e) {
    if (d->oom) return;
    if (grow((void **)arr, cap, *n + 1, sizeof(span))) {
        d->oom = 1;
        return;
    }
    (*arr)[(*n)++] = (span){b, e};
}

/* A special token written by the template: a safe place to cut the text for tokenization. */
static void emit_special(doc *d, const char *tok) {
    size_t b = d->len;
    emits(d, tok);
    push_span(d, &d->specials, &d->n_specials, &d->cap_specials, b, d->len);
}

static void assistant_from(doc *d, size_t begin) {
    push_span(d, &d->assistant, &d->n_assistant, &d->cap_assistant, begin, d->len);
}

/* ---- string helpers on (pointer, length) ---- */

typedef struct str {
    const char *p;
    size_t n;
} str;

static str mkstr(const char *p, size_t n) { return (str){p, n}; }

static const char *find(str s, const char *needle) {
    size_t k = strlen(needle);
    if (k > s.n) return NULL;
    return memmem(s.p, s.n, needle, k);
}

static const char *find_last(str s, const char *needle) {
    size_t k = strlen(needle);
    if (k > s.n) return NULL;
    for (size_t i = s.n - k + 1; i-- > 0;)
        if (memcmp(s.p + i, needle, k) == 0) return s.p + i;
    return NULL;
}

static int starts_with(str s, const char *pre) {
    size_t k = strlen(pre);
    return s.n >= k && memcmp(s.p, pre, k) == 0;
}

static int ends_with(str s, const char *suf) {
    size_t k = strlen(suf);
    return s.n >= k && memcmp(s.p + s.n - k, suf, k) == 0;
}

static str lstrip_nl(str s) {
    while (s.n && s.p[0] == '\n') s.p++, s.n--;
    return s;
}

static str rstrip_nl(str s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

/* Python's str.isspace() for one code point (what jinja's trim filter strips). */
static int py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* Decodes the UTF-8 sequence at p (at most n bytes); returns its length, or 0 when it is not valid UTF-8. */
static size_t utf8_decode(const unsigned char *p, size_t n, uint32_t *cp) {
    if (!n) return 0;
    unsigned char c = p[0];
    size_t len;
    uint32_t v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        len = 2, v = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, v = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, v = c & 0x07;
    } else {
        return 0;
    }
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    *cp = v;
    return len;
}

/* jinja's | trim: Python's str.strip() (Unicode whitespace). Invalid UTF-8 is left alone. */
static str py_strip(str s) {
    const unsigned char *p = (const unsigned char *)s.p;
    size_t b = 0, e = s.n;
    uint32_t cp;
    size_t k;
    while (b < e && (k = utf8_decode(p + b, e - b, &cp)) && py_isspace(cp)) b += k;
    while (e > b) {
        size_t start = e - 1; /* back up to the first byte of the last sequence */
        while (start > b && (p[start] & 0xC0) == 0x80 && e - start < 4) start--;
        k = utf8_decode(p + start, e - start, &cp);
        if (!k || start + k != e || !py_isspace(cp)) break;
        e = start;
    }
    return mkstr(s.p + b, e - b);
}

static int is_role(const cpt_chat_message *m, const char *role) { return strcmp(m->role, role) == 0; }

static int check_messages(const cpt_chat_message *msgs, size_t n, cpt_err *err) {
    if (n == 0) return cpt_errf(err, "chat template: the conversation has no messages");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role) return cpt_errf(err, "messages[%zu].role: missing", i);
        if (!msgs[i].content && msgs[i].content_len)
            return cpt_errf(err, "messages[%zu].content: missing", i);
        if (!is_role(&msgs[i], "system") && !is_role(&msgs[i], "user") && !is_role(&msgs[i], "assistant"))
            return cpt_errf(err, "messages[%zu].role: unknown role '%s' (expected system, user or assistant)", i,
                            msgs[i].role);
    }
    return 0;
}

static str content_of(const cpt_chat_message *m) { return mkstr(m->content ? m->content : "", m->content_len); }

/* ---- the families ---- */

static void render_chatml(const cpt_chat_template *tpl, const cpt_chat_message *msgs, size_t n,
                          const cpt_chat_options *opt, doc *d) {
    if (tpl->default_system && !is_role(&msgs[0], "system")) {
        emit_special(d, "<|im_start|>");
        emits(d, "system\n");
        emits(d, tpl->default_system);
        emit_special(d, "<|im_end|>");
        emits(d, "\n");
    }
    for (size_t i = 0; i < n; i++) {
        str c = content_of(&msgs[i]);
        emit_special(d, "<|im_start|>");
        emits(d, msgs[i].role);
        emits(d, "\n");
        size_t begin = d->len;
        emit(d, c.p, c.n);
        emit_special(d, "<|im_end|>");
        if (is_role(&msgs[i], "assistant")) assistant_from(d, begin);
        emits(d, "\n");
    }
    if (opt->add_generation_prompt) {
        emit_special(d, "<|im_start|>");
        emits(d, "assistant\n");
    }
}

/* Qwen3: the last user message that is not a wrapped tool response; everything after it is the current turn. */
static size_t qwen3_last_query(const cpt_chat_message *msgs, size_t n) {
    for (size_t i = n; i-- > 0;) {
        str c = content_of(&msgs[i]);
        if (is_role(&msgs[i], "user") && !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>")))
            return i;
    }
    return n - 1;
}

static void render_qwen3(const cpt_chat_message *msgs, size_t n, const cpt_chat_options *opt, doc *d) {
    if (is_role(&msgs[0], "system")) {
        str c = content_of(&msgs[0]);
        emit_special(d, "<|im_start|>");
        emits(d, "system\n");
        emit(d, c.p, c.n);
        emit_special(d, "<|im_end|>");
        emits(d, "\n");
    }
    size_t last_query = qwen3_last_query(msgs, n);
    for (size_t i = 0; i < n; i++) {
        const cpt_chat_message *m = &msgs[i];
        str c = content_of(m);
        if (is_role(m, "user") || (is_role(m, "system") && i > 0)) {
            emit_special(d, "<|im_start|>");
            emits(d, m->role);
            emits(d, "\n");
            emit(d, c.p, c.n);
            emit_special(d, "<|im_end|>");
            emits(d, "\n");
        } else if (is_role(m, "assistant")) {
            str content = c, reasoning = mkstr("", 0);
            if (m->reasoning) {
                reasoning = mkstr(m->reasoning, m->reasoning_len);
            } else if (find(c, "</think>")) {
                const char *last_close = find_last(c, "</think>");
                content = lstrip_nl(mkstr(last_close + 8, (size_t)(c.p + c.n - (last_close + 8))));
                str before = rstrip_nl(mkstr(c.p, (size_t)(find(c, "</think>") - c.p)));
                const char *open = find_last(before, "<think>");
                if (open) before = mkstr(open + 7, (size_t)(before.p + before.n - (open + 7)));
                reasoning = lstrip_nl(before);
            }
            emit_special(d, "<|im_start|>");
            emits(d, "assistant\n");
            size_t begin = d->len;
            if (i > last_query && (i == n - 1 || reasoning.n)) {
                str r = rstrip_nl(lstrip_nl(reasoning));
                str body = lstrip_nl(content);
                emits(d, "<think>\n");
                emit(d, r.p, r.n);
                emits(d, "\n</think>\n\n");
                emit(d, body.p, body.n);
            } else {
                emit(d, content.p, content.n);
            }
            emit_special(d, "<|im_end|>");
            assistant_from(d, begin);
            emits(d, "\n");
        }
    }
    if (opt->add_generation_prompt) {
        emit_special(d, "<|im_start|>");
        emits(d, "assistant\n");
        if (opt->disable_thinking) emits(d, "<think>\n\n</think>\n\n");
    }
}

static void render_llama3(const cpt_chat_message *msgs, size_t n, const cpt_chat_options *opt, doc *d) {
    for (size_t i = 0; i < n; i++) {
        if (i == 0) emit_special(d, "<|begin_of_text|>");
        emit_special(d, "<|start_header_id|>");
        emits(d, msgs[i].role);
        emit_special(d, "<|end_header_id|>");
        emits(d, "\n\n");
        size_t begin = d->len;
        str c = py_strip(content_of(&msgs[i]));
        emit(d, c.p, c.n);
        emit_special(d, "<|eot_id|>");
        if (is_role(&msgs[i], "assistant")) assistant_from(d, begin);
    }
    if (opt->add_generation_prompt) {
        emit_special(d, "<|start_header_id|>");
        emits(d, "assistant");
        emit_special(d, "<|end_header_id|>");
        emits(d, "\n\n");
    }
}

static int render_doc(const cpt_chat_template *tpl, const cpt_chat_message *msgs, size_t n,
                      const cpt_chat_options *opt, doc *d, cpt_err *err) {
    static const cpt_chat_options defaults = {0, 0};
    if (!opt) opt = &defaults;
    memset(d, 0, sizeof *d);
    if (check_messages(msgs, n, err)) return -1;
    emit(d, "", 0); /* a NUL-terminated empty text even when nothing is written */
    switch (tpl->family) {
    case CPT_CHAT_CHATML: render_chatml(tpl, msgs, n, opt, d); break;
    case CPT_CHAT_QWEN3: render_qwen3(msgs, n, opt, d); break;
    case CPT_CHAT_LLAMA3: render_llama3(msgs, n, opt, d); break;
    default: return cpt_errf(err, "chat template: unknown family %d", (int)tpl->family);
    }
    if (d->oom) {
        doc_free(d);
        return cpt_errf(err, "chat template: out of memory rendering %zu messages", n);
    }
    return 0;
}

int cpt_chat_render_text(const cpt_chat_template *tpl, const cpt_chat_message *msgs, size_t n,
                         const cpt_chat_options *opt, cpt_chat_rendered *out, cpt_err *err) {
    memset(out, 0, sizeof *out);
    doc d;
    if (render_doc(tpl, msgs, n, opt, &d, err)) return -1;
    out->text = d.text;
    out->text_len = d.len;
    d.text = NULL;
    doc_free(&d);
    return 0;
}

/* ---- tokenization with the assistant mask ---- */

typedef struct idbuf {
    int32_t *ids;
    uint8_t *mask;
    size_t n, cap;
} idbuf;

static int idbuf_push(idbuf *b, int32_t id, uint8_t m) {
    if (b->n == b->cap) {
        size_t c = b->cap ? b->cap * 2 : 256;
        int32_t *ids = realloc(b->ids, c * sizeof *ids);
        if (!ids) return -1;
        b->ids = ids;
        uint8_t *mask = realloc(b->mask, c);
        if (!mask) return -1;
        b->mask = mask;
        b->cap = c;
    }
    b->ids[b->n] = id;
    b->mask[b->n] = m;
    b->n++;
    return 0;
}

/* Is byte offset p inside an assistant span? Spans are sorted and disjoint. */
static int in_assistant(const doc *d, size_t p) {
    for (size_t i = 0; i < d->n_assistant; i++)
        if (p >= d->assistant[i].begin && p < d->assistant[i].end) return 1;
    return 0;
}

/* Tokens of the unit text[u0, u1) that hold only bytes before offset p: the common prefix of the unit's ids and
 * the ids of text[u0, p). *exact says whether the unit's tokens split exactly at p. */
static long tokens_before(const cpt_tokenizer *tok, const char *text, size_t u0, size_t p, const int32_t *ids,
                          long n, int *exact, cpt_err *err) {
    int32_t *pre = NULL;
    long np = cpt_tokenizer_encode(tok, text + u0, p - u0, &pre, err);
    if (np < 0) return -1;
    long j = 0;
    while (j < np && j < n && pre[j] == ids[j]) j++;
    *exact = (j == np);
    free(pre);
    return j;
}

/* Encodes one unit (a piece of text cut next to special tokens) and appends its ids with their mask. */
static int encode_unit(const cpt_tokenizer *tok, const doc *d, size_t u0, size_t u1, idbuf *out, cpt_err *err) {
    int32_t *ids = NULL;
    long n = cpt_tokenizer_encode(tok, d->text + u0, u1 - u0, &ids, err);
    if (n < 0) return -1;
    /* Mask boundaries inside the unit: the starts and ends of assistant spans strictly within (u0, u1). */
    long from = 0;
    int state = in_assistant(d, u0);
    int rc = 0;
    for (size_t s = 0; s < d->n_assistant && rc == 0; s++) {
        size_t edges[2] = {d->assistant[s].begin, d->assistant[s].end};
        for (int k = 0; k < 2; k++) {
            size_t p = edges[k];
            if (p <= u0 || p >= u1) continue;
            int exact = 0;
            long j = tokens_before(tok, d->text, u0, p, ids, n, &exact, err);
            if (j < 0) {
                rc = -1;
                break;
            }
            /* A token that straddles the boundary holds assistant bytes: it goes with the assistant side. */
            if (k == 1 && !exact && j < n) j++;
            if (j < from) j = from;
            for (long t = from; t < j; t++)
                if (idbuf_push(out, ids[t], (uint8_t)state)) rc = cpt_errf(err, "chat template: out of memory");
            from = j;
            state = (k == 0);
        }
    }
    for (long t = from; t < n && rc == 0; t++)
        if (idbuf_push(out, ids[t], (uint8_t)state)) rc = cpt_errf(err, "chat template: out of memory");
    free(ids);
    return rc;
}

int cpt_chat_render(const cpt_chat_template *tpl, const cpt_tokenizer *tok, const cpt_chat_message *msgs, size_t n,
                    const cpt_chat_options *opt, cpt_chat_rendered *out, cpt_err *err) {
    memset(out, 0, sizeof *out);
    doc d;
    if (render_doc(tpl, msgs, n, opt, &d, err)) return -1;
    /* Cut points: both edges of every template special token that this tokenizer matches as special (a token
     * it does not know is plain text, and cutting next to it could change how the text around it merges). */
    idbuf b = {0};
    size_t u0 = 0;
    int rc = 0;
    for (size_t i = 0; i <= d.n_specials && rc == 0; i++) {
        size_t cut[2];
        int ncut = 0;
        if (i < d.n_specials) {
            char name[32];
            span s = d.specials[i];
            size_t k = s.end - s.begin < sizeof name ? s.end - s.begin : sizeof name - 1;
            memcpy(name, d.text + s.begin, k);
            name[k] = 0;
            int32_t id = cpt_tokenizer_token_id(tok, name);
            if (id < 0 || !cpt_tokenizer_is_special(tok, id)) continue;
            cut[ncut++] = s.begin;
            cut[ncut++] = s.end;
        } else {
            cut[ncut++] = d.len;
        }
        for (int c = 0; c < ncut && rc == 0; c++) {
            if (cut[c] > u0) rc = encode_unit(tok, &d, u0, cut[c], &b, err);
            if (cut[c] > u0) u0 = cut[c];
        }
    }
    if (rc) {
        free(b.ids);
        free(b.mask);
        doc_free(&d);
        return cpt_err_prefix(err, "chat template: tokenizing");
    }
    out->text = d.text;
    out->text_len = d.len;
    d.text = NULL;
    doc_free(&d);
    out->ids = b.ids;
    out->assistant_mask = b.mask;
    out->n_ids = b.n;
    return 0;
}

void cpt_chat_rendered_free(cpt_chat_rendered *r) {
    if (!r) return;
    free(r->text);
    free(r->ids);
    free(r->assistant_mask);
    memset(r, 0, sizeof *r);
}

/* ---- choosing a template ---- */

const char *cpt_chat_family_name(cpt_chat_family family) {
    switch (family) {
    case CPT_CHAT_CHATML: return "chatml";
    case CPT_CHAT_QWEN3: return "qwen3";
    case CPT_CHAT_LLAMA3: return "llama3";
    }
    return "unknown";
}

int cpt_chat_template_check(const cpt_chat_template *tpl, const cpt_tokenizer *tok, cpt_err *err) {
    static const char *const chatml[] = {"<|im_start|>", "<|im_end|>", NULL};
    static const char *const llama3[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                         "<|eot_id|>", NULL};
    const char *const *need = tpl->family == CPT_CHAT_LLAMA3 ? llama3 : chatml;
    for (; *need; need++) {
        int32_t id = cpt_tokenizer_token_id(tok, *need);
        if (id < 0 || !cpt_tokenizer_is_special(tok, id))
            return cpt_errf(err, "chat template %s: the tokenizer has no special token %s (wrong template for "
                                 "this tokenizer?)", cpt_chat_family_name(tpl->family), *need);
    }
    return 0;
}

int cpt_chat_template_by_name(const char *name, cpt_chat_template *tpl, cpt_err *err) {
    memset(tpl, 0, sizeof *tpl);
    if (!name) return cpt_errf(err, "chat template: no name given");
    if (strcmp(name, "chatml") == 0) tpl->family = CPT_CHAT_CHATML;
    else if (strcmp(name, "qwen3") == 0) tpl->family = CPT_CHAT_QWEN3;
    else if (strcmp(name, "llama3") == 0) tpl->family = CPT_CHAT_LLAMA3;
    else return cpt_errf(err, "chat template: unknown template '%s' (expected auto, chatml, qwen3 or llama3)", name);
    return 0;
}

/* The default system prompt of a Qwen2.5-style template: a string literal '<|im_start|>system\n...<|im_end|>'
 * that holds the whole system message (not one that is concatenated with messages[0]). */
static int find_default_system(const char *jinja, char **out, cpt_err *err) {
    static const char head[] = "<|im_start|>system\\n";
    *out = NULL;
    for (const char *p = strstr(jinja, head); p; p = strstr(p + 1, head)) {
        if (p == jinja || (p[-1] != '\'' && p[-1] != '"')) continue;
        char quote = p[-1];
        const char *b = p + strlen(head);
        const char *e = strstr(b, "<|im_end|>");
        if (!e || e == b) continue;
        size_t len = (size_t)(e - b);
        char *s = malloc(len + 1);
        if (!s) return cpt_errf(err, "chat template: out of memory");
        size_t k = 0;
        int ok = 1;
        for (const char *q = b; q < e; q++) {
            if (*q == quote || *q == '\n') { ok = 0; break; }
            if (*q == '\\' && q + 1 < e) {
                q++;
                s[k++] = *q == 'n' ? '\n' : *q == 't' ? '\t' : *q;
            } else {
                s[k++] = *q;
            }
        }
        if (!ok) {
            free(s);
            continue;
        }
        s[k] = 0;
        *out = s;
        return 0;
    }
    return 0;
}

int cpt_chat_template_detect(const char *jinja, cpt_chat_template *tpl, cpt_err *err) {
    memset(tpl, 0, sizeof *tpl);
    if (!jinja || !*jinja) return cpt_errf(err, "chat template: the tokenizer has no chat_template");
    if (strstr(jinja, "<|start_header_id|>")) {
        if (strstr(jinja, "Cutting Knowledge Date") || strstr(jinja, "date_string"))
            return cpt_errf(err, "chat template: this is a Llama-3.1+ template (it writes a dated system header), "
                                 "which cpt does not render; pass --template llama3 for Llama-3 formatting");
        tpl->family = CPT_CHAT_LLAMA3;
        return 0;
    }
    if (strstr(jinja, "<|im_start|>")) {
        if (strstr(jinja, "last_query_index") && strstr(jinja, "reasoning_content")) {
            tpl->family = CPT_CHAT_QWEN3;
            return 0;
        }
        if (strstr(jinja, "<think>"))
            return cpt_errf(err, "chat template: a ChatML template with its own <think> handling that is not "
                                 "Qwen3's; pass --template qwen3 or chatml to choose the rendering");
        tpl->family = CPT_CHAT_CHATML;
        return find_default_system(jinja, &tpl->default_system, err);
    }
    return cpt_errf(err, "chat template: unknown template family (neither ChatML <|im_start|> nor Llama-3 "
                         "<|start_header_id|>); pass --template chatml|qwen3|llama3");
}

void cpt_chat_template_free(cpt_chat_template *tpl) {
    if (!tpl) return;
    free(tpl->default_system);
    memset(tpl, 0, sizeof *tpl);
}

static int dir_of_tokenizer(const char *path, char *dir, size_t cap, cpt_err *err) {
    size_t n = strlen(path);
    if (n + 1 > cap) return cpt_errf(err, "%s: path too long", path);
    memcpy(dir, path, n + 1);
    if (n >= 5 && strcmp(path + n - 5, ".json") == 0) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else strcpy(dir, ".");
    }
    return 0;
}

int cpt_chat_template_load(const char *tokenizer_path, const char *name, cpt_chat_template *tpl, cpt_err *err) {
    memset(tpl, 0, sizeof *tpl);
    if (name && strcmp(name, "auto") != 0) return cpt_chat_template_by_name(name, tpl, err);
    char dir[4096], path[4200];
    if (dir_of_tokenizer(tokenizer_path, dir, sizeof dir, err)) return -1;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (cpt_path_exists(path)) {
        json_error_t je;
        json_t *cfg = json_load_file(path, 0, &je);
        if (!cfg) return cpt_errf(err, "%s:%d: invalid JSON: %s", path, je.line, je.text);
        json_t *t = json_object_get(cfg, "chat_template");
        int rc;
        if (json_is_string(t)) {
            rc = cpt_chat_template_detect(json_string_value(t), tpl, err);
        } else if (json_is_array(t)) { /* named templates: [{"name": "default", "template": ...}, ...] */
            const char *text = NULL;
            size_t i;
            json_t *e;
            json_array_foreach(t, i, e) {
                json_t *nm = json_object_get(e, "name"), *tt = json_object_get(e, "template");
                if (json_is_string(nm) && json_is_string(tt) && strcmp(json_string_value(nm), "default") == 0)
                    text = json_string_value(tt);
            }
            rc = text ? cpt_chat_template_detect(text, tpl, err)
                      : cpt_errf(err, "%s: chat_template: no template named \"default\"", path);
        } else if (t) {
            rc = cpt_errf(err, "%s: chat_template: expected a string", path);
        } else {
            rc = 1; /* absent: try chat_template.jinja */
        }
        json_decref(cfg);
        if (rc <= 0) return rc ? cpt_err_prefix(err, "%s", path) : 0;
    }
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (cpt_path_exists(path)) {
        char *text = cpt_read_file(path, NULL, err);
        if (!text) return -1;
        int rc = cpt_chat_template_detect(text, tpl, err);
        free(text);
        return rc ? cpt_err_prefix(err, "%s", path) : 0;
    }
    return cpt_errf(err, "%s: no chat template found (tokenizer_config.json has no chat_template and there is no "
                         "chat_template.jinja); pass --template chatml|qwen3|llama3", dir);
}

/* ---- messages from JSON ---- */

int cpt_chat_messages_from_json(const json_t *messages, cpt_chat_message **msgs, size_t *n, cpt_err *err) {
    *msgs = NULL;
    *n = 0;
    if (!json_is_array(messages)) return cpt_errf(err, "messages: expected an array of {role, content} objects");
    size_t count = json_array_size(messages);
    if (count == 0) return cpt_errf(err, "messages: empty");
    cpt_chat_message *m = calloc(count, sizeof *m);
    if (!m) return cpt_errf(err, "messages: out of memory");
    for (size_t i = 0; i < count; i++) {
        json_t *o = json_array_get(messages, i);
        if (!json_is_object(o)) {
            free(m);
            return cpt_errf(err, "messages[%zu]: expected an object", i);
        }
        json_t *role = json_object_get(o, "role"), *content = json_object_get(o, "content");
        json_t *reasoning = json_object_get(o, "reasoning_content");
        if (!json_is_string(role)) {
            free(m);
            return cpt_errf(err, "messages[%zu].role: %s", i, role ? "expected a string" : "missing");
        }
        if (!json_is_string(content)) {
            free(m);
            return cpt_errf(err, "messages[%zu].content: %s", i, content ? "expected a string" : "missing");
        }
        if (reasoning && !json_is_string(reasoning) && !json_is_null(reasoning)) {
            free(m);
            return cpt_errf(err, "messages[%zu].reasoning_content: expected a string or null", i);
        }
        if (strlen(json_string_value(role)) != json_string_length(role)) {
            free(m);
            return cpt_errf(err, "messages[%zu].role: holds a NUL character", i);
        }
        m[i].role = json_string_value(role);
        m[i].content = json_string_value(content);
        m[i].content_len = json_string_length(content);
        if (json_is_string(reasoning)) {
            m[i].reasoning = json_string_value(reasoning);
            m[i].reasoning_len = json_string_length(reasoning);
        }
    }
    if (check_messages(m, count, err)) {
        free(m);
        return -1;
    }
    *msgs = m;
    *n = count;
    return 0;
}
