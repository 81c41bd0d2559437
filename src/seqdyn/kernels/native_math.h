// Shared by the native kernels (build.py compiles each with this header beside it).
#pragma once

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
