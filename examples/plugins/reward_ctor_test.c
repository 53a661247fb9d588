/* Test plugin (not an example to copy): its constructor runs when the library is loaded, before any cpt call, and
 * writes the file named by $CPT_TEST_PLUGIN_MARKER. tests/integration/test_plugin_preflight.sh checks that
 * `cpt preflight` never loads a plugin (the marker must not appear) while a real load does create it. Scores 1. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "reward/plugin_abi.h"

__attribute__((constructor)) static void mark_loaded(void) {
    const char *path = getenv("CPT_TEST_PLUGIN_MARKER");
    if (!path || !*path) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return;
    (void)!write(fd, "loaded\n", 7);
    close(fd);
}

int cpt_reward_plugin_abi(void) { return CPT_REWARD_PLUGIN_ABI; }

void *cpt_reward_plugin_init(const char *config, char *err, size_t err_len) {
    (void)config, (void)err, (void)err_len;
    static int state;
    return &state;
}

int cpt_reward_plugin_score_batch(void *state, int n, const char *const *prompts, const char *const *completions,
                                  const char *const *extras, double *scores, char *err, size_t err_len) {
    (void)state, (void)prompts, (void)completions, (void)extras, (void)err, (void)err_len;
    for (int i = 0; i < n; i++) scores[i] = 1.0;
    return n;
}

void cpt_reward_plugin_free(void *state) { (void)state; }
