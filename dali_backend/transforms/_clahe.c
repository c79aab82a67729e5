/* OpenCV's CLAHE for 8-bit single-channel images, bit for bit, in one pass per phase.
 *
 * The Clahe operation's CPU kernel (dali_backend/transforms/color.py), an optional extension: without it
 * (no C compiler at install time) Clahe.apply calls cv2.createCLAHE, whose pixels these are. It follows
 * OpenCV's imgproc/src/clahe.cpp (CLAHE_CalcLut_Body, CLAHE_Interpolation_Body; OpenCV 4.x and 5.x):
 *
 *   - the tiles: a size the grid does not divide is padded on the bottom and right by
 *     tiles - size % tiles (so by a whole tile on an axis it does divide), BORDER_REFLECT_101, for the
 *     histograms only;
 *   - per tile a 256-bin histogram, clipped at max(int(clip_limit * tile_area / 256), 1), the excess
 *     redistributed evenly and the residual one by one every max(256 / residual, 1) bins; the table is
 *     saturate(cumulative * (255 / tile_area)), rounded to nearest, ties to even (cvRound);
 *   - per pixel the four neighbouring tiles' tables, blended in float32 in OpenCV's order
 *     (top * (1 - ya) + bottom * ya, each (left * (1 - xa) + right * xa)), rounded the same way.
 *
 * What differs is speed only: four partial histograms per tile (no store-to-load chain on runs of one
 * value) and, where the CPU has AVX2, the blend eight pixels at a time, each pixel's left and right
 * tile values in one gather from a table of pairs (two gathers per 8 pixels). Every float32 step
 * is the same IEEE operation in the same order on either path; the file is compiled without FMA
 * contraction (-ffp-contract=off, setup.py) so that no step is fused. The GIL is released while it runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__i386__) && !defined(__SSE2_MATH__)
#error "x87 float arithmetic (extended precision) would not give OpenCV's float32 blend: build with -msse2 -mfpmath=sse, or go without the extension (OpenCV is used)"
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CLAHE_X86 1
#endif

#define LUT_SLACK 4 /* the gathers read 4 bytes at the last table entry */

static inline int reflect101(int p, int n)
{
    if (n == 1)
        return 0;
    while (p < 0 || p >= n) {
        if (p < 0)
            p = -p;
        if (p >= n)
            p = 2 * n - 2 - p;
    }
    return p;
}

static inline int round_even(float v)
{
#ifdef CLAHE_X86
    return _mm_cvt_ss2si(_mm_set_ss(v)); /* MXCSR's rounding: nearest, ties to even, as cvRound */
#else
    return (int)__builtin_lrintf(v);
#endif
}

static inline uint8_t saturate_u8(float v)
{
    int r = round_even(v);
    return (uint8_t)(r < 0 ? 0 : (r > 255 ? 255 : r));
}

static void tile_tables(const uint8_t *src, Py_ssize_t stride, int w, int h, int tiles_x, int tiles_y,
                        int tw, int th, int clip, float lut_scale, uint8_t *lut, int *colmap)
{
    int parts[4][256];
    int hist[256];
    for (int ty = 0; ty < tiles_y; ++ty) {
        for (int tx = 0; tx < tiles_x; ++tx) {
            int x0 = tx * tw, y0 = ty * th;
            memset(parts, 0, sizeof parts);
            if (x0 + tw <= w && y0 + th <= h) {
                for (int y = y0; y < y0 + th; ++y) {
                    const uint8_t *p = src + y * stride + x0;
                    int x = 0;
                    for (; x + 4 <= tw; x += 4) {
                        parts[0][p[x]]++;
                        parts[1][p[x + 1]]++;
                        parts[2][p[x + 2]]++;
                        parts[3][p[x + 3]]++;
                    }
                    for (; x < tw; ++x)
                        parts[0][p[x]]++;
                }
            } else { /* a tile reaching into the reflected border */
                for (int x = 0; x < tw; ++x)
                    colmap[x] = reflect101(x0 + x, w);
                for (int y = y0; y < y0 + th; ++y) {
                    const uint8_t *p = src + reflect101(y, h) * stride;
                    for (int x = 0; x < tw; ++x)
                        parts[0][p[colmap[x]]]++;
                }
            }
            for (int i = 0; i < 256; ++i)
                hist[i] = parts[0][i] + parts[1][i] + parts[2][i] + parts[3][i];
            if (clip > 0) {
                int clipped = 0;
                for (int i = 0; i < 256; ++i) {
                    if (hist[i] > clip) {
                        clipped += hist[i] - clip;
                        hist[i] = clip;
                    }
                }
                int batch = clipped / 256, residual = clipped - batch * 256;
                for (int i = 0; i < 256; ++i)
                    hist[i] += batch;
                if (residual != 0) {
                    int step = 256 / residual;
                    if (step < 1)
                        step = 1;
                    for (int i = 0; i < 256 && residual > 0; i += step, residual--)
                        hist[i]++;
                }
            }
            uint8_t *table = lut + ((size_t)ty * tiles_x + tx) * 256; /* past 2^23 tiles an int overflows */
            int sum = 0;
            for (int i = 0; i < 256; ++i) {
                sum += hist[i];
                table[i] = saturate_u8(sum * lut_scale);
            }
        }
    }
}

#ifdef CLAHE_X86
/* The blend, 8 pixels at a time: each pixel's two horizontal neighbours come in one gather from a table of
   pairs (low byte the left tile's value, high byte the right tile's, borders clamped as OpenCV clamps), so
   a block of 8 takes two gathers, one per tile row. The float32 steps are the scalar loop's, in its order. */
__attribute__((target("avx2"))) static int blend_row_avx2(const uint8_t *s, uint8_t *d, int w, const int *pair,
                                                           const float *xa, const float *xa1, const uint16_t *top,
                                                           const uint16_t *bottom, float ya, float ya1)
{
    const __m256i low_byte = _mm256_set1_epi32(0xFF);
    const __m256 vya = _mm256_set1_ps(ya), vya1 = _mm256_set1_ps(ya1);
    int x = 0;
    for (; x + 8 <= w; x += 8) {
        __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s + x)));
        __m256i i = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(pair + x)), v);
        __m256i gt = _mm256_i32gather_epi32((const int *)top, i, 2);
        __m256i gb = _mm256_i32gather_epi32((const int *)bottom, i, 2);
        __m256 a = _mm256_cvtepi32_ps(_mm256_and_si256(gt, low_byte));
        __m256 b = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(gt, 8), low_byte));
        __m256 c = _mm256_cvtepi32_ps(_mm256_and_si256(gb, low_byte));
        __m256 e = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(gb, 8), low_byte));
        __m256 wl = _mm256_loadu_ps(xa1 + x), wr = _mm256_loadu_ps(xa + x);
        __m256 upper = _mm256_add_ps(_mm256_mul_ps(a, wl), _mm256_mul_ps(b, wr));
        __m256 lower = _mm256_add_ps(_mm256_mul_ps(c, wl), _mm256_mul_ps(e, wr));
        __m256 r = _mm256_add_ps(_mm256_mul_ps(upper, vya1), _mm256_mul_ps(lower, vya));
        __m256i ri = _mm256_cvtps_epi32(r); /* nearest, ties to even; then saturated to 0..255 */
        __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(ri), _mm256_extracti128_si256(ri, 1));
        _mm_storel_epi64((__m128i *)(d + x), _mm_packus_epi16(words, words));
    }
    return x;
}
#endif

/* 0, or -1 when memory ran out. */
static int clahe_u8(const uint8_t *src, Py_ssize_t sstride, uint8_t *dst, Py_ssize_t dstride, int w, int h,
                    int tiles_x, int tiles_y, double clip_limit, int simd)
{
    int pw = w, ph = h;
    if (w % tiles_x != 0 || h % tiles_y != 0) {
        pw = w + tiles_x - w % tiles_x;
        ph = h + tiles_y - h % tiles_y;
    }
    int tw = pw / tiles_x, th = ph / tiles_y;
    int area = tw * th;
    float lut_scale = 255.0f / (float)area;
    int clip = 0;
    if (clip_limit > 0.0) {
        double limit = clip_limit * area / 256;
        /* OpenCV's static_cast<int> of a value past INT_MAX (a huge or infinite clip_limit) gives INT_MIN on
           x86, so its max(clip, 1) is 1: the same here, without the undefined conversion */
        clip = limit < 2147483648.0 ? (int)limit : 1;
        if (clip < 1)
            clip = 1;
    }
    size_t lut_bytes = (size_t)tiles_x * tiles_y * 256 + LUT_SLACK;
    uint8_t *lut = (uint8_t *)calloc(lut_bytes, 1);
    int *colmap = (int *)malloc(sizeof(int) * (size_t)tw);
    int *ind1 = (int *)malloc(sizeof(int) * 2 * (size_t)w);
    float *xa = (float *)malloc(sizeof(float) * 2 * (size_t)w);
    if (!lut || !colmap || !ind1 || !xa) {
        free(lut), free(colmap), free(ind1), free(xa);
        return -1;
    }
    tile_tables(src, sstride, w, h, tiles_x, tiles_y, tw, th, clip, lut_scale, lut, colmap);
#ifdef CLAHE_X86
    int avx2 = simd && __builtin_cpu_supports("avx2");
    /* pairs[ty][j][v] = (table[ty][max(j - 1, 0)][v], table[ty][min(j, tiles_x - 1)][v]) for j = 0 .. tiles_x */
    size_t row_pairs = (size_t)(tiles_x + 1) * 256;
    uint16_t *pairs = avx2 ? (uint16_t *)malloc(sizeof(uint16_t) * (row_pairs * tiles_y + 2)) : NULL;
    int *pair = avx2 ? (int *)malloc(sizeof(int) * (size_t)w) : NULL;
    if (avx2 && (!pairs || !pair)) {
        free(pairs), free(pair), free(lut), free(colmap), free(ind1), free(xa);
        return -1;
    }
    if (avx2) {
        for (int ty = 0; ty < tiles_y; ++ty) {
            for (int j = 0; j <= tiles_x; ++j) {
                const uint8_t *left = lut + ((size_t)ty * tiles_x + (j > 0 ? j - 1 : 0)) * 256;
                const uint8_t *right = lut + ((size_t)ty * tiles_x + (j < tiles_x ? j : tiles_x - 1)) * 256;
                uint16_t *p = pairs + ty * row_pairs + (size_t)j * 256;
                for (int v = 0; v < 256; ++v)
                    p[v] = (uint16_t)(left[v] | (right[v] << 8));
            }
        }
        pairs[row_pairs * tiles_y] = pairs[row_pairs * tiles_y + 1] = 0; /* the last gather reads 2 bytes past */
    }
#endif

    int *ind2 = ind1 + w;
    float *xa1 = xa + w;
    float inv_tw = 1.0f / tw, inv_th = 1.0f / th;
    for (int x = 0; x < w; ++x) {
        float txf = x * inv_tw - 0.5f;
        int tx1 = (int)__builtin_floorf(txf), tx2 = tx1 + 1;
        xa[x] = txf - tx1;
        xa1[x] = 1.0f - xa[x];
#ifdef CLAHE_X86
        if (pair)
            pair[x] = (tx1 + 1) * 256;
#endif
        if (tx1 < 0)
            tx1 = 0;
        if (tx2 > tiles_x - 1)
            tx2 = tiles_x - 1;
        ind1[x] = tx1 * 256;
        ind2[x] = tx2 * 256;
    }
    for (int y = 0; y < h; ++y) {
        const uint8_t *s = src + y * sstride;
        uint8_t *d = dst + y * dstride;
        float tyf = y * inv_th - 0.5f;
        int ty1 = (int)__builtin_floorf(tyf), ty2 = ty1 + 1;
        float ya = tyf - ty1, ya1 = 1.0f - ya;
        if (ty1 < 0)
            ty1 = 0;
        if (ty2 > tiles_y - 1)
            ty2 = tiles_y - 1;
        const uint8_t *top = lut + (size_t)ty1 * tiles_x * 256, *bottom = lut + (size_t)ty2 * tiles_x * 256;
        int x = 0;
#ifdef CLAHE_X86
        if (avx2)
            x = blend_row_avx2(s, d, w, pair, xa, xa1, pairs + ty1 * row_pairs, pairs + ty2 * row_pairs, ya, ya1);
#endif
        for (; x < w; ++x) {
            int v = s[x];
            int i1 = ind1[x] + v, i2 = ind2[x] + v;
            float r = (top[i1] * xa1[x] + top[i2] * xa[x]) * ya1 + (bottom[i1] * xa1[x] + bottom[i2] * xa[x]) * ya;
            d[x] = saturate_u8(r);
        }
    }
#ifdef CLAHE_X86
    free(pairs), free(pair);
#endif
    free(lut), free(colmap), free(ind1), free(xa);
    return 0;
}

/* The buffer's (rows, cols, row stride) if it is a 2-D uint8 image with contiguous columns. */
static int image_of(Py_buffer *b, const char *what, Py_ssize_t *rows, Py_ssize_t *cols, Py_ssize_t *stride)
{
    if (b->ndim != 2 || b->itemsize != 1 || (b->format && strcmp(b->format, "B") != 0)) {
        PyErr_Format(PyExc_ValueError, "clahe_u8: %s must be a 2-D uint8 array (got %d dimensions, format %s)",
                     what, b->ndim, b->format ? b->format : "B");
        return -1;
    }
    if (b->strides[1] != 1) {
        PyErr_Format(PyExc_ValueError, "clahe_u8: %s must have contiguous columns (column stride %zd)", what,
                     b->strides[1]);
        return -1;
    }
    *rows = b->shape[0], *cols = b->shape[1], *stride = b->strides[0];
    return 0;
}

/* Whether two 2-D buffers' bytes (rows of shape[1] bytes, any row stride) can share memory. */
static int overlap(const Py_buffer *a, const Py_buffer *b)
{
    const char *lo[2], *hi[2];
    const Py_buffer *both[2] = {a, b};
    for (int k = 0; k < 2; ++k) {
        Py_ssize_t span = (both[k]->shape[0] - 1) * both[k]->strides[0];
        lo[k] = (const char *)both[k]->buf + (span < 0 ? span : 0);
        hi[k] = (const char *)both[k]->buf + (span > 0 ? span : 0) + both[k]->shape[1];
    }
    return lo[0] < hi[1] && lo[1] < hi[0];
}

static PyObject *py_clahe_u8(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj;
    Py_buffer src, dst;
    int tiles_x, tiles_y, simd = 1;
    double clip_limit;
    if (!PyArg_ParseTuple(args, "OOiid|p", &src_obj, &dst_obj, &tiles_x, &tiles_y, &clip_limit, &simd))
        return NULL;
    (void)self;
#ifndef CLAHE_X86
    (void)simd;
#endif
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_STRIDES | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t rows, cols, sstride, drows, dcols, dstride;
    int ok = 0;
    if (image_of(&src, "src", &rows, &cols, &sstride) < 0 || image_of(&dst, "dst", &drows, &dcols, &dstride) < 0)
        goto done;
    if (drows != rows || dcols != cols) {
        PyErr_Format(PyExc_ValueError, "clahe_u8: dst is %zdx%zd, src %zdx%zd; they must be the same size", drows,
                     dcols, rows, cols);
        goto done;
    }
    if (overlap(&src, &dst) && !(src.buf == dst.buf && sstride == dstride)) {
        PyErr_SetString(PyExc_ValueError, "clahe_u8: dst overlaps src without being the same view; pass a separate "
                                          "dst (or src itself: in place is allowed)");
        goto done;
    }
    if (tiles_x < 1 || tiles_y < 1 || tiles_x > 4096 || tiles_y > 4096 || rows < 1 || cols < 1 || rows > INT32_MAX / 2
        || cols > INT32_MAX / 2) {
        PyErr_Format(PyExc_ValueError, "clahe_u8: tiles (%d, %d) or size %zdx%zd out of range", tiles_x, tiles_y,
                     rows, cols);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    ok = clahe_u8((const uint8_t *)src.buf, sstride, (uint8_t *)dst.buf, dstride, (int)cols, (int)rows, tiles_x,
                  tiles_y, clip_limit, simd);
    Py_END_ALLOW_THREADS
    if (ok < 0) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

static PyMethodDef methods[] = {
    {"clahe_u8", py_clahe_u8, METH_VARARGS,
     "clahe_u8(src, dst, tiles_x, tiles_y, clip_limit, simd=True): OpenCV's CLAHE of the 2-D uint8 array src "
     "into dst (same size, contiguous columns; dst may be src itself, not a view overlapping it otherwise), "
     "bit for bit; releases the GIL. simd=False: the scalar blend "
     "only (the same pixels; for tests)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_clahe", "OpenCV's 8-bit CLAHE, bit for bit, faster.",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__clahe(void) { return PyModule_Create(&module); }
