/* Fuzzes the metrics.jsonl readers (a file a crash may have torn or a user may have edited): the input is written
 * as a metrics file, then its series and keys are read; nothing may crash, and every point read is well formed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/metrics.h"

static char path[64];

static void remove_file(void) { unlink(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/cpt-fuzz-metrics-%ld.jsonl", (long)getpid());
        atexit(remove_file);
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    cpt_err err;
    static const char *keys[] = {"loss", "reward/mean", "step", "time"};
    for (int k = 0; k < 4; k++) {
        cpt_metrics_series s;
        if (cpt_metrics_read_series(path, keys[k], &s, &err) != 0) {
            if (!err.msg[0]) abort();
            continue;
        }
        for (size_t i = 1; i < s.n; i++)
            if (s.steps[i] <= s.steps[i - 1]) abort(); /* resumed runs are folded: steps strictly increase */
        if (s.bad_lines && !s.first_bad_line) abort();
        cpt_metrics_series_free(&s);
    }
    char **names;
    size_t n;
    if (cpt_metrics_read_keys(path, &names, &n, &err) == 0) {
        for (size_t i = 1; i < n; i++)
            if (strcmp(names[i - 1], names[i]) >= 0) abort(); /* sorted, unique */
        cpt_metrics_keys_free(names, n);
    }
    return 0;
}
