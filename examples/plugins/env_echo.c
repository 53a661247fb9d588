/* Example environment plugin (ABI: reward/env_abi.h): a word counter. The call is the text to count, or Qwen's
 * JSON {"name": "wordcount", "arguments": {"text": "..."}} (then the "text" value is counted, found without a JSON
 * library for brevity); the observation is "N words, M characters". Config: a prefix for the observation
 * (env.plugin_config = "count: "). It keeps to seccomp strict mode: no files, no clock, no new memory.
 *
 * Build outside the tree: cc -shared -fPIC -I/path/to/cpt -o libenv_echo.so env_echo.c
 * (the cpt build makes build/plugins/libenv_echo.so). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "reward/env_abi.h"

typedef struct {
    char prefix[128];
} echo_state;

static echo_state state; /* one per process: every call runs in a fresh child */

int cpt_env_plugin_abi(void) { return CPT_ENV_PLUGIN_ABI; }

int cpt_env_plugin_sandbox(void) { return CPT_ENV_SANDBOX_STRICT; }

void *cpt_env_plugin_init(const char *config, char *err, size_t err_len) {
    if (strlen(config) >= sizeof state.prefix) {
        snprintf(err, err_len, "env.plugin_config: a prefix of at most %zu bytes", sizeof state.prefix - 1);
        return NULL;
    }
    snprintf(state.prefix, sizeof state.prefix, "%s", config);
    return &state;
}

int cpt_env_plugin_answer(void *vstate, const char *call, const char *extra, char *obs, size_t cap) {
    echo_state *s = vstate;
    (void)extra;
    const char *text = call, *end = call + strlen(call);
    const char *key = strstr(call, "\"text\"");
    if (call[0] == '{') {
        const char *q = key ? strchr(key + 6, '"') : NULL;
        if (!q) {
            snprintf(obs, cap, "error: the call has no \"text\" argument");
            return 0;
        }
        text = q + 1;
        end = text;
        while (*end && *end != '"') end += (*end == '\\' && end[1]) ? 2 : 1;
    }
    long words = 0, chars = 0;
    int in_word = 0;
    for (const char *p = text; p < end; p++) {
        if (((unsigned char)*p & 0xC0) != 0x80) chars++;
        if (isspace((unsigned char)*p)) {
            in_word = 0;
        } else if (!in_word) {
            in_word = 1;
            words++;
        }
    }
    snprintf(obs, cap, "%s%ld words, %ld characters", s->prefix, words, chars);
    return 1;
}
