// Shared by the native kernels (build.py compiles each with this header beside it).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
// glibc's vector math (libmvec) has SIMD versions of exp; declaring them lets the key loops vectorize exactly
// as with -ffast-math, without its other licences.
__attribute__((__simd__("notinbranch"))) float expf(float);
__attribute__((__simd__("notinbranch"))) double exp(double);
#else
float expf(float);
double exp(double);
#endif
}

namespace {
inline float exponential(float x) { return expf(x); }
inline double exponential(double x) { return exp(x); }
}  // namespace

// A structure's field offsets and size, as each kernel's <prefix>_layout reports them to build.py, which compares
// them with the structure's Python mirror before running the kernel (a drift between the two is then refused at
// load time instead of corrupting memory).
#define SEQDYN_OFFSET(type, field) static_cast<int64_t>(offsetof(type, field))

namespace {
// Writes the count values of layout (offsets in declaration order, then the size) into out, up to capacity of
// them; returns count.
inline int64_t copy_layout(const int64_t* layout, int64_t count, int64_t* out, int64_t capacity) {
    for (int64_t i = 0; i < count && i < capacity; ++i) out[i] = layout[i];
    return count;
}
}  // namespace

// The C entry points <prefix>_forward_<f32|f64>(args, begin, end) and <prefix>_backward_<f32|f64>(args, begin, end,
// part) of a kernel whose templates forward<T> and backward<T> take its argument structure Args.
#define SEQDYN_ENTRY_POINTS(prefix, Args)                                                                          \
    extern "C" {                                                                                                   \
    int prefix##_forward_f32(const Args* a, int64_t begin, int64_t end) { return forward<float>(a, begin, end); }  \
    int prefix##_forward_f64(const Args* a, int64_t begin, int64_t end) { return forward<double>(a, begin, end); } \
    int prefix##_backward_f32(const Args* a, int64_t begin, int64_t end, int64_t part) {                           \
        return backward<float>(a, begin, end, part);                                                               \
    }                                                                                                              \
    int prefix##_backward_f64(const Args* a, int64_t begin, int64_t end, int64_t part) {                           \
        return backward<double>(a, begin, end, part);                                                              \
    }                                                                                                              \
    }
