/*
 * CRC32C (Castagnoli), as crc32c.crc32c(data, crc) computes it, for the bookie's C
 * extensions (bookie/storage/_fastcheckpoint.c, bookie/storage/_fastadd.c): a slicing-by-8 table, and the
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
/* The hardware loop runs three independent lanes of CRC_LANE bytes at a time (the crc32
 * instruction takes three cycles but starts one a cycle), then joins them: a lane's
 * register is moved past the CRC_LANE bytes that follow it by crc_shift, which is linear
 * in the register (feeding zero bytes), so four byte tables hold it. */
#define CRC_LANE 64

static uint32_t crc_shift_table[4][256];

static void
crc_init_shift_table(void)
{
    static const unsigned char zeros[CRC_LANE];
    for (uint32_t b = 0; b < 4; b++) {
        for (uint32_t v = 0; v < 256; v++) {
            crc_shift_table[b][v] = crc_software_update(v << (8 * b), zeros, CRC_LANE);
        }
    }
}

/* The register after CRC_LANE zero bytes from ``crc``. */
static inline uint32_t
crc_shift(uint32_t crc)
{
    return crc_shift_table[0][crc & 0xFF] ^ crc_shift_table[1][(crc >> 8) & 0xFF] ^
           crc_shift_table[2][(crc >> 16) & 0xFF] ^ crc_shift_table[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t
crc_sse42_update(uint32_t state, const unsigned char *p, size_t n)
{
    uint64_t crc = state;
    while (n >= 3 * CRC_LANE) {
        uint64_t crc1 = 0, crc2 = 0;
        for (size_t i = 0; i < CRC_LANE; i += 8) {
            uint64_t word0, word1, word2;
            memcpy(&word0, p + i, 8);
            memcpy(&word1, p + CRC_LANE + i, 8);
            memcpy(&word2, p + 2 * CRC_LANE + i, 8);
            crc = _mm_crc32_u64(crc, word0);
            crc1 = _mm_crc32_u64(crc1, word1);
            crc2 = _mm_crc32_u64(crc2, word2);
        }
        crc = crc_shift(crc_shift((uint32_t)crc) ^ (uint32_t)crc1) ^ (uint32_t)crc2;
        p += 3 * CRC_LANE;
        n -= 3 * CRC_LANE;
    }
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
        crc_init_shift_table();
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
