/* KIVI's quantizer on the CPU, fused: one pass over a group's data for its min/max, one for its codes.
 *
 * The same arithmetic as infinipotv/kv/quant.py's PyTorch path, bit for bit: every operation that PyTorch does in
 * float16/bfloat16 is computed in float32 and rounded back to that dtype (PyTorch's CPU half-precision kernels do the
 * same, and float32 holds more than 2 * 11 + 2 bits, so the double rounding is exact). Compiled without fused
 * multiply-adds (-ffp-contract=off) and without fast-math: each product and sum is rounded as PyTorch rounds it.
 *
 * Built twice from this source (see native.py): -DLANES=8 with AVX2 + F16C, -DLANES=16 with AVX-512F. head_dim
 * must be a multiple of LANES (and a value group too), else the caller takes another build or the PyTorch path.
 *
 * Layouts (see quant.py): x [n, t, d] with n rows of stride xs elements; codes [n, t, d * bits / 8] packed along
 * channels, least significant bits first; keys: scale/zero [n, t / g, d]; values: scale/zero [n, t, d / g].
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define MAXD 4096 /* the largest head_dim */
#define MAXG 256  /* the largest value group */
#define RN_MODE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* -- LANES float32 lanes: the few vector operations the kernels use ---------------------------------------------- */
#if LANES == 16
typedef __m512 V;
typedef __m512i VI;
#define v_set1 _mm512_set1_ps
#define v_zero _mm512_setzero_ps
#define v_loadu _mm512_loadu_ps
#define v_storeu _mm512_storeu_ps
#define v_min _mm512_min_ps
#define v_max _mm512_max_ps
#define v_add _mm512_add_ps
#define v_sub _mm512_sub_ps
#define v_mul _mm512_mul_ps
#define v_div _mm512_div_ps
#define v_round(v) _mm512_roundscale_ps(v, RN_MODE)
#define v_hmin _mm512_reduce_min_ps
#define v_hmax _mm512_reduce_max_ps
static inline V v_one_where_zero(V s) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(s, v_zero(), _CMP_EQ_OQ), s, v_set1(1.f)); }
static inline V h16_load(const void *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline __m256i h16_bits(V v) { return _mm512_cvtps_ph(v, RN_MODE); }
static inline void h16_store(void *p, __m256i h) { _mm256_storeu_si256((__m256i *)p, h); }
static inline V h16_widen(__m256i h) { return _mm512_cvtph_ps(h); }
static inline VI u16_widen(const void *p) { return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)); }
static inline void u32_narrow16(void *p, VI u) { _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(u)); }
static inline VI vi_bf16_round(V v) {
    VI u = _mm512_castps_si512(v);
    VI lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    VI r = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))),
                            _mm512_set1_epi32((int)0xffff0000u));
    return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, _mm512_set1_epi32(0x7fc00000));
}
/* Four 16-lane vectors -> one whose quarter k holds op over a[k]'s lanes, four times: the min (or max) of four
   value groups at once (a transposing tree of 128-bit shuffles), instead of four horizontal reductions in turn. */
#define REDUCE4(OP, a0, a1, a2, a3, out)                                                                            \
    do {                                                                                                            \
        V m01 = OP(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xEE));                        \
        V m23 = OP(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));                        \
        V m = OP(_mm512_shuffle_f32x4(m01, m23, 0x88), _mm512_shuffle_f32x4(m01, m23, 0xDD));                      \
        m = OP(m, _mm512_permute_ps(m, 0x4E));                                                                      \
        (out) = OP(m, _mm512_permute_ps(m, 0xB1));                                                                  \
    } while (0)
/* quarter k of v (k constant), in every lane */
#define QUARTER(v, k) _mm512_shuffle_f32x4(v, v, (k) * 0x55)
#define vi_as_v _mm512_castsi512_ps
#define v_as_vi _mm512_castps_si512
#define vi_shl16(u) _mm512_slli_epi32(u, 16)
#define vi_shr16(u) _mm512_srli_epi32(u, 16)
/* LANES codes (integral floats in [0, 255]) as bytes, and back */
static inline __m128i codes_bytes(V v) { return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)); }
static inline V codes_float(__m128i b) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)); }
#else
typedef __m256 V;
typedef __m256i VI;
#define v_set1 _mm256_set1_ps
#define v_zero _mm256_setzero_ps
#define v_loadu _mm256_loadu_ps
#define v_storeu _mm256_storeu_ps
#define v_min _mm256_min_ps
#define v_max _mm256_max_ps
#define v_add _mm256_add_ps
#define v_sub _mm256_sub_ps
#define v_mul _mm256_mul_ps
#define v_div _mm256_div_ps
#define v_round(v) _mm256_round_ps(v, RN_MODE)
static inline float v_hmin(V v) {
    __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_min_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_min_ss(m, _mm_shuffle_ps(m, m, 1)));
}
static inline float v_hmax(V v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}
static inline V v_one_where_zero(V s) { return _mm256_blendv_ps(s, v_set1(1.f), _mm256_cmp_ps(s, v_zero(), _CMP_EQ_OQ)); }
static inline V h16_load(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m128i h16_bits(V v) { return _mm256_cvtps_ph(v, RN_MODE); }
static inline void h16_store(void *p, __m128i h) { _mm_storeu_si128((__m128i *)p, h); }
static inline V h16_widen(__m128i h) { return _mm256_cvtph_ps(h); }
static inline VI u16_widen(const void *p) { return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)); }
static inline void u32_narrow16(void *p, VI u) {
    _mm_storeu_si128((__m128i *)p, _mm_packus_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1)));
}
static inline VI vi_bf16_round(V v) {
    VI u = _mm256_castps_si256(v);
    VI lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    VI r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))),
                            _mm256_set1_epi32((int)0xffff0000u));
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc00000), _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}
#define vi_as_v _mm256_castsi256_ps
#define v_as_vi _mm256_castps_si256
#define vi_shl16(u) _mm256_slli_epi32(u, 16)
#define vi_shr16(u) _mm256_srli_epi32(u, 16)
static inline __m128i codes_bytes(V v) {
    __m256i i = _mm256_cvtps_epi32(v);
    __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    return _mm_packus_epi16(w, w);
}
static inline V codes_float(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)); }
#endif

/* -- dtype adapters: load LANES values as float32, round float32 to the dtype, store rounded values; and the same
      for one scalar (a value group's scale and zero) --------------------------------------------------------------- */

static inline V ld_f32(const void *p) { return v_loadu((const float *)p); }
static inline V rn_f32(V v) { return v; }
static inline void st_f32(void *p, V v) { v_storeu((float *)p, v); }
static inline float rn1_f32(float v) { return v; }
static inline float ld1_f32(const void *p) { return *(const float *)p; }
static inline void st1_f32(void *p, float v) { *(float *)p = v; }

static inline V ld_f16(const void *p) { return h16_load(p); }
static inline V rn_f16(V v) { return h16_widen(h16_bits(v)); }
static inline void st_f16(void *p, V v) { h16_store(p, h16_bits(v)); }
static inline float rn1_f16(float v) { return _cvtsh_ss(_cvtss_sh(v, RN_MODE)); }
static inline float ld1_f16(const void *p) { return _cvtsh_ss(*(const uint16_t *)p); }
static inline void st1_f16(void *p, float v) { *(uint16_t *)p = _cvtss_sh(v, RN_MODE); }

/* bfloat16: round to nearest even on the upper 16 bits (c10::BFloat16's rule), a NaN to the quiet NaN 0x7fc0 */
static inline V ld_bf16(const void *p) { return vi_as_v(vi_shl16(u16_widen(p))); }
static inline V rn_bf16(V v) { return vi_as_v(vi_bf16_round(v)); }
static inline void st_bf16(void *p, V v) { u32_narrow16(p, vi_shr16(vi_bf16_round(v))); }
static inline float rn1_bf16(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u = (v != v) ? 0x7fc00000u : ((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
    memcpy(&v, &u, 4);
    return v;
}
static inline float ld1_bf16(const void *p) {
    uint32_t u = (uint32_t)(*(const uint16_t *)p) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline void st1_bf16(void *p, float v) { /* v: already rounded to bfloat16 (low 16 bits zero) */
    uint32_t u;
    memcpy(&u, &v, 4);
    *(uint16_t *)p = (uint16_t)(u >> 16);
}

/* -- codes ------------------------------------------------------------------------------------------------------ */

/* Packing in a 64-bit word: 8 codes, one a byte (little-endian: the first code is the lowest byte), closed up to
   4 bits each (-> 32 bits) or 2 bits each (-> 16 bits) by halving the gaps between them; and back. Done a row at
   a time, the compiler vectorises these loops. */
static inline uint64_t pack8(uint64_t w, int bits) {
    if (bits == 4) {
        w = (w | (w >> 4)) & 0x00FF00FF00FF00FFull;
        w = (w | (w >> 8)) & 0x0000FFFF0000FFFFull;
        return (w | (w >> 16)) & 0xFFFFFFFFull;
    }
    w = (w | (w >> 6)) & 0x000F000F000F000Full;
    w = (w | (w >> 12)) & 0x000000FF000000FFull;
    return (w | (w >> 24)) & 0xFFFFull;
}

static inline uint64_t unpack8(uint64_t w, int bits) {
    if (bits == 4) {
        w = (w | (w << 16)) & 0x0000FFFF0000FFFFull;
        w = (w | (w << 8)) & 0x00FF00FF00FF00FFull;
        return (w | (w << 4)) & 0x0F0F0F0F0F0F0F0Full;
    }
    w = (w | (w << 24)) & 0x000000FF000000FFull;
    w = (w | (w << 12)) & 0x000F000F000F000Full;
    return (w | (w << 6)) & 0x0303030303030303ull;
}

/* round(clamp(v, 0, levels)) (half to even) as LANES bytes at q: one byte a code, packed a row at a time */
static inline void store_codes(uint8_t *q, V v, V levels) {
    _mm_storeu_si128((__m128i *)q, codes_bytes(v_round(v_min(v_max(v, v_zero()), levels))));
}

/* LANES codes, one a byte at q, as float32 */
static inline V load_codes(const uint8_t *q) { return codes_float(_mm_loadu_si128((const __m128i *)q)); }

/* A row of d codes (one a byte) packed into d * bits / 8 bytes, 8 codes a 64-bit word; and back. */
static inline void pack_row(const uint8_t *restrict q, uint8_t *restrict out, int64_t d, const int bits) {
    if (bits == 8) {
        memcpy(out, q, (size_t)d);
        return;
    }
    if (bits == 4) {
        for (int64_t k = 0; k < d / 8; k++) {
            uint64_t w;
            memcpy(&w, q + 8 * k, 8);
            uint32_t p = (uint32_t)pack8(w, 4);
            memcpy(out + 4 * k, &p, 4);
        }
        return;
    }
    int64_t k = 0;
    for (; k + 16 <= d; k += 16) { /* 16 codes -> one 32-bit word: the same stores as at 4 bits (vectorised alike) */
        uint64_t w0, w1;
        memcpy(&w0, q + k, 8);
        memcpy(&w1, q + k + 8, 8);
        uint32_t p = (uint32_t)(pack8(w0, 2) | (pack8(w1, 2) << 16));
        memcpy(out + k / 4, &p, 4);
    }
    if (k < d) { /* d = 8 mod 16 */
        uint64_t w;
        memcpy(&w, q + k, 8);
        uint16_t p = (uint16_t)pack8(w, 2);
        memcpy(out + k / 4, &p, 2);
    }
}

static inline void unpack_row(const uint8_t *restrict packed, uint8_t *restrict q, int64_t d, const int bits) {
    if (bits == 8) {
        memcpy(q, packed, (size_t)d);
        return;
    }
    int64_t first = 0;
    if (bits == 4) { /* 32 codes from 16 bytes at a time: each byte's low nibble, then its high one */
        const __m128i low = _mm_set1_epi8(0x0F);
        for (; first + 32 <= d; first += 32) {
            __m128i p = _mm_loadu_si128((const __m128i *)(packed + first / 2));
            __m128i lo = _mm_and_si128(p, low), hi = _mm_and_si128(_mm_srli_epi16(p, 4), low);
            _mm_storeu_si128((__m128i *)(q + first), _mm_unpacklo_epi8(lo, hi));
            _mm_storeu_si128((__m128i *)(q + first + 16), _mm_unpackhi_epi8(lo, hi));
        }
    }
    for (int64_t k = first / 8; k < d / 8; k++) {
        uint64_t w;
        if (bits == 4) {
            uint32_t p;
            memcpy(&p, packed + 4 * k, 4);
            w = unpack8(p, 4);
        } else {
            uint16_t p;
            memcpy(&p, packed + 2 * k, 2);
            w = unpack8(p, 2);
        }
        memcpy(q + 8 * k, &w, 8);
    }
}

/* -- the four kernels, per dtype ----------------------------------------------------------------------------------- */

/* element i of a tensor of the kernel's dtype (esz: its element size, declared by every kernel) */
#define AT(p, i) ((const char *)(p) + (int64_t)(i) * esz)
#define AT_W(p, i) ((char *)(p) + (int64_t)(i) * esz)

/* A token's value groups (inside kivi_quantize_value): first every group's min and scale (independent chains that
   the CPU overlaps), then the codes. NV = g / LANES vectors per group: a constant for KIVI's g = 32. */
#define VALUE_ROW(LD, RN, ST1, RN1, NV)                                                                             \
    do {                                                                                                            \
        float mns[MAXD / 8], scs[MAXD / 8];                                                                         \
        for (int64_t k = 0; k < ng; k++) {                                                                          \
            V lo = LD(AT(x, first + k * g)), hi = lo;                                                               \
            for (int64_t c = 1; c < (NV); c++) {                                                                    \
                V v = LD(AT(x, first + k * g + LANES * c));                                                         \
                lo = v_min(lo, v);                                                                                  \
                hi = v_max(hi, v);                                                                                  \
            }                                                                                                       \
            mns[k] = v_hmin(lo);                                                                                    \
            scs[k] = RN1(RN1(v_hmax(hi) - mns[k]) / (float)((1 << bits) - 1));                                      \
            ST1(AT_W(scale, out + k), scs[k]);                                                                      \
            ST1(AT_W(zero, out + k), mns[k]);                                                                       \
        }                                                                                                           \
        for (int64_t k = 0; k < ng; k++) {                                                                          \
            const V vmn = v_set1(mns[k]), safe = v_set1(scs[k] == 0.f ? 1.f : scs[k]);                             \
            for (int64_t c = 0; c < (NV); c++) {                                                                    \
                V v = RN(v_sub(LD(AT(x, first + k * g + LANES * c)), vmn));                                         \
                store_codes(q + k * g + LANES * c, RN(v_div(v, safe)), levels);                                     \
            }                                                                                                       \
        }                                                                                                           \
    } while (0)

#if LANES == 16
/* VALUE_ROW for g = 32 (two vectors a group), four groups at a time: their mins, maxes and scales in one vector */
#define VALUE_ROW_32(LD, RN, ST1, NAME)                                                                            \
    do {                                                                                                            \
        for (int64_t k = 0; k < ng; k += 4) {                                                                       \
            V a[8], lo[4], hi[4], mn, mx;                                                                           \
            for (int j = 0; j < 8; j++) a[j] = LD(AT(x, first + k * 32 + 16 * j));                                 \
            for (int j = 0; j < 4; j++) {                                                                           \
                lo[j] = v_min(a[2 * j], a[2 * j + 1]);                                                              \
                hi[j] = v_max(a[2 * j], a[2 * j + 1]);                                                              \
            }                                                                                                       \
            REDUCE4(v_min, lo[0], lo[1], lo[2], lo[3], mn);                                                         \
            REDUCE4(v_max, hi[0], hi[1], hi[2], hi[3], mx);                                                         \
            const V s = RN(v_div(RN(v_sub(mx, mn)), levels)), safe = v_one_where_zero(s);                           \
            const V mns[4] = {QUARTER(mn, 0), QUARTER(mn, 1), QUARTER(mn, 2), QUARTER(mn, 3)};                     \
            const V sfs[4] = {QUARTER(safe, 0), QUARTER(safe, 1), QUARTER(safe, 2), QUARTER(safe, 3)};             \
            const V scs[4] = {QUARTER(s, 0), QUARTER(s, 1), QUARTER(s, 2), QUARTER(s, 3)};                         \
            for (int j = 0; j < 4; j++) {                                                                           \
                ST1(AT_W(scale, out + k + j), _mm512_cvtss_f32(scs[j]));                                            \
                ST1(AT_W(zero, out + k + j), _mm512_cvtss_f32(mns[j]));                                             \
            }                                                                                                       \
            for (int j = 0; j < 8; j++)                                                                             \
                store_codes(q + k * 32 + 16 * j, RN(v_div(RN(v_sub(a[j], mns[j / 2])), sfs[j / 2])), levels);       \
        }                                                                                                           \
    } while (0)
#define FOUR_GROUPS_FIT(g, ng) ((g) == 32 && (ng) % 4 == 0)
#else
#define VALUE_ROW_32(LD, RN, ST1, NAME) do { } while (0)
#define FOUR_GROUPS_FIT(g, ng) 0
#endif

#define KERNELS(NAME, E, LD, RN, ST, LD1, RN1, ST1)                                                                 \
    /* keys, per channel: a group is g tokens of one channel */                                                    \
    static inline __attribute__((always_inline)) void impl_quantize_key_##NAME(const void *x, int64_t n, int64_t xs, int64_t t, int64_t d, int64_t g,         \
                                  uint8_t *codes, void *scale, void *zero, const int bits) {                            \
        const int64_t esz = E, row = d * bits / 8, ng = t / g;                                                      \
        const V levels = v_set1((float)((1 << bits) - 1));                                                          \
        float mn[MAXD], sf[MAXD];                                                                                   \
        uint8_t q[MAXD + 16];                                                                                       \
        for (int64_t i = 0; i < n; i++) {                                                                           \
            for (int64_t j = 0; j < ng; j++) {                                                                      \
                const int64_t first = i * xs + j * g * d, out = (i * ng + j) * d;                                  \
                for (int64_t c = 0; c < d; c += LANES) {                                                            \
                    V lo = LD(AT(x, first + c)), hi = lo;                                                           \
                    for (int64_t r = 1; r < g; r++) {                                                               \
                        V v = LD(AT(x, first + r * d + c));                                                         \
                        lo = v_min(lo, v);                                                                          \
                        hi = v_max(hi, v);                                                                          \
                    }                                                                                               \
                    V s = RN(v_div(RN(v_sub(hi, lo)), levels));                                                     \
                    ST(AT_W(scale, out + c), s);                                                                    \
                    ST(AT_W(zero, out + c), lo);                                                                    \
                    v_storeu(mn + c, lo);                                                                           \
                    v_storeu(sf + c, v_one_where_zero(s));                                                          \
                }                                                                                                   \
                for (int64_t r = 0; r < g; r++) {                                                                   \
                    for (int64_t c = 0; c < d; c += LANES) {                                                        \
                        V v = RN(v_sub(LD(AT(x, first + r * d + c)), v_loadu(mn + c)));                             \
                        store_codes(q + c, RN(v_div(v, v_loadu(sf + c))), levels);                                  \
                    }                                                                                               \
                    pack_row(q, codes + (i * t + j * g + r) * row, d, bits);                                        \
                }                                                                                                   \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
                                                                                                                    \
    /* values, per token: a group is g channels of one token */                                                    \
    static inline __attribute__((always_inline)) void impl_quantize_value_##NAME(const void *x, int64_t n, int64_t xs, int64_t t, int64_t d, int64_t g,       \
                                    uint8_t *codes, void *scale, void *zero, const int bits) {                          \
        const int64_t esz = E, row = d * bits / 8, ng = d / g, nv = g / LANES;                                      \
        uint8_t q[MAXD + 16];                                                                                       \
        const V levels = v_set1((float)((1 << bits) - 1));                                                          \
        for (int64_t i = 0; i < n; i++) {                                                                           \
            for (int64_t r = 0; r < t; r++) {                                                                       \
                const int64_t first = i * xs + r * d, out = (i * t + r) * ng;                                      \
                if (FOUR_GROUPS_FIT(g, ng))                                                                         \
                    VALUE_ROW_32(LD, RN, ST1, NAME);                                                                \
                else if (nv == 32 / LANES)                                                                          \
                    VALUE_ROW(LD, RN, ST1, RN1, 32 / LANES);                                                        \
                else                                                                                                \
                    VALUE_ROW(LD, RN, ST1, RN1, nv);                                                                \
                pack_row(q, codes + (i * t + r) * row, d, bits);                                                    \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
                                                                                                                    \
    /* keys: token r of row i reads scale/zero row groups[i * t + r] ([rows, d]); NULL: row i * (t / g) + r / g.   \
       Output row (i, r) at out + i * os + r * d. */                                                              \
    static inline __attribute__((always_inline)) void impl_dequantize_key_##NAME(const uint8_t *codes, int64_t n, int64_t t, int64_t d, int64_t g,            \
                                    const int64_t *groups, const void *scale, const void *zero, void *out,        \
                                    int64_t os, const int bits) {                                                                  \
        const int64_t esz = E, row = d * bits / 8;                                                                  \
        uint8_t q[MAXD + 16];                                                                                       \
        float sc[MAXD], zr[MAXD]; /* the group's scale/zero row in float32, kept while tokens share the group */    \
        int64_t held = -1;                                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                                           \
            for (int64_t r = 0; r < t; r++) {                                                                       \
                const int64_t grp = (groups ? groups[i * t + r] : i * (t / g) + r / g) * d, dst = i * os + r * d;   \
                if (grp != held) {                                                                                  \
                    for (int64_t c = 0; c < d; c += LANES) {                                                        \
                        v_storeu(sc + c, LD(AT(scale, grp + c)));                                                   \
                        v_storeu(zr + c, LD(AT(zero, grp + c)));                                                    \
                    }                                                                                               \
                    held = grp;                                                                                     \
                }                                                                                                   \
                unpack_row(codes + (i * t + r) * row, q, d, bits);                                                  \
                for (int64_t c = 0; c < d; c += LANES) {                                                            \
                    V v = RN(v_mul(load_codes(q + c), v_loadu(sc + c)));                                            \
                    ST(AT_W(out, dst + c), v_add(v, v_loadu(zr + c)));                                              \
                }                                                                                                   \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
                                                                                                                    \
    /* values: scale/zero [n, t, d / g]; output row (i, r) at out + i * os + r * d */                              \
    static inline __attribute__((always_inline)) void impl_dequantize_value_##NAME(const uint8_t *codes, int64_t n, int64_t t, int64_t d, int64_t g,          \
                                      const void *scale, const void *zero, void *out, int64_t os, const int bits) {      \
        const int64_t esz = E, row = d * bits / 8, ng = d / g;                                                      \
        uint8_t q[MAXD + 16];                                                                                       \
        for (int64_t i = 0; i < n; i++) {                                                                           \
            for (int64_t r = 0; r < t; r++) {                                                                       \
                const int64_t first = (i * t + r) * ng, dst = i * os + r * d;                                      \
                unpack_row(codes + (i * t + r) * row, q, d, bits);                                                  \
                for (int64_t k = 0; k < ng; k++) {                                                                  \
                    const V sk = v_set1(LD1(AT(scale, first + k))), zk = v_set1(LD1(AT(zero, first + k)));         \
                    for (int64_t c = k * g; c < (k + 1) * g; c += LANES)                                            \
                        ST(AT_W(out, dst + c), v_add(RN(v_mul(load_codes(q + c), sk)), zk));                        \
                }                                                                                                   \
            }                                                                                                       \
        }                                                                                                           \
    }

/* The exported kernels: one specialisation per bit width (the packing branches resolved at compile time). */
#define BY_BITS(F, ...) \
    do { if (bits == 4) F(__VA_ARGS__, 4); else if (bits == 2) F(__VA_ARGS__, 2); else F(__VA_ARGS__, 8); } while (0)
#define EXPORTS(NAME)                                                                                               \
    void kivi_quantize_key_##NAME(const void *x, int64_t n, int64_t xs, int64_t t, int64_t d, int64_t g,         \
                                  int bits, uint8_t *codes, void *scale, void *zero) {                            \
        BY_BITS(impl_quantize_key_##NAME, x, n, xs, t, d, g, codes, scale, zero);                                   \
    }                                                                                                               \
    void kivi_quantize_value_##NAME(const void *x, int64_t n, int64_t xs, int64_t t, int64_t d, int64_t g,       \
                                    int bits, uint8_t *codes, void *scale, void *zero) {                          \
        BY_BITS(impl_quantize_value_##NAME, x, n, xs, t, d, g, codes, scale, zero);                                 \
    }                                                                                                               \
    void kivi_dequantize_key_##NAME(const uint8_t *codes, int64_t n, int64_t t, int64_t d, int64_t g, int bits,  \
                                    const int64_t *groups, const void *scale, const void *zero, void *out,        \
                                    int64_t os) {                                                                  \
        BY_BITS(impl_dequantize_key_##NAME, codes, n, t, d, g, groups, scale, zero, out, os);                       \
    }                                                                                                               \
    void kivi_dequantize_value_##NAME(const uint8_t *codes, int64_t n, int64_t t, int64_t d, int64_t g,          \
                                      int bits, const void *scale, const void *zero, void *out, int64_t os) {      \
        BY_BITS(impl_dequantize_value_##NAME, codes, n, t, d, g, scale, zero, out, os);                             \
    }

KERNELS(float32, 4, ld_f32, rn_f32, st_f32, ld1_f32, rn1_f32, st1_f32)
KERNELS(float16, 2, ld_f16, rn_f16, st_f16, ld1_f16, rn1_f16, st1_f16)
KERNELS(bfloat16, 2, ld_bf16, rn_bf16, st_bf16, ld1_bf16, rn1_bf16, st1_bf16)
EXPORTS(float32)
EXPORTS(float16)
EXPORTS(bfloat16)

/* what the caller checks shapes against: the vector width, the largest head_dim and value group */
int64_t kivi_lanes(void) { return LANES; }
int64_t kivi_max_head_dim(void) { return MAXD; }
int64_t kivi_max_value_group(void) { return MAXG; }
