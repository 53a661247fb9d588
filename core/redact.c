/* URL redaction (core/redact.h). */
#include "core/redact.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The authority's userinfo of s: [*u0, *u1) is the user, [*p0, *at) the password (p0 == at: none). The last '@'
 * after "://" counts, even past a '/': an unescaped '/' or '@' in a password must not let the rest show. */
static int find_password(const char *s, const char **p0, const char **at) {
    const char *scheme = strstr(s, "://");
    if (!scheme) return 0;
    const char *start = scheme + 3;
    const char *last_at = strrchr(start, '@');
    if (!last_at) return 0;
    const char *colon = memchr(start, ':', (size_t)(last_at - start));
    if (!colon) return 0;
    *p0 = colon + 1;
    *at = last_at;
    return 1;
}

static int secret_query_key(const char *k, size_t n) {
    static const char *const keys[] = {"password", "pass", "passwd", "pwd", "auth", "token", "secret"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strlen(keys[i]) == n && !strncasecmp(k, keys[i], n)) return 1;
    return 0;
}

/* The secret query values [v0[i], v1[i]) of s (at most max); returns how many there were. */
static int query_secrets(const char *s, const char **v0, const char **v1, int max) {
    const char *q = strchr(s, '?');
    int n = 0;
    while (q && *q) {
        const char *k = q + 1;
        const char *eq = strchr(k, '=');
        const char *amp = strchr(k, '&');
        if (!eq || (amp && amp < eq)) { q = amp; continue; }
        const char *end = amp ? amp : k + strlen(k);
        if (secret_query_key(k, (size_t)(eq - k)) && n < max) {
            v0[n] = eq + 1;
            v1[n] = end;
            n++;
        }
        q = amp;
    }
    return n;
}

int cpt_url_has_secret(const char *s) {
    if (!s || !strstr(s, "://")) return 0; /* only URLs: other strings (templates, regexes) stay as written */
    const char *p0, *at, *v0[8], *v1[8];
    if (find_password(s, &p0, &at)) return 1;
    return query_secrets(s, v0, v1, 8) > 0;
}

void cpt_redact_url(const char *s, char *out, size_t cap) {
    if (!cap) return;
    if (!s) { snprintf(out, cap, "(none)"); return; }
    if (!strstr(s, "://")) { snprintf(out, cap, "%s", s); return; }
    /* Spans to hide, in order: the password, then secret query values. */
    const char *h0[9], *h1[9];
    int n = 0;
    const char *p0, *at;
    if (find_password(s, &p0, &at)) h0[n] = p0, h1[n] = at, n++;
    const char *v0[8], *v1[8];
    int nq = query_secrets(n ? h1[0] : s, v0, v1, 8);
    for (int i = 0; i < nq; i++) h0[n] = v0[i], h1[n] = v1[i], n++;
    size_t o = 0;
    const char *p = s;
    for (int i = 0; i <= n; i++) {
        const char *stop = i < n ? h0[i] : s + strlen(s);
        for (; p < stop && o + 1 < cap; p++) out[o++] = *p;
        if (i < n) {
            for (const char *r = "***"; *r && o + 1 < cap; r++) out[o++] = *r;
            p = h1[i];
        }
    }
    out[o] = '\0';
}
