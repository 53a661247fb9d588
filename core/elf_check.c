/* ELF shared object checks without loading (core/elf_check.h). Only this machine's class and byte order are
 * decoded further than the identification bytes: anything else is refused before its headers are read. */
#include "core/elf_check.h"

#include <elf.h>
#include <stdint.h>
#include <string.h>

#if UINTPTR_MAX > 0xffffffffu
#define NATIVE_CLASS ELFCLASS64
typedef Elf64_Ehdr ehdr_t;
typedef Elf64_Shdr shdr_t;
typedef Elf64_Sym sym_t;
#define SYM_BIND ELF64_ST_BIND
#define SYM_TYPE ELF64_ST_TYPE
#else
#define NATIVE_CLASS ELFCLASS32
typedef Elf32_Ehdr ehdr_t;
typedef Elf32_Shdr shdr_t;
typedef Elf32_Sym sym_t;
#define SYM_BIND ELF32_ST_BIND
#define SYM_TYPE ELF32_ST_TYPE
#endif

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NATIVE_DATA ELFDATA2LSB
#else
#define NATIVE_DATA ELFDATA2MSB
#endif

/* The architecture this program runs on; 0 where unknown here (then any e_machine passes). */
static int native_machine(void) {
#if defined(__x86_64__)
    return EM_X86_64;
#elif defined(__aarch64__)
    return EM_AARCH64;
#elif defined(__i386__)
    return EM_386;
#elif defined(__powerpc64__)
    return EM_PPC64;
#elif defined(__riscv)
    return EM_RISCV;
#elif defined(__s390x__)
    return EM_S390;
#else
    return 0;
#endif
}

/* 1 if [off, off + size) lies inside [0, len). */
static int inside(uint64_t off, uint64_t size, size_t len) { return off <= len && size <= len - off; }

int cpt_elf_check_shared(const unsigned char *buf, size_t len, const char *what, const char *const *names, int n,
                         int *found, cpt_err *err) {
    for (int i = 0; i < n; i++) found[i] = 0;
    if (len < EI_NIDENT || memcmp(buf, ELFMAG, SELFMAG))
        return cpt_errf(err, "%s: not an ELF file (a shared object built with -shared -fPIC is expected)", what);
    if (buf[EI_CLASS] != NATIVE_CLASS)
        return cpt_errf(err, "%s: a %s ELF file, this machine runs %s code", what,
                        buf[EI_CLASS] == ELFCLASS32 ? "32-bit" : buf[EI_CLASS] == ELFCLASS64 ? "64-bit" : "bad-class",
                        NATIVE_CLASS == ELFCLASS64 ? "64-bit" : "32-bit");
    if (buf[EI_DATA] != NATIVE_DATA) return cpt_errf(err, "%s: ELF byte order differs from this machine's", what);
    ehdr_t eh;
    if (len < sizeof eh) return cpt_errf(err, "%s: truncated ELF header", what);
    memcpy(&eh, buf, sizeof eh);
    if (eh.e_type != ET_DYN)
        return cpt_errf(err, "%s: ELF type %u, not a shared object (ET_DYN; build with -shared -fPIC)", what,
                        (unsigned)eh.e_type);
    int m = native_machine();
    if (m && eh.e_machine != m)
        return cpt_errf(err, "%s: built for ELF machine %u, this machine is %d", what, (unsigned)eh.e_machine, m);
    if (!eh.e_shoff || !eh.e_shnum)
        return cpt_errf(err, "%s: no ELF section headers, so its symbols cannot be checked", what);
    if (eh.e_shentsize != sizeof(shdr_t) || !inside(eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(shdr_t), len))
        return cpt_errf(err, "%s: ELF section headers out of the file (truncated or corrupt)", what);
    int dynsym = -1;
    for (unsigned i = 0; i < eh.e_shnum && dynsym < 0; i++) {
        shdr_t sh;
        memcpy(&sh, buf + eh.e_shoff + (uint64_t)i * sizeof sh, sizeof sh);
        if (sh.sh_type == SHT_DYNSYM) dynsym = (int)i;
    }
    if (dynsym < 0) return cpt_errf(err, "%s: no dynamic symbol table (.dynsym): it exports nothing", what);
    shdr_t sy, st;
    memcpy(&sy, buf + eh.e_shoff + (uint64_t)dynsym * sizeof sy, sizeof sy);
    if (sy.sh_entsize != sizeof(sym_t) || !inside(sy.sh_offset, sy.sh_size, len) || sy.sh_size % sizeof(sym_t))
        return cpt_errf(err, "%s: corrupt dynamic symbol table", what);
    if (sy.sh_link == 0 || sy.sh_link >= eh.e_shnum) return cpt_errf(err, "%s: corrupt dynamic symbol table link", what);
    memcpy(&st, buf + eh.e_shoff + (uint64_t)sy.sh_link * sizeof st, sizeof st);
    if (st.sh_type != SHT_STRTAB || !inside(st.sh_offset, st.sh_size, len))
        return cpt_errf(err, "%s: corrupt dynamic string table", what);
    const char *strtab = (const char *)buf + st.sh_offset;
    uint64_t strsz = st.sh_size;
    uint64_t count = sy.sh_size / sizeof(sym_t);
    for (uint64_t k = 1; k < count; k++) { /* symbol 0 is the reserved null symbol */
        sym_t s;
        memcpy(&s, buf + sy.sh_offset + k * sizeof s, sizeof s);
        if (s.st_shndx == SHN_UNDEF || s.st_name >= strsz) continue;
        int bind = SYM_BIND(s.st_info), type = SYM_TYPE(s.st_info);
        if ((bind != STB_GLOBAL && bind != STB_WEAK) || (type != STT_FUNC && type != STT_GNU_IFUNC)) continue;
        const char *name = strtab + s.st_name;
        size_t room = (size_t)(strsz - s.st_name);
        const char *nul = memchr(name, '\0', room);
        if (!nul) continue;
        for (int i = 0; i < n; i++)
            if (!found[i] && (size_t)(nul - name) == strlen(names[i]) && !memcmp(name, names[i], (size_t)(nul - name)))
                found[i] = 1;
    }
    return 0;
}
