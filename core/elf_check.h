/* A bounds-checked reader of ELF headers and the dynamic symbol table, to check a shared object without loading
 * it (loading runs its constructors): used for reward plugins before anything dlopens them. It decodes bytes from
 * outside, so every offset, size and count is checked against the buffer (tests/fuzz/fuzz_elf_check.c). */
#ifndef CPT_CORE_ELF_CHECK_H
#define CPT_CORE_ELF_CHECK_H

#include <stddef.h>

#include "core/error.h"

/* Checks that buf[0..len) is an ELF shared object (ET_DYN) of this machine's class, byte order and architecture
 * with a dynamic symbol table, and sets found[i] to 1 for each names[i] it defines as a global or weak function
 * (0 otherwise). what names the file in errors. Returns 0, or -1 with err saying what is wrong. */
int cpt_elf_check_shared(const unsigned char *buf, size_t len, const char *what, const char *const *names, int n,
                         int *found, cpt_err *err);

#endif
