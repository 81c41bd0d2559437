// The RMS normalization's native kernel, with the output gate of GLA / DeltaNet / Gated DeltaNet fused:
//
//   r = (Σ_i x_i² / n + ε)^{-1/2},   x̂ = r x,   y = x̂ ⊙ w ⊙ SiLU(z)   (or x̂ ⊙ w without a gate)
//
// per row of n elements, and its adjoint, with r and SiLU recomputed rather than saved:
//
//   a = ∂y ⊙ SiLU(z),   ∂w = Σ_rows a ⊙ x̂,   u = a ⊙ w,   ∂x = r (u − x̂ ⟨u, x̂⟩ / n),
//   ∂z = ∂y ⊙ x̂ ⊙ w ⊙ σ(z) (1 + z (1 − σ(z)))
//
// The same operations as its torch definition (rms_norm_reference in norm.py beside it); this file reads each row
// once (it stays in cache between its two loops) where torch makes a pass per elementwise op.  Plain C ABI,
// loaded by norm.py with ctypes (which checks the layout of NormArgs first, see norm_layout below); every entry
// point takes a range of rows so that Python threads share them.
#include <cmath>
#include <cstdint>

#include "native_math.h"

extern "C" {
struct NormArgs {
    int64_t rows, width;
    double eps;
    const void *x;            // [rows, n]
    const void *gate;         // [rows, n] (pre-activation z) or null
    const void *weight;       // [n]
    void *y;                  // forward output [rows, n]
    const void *grad_y;       // [rows, n]
    void *grad_x;             // [rows, n]
    void *grad_gate;          // [rows, n] or null
    void *grad_weight;        // [parts, n], accumulated by part
};
}

namespace {

template <typename T>
T inverse_rms(const T* x, int64_t n, double eps) {
    T squares = T(0);
    #pragma omp simd reduction(+ : squares)
    for (int64_t i = 0; i < n; ++i) squares += x[i] * x[i];
    return T(1) / std::sqrt(squares / T(n) + T(eps));
}

template <typename T>
int forward(const NormArgs* a, int64_t begin, int64_t end) {
    const int64_t n = a->width;
    const T* weight = static_cast<const T*>(a->weight);
    for (int64_t row = begin; row < end; ++row) {
        const T* x = static_cast<const T*>(a->x) + row * n;
        T* y = static_cast<T*>(a->y) + row * n;
        const T r = inverse_rms(x, n, a->eps);
        if (a->gate) {
            const T* z = static_cast<const T*>(a->gate) + row * n;
            #pragma omp simd
            for (int64_t i = 0; i < n; ++i) y[i] = x[i] * r * weight[i] * z[i] / (T(1) + exponential(-z[i]));
        } else {
            #pragma omp simd
            for (int64_t i = 0; i < n; ++i) y[i] = x[i] * r * weight[i];
        }
    }
    return 0;
}

template <typename T>
int backward(const NormArgs* a, int64_t begin, int64_t end, int64_t part) {
    const int64_t n = a->width;
    const T* weight = static_cast<const T*>(a->weight);
    T* grad_weight = static_cast<T*>(a->grad_weight) + part * n;
    for (int64_t row = begin; row < end; ++row) {
        const T* x = static_cast<const T*>(a->x) + row * n;
        const T* dy = static_cast<const T*>(a->grad_y) + row * n;
        const T* z = a->gate ? static_cast<const T*>(a->gate) + row * n : nullptr;
        T* dx = static_cast<T*>(a->grad_x) + row * n;
        const T r = inverse_rms(x, n, a->eps);
        T along = T(0);  // ⟨u, x̂⟩ with u = ∂y ⊙ SiLU(z) ⊙ w
        if (z) {
            T* dz = static_cast<T*>(a->grad_gate) + row * n;
            #pragma omp simd reduction(+ : along)
            for (int64_t i = 0; i < n; ++i) {
                const T sigma = T(1) / (T(1) + exponential(-z[i]));
                const T normalized = x[i] * r, scaled = dy[i] * z[i] * sigma;  // x̂, ∂y ⊙ SiLU(z)
                grad_weight[i] += scaled * normalized;
                dx[i] = scaled * weight[i];  // u, finished below
                along += dx[i] * normalized;
                dz[i] = dy[i] * normalized * weight[i] * sigma * (T(1) + z[i] * (T(1) - sigma));
            }
        } else {
            #pragma omp simd reduction(+ : along)
            for (int64_t i = 0; i < n; ++i) {
                const T normalized = x[i] * r;
                grad_weight[i] += dy[i] * normalized;
                dx[i] = dy[i] * weight[i];
                along += dx[i] * normalized;
            }
        }
        const T mean = along / T(n);
        #pragma omp simd
        for (int64_t i = 0; i < n; ++i) dx[i] = r * (dx[i] - x[i] * r * mean);
    }
    return 0;
}

}  // namespace

SEQDYN_ENTRY_POINTS(seqdyn_norm, NormArgs)

// The field offsets and size of NormArgs (see copy_layout in native_math.h).
extern "C" int64_t seqdyn_norm_layout(int64_t* out, int64_t capacity) {
#define F(field) SEQDYN_OFFSET(NormArgs, field)
    const int64_t layout[] = {
        F(rows), F(width), F(eps), F(x), F(gate), F(weight),
        F(y), F(grad_y), F(grad_x), F(grad_gate), F(grad_weight),
        static_cast<int64_t>(sizeof(NormArgs))};
#undef F
    return copy_layout(layout, sizeof(layout) / sizeof(layout[0]), out, capacity);
}
