/*
 * CRC32C (Castagnoli), as crc32c.crc32c(data, crc) computes it, for the bookie's C
 * extensions (bookie/_fastcheckpoint.c, bookie/_fastadd.c): a slicing-by-8 table, and the
 * SSE4.2 crc32 instruction where the CPU has it. Each extension includes this file and
 * gets its own copy of the table; call crc_select() once, at module init, before any CRC.
 *
 *   crc_update(state, p, n)  the running register over n more bytes (state starts at
 *                            0xFFFFFFFF; the CRC is the final state ^ 0xFFFFFFFF)
 *   crc_extend(crc, p, n)    crc32c.crc32c(p[:n], crc)
 *   crc_of(p, n)             crc32c.crc32c(p[:n])
 *   crc_software(p, n)       crc_of, always by table (checks the hardware path)
 */
#ifndef WALOG_CRC32C_H
#define WALOG_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define WALOG_X86_CRC 1
#include <nmmintrin.h>
#endif

static uint32_t crc_table[8][256];

static void
crc_init_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = n;
        for (int k = 0; k < 8; k++) {
            crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
        }
        crc_table[0][n] = crc;
    }
    for (uint32_t n = 0; n < 256; n++) {
        for (int t = 1; t < 8; t++) {
            crc_table[t][n] =
                (crc_table[t - 1][n] >> 8) ^ crc_table[0][crc_table[t - 1][n] & 0xFF];
        }
    }
}

static uint32_t
crc_software_update(uint32_t crc, const unsigned char *p, size_t n)
{
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
              crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
              crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) {
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    }
    return crc;
}

#ifdef WALOG_X86_CRC
__attribute__((target("sse4.2"))) static uint32_t
crc_sse42_update(uint32_t state, const unsigned char *p, size_t n)
{
    uint64_t crc = state;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8); /* x86 is little-endian, as the CRC's bit order wants */
        crc = _mm_crc32_u64(crc, word);
        p += 8;
        n -= 8;
    }
    uint32_t crc32 = (uint32_t)crc;
    while (n--) {
        crc32 = _mm_crc32_u8(crc32, *p++);
    }
    return crc32;
}
#endif

static uint32_t (*crc_update)(uint32_t, const unsigned char *, size_t) = crc_software_update;

/* Fill the table and pick the fastest implementation; "sse4.2" or "table". */
static const char *
crc_select(void)
{
    crc_init_table();
#ifdef WALOG_X86_CRC
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        crc_update = crc_sse42_update;
        return "sse4.2";
    }
#endif
    return "table";
}

static inline uint32_t
crc_extend(uint32_t crc, const unsigned char *p, size_t n)
{
    return crc_update(crc ^ 0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
}

static inline uint32_t
crc_of(const unsigned char *p, size_t n)
{
    return crc_extend(0, p, n);
}

static inline uint32_t
crc_software(const unsigned char *p, size_t n)
{
    return crc_software_update(0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
}

#endif /* WALOG_CRC32C_H */
