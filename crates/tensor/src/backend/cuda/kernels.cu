// The CUDA backend's kernels, compiled once per process by NVRTC for the device's
// architecture (with --fmad=false, so products and sums round like the CPU kernels).
//
// Every kernel takes its element count first and walks it with a grid-stride loop. Views
// arrive as a `Strided` (shape, strides, offset, up to MAX_DIMS dimensions after the host
// merged what it could); `contiguous` lets a dense view skip the index arithmetic.

typedef unsigned char u8;
typedef long long i64;
typedef unsigned long long u64;
typedef float f32;
typedef double f64;

#define MAX_DIMS 8

// The 16-bit floats as their bits, so that no CUDA header is needed (NVRTC has no
// cuda_fp16.h without a toolkit install). Two types, so that templates tell them apart.
// They are computed in f32: `widen` reads one exactly, `narrow` rounds an f32 to nearest
// even, as the `half` crate does on the CPU.
struct f16 { unsigned short bits; };
struct bf16 { unsigned short bits; };

struct Strided {
    int ndim;
    int contiguous;
    i64 offset;
    i64 shape[MAX_DIMS];
    i64 stride[MAX_DIMS];
};

// The storage offset of logical element `i` (row-major over `shape`).
__device__ __forceinline__ i64 at(const Strided& L, i64 i) {
    if (L.contiguous) return L.offset + i;
    i64 off = L.offset;
    for (int d = L.ndim - 1; d >= 0; --d) {
        i64 s = L.shape[d];
        i64 q = i / s;
        off += (i - q * s) * L.stride[d];
        i = q;
    }
    return off;
}

#define GRID_LOOP(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

template <typename T> struct is_float_t { static const bool value = false; };
template <> struct is_float_t<f32> { static const bool value = true; };
template <> struct is_float_t<f64> { static const bool value = true; };
template <typename A, typename B> struct same_t { static const bool value = false; };
template <typename A> struct same_t<A, A> { static const bool value = true; };

template <typename T> struct is_half_t { static const bool value = false; };
template <> struct is_half_t<f16> { static const bool value = true; };
template <> struct is_half_t<bf16> { static const bool value = true; };

__device__ __forceinline__ f32 widen(f16 h) {
    f32 f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
    return f;
}
// A bf16 is the upper half of an f32.
__device__ __forceinline__ f32 widen(bf16 h) { return __uint_as_float((unsigned)h.bits << 16); }
template <typename T> __device__ __forceinline__ T widen(T x) { return x; }

template <typename T> __device__ __forceinline__ T narrow(f32 x);
template <> __device__ __forceinline__ f16 narrow<f16>(f32 x) {
    f16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
    return h;
}
// Round to nearest even by integer arithmetic: adding 0x7fff plus the lowest kept bit
// carries into the kept half exactly when the dropped half is above one half, or equal
// to it with an odd kept half. A NaN stays a (quiet) NaN instead of rounding to infinity.
template <> __device__ __forceinline__ bf16 narrow<bf16>(f32 x) {
    unsigned u = __float_as_uint(x);
    bf16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        h.bits = (unsigned short)((u >> 16) | 0x40u);
        return h;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    h.bits = (unsigned short)(u >> 16);
    return h;
}

// Rust's `as` from a float: truncation, saturating at the ends, NaN to zero.
__device__ __forceinline__ i64 f_to_i64(f64 x) {
    if (x != x) return 0;
    if (x >= 9223372036854775808.0) return 0x7fffffffffffffffLL;
    if (x < -9223372036854775808.0) return (i64)0x8000000000000000ULL;
    return (i64)x;
}
__device__ __forceinline__ u8 f_to_u8(f64 x) {
    if (x != x || x <= 0.0) return 0;
    if (x >= 255.0) return 255;
    return (u8)(int)x;
}

template <typename D, typename S> __device__ __forceinline__ D convert(S x) {
    if constexpr (is_half_t<S>::value) {
        // Exact in f32, then as from an f32.
        return convert<D, f32>(widen(x));
    } else if constexpr (is_half_t<D>::value) {
        // As the CPU converts: doubles through f32 (PyTorch's `Half(float)`), integers
        // through f64 and f32, so a value may round twice exactly as there.
        if constexpr (is_float_t<S>::value) return narrow<D>((f32)x);
        else return narrow<D>((f32)(f64)x);
    } else if constexpr (is_float_t<D>::value) {
        return (D)x;
    } else if constexpr (is_float_t<S>::value) {
        if constexpr (same_t<D, i64>::value) return f_to_i64((f64)x);
        else return f_to_u8((f64)x);
    } else {
        // Integer to integer: `i64 -> u8` keeps the low byte, `u8 -> i64` widens.
        return (D)x;
    }
}

template <typename T> __device__ __forceinline__ bool isnan_(T x) {
    if constexpr (is_float_t<T>::value) return x != x;
    else return false;
}
template <typename T> __device__ __forceinline__ T max_nan(T a, T b) {
    if (isnan_(a) || a > b) return a;
    if (isnan_(b) || b > a) return b;
    return a;
}
template <typename T> __device__ __forceinline__ T min_nan(T a, T b) {
    if (isnan_(a) || a < b) return a;
    if (isnan_(b) || b < a) return b;
    return a;
}

// Wrapping integer arithmetic (Rust's wrapping_*); plain arithmetic for floats.
template <typename T> __device__ __forceinline__ T wadd(T a, T b) {
    if constexpr (same_t<T, i64>::value) return (i64)((u64)a + (u64)b);
    else return (T)(a + b);
}
template <typename T> __device__ __forceinline__ T wsub(T a, T b) {
    if constexpr (same_t<T, i64>::value) return (i64)((u64)a - (u64)b);
    else return (T)(a - b);
}
template <typename T> __device__ __forceinline__ T wmul(T a, T b) {
    if constexpr (same_t<T, i64>::value) return (i64)((u64)a * (u64)b);
    else return (T)(a * b);
}
template <typename T> __device__ __forceinline__ T ipow(T x, u64 e) {
    T base = x, acc = (T)1;
    while (e > 0) {
        if (e & 1) acc = wmul(acc, base);
        base = wmul(base, base);
        e >>= 1;
    }
    return acc;
}
// Integer `x ^ y` as the CPU computes it: wrapping for y >= 0; for y < 0 only 1 and -1
// have a non-zero truncated reciprocal.
template <typename T> __device__ __forceinline__ T int_pow(T x, T y) {
    i64 e = (i64)y;
    if (e >= 0) return ipow(x, (u64)e);
    if (x == (T)1) return (T)1;
    if ((i64)x == -1) return (e % 2 == 0) ? (T)1 : x;
    return (T)0;
}
// Integer division as the CPU computes it: by zero gives 0, and so does the one quotient
// that overflows (i64::MIN / -1).
template <typename T> __device__ __forceinline__ T int_div(T x, T y) {
    if (y == (T)0) return (T)0;
    if constexpr (same_t<T, i64>::value) {
        if (x == (i64)0x8000000000000000ULL && y == (T)-1) return (T)0;
    }
    return (T)(x / y);
}
// Wrapping |x| (bytes are their own absolute value) and the sign of an integer.
template <typename T> __device__ __forceinline__ T int_abs(T x) {
    if constexpr (same_t<T, u8>::value) return x;
    else return x < (T)0 ? wsub((T)0, x) : x;
}
template <typename T> __device__ __forceinline__ T int_sign(T x) {
    if constexpr (same_t<T, u8>::value) return (T)(x > 0);
    else return (T)((x > 0) - (x < 0));
}
// PyTorch's clamp, min(max(x, lo), hi): the upper bound applies last; NaN stays NaN.
template <typename T> __device__ __forceinline__ T clamp_elem(T x, T lo, T hi) {
    T y = x < lo ? lo : x;
    return y > hi ? hi : y;
}

// ---- creation and movement ----

#define DEF_FILL(N, T)                                                                   \
    extern "C" __global__ void fill_##N(i64 n, T* out, Strided L, T v) {                 \
        GRID_LOOP(i, n) out[at(L, i)] = v;                                               \
    }
DEF_FILL(u8, u8)
DEF_FILL(i64, i64)
DEF_FILL(f32, f32)
DEF_FILL(f64, f64)
DEF_FILL(f16, f16)
DEF_FILL(bf16, bf16)

// dst[Ld(i)] = convert(src[Ls(i)]): casts, copies into views, joins.
#define DEF_CONVERT(DN, D, SN, S)                                                        \
    extern "C" __global__ void convert_##SN##_##DN(i64 n, D* dst, Strided Ld, const S* src, Strided Ls) { \
        GRID_LOOP(i, n) dst[at(Ld, i)] = convert<D, S>(src[at(Ls, i)]);                  \
    }
#define DEF_CONVERT_FROM(SN, S)  \
    DEF_CONVERT(u8, u8, SN, S)   \
    DEF_CONVERT(i64, i64, SN, S) \
    DEF_CONVERT(f32, f32, SN, S) \
    DEF_CONVERT(f64, f64, SN, S) \
    DEF_CONVERT(f16, f16, SN, S) \
    DEF_CONVERT(bf16, bf16, SN, S)
DEF_CONVERT_FROM(u8, u8)
DEF_CONVERT_FROM(i64, i64)
DEF_CONVERT_FROM(f32, f32)
DEF_CONVERT_FROM(f64, f64)
DEF_CONVERT_FROM(f16, f16)
DEF_CONVERT_FROM(bf16, bf16)

// ---- elementwise functions of one tensor ----
//
// `unary_float` and `unary_int` switch over the op codes of the unary op table
// (ops/unary.rs): one `case` per row, generated by kernel_source.rs. `p0`/`p1` carry the
// op's parameters already converted to the element type by the host.

//@generated unary

#define DEF_UNARY(N, T, FN)                                                              \
    extern "C" __global__ void unary_##N(i64 n, int op, T p0, T p1, T* out, Strided Lo,  \
                                         const T* src, Strided Ls) {                     \
        GRID_LOOP(i, n) out[at(Lo, i)] = FN<T>(op, src[at(Ls, i)], p0, p1);              \
    }
DEF_UNARY(u8, u8, unary_int)
DEF_UNARY(i64, i64, unary_int)
DEF_UNARY(f32, f32, unary_float)
DEF_UNARY(f64, f64, unary_float)

// The 16-bit floats: each element computed in f32 by the f32 function and rounded once;
// the host passes the parameters as f32, as the CPU's f32 kernel takes them.
#define DEF_UNARY_HALF(N, T)                                                             \
    extern "C" __global__ void unary_##N(i64 n, int op, f32 p0, f32 p1, T* out,          \
                                         Strided Lo, const T* src, Strided Ls) {         \
        GRID_LOOP(i, n) out[at(Lo, i)] = narrow<T>(unary_float<f32>(op, widen(src[at(Ls, i)]), p0, p1)); \
    }
DEF_UNARY_HALF(f16, f16)
DEF_UNARY_HALF(bf16, bf16)

// ---- elementwise functions of two tensors ----

// `binary_float` and `binary_int`, from the binary op table (ops/binary.rs).

//@generated binary

#define DEF_BINARY(N, T, FN)                                                             \
    extern "C" __global__ void binary_##N(i64 n, int op, T* out, Strided Lo, const T* a, \
                                          Strided La, const T* b, Strided Lb) {          \
        GRID_LOOP(i, n) out[at(Lo, i)] = FN<T>(op, a[at(La, i)], b[at(Lb, i)]);          \
    }
DEF_BINARY(u8, u8, binary_int)
DEF_BINARY(i64, i64, binary_int)
DEF_BINARY(f32, f32, binary_float)
DEF_BINARY(f64, f64, binary_float)

#define DEF_BINARY_HALF(N, T)                                                            \
    extern "C" __global__ void binary_##N(i64 n, int op, T* out, Strided Lo, const T* a, \
                                          Strided La, const T* b, Strided Lb) {          \
        GRID_LOOP(i, n) out[at(Lo, i)] = narrow<T>(binary_float<f32>(op, widen(a[at(La, i)]), widen(b[at(Lb, i)]))); \
    }
DEF_BINARY_HALF(f16, f16)
DEF_BINARY_HALF(bf16, bf16)

// ---- comparisons and selection ----

// `cmp_op`, from the comparison table (ops/compare.rs).

//@generated compare

#define DEF_COMPARE(N, T)                                                                \
    extern "C" __global__ void compare_##N(i64 n, int op, u8* out, const T* a, Strided La, \
                                           const T* b, Strided Lb) {                     \
        GRID_LOOP(i, n) out[i] = cmp_op<T>(op, a[at(La, i)], b[at(Lb, i)]);              \
    }                                                                                    \
    extern "C" __global__ void compare_scalar_##N(i64 n, int op, u8* out, const T* a,    \
                                                  Strided La, T s) {                     \
        GRID_LOOP(i, n) out[i] = cmp_op<T>(op, a[at(La, i)], s);                         \
    }
DEF_COMPARE(u8, u8)
DEF_COMPARE(i64, i64)
DEF_COMPARE(f32, f32)
DEF_COMPARE(f64, f64)

// Widening is exact, so the 16-bit floats compare as their f32 values (the scalar was
// rounded to the tensor's dtype on the host).
#define DEF_COMPARE_HALF(N, T)                                                           \
    extern "C" __global__ void compare_##N(i64 n, int op, u8* out, const T* a, Strided La, \
                                           const T* b, Strided Lb) {                     \
        GRID_LOOP(i, n) out[i] = cmp_op<f32>(op, widen(a[at(La, i)]), widen(b[at(Lb, i)])); \
    }                                                                                    \
    extern "C" __global__ void compare_scalar_##N(i64 n, int op, u8* out, const T* a,    \
                                                  Strided La, T s) {                     \
        GRID_LOOP(i, n) out[i] = cmp_op<f32>(op, widen(a[at(La, i)]), widen(s));          \
    }
DEF_COMPARE_HALF(f16, f16)
DEF_COMPARE_HALF(bf16, bf16)

// Integer elements against an integer bound (the host turned the scalar into one).
#define DEF_COMPARE_INT(N, T)                                                            \
    extern "C" __global__ void compare_int_##N(i64 n, int op, u8* out, const T* a,       \
                                               Strided La, i64 s) {                      \
        GRID_LOOP(i, n) out[i] = cmp_op<i64>(op, (i64)a[at(La, i)], s);                  \
    }
DEF_COMPARE_INT(u8, u8)
DEF_COMPARE_INT(i64, i64)

#define DEF_WHERE(N, T)                                                                  \
    extern "C" __global__ void where_##N(i64 n, T* out, const u8* c, Strided Lc,         \
                                         const T* a, Strided La, const T* b, Strided Lb) { \
        GRID_LOOP(i, n) out[i] = c[at(Lc, i)] ? a[at(La, i)] : b[at(Lb, i)];             \
    }
DEF_WHERE(u8, u8)
DEF_WHERE(i64, i64)
DEF_WHERE(f32, f32)
DEF_WHERE(f64, f64)
DEF_WHERE(f16, f16)
DEF_WHERE(bf16, bf16)

// ---- reductions ----
//
// The input view is permuted so that the kept dimensions come first: output element r
// combines elements r * inner .. (r + 1) * inner of the view. Floats sum in f64.

template <typename T> struct SumAcc { typedef T type; };
template <> struct SumAcc<f32> { typedef f64 type; };

template <typename T> __device__ __forceinline__ T lowest();
template <> __device__ __forceinline__ u8 lowest<u8>() { return 0; }
template <> __device__ __forceinline__ i64 lowest<i64>() { return (i64)0x8000000000000000ULL; }
template <> __device__ __forceinline__ f32 lowest<f32>() { return -__int_as_float(0x7f800000); }
template <> __device__ __forceinline__ f64 lowest<f64>() { return -__longlong_as_double(0x7ff0000000000000LL); }
template <typename T> __device__ __forceinline__ T highest();
template <> __device__ __forceinline__ u8 highest<u8>() { return 255; }
template <> __device__ __forceinline__ i64 highest<i64>() { return 0x7fffffffffffffffLL; }
template <> __device__ __forceinline__ f32 highest<f32>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ f64 highest<f64>() { return __longlong_as_double(0x7ff0000000000000LL); }

// From the reduction table (ops/reduce.rs): `combine`, the associative step of a value
// reduction in its accumulator type `A`, with its `identity`; `accumulates_wide`, whether
// it accumulates in `SumAcc<T>` (f64 for f32) rather than `T`; and `arg_prefers`, whether
// an arg-reduction prefers `a` to `b`.

//@generated reduce

// One block of 256 threads per output element.
template <typename T> __device__ void reduce_rows(int op, i64 outer, i64 inner, T* out, const T* src, const Strided& L) {
    typedef typename SumAcc<T>::type A0;
    // Only sums widen (`accumulates_wide`); products and extrema stay in the element type.
    __shared__ unsigned char smem_raw[256 * sizeof(f64)];
    for (i64 r = blockIdx.x; r < outer; r += gridDim.x) {
        if (accumulates_wide(op)) {
            A0* sm = (A0*)smem_raw;
            A0 acc = identity<T, A0>(op);
            for (i64 j = threadIdx.x; j < inner; j += blockDim.x) acc = combine<T, A0>(op, acc, (A0)src[at(L, r * inner + j)]);
            sm[threadIdx.x] = acc;
            __syncthreads();
            for (int w = blockDim.x / 2; w > 0; w /= 2) {
                if (threadIdx.x < w) sm[threadIdx.x] = combine<T, A0>(op, sm[threadIdx.x], sm[threadIdx.x + w]);
                __syncthreads();
            }
            if (threadIdx.x == 0) out[r] = (T)sm[0];
        } else {
            T* sm = (T*)smem_raw;
            T acc = identity<T, T>(op);
            for (i64 j = threadIdx.x; j < inner; j += blockDim.x) acc = combine<T, T>(op, acc, src[at(L, r * inner + j)]);
            sm[threadIdx.x] = acc;
            __syncthreads();
            for (int w = blockDim.x / 2; w > 0; w /= 2) {
                if (threadIdx.x < w) sm[threadIdx.x] = combine<T, T>(op, sm[threadIdx.x], sm[threadIdx.x + w]);
                __syncthreads();
            }
            if (threadIdx.x == 0) out[r] = sm[0];
        }
        __syncthreads();
    }
}

// One thread per output element: for many short rows, or rows whose neighbours are
// neighbours in memory (a reduction over a leading dimension), where this reads coalesced.
template <typename T> __device__ void reduce_cols(int op, i64 outer, i64 inner, T* out, const T* src, const Strided& L) {
    typedef typename SumAcc<T>::type A0;
    GRID_LOOP(r, outer) {
        if (accumulates_wide(op)) {
            A0 acc = identity<T, A0>(op);
            for (i64 j = 0; j < inner; ++j) acc = combine<T, A0>(op, acc, (A0)src[at(L, r * inner + j)]);
            out[r] = (T)acc;
        } else {
            T acc = identity<T, T>(op);
            for (i64 j = 0; j < inner; ++j) acc = combine<T, T>(op, acc, src[at(L, r * inner + j)]);
            out[r] = acc;
        }
    }
}

// Arg-reductions: the first index of the extreme value; a NaN beats any number and the
// first NaN wins.
template <typename T> __device__ __forceinline__ bool arg_better(int op, T a, i64 ia, T b, i64 ib) {
    bool na = isnan_(a), nb = isnan_(b);
    if (na || nb) return na && (!nb || ia < ib);
    if (arg_prefers<T>(op, a, b)) return true;
    if (a == b) return ia < ib;
    return false;
}

template <typename T> __device__ void arg_rows(int op, i64 outer, i64 inner, i64* out, const T* src, const Strided& L) {
    __shared__ unsigned char vraw[256 * sizeof(f64)];
    __shared__ i64 is[256];
    T* vs = (T*)vraw;
    for (i64 r = blockIdx.x; r < outer; r += gridDim.x) {
        T best = (T)0;
        i64 bi = -1;
        for (i64 j = threadIdx.x; j < inner; j += blockDim.x) {
            T v = src[at(L, r * inner + j)];
            if (bi < 0 || arg_better(op, v, j, best, bi)) { best = v; bi = j; }
        }
        vs[threadIdx.x] = best;
        is[threadIdx.x] = bi;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w /= 2) {
            if (threadIdx.x < w) {
                i64 jb = is[threadIdx.x + w];
                if (jb >= 0 && (is[threadIdx.x] < 0 || arg_better(op, vs[threadIdx.x + w], jb, vs[threadIdx.x], is[threadIdx.x]))) {
                    vs[threadIdx.x] = vs[threadIdx.x + w];
                    is[threadIdx.x] = jb;
                }
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) out[r] = is[0] < 0 ? 0 : is[0];
        __syncthreads();
    }
}

#define DEF_REDUCE(N, T)                                                                 \
    extern "C" __global__ void reduce_rows_##N(int op, i64 outer, i64 inner, T* out,     \
                                               const T* src, Strided L) {                \
        reduce_rows<T>(op, outer, inner, out, src, L);                                   \
    }                                                                                    \
    extern "C" __global__ void reduce_cols_##N(int op, i64 outer, i64 inner, T* out,     \
                                               const T* src, Strided L) {                \
        reduce_cols<T>(op, outer, inner, out, src, L);                                   \
    }                                                                                    \
    extern "C" __global__ void arg_rows_##N(int op, i64 outer, i64 inner, i64* out,      \
                                            const T* src, Strided L) {                   \
        arg_rows<T>(op, outer, inner, out, src, L);                                      \
    }
DEF_REDUCE(u8, u8)
DEF_REDUCE(i64, i64)
DEF_REDUCE(f32, f32)
DEF_REDUCE(f64, f64)

// `sum |x|^p` (max |x| for p = inf, NaN if any element is) of a float view into one f64,
// by a single block so the order is fixed.
template <typename T> __device__ void power_sum(i64 n, const T* src, Strided L, f64 p, f64* out) {
    __shared__ f64 sm[1024];
    bool inf = p == __longlong_as_double(0x7ff0000000000000LL);
    f64 acc = 0.0;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        f64 x = fabs((f64)src[at(L, i)]);
        if (inf) acc = (x != x || acc != acc) ? x + acc : fmax(acc, x);
        else if (p == 2.0) acc += x * x;
        else if (p == 1.0) acc += x;
        else acc += pow(x, p);
    }
    sm[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) {
            f64 a = sm[threadIdx.x], b = sm[threadIdx.x + w];
            sm[threadIdx.x] = inf ? ((a != a || b != b) ? a + b : fmax(a, b)) : a + b;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = sm[0];
}
extern "C" __global__ void power_sum_f32(i64 n, const f32* src, Strided L, f64 p, f64* out) { power_sum<f32>(n, src, L, p, out); }
extern "C" __global__ void power_sum_f64(i64 n, const f64* src, Strided L, f64 p, f64* out) { power_sum<f64>(n, src, L, p, out); }

// ---- softmax along one dimension ----
//
// `L` and `Lo` put the softmax dimension last; one block per row.
template <typename T> __device__ void softmax_rows(i64 outer, i64 inner, int logv, T* out, Strided Lo, const T* src, Strided L) {
    __shared__ f64 sm[256];
    for (i64 r = blockIdx.x; r < outer; r += gridDim.x) {
        T m = lowest<T>();
        for (i64 j = threadIdx.x; j < inner; j += blockDim.x) m = max_nan(m, src[at(L, r * inner + j)]);
        sm[threadIdx.x] = (f64)m;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w /= 2) {
            if (threadIdx.x < w) sm[threadIdx.x] = max_nan(sm[threadIdx.x], sm[threadIdx.x + w]);
            __syncthreads();
        }
        T mx = (T)sm[0];
        __syncthreads();
        f64 s = 0.0;
        for (i64 j = threadIdx.x; j < inner; j += blockDim.x) s += (f64)exp(src[at(L, r * inner + j)] - mx);
        sm[threadIdx.x] = s;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w /= 2) {
            if (threadIdx.x < w) sm[threadIdx.x] += sm[threadIdx.x + w];
            __syncthreads();
        }
        T total = (T)sm[0];
        __syncthreads();
        T lt = log(total);
        for (i64 j = threadIdx.x; j < inner; j += blockDim.x) {
            T x = src[at(L, r * inner + j)] - mx;
            out[at(Lo, r * inner + j)] = logv ? x - lt : exp(x) / total;
        }
    }
}
extern "C" __global__ void softmax_f32(i64 outer, i64 inner, int logv, f32* out, Strided Lo, const f32* src, Strided L) { softmax_rows<f32>(outer, inner, logv, out, Lo, src, L); }
extern "C" __global__ void softmax_f64(i64 outer, i64 inner, int logv, f64* out, Strided Lo, const f64* src, Strided L) { softmax_rows<f64>(outer, inner, logv, out, Lo, src, L); }

// ---- indexing ----
//
// An index outside its range writes nothing and sets `*bad`, which the host reads back
// and reports.

// out (contiguous, [outer, k, inner]) = src[.., index[t], ..]; `Ls` is the source view
// and `size` its extent along the dimension.
#define DEF_INDEX_SELECT(N, T)                                                           \
    extern "C" __global__ void index_select_##N(i64 n, i64 k, i64 inner, i64 size, T* out, \
            const T* src, Strided Ls, const i64* index, Strided Li, int* bad) {           \
        GRID_LOOP(i, n) {                                                                \
            i64 c = i % inner, rest = i / inner, t = rest % k, o = rest / k;             \
            i64 idx = index[at(Li, t)];                                                  \
            if (idx < 0 || idx >= size) { *bad = 1; out[i] = T(); continue; }           \
            out[i] = src[at(Ls, (o * size + idx) * inner + c)];                          \
        }                                                                                \
    }
DEF_INDEX_SELECT(u8, u8)
DEF_INDEX_SELECT(i64, i64)
DEF_INDEX_SELECT(f32, f32)
DEF_INDEX_SELECT(f64, f64)
DEF_INDEX_SELECT(f16, f16)
DEF_INDEX_SELECT(bf16, bf16)

// The storage offset of the element at the coordinates of logical element `i` of
// `shape`, read through `stride`, with coordinate `dim` replaced by `idx`.
__device__ __forceinline__ i64 at_replaced(const Strided& L, i64 i, int dim, i64 idx) {
    i64 off = L.offset;
    for (int d = L.ndim - 1; d >= 0; --d) {
        i64 s = L.shape[d];
        i64 q = i / s;
        i64 c = d == dim ? idx : i - q * s;
        off += c * L.stride[d];
        i = q;
    }
    return off;
}

// out[i] = src[coords(i) with dim -> index[i]]; every Strided has the index's shape.
#define DEF_GATHER(N, T)                                                                 \
    extern "C" __global__ void gather_##N(i64 n, int dim, i64 size, T* out, const T* src, \
            Strided Ls, const i64* index, Strided Li, int* bad) {                        \
        GRID_LOOP(i, n) {                                                                \
            i64 idx = index[at(Li, i)];                                                  \
            if (idx < 0 || idx >= size) { *bad = 1; out[i] = T(); continue; }           \
            out[i] = src[at_replaced(Ls, i, dim, idx)];                                  \
        }                                                                                \
    }
DEF_GATHER(u8, u8)
DEF_GATHER(i64, i64)
DEF_GATHER(f32, f32)
DEF_GATHER(f64, f64)
DEF_GATHER(f16, f16)
DEF_GATHER(bf16, bf16)

__device__ __forceinline__ void atomic_add_(f32* p, f32 v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add_(f64* p, f64 v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add_(i64* p, i64 v) { atomicAdd((u64*)p, (u64)v); }
__device__ __forceinline__ void atomic_add_(u8* p, u8 v) {
    // No byte atomics: add into the byte's lane of its aligned 32-bit word.
    unsigned int* word = (unsigned int*)((size_t)p & ~(size_t)3);
    unsigned int shift = ((size_t)p & 3) * 8;
    unsigned int old = *word, assumed;
    do {
        assumed = old;
        unsigned int b = ((assumed >> shift) + v) & 0xffu;
        old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (b << shift));
    } while (assumed != old);
}

// out (a contiguous copy of the destination, `Lo` its strides in the index's shape)
// [coords(i) with dim -> index[i]] += src[i].
#define DEF_SCATTER_ADD(N, T)                                                            \
    extern "C" __global__ void scatter_add_##N(i64 n, int dim, i64 size, T* out, Strided Lo, \
            const T* src, Strided Ls, const i64* index, Strided Li, int* bad) {           \
        GRID_LOOP(i, n) {                                                                \
            i64 idx = index[at(Li, i)];                                                  \
            if (idx < 0 || idx >= size) { *bad = 1; continue; }                          \
            atomic_add_(out + at_replaced(Lo, i, dim, idx), src[at(Ls, i)]);             \
        }                                                                                \
    }
DEF_SCATTER_ADD(u8, u8)
DEF_SCATTER_ADD(i64, i64)
DEF_SCATTER_ADD(f32, f32)
DEF_SCATTER_ADD(f64, f64)

// ---- optimizer steps ----
//
// The same operations in the same order as the CPU kernels (backend/cpu/optim.rs), so
// both devices round alike.

template <typename T> __device__ __forceinline__ T lerp_(T s, T e, T w, int small) {
    return small ? s + w * (e - s) : e - (e - s) * ((T)1 - w);
}

template <typename T> __device__ void sgd(i64 n, T* p, const T* g, T* b, T neg_lr, T wd, int decay, T momentum,
                                          T keep, int nesterov, int fresh) {
    GRID_LOOP(i, n) {
        T d = decay ? g[i] + wd * p[i] : g[i];
        if (b) {
            T bv = fresh ? d : b[i] * momentum + keep * d;
            b[i] = bv;
            p[i] = nesterov ? p[i] + neg_lr * (d + momentum * bv) : p[i] + neg_lr * bv;
        } else {
            p[i] = p[i] + neg_lr * d;
        }
    }
}

template <typename T> __device__ void adam(i64 n, T* p, const T* g, T* m, T* v, T* vmax, T wd, int coupled, T w1,
                                           int small, T b2, T w2, T bc2_sqrt, T neg_step, T eps, int shrink_on,
                                           T shrink) {
    GRID_LOOP(i, n) {
        T d = coupled ? g[i] + wd * p[i] : g[i];
        T mv = lerp_(m[i], d, w1, small);
        m[i] = mv;
        T vv = v[i] * b2 + w2 * d * d;
        v[i] = vv;
        T second = vv;
        if (vmax) {
            second = max_nan(vmax[i], vv);
            vmax[i] = second;
        }
        T q = shrink_on ? p[i] * shrink : p[i];
        T denom = sqrt(second) / bc2_sqrt + eps;
        p[i] = q + neg_step * mv / denom;
    }
}

template <typename T> __device__ void rmsprop(i64 n, T* p, const T* g, T* s, T* ga, T* b, T wd, int decay, T alpha,
                                              T w, int small, T eps, T momentum, T neg_lr) {
    GRID_LOOP(i, n) {
        T d = decay ? g[i] + wd * p[i] : g[i];
        T sv = s[i] * alpha + w * d * d;
        s[i] = sv;
        T avg;
        if (ga) {
            T a = lerp_(ga[i], d, w, small);
            ga[i] = a;
            avg = sqrt(sv + -a * a) + eps;
        } else {
            avg = sqrt(sv) + eps;
        }
        if (b) {
            T bv = b[i] * momentum + d / avg;
            b[i] = bv;
            p[i] = p[i] + neg_lr * bv;
        } else {
            p[i] = p[i] + neg_lr * d / avg;
        }
    }
}

#define DEF_OPTIM(N, T)                                                                  \
    extern "C" __global__ void sgd_##N(i64 n, T* p, const T* g, T* b, T neg_lr, T wd, int decay, \
            T momentum, T keep, int nesterov, int fresh) {                               \
        sgd<T>(n, p, g, b, neg_lr, wd, decay, momentum, keep, nesterov, fresh);          \
    }                                                                                    \
    extern "C" __global__ void adam_##N(i64 n, T* p, const T* g, T* m, T* v, T* vmax, T wd, \
            int coupled, T w1, int small, T b2, T w2, T bc2_sqrt, T neg_step, T eps,     \
            int shrink_on, T shrink) {                                                   \
        adam<T>(n, p, g, m, v, vmax, wd, coupled, w1, small, b2, w2, bc2_sqrt, neg_step, eps, shrink_on, shrink); \
    }                                                                                    \
    extern "C" __global__ void rmsprop_##N(i64 n, T* p, const T* g, T* s, T* ga, T* b, T wd, \
            int decay, T alpha, T w, int small, T eps, T momentum, T neg_lr) {           \
        rmsprop<T>(n, p, g, s, ga, b, wd, decay, alpha, w, small, eps, momentum, neg_lr); \
    }
DEF_OPTIM(f32, f32)
DEF_OPTIM(f64, f64)

// ---- classification losses of class-index targets ----
//
// A warp per row of `C` scores (the view `L` puts the class dimension last); the same
// formulas as backend/cpu/class_loss.rs. A target that is neither ignored nor a class
// raises `*bad`.

__device__ __forceinline__ f64 warp_sum(f64 v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename T> __device__ __forceinline__ T warp_max(T v) {
    for (int o = 16; o > 0; o /= 2) v = max_nan(v, (T)__shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Whether row r counts; raises `bad` for a target out of range.
__device__ __forceinline__ bool target_ok(i64 tgt, i64 C, int has_ignore, i64 ignore, int* bad) {
    if (has_ignore && tgt == ignore) return false;
    if (tgt < 0 || tgt >= C) { *bad = 1; return false; }
    return true;
}

// Counts the rows whose target is not ignored (the divisor of a mean) and checks targets.
extern "C" __global__ void class_targets(i64 rows, i64 C, const i64* t, Strided Lt, int has_ignore, i64 ignore,
                                         u64* counted, int* bad) {
    GRID_LOOP(r, rows) {
        if (target_ok(t[at(Lt, r)], C, has_ignore, ignore, bad)) atomicAdd(counted, 1ULL);
    }
}

// The row's shift: its maximum, or 0 where that is not finite (as softmax shifts).
template <typename T> __device__ __forceinline__ T row_shift(const T* s, const Strided& L, i64 r, i64 C, int lane) {
    T m = lowest<T>();
    for (i64 c = lane; c < C; c += 32) m = max_nan(m, s[at(L, r * C + c)]);
    m = warp_max(m);
    return (m - m == (T)0) ? m : (T)0;
}

template <typename T> __device__ void class_loss_rows(i64 rows, i64 C, const T* s, Strided L, const i64* t, Strided Lt,
                                                      int logits, int has_ignore, i64 ignore, T hit, T spread, T* out,
                                                      int* bad) {
    int lane = threadIdx.x & 31;
    i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 r = warp; r < rows; r += warps) {
        i64 tgt = t[at(Lt, r)];
        if (!target_ok(tgt, C, has_ignore, ignore, bad)) {
            if (lane == 0) out[r] = (T)0;
            continue;
        }
        T picked;
        if (logits) {
            T m = row_shift(s, L, r, C, lane);
            f64 e = 0.0, sh = 0.0;
            for (i64 c = lane; c < C; c += 32) {
                T x = s[at(L, r * C + c)] - m;
                e += (f64)exp(x);
                sh += (f64)x;
            }
            e = warp_sum(e);
            sh = warp_sum(sh);
            T lse = log((T)e);
            picked = lse - hit * (s[at(L, r * C + tgt)] - m);
            if (spread != (T)0) picked = picked - spread * (T)sh;
        } else {
            f64 sum = 0.0;
            if (spread != (T)0) {
                for (i64 c = lane; c < C; c += 32) sum += (f64)s[at(L, r * C + c)];
                sum = warp_sum(sum);
            }
            picked = -(hit * s[at(L, r * C + tgt)]);
            if (spread != (T)0) picked = picked - spread * (T)sum;
        }
        if (lane == 0) out[r] = picked;
    }
}

// The rows' losses summed in f64 by one block in a fixed order, divided by the count for
// a mean (0 counted rows give NaN, as in PyTorch).
template <typename T> __device__ void class_loss_total(i64 rows, const T* per_row, const u64* counted, int mean, T* out) {
    __shared__ f64 sm[1024];
    f64 acc = 0.0;
    for (i64 r = threadIdx.x; r < rows; r += blockDim.x) acc += (f64)per_row[r];
    sm[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) sm[threadIdx.x] += sm[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (T)(mean ? sm[0] / (f64)*counted : sm[0]);
}

// The gradient with respect to the scores: `w * (softmax - q)` for logits, `-w * q` for
// log-probabilities, zero for ignored rows; written through `Lo` into the scores' shape.
template <typename T> __device__ void class_loss_grad(i64 rows, i64 C, const T* s, Strided L, const i64* t, Strided Lt,
                                                      int logits, int has_ignore, i64 ignore, T hit, T spread,
                                                      const T* g, Strided Lg, int reduction, const u64* counted,
                                                      T* out, Strided Lo, int* bad) {
    int lane = threadIdx.x & 31;
    i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 r = warp; r < rows; r += warps) {
        i64 tgt = t[at(Lt, r)];
        if (!target_ok(tgt, C, has_ignore, ignore, bad)) {
            for (i64 c = lane; c < C; c += 32) out[at(Lo, r * C + c)] = (T)0;
            continue;
        }
        T w = reduction == 0 ? g[at(Lg, r)] : (reduction == 1 ? g[at(Lg, 0)] : g[at(Lg, 0)] / (T)(f64)*counted);
        if (logits) {
            T m = row_shift(s, L, r, C, lane);
            f64 e = 0.0;
            for (i64 c = lane; c < C; c += 32) e += (f64)exp(s[at(L, r * C + c)] - m);
            e = warp_sum(e);
            T k = w / (T)e, u = w * spread;
            for (i64 c = lane; c < C; c += 32) {
                T v = exp(s[at(L, r * C + c)] - m) * k - u;
                if (c == tgt) v = v - w * hit;
                out[at(Lo, r * C + c)] = v;
            }
        } else {
            for (i64 c = lane; c < C; c += 32) {
                T v = -(w * spread);
                if (c == tgt) v = v - w * hit;
                out[at(Lo, r * C + c)] = v;
            }
        }
    }
}

#define DEF_CLASS_LOSS(N, T)                                                             \
    extern "C" __global__ void class_loss_##N(i64 rows, i64 C, const T* s, Strided L, const i64* t, Strided Lt, \
            int logits, int has_ignore, i64 ignore, T hit, T spread, T* out, int* bad) {  \
        class_loss_rows<T>(rows, C, s, L, t, Lt, logits, has_ignore, ignore, hit, spread, out, bad); \
    }                                                                                    \
    extern "C" __global__ void class_loss_total_##N(i64 rows, const T* per_row, const u64* counted, int mean, T* out) { \
        class_loss_total<T>(rows, per_row, counted, mean, out);                          \
    }                                                                                    \
    extern "C" __global__ void class_loss_grad_##N(i64 rows, i64 C, const T* s, Strided L, const i64* t, Strided Lt, \
            int logits, int has_ignore, i64 ignore, T hit, T spread, const T* g, Strided Lg, int reduction, \
            const u64* counted, T* out, Strided Lo, int* bad) {                          \
        class_loss_grad<T>(rows, C, s, L, t, Lt, logits, has_ignore, ignore, hit, spread, g, Lg, reduction, counted, out, Lo, bad); \
    }
DEF_CLASS_LOSS(f32, f32)
DEF_CLASS_LOSS(f64, f64)

// ---- sliding windows: unfold (im2col) and fold (col2im) ----

struct Window {
    i64 in[2], out[2], k[2], s[2], p[2], d[2];
};

// out [N, C * kh * kw, oh * ow] (contiguous) from the input view [N, C, h, w] read through
// strides `st` from `off`; zero in the padding.
template <typename T> __device__ void unfold(i64 n, i64 C, Window w, T* out, const T* x, i64 s0, i64 s1, i64 s2, i64 s3, i64 off) {
    i64 P = w.out[0] * w.out[1], taps = w.k[0] * w.k[1];
    GRID_LOOP(i, n) {
        i64 pos = i % P, rest = i / P, row = rest % (C * taps), b = rest / (C * taps);
        i64 c = row / taps, tap = row % taps;
        i64 ki = tap / w.k[1], kj = tap % w.k[1];
        i64 y = pos / w.out[1], xx = pos % w.out[1];
        i64 iy = y * w.s[0] - w.p[0] + ki * w.d[0];
        i64 ix = xx * w.s[1] - w.p[1] + kj * w.d[1];
        bool inside = iy >= 0 && iy < w.in[0] && ix >= 0 && ix < w.in[1];
        out[i] = inside ? x[off + b * s0 + c * s1 + iy * s2 + ix * s3] : (T)0;
    }
}

// out [N, C, h, w] (contiguous): every column entry that unfold took from a position
// summed back into it, gathered per output element in tap order (no atomics, so the sums
// do not depend on scheduling). The columns are read through strides from `off`.
template <typename T> __device__ void fold(i64 n, i64 C, Window w, T* out, const T* col, i64 s0, i64 s1, i64 s2, i64 off) {
    i64 taps = w.k[0] * w.k[1];
    GRID_LOOP(i, n) {
        i64 ix = i % w.in[1], rest = i / w.in[1], iy = rest % w.in[0];
        rest /= w.in[0];
        i64 c = rest % C, b = rest / C;
        f64 acc = 0.0;
        for (i64 ki = 0; ki < w.k[0]; ++ki) {
            i64 ty = iy + w.p[0] - ki * w.d[0];
            if (ty < 0 || ty % w.s[0] != 0) continue;
            i64 y = ty / w.s[0];
            if (y >= w.out[0]) continue;
            for (i64 kj = 0; kj < w.k[1]; ++kj) {
                i64 tx = ix + w.p[1] - kj * w.d[1];
                if (tx < 0 || tx % w.s[1] != 0) continue;
                i64 xx = tx / w.s[1];
                if (xx >= w.out[1]) continue;
                i64 row = c * taps + ki * w.k[1] + kj;
                acc += (f64)col[off + b * s0 + row * s1 + (y * w.out[1] + xx) * s2];
            }
        }
        out[i] = (T)acc;
    }
}

extern "C" __global__ void unfold_f32(i64 n, i64 C, Window w, f32* out, const f32* x, i64 s0, i64 s1, i64 s2, i64 s3, i64 off) { unfold<f32>(n, C, w, out, x, s0, s1, s2, s3, off); }
extern "C" __global__ void unfold_f64(i64 n, i64 C, Window w, f64* out, const f64* x, i64 s0, i64 s1, i64 s2, i64 s3, i64 off) { unfold<f64>(n, C, w, out, x, s0, s1, s2, s3, off); }
extern "C" __global__ void fold_f32(i64 n, i64 C, Window w, f32* out, const f32* col, i64 s0, i64 s1, i64 s2, i64 off) { fold<f32>(n, C, w, out, col, s0, s1, s2, off); }
extern "C" __global__ void fold_f64(i64 n, i64 C, Window w, f64* out, const f64* col, i64 s0, i64 s1, i64 s2, i64 off) { fold<f64>(n, C, w, out, col, s0, s1, s2, off); }

// ---- max pooling over planes ----
//
// `win` holds each output row's window (start, count) then each output column's; the
// input view [N, C, h, w] is read through its strides. PyTorch's rule: a larger value or
// any NaN takes the place, so the first maximum (or the last NaN) wins.
template <typename T> __device__ void max_pool(i64 n, i64 C, i64 w, i64 oh, i64 ow, i64 rstep, i64 cstep, const i64* win,
                                               const T* x, i64 s0, i64 s1, i64 s2, i64 s3, i64 off, T* out, i64* at) {
    GRID_LOOP(i, n) {
        i64 xo = i % ow, rest = i / ow, y = rest % oh, p = rest / oh;
        i64 c = p % C, b = p / C;
        i64 r0 = win[2 * y], rn = win[2 * y + 1], c0 = win[2 * oh + 2 * xo], cn = win[2 * oh + 2 * xo + 1];
        T best = lowest<T>();
        i64 arg = r0 * w + c0;
        for (i64 a = 0; a < rn; ++a) {
            i64 r = r0 + a * rstep;
            for (i64 j = 0; j < cn; ++j) {
                i64 cc = c0 + j * cstep;
                T v = x[off + b * s0 + c * s1 + r * s2 + cc * s3];
                if (v > best || v != v) {
                    best = v;
                    arg = r * w + cc;
                }
            }
        }
        out[i] = best;
        at[i] = arg;
    }
}

// out[n, c, q] = src[n, c, index[n, c, q]] over flattened planes of `plane` elements.
template <typename T> __device__ void gather_planes(i64 n, i64 out_plane, i64 plane, const T* src, Strided Ls,
                                                    const i64* index, Strided Li, T* out, int* bad) {
    GRID_LOOP(i, n) {
        i64 k = index[at(Li, i)];
        if (k < 0 || k >= plane) { *bad = 1; out[i] = (T)0; continue; }
        out[i] = src[at(Ls, (i / out_plane) * plane + k)];
    }
}

// out (zeroed, [N, C, plane]) [n, c, index[n, c, q]] += src[n, c, q].
template <typename T> __device__ void scatter_planes(i64 n, i64 in_plane, i64 plane, const T* src, Strided Ls,
                                                     const i64* index, Strided Li, T* out, int* bad) {
    GRID_LOOP(i, n) {
        i64 k = index[at(Li, i)];
        if (k < 0 || k >= plane) { *bad = 1; continue; }
        atomic_add_(out + (i / in_plane) * plane + k, src[at(Ls, i)]);
    }
}

#define DEF_POOL(N, T)                                                                   \
    extern "C" __global__ void max_pool_##N(i64 n, i64 C, i64 w, i64 oh, i64 ow, i64 rstep, i64 cstep, \
            const i64* win, const T* x, i64 s0, i64 s1, i64 s2, i64 s3, i64 off, T* out, i64* at) { \
        max_pool<T>(n, C, w, oh, ow, rstep, cstep, win, x, s0, s1, s2, s3, off, out, at);  \
    }                                                                                    \
    extern "C" __global__ void gather_planes_##N(i64 n, i64 out_plane, i64 plane, const T* src, Strided Ls, \
            const i64* index, Strided Li, T* out, int* bad) {                            \
        gather_planes<T>(n, out_plane, plane, src, Ls, index, Li, out, bad);             \
    }                                                                                    \
    extern "C" __global__ void scatter_planes_##N(i64 n, i64 in_plane, i64 plane, const T* src, Strided Ls, \
            const i64* index, Strided Li, T* out, int* bad) {                            \
        scatter_planes<T>(n, in_plane, plane, src, Ls, index, Li, out, bad);             \
    }
DEF_POOL(f32, f32)
DEF_POOL(f64, f64)
