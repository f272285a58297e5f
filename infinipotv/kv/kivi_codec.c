/* KIVI's quantizer on the CPU, fused: one pass over a group's data for its min/max, one for its codes.
 *
 * The same arithmetic as infinipotv/kv/quant.py's PyTorch path, bit for bit: every operation that PyTorch does in
 * float16/bfloat16 is computed in float32 and rounded back to that dtype (PyTorch's CPU half-precision kernels do the
 * same, and float32 holds more than 2 * 11 + 2 bits, so the double rounding is exact). Compiled without fused
 * multiply-adds (-ffp-contract=off) and without fast-math: each product and sum is rounded as PyTorch rounds it.
 * AVX2 + F16C, eight lanes; head_dim must be a multiple of 8 (and the value group size too), else the caller takes
 * the PyTorch path.
 *
 * Layouts (see quant.py): x [n, t, d] with n rows of stride xs elements; codes [n, t, d * bits / 8] packed along
 * channels, least significant bits first; keys: scale/zero [n, t / g, d]; values: scale/zero [n, t, d / g].
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define MAXD 4096 /* the largest head_dim */
#define MAXG 256  /* the largest value group */

typedef __m256 V;

/* -- dtype adapters: load 8 values as float32, round 8 float32 to the dtype, store 8 rounded values ------------- */

static inline V ld_f32(const void *p) { return _mm256_loadu_ps((const float *)p); }
static inline V rn_f32(V v) { return v; }
static inline void st_f32(void *p, V v) { _mm256_storeu_ps((float *)p, v); }
static inline float rn1_f32(float v) { return v; }
static inline float ld1_f32(const void *p) { return *(const float *)p; }
static inline void st1_f32(void *p, float v) { *(float *)p = v; }

#define F16_RN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
static inline V ld_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline V rn_f16(V v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, F16_RN)); }
static inline void st_f16(void *p, V v) { _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, F16_RN)); }
static inline float rn1_f16(float v) { return _cvtsh_ss(_cvtss_sh(v, F16_RN)); }
static inline float ld1_f16(const void *p) { return _cvtsh_ss(*(const uint16_t *)p); }
static inline void st1_f16(void *p, float v) { *(uint16_t *)p = _cvtss_sh(v, F16_RN); }

static inline V ld_bf16(const void *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
/* round to nearest even on the upper 16 bits (c10::BFloat16's rule); a NaN becomes the quiet NaN 0x7fc0 */
static inline __m256i bf16_bits(V v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    r = _mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc00000), nan);
}
static inline V rn_bf16(V v) { return _mm256_castsi256_ps(bf16_bits(v)); }
static inline float ld1_bf16(const void *p) {
    uint32_t u = (uint32_t)(*(const uint16_t *)p) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float rn1_bf16(float v) { return _mm256_cvtss_f32(rn_bf16(_mm256_set1_ps(v))); }
/* v: already rounded to bfloat16 (its low 16 bits are zero) */
static inline void st1_bf16(void *p, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    *(uint16_t *)p = (uint16_t)(u >> 16);
}
static inline void st_bf16(void *p, V v) {
    __m256i hi = _mm256_srli_epi32(bf16_bits(v), 16);
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
    _mm_storeu_si128((__m128i *)p, packed);
}

/* -- codes ------------------------------------------------------------------------------------------------------ */

/* round(clamp(v, 0, levels)) (half to even) as 8 bytes at q */
static inline void store_codes(uint8_t *q, V v, V levels) {
    v = _mm256_round_ps(_mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), levels), F16_RN);
    __m256i i = _mm256_cvtps_epi32(v);
    __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64((__m128i *)q, _mm_packus_epi16(w, w));
}

/* 8 codes from q as float32 */
static inline V load_codes(const uint8_t *q) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q)));
}

/* Packing 8 codes at a time in a 64-bit word (little-endian: the first code is the lowest byte), halving the gaps
   between them: 4 bits, 8 codes -> 4 bytes; 2 bits, 8 codes -> 2 bytes. d is a multiple of 8. */
static void pack_row(const uint8_t *restrict q, uint8_t *restrict out, int64_t d, int bits) {
    if (bits == 8) {
        memcpy(out, q, (size_t)d);
        return;
    }
    for (int64_t k = 0; k < d / 8; k++) {
        uint64_t w;
        memcpy(&w, q + 8 * k, 8);
        if (bits == 4) {
            w = (w | (w >> 4)) & 0x00FF00FF00FF00FFull;
            w = (w | (w >> 8)) & 0x0000FFFF0000FFFFull;
            uint32_t p = (uint32_t)(w | (w >> 16));
            memcpy(out + 4 * k, &p, 4);
        } else {
            w = (w | (w >> 6)) & 0x000F000F000F000Full;
            w = (w | (w >> 12)) & 0x000000FF000000FFull;
            uint16_t p = (uint16_t)(w | (w >> 24));
            memcpy(out + 2 * k, &p, 2);
        }
    }
}

static void unpack_row(const uint8_t *restrict packed, uint8_t *restrict q, int64_t d, int bits) {
    if (bits == 8) {
        memcpy(q, packed, (size_t)d);
        return;
    }
    for (int64_t k = 0; k < d / 8; k++) {
        uint64_t w;
        if (bits == 4) {
            uint32_t p;
            memcpy(&p, packed + 4 * k, 4);
            w = p;
            w = (w | (w << 16)) & 0x0000FFFF0000FFFFull;
            w = (w | (w << 8)) & 0x00FF00FF00FF00FFull;
            w = (w | (w << 4)) & 0x0F0F0F0F0F0F0F0Full;
        } else {
            uint16_t p;
            memcpy(&p, packed + 2 * k, 2);
            w = p;
            w = (w | (w << 24)) & 0x000000FF000000FFull;
            w = (w | (w << 12)) & 0x000F000F000F000Full;
            w = (w | (w << 6)) & 0x0303030303030303ull;
        }
        memcpy(q + 8 * k, &w, 8);
    }
}

static inline float hmin(V v) {
    __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_min_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_min_ss(m, _mm_shuffle_ps(m, m, 1)));
}

static inline float hmax(V v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

/* a token's value groups (inside kivi_quantize_value): first every group's min and scale (independent chains that
   the CPU overlaps), then the codes; NV = g / 8 vectors per group, a constant where g = 32 (KIVI's) */
#define VALUE_ROW(LD, RN, ST1, RN1, NV)                                                                              \
    do {                                                                                                            \
        float mns[MAXD / 8], scs[MAXD / 8];                                                                         \
        for (int64_t k = 0; k < ng; k++) {                                                                          \
            V lo = LD(AT(x, first + k * g)), hi = lo;                                                               \
            for (int64_t c = 1; c < (NV); c++) {                                                                    \
                V v = LD(AT(x, first + k * g + 8 * c));                                                             \
                lo = _mm256_min_ps(lo, v);                                                                          \
                hi = _mm256_max_ps(hi, v);                                                                          \
            }                                                                                                       \
            mns[k] = hmin(lo);                                                                                      \
            scs[k] = RN1(RN1(hmax(hi) - mns[k]) / (float)((1 << bits) - 1));                                        \
            ST1(AT_W(scale, out + k), scs[k]);                                                                      \
            ST1(AT_W(zero, out + k), mns[k]);                                                                       \
        }                                                                                                           \
        for (int64_t k = 0; k < ng; k++) {                                                                          \
            const V vmn = _mm256_set1_ps(mns[k]), safe = _mm256_set1_ps(scs[k] == 0.f ? 1.f : scs[k]);             \
            for (int64_t c = 0; c < (NV); c++) {                                                                    \
                V v = RN(_mm256_sub_ps(LD(AT(x, first + k * g + 8 * c)), vmn));                                     \
                store_codes(q + k * g + 8 * c, RN(_mm256_div_ps(v, safe)), levels);                                 \
            }                                                                                                       \
        }                                                                                                           \
    } while (0)
#define VALUE_ROW_float32(NV) VALUE_ROW(ld_f32, rn_f32, st1_f32, rn1_f32, NV)
#define VALUE_ROW_float16(NV) VALUE_ROW(ld_f16, rn_f16, st1_f16, rn1_f16, NV)
#define VALUE_ROW_bfloat16(NV) VALUE_ROW(ld_bf16, rn_bf16, st1_bf16, rn1_bf16, NV)

/* -- the four kernels, per dtype (E: element size in bytes) ------------------------------------------------------ */

/* element i of a tensor of the kernel's dtype (esz: its element size, declared by every kernel) */
#define AT(p, i) ((const char *)(p) + (int64_t)(i) * esz)
#define AT_W(p, i) ((char *)(p) + (int64_t)(i) * esz)

#define KERNELS(NAME, E, LD, RN, ST, LD1, RN1, ST1)                                                                                \
    /* keys, per channel: a group is g tokens of one channel */                                                    \
    void kivi_quantize_key_##NAME(const void *x, int64_t n, int64_t xs, int64_t t, int64_t d, int64_t g,         \
                                  int bits, uint8_t *codes, void *scale, void *zero) {                            \
        const int64_t esz = E;                                                                                      \
        const V levels = _mm256_set1_ps((float)((1 << bits) - 1)), one = _mm256_set1_ps(1.f);                     \
        float mn[MAXD], sf[MAXD];                                                                                   \
        uint8_t q[MAXD];                                                                                            \
        const int64_t row = d * bits / 8, ng = t / g;                                                               \
        for (int64_t i = 0; i < n; i++) {                                                                           \
            for (int64_t j = 0; j < ng; j++) {                                                                      \
                const int64_t first = i * xs + j * g * d, out = (i * ng + j) * d;                                  \
                for (int64_t c = 0; c < d; c += 8) {                                                                \
                    V lo = LD(AT(x, first + c)), hi = lo;                                                           \
                    for (int64_t r = 1; r < g; r++) {                                                               \
                        V v = LD(AT(x, first + r * d + c));                                                         \
                        lo = _mm256_min_ps(lo, v);                                                                  \
                        hi = _mm256_max_ps(hi, v);                                                                  \
                    }                                                                                               \
                    V s = RN(_mm256_div_ps(RN(_mm256_sub_ps(hi, lo)), levels));                                     \
                    ST(AT_W(scale, out + c), s);                                                                    \
                    ST(AT_W(zero, out + c), lo);                                                                    \
                    _mm256_storeu_ps(mn + c, lo);                                                                   \
                    _mm256_storeu_ps(sf + c, _mm256_blendv_ps(s, one, _mm256_cmp_ps(s, _mm256_setzero_ps(),      \
                                                                                    _CMP_EQ_OQ)));                 \
                }                                                                                                   \
                for (int64_t r = 0; r < g; r++) {                                                                   \
                    for (int64_t c = 0; c < d; c += 8) {                                                            \
                        V v = RN(_mm256_sub_ps(LD(AT(x, first + r * d + c)), _mm256_loadu_ps(mn + c)));            \
                        store_codes(q + c, RN(_mm256_div_ps(v, _mm256_loadu_ps(sf + c))), levels);                  \
                    }                                                                                               \
                    pack_row(q, codes + (i * t + j * g + r) * row, d, bits);                                        \
                }                                                                                                   \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
                                                                                                                    \
    /* values, per token: a group is g channels of one token (g <= MAXG: its vectors stay in registers) */      \
    void kivi_quantize_value_##NAME(const void *x, int64_t n, int64_t xs, int64_t t, int64_t d, int64_t g,       \
                                    int bits, uint8_t *codes, void *scale, void *zero) {                          \
        const int64_t esz = E;                                                                                      \
        const V levels = _mm256_set1_ps((float)((1 << bits) - 1));                                                  \
        uint8_t q[MAXD];                                                                                            \
        const int64_t row = d * bits / 8, ng = d / g, nv = g / 8;                                                   \
        for (int64_t i = 0; i < n; i++) {                                                                           \
            for (int64_t r = 0; r < t; r++) {                                                                       \
                const int64_t first = i * xs + r * d, out = (i * t + r) * ng;                                      \
                if (nv == 4)                                                                                        \
                    VALUE_ROW_##NAME(4);                                                                            \
                else                                                                                                \
                    VALUE_ROW_##NAME(nv);                                                                           \
                pack_row(q, codes + (i * t + r) * row, d, bits);                                                    \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
                                                                                                                    \
    /* keys: token r of row i reads scale/zero row groups[i * t + r] ([rows, d]); NULL: row i * (t / g) + r / g.   \
       Output row (i, r) at out + i * os + r * d. */                                                              \
    void kivi_dequantize_key_##NAME(const uint8_t *codes, int64_t n, int64_t t, int64_t d, int64_t g, int bits,  \
                                    const int64_t *groups, const void *scale, const void *zero, void *out,        \
                                    int64_t os) {                                                                  \
        const int64_t esz = E;                                                                                      \
        uint8_t q[MAXD];                                                                                            \
        const int64_t row = d * bits / 8;                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                                           \
            for (int64_t r = 0; r < t; r++) {                                                                       \
                const int64_t grp = (groups ? groups[i * t + r] : i * (t / g) + r / g) * d, dst = i * os + r * d;   \
                unpack_row(codes + (i * t + r) * row, q, d, bits);                                                  \
                for (int64_t c = 0; c < d; c += 8) {                                                                \
                    V v = RN(_mm256_mul_ps(load_codes(q + c), LD(AT(scale, grp + c))));                             \
                    ST(AT_W(out, dst + c), _mm256_add_ps(v, LD(AT(zero, grp + c))));                               \
                }                                                                                                   \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
                                                                                                                    \
    /* values: scale/zero [n, t, d / g]; output row (i, r) at out + i * os + r * d */                              \
    void kivi_dequantize_value_##NAME(const uint8_t *codes, int64_t n, int64_t t, int64_t d, int64_t g,          \
                                      int bits, const void *scale, const void *zero, void *out, int64_t os) {      \
        const int64_t esz = E;                                                                                      \
        uint8_t q[MAXD];                                                                                            \
        const int64_t row = d * bits / 8, ng = d / g;                                                               \
        for (int64_t i = 0; i < n; i++) {                                                                           \
            for (int64_t r = 0; r < t; r++) {                                                                       \
                const int64_t first = (i * t + r) * ng, dst = i * os + r * d;                                      \
                unpack_row(codes + (i * t + r) * row, q, d, bits);                                                  \
                for (int64_t k = 0; k < ng; k++) {                                                                  \
                    const V sk = _mm256_set1_ps(LD1(AT(scale, first + k))), zk = _mm256_set1_ps(LD1(AT(zero, first + k))); \
                    for (int64_t c = k * g; c < (k + 1) * g; c += 8) {                                              \
                        ST(AT_W(out, dst + c), _mm256_add_ps(RN(_mm256_mul_ps(load_codes(q + c), sk)), zk));        \
                    }                                                                                               \
                }                                                                                                   \
            }                                                                                                       \
        }                                                                                                           \
    }

KERNELS(float32, 4, ld_f32, rn_f32, st_f32, ld1_f32, rn1_f32, st1_f32)
KERNELS(float16, 2, ld_f16, rn_f16, st_f16, ld1_f16, rn1_f16, st1_f16)
KERNELS(bfloat16, 2, ld_bf16, rn_bf16, st_bf16, ld1_bf16, rn1_bf16, st1_bf16)

/* the largest head_dim the kernels take (their row buffers live on the stack) */
int64_t kivi_max_head_dim(void) { return MAXD; }
int64_t kivi_max_value_group(void) { return MAXG; }
