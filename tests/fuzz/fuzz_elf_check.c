/* Fuzzes the ELF shared-object checker (core/elf_check.h): any bytes give a result or a message naming the file,
 * never a read outside the buffer (the harness copies the input to an exact-size allocation so ASan sees one). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/elf_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    static const char *const names[] = {"cpt_reward_plugin_abi", "cpt_reward_plugin_init",
                                        "cpt_reward_plugin_score_batch", "cpt_reward_plugin_free"};
    int found[4];
    cpt_err err;
    if (cpt_elf_check_shared(buf, size, "fuzz.so", names, 4, found, &err) != 0) {
        if (!strstr(err.msg, "fuzz.so")) abort(); /* every error names the file */
    } else {
        for (int i = 0; i < 4; i++)
            if (found[i] != 0 && found[i] != 1) abort();
    }
    free(buf);
    return 0;
}
