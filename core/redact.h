/* Secrets out of printed text: a URL's password (scheme://user:PASSWORD@host) and password-like query values
 * (?password=..., &pass=..., &auth=..., &token=...) become "***". Used wherever a config value or a queue URL is
 * printed, logged or written (config dump, preflight, error messages). */
#ifndef CPT_CORE_REDACT_H
#define CPT_CORE_REDACT_H

#include <stddef.h>

/* 1 when s holds something cpt_redact_url would hide. */
int cpt_url_has_secret(const char *s);

/* s with every secret replaced by "***" (NUL-terminated, truncated to cap; NULL s gives "(none)"). A string
 * without a secret is copied unchanged. At most 9 spans are hidden, so strlen(s) + 28 bytes always suffice. */
void cpt_redact_url(const char *s, char *out, size_t cap);

#endif
