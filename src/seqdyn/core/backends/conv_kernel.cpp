// The short convolution's native kernel: a causal depthwise convolution of time-major inputs, SiLU fused.
//
//   p_t = b + Σ_{s<w} W_s ⊙ x_{t−w+1+s},   y_t = SiLU(p_t) (or p_t)      (x_{−w+1..−1}: the state)
//
// and its adjoint, with p recomputed rather than saved:
//
//   ∂p_t = ∂y_t ⊙ SiLU'(p_t);   ∂x_u = Σ_s W_s ⊙ ∂p_{u+w−1−s};   ∂W_s = Σ_{b,t} ∂p_t ⊙ x_{t−w+1+s};   ∂b = Σ ∂p_t
//
// The same operation as _DepthwiseCorrelation in seqdyn/nn/conv.py (its torch definition); this file reads each
// input row once for all w taps and the activation, where torch makes a pass per tap and per elementwise op.
// Plain C ABI, loaded by native.py with ctypes; every entry point takes a range of (batch, block of steps)
// items so that Python threads share the work.  All tensors are contiguous with channels last; the state is read
// where the window reaches before the first step, so the input is never copied behind it.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "native_math.h"

extern "C" {
struct ConvArgs {
    int64_t batch, length, channels, width, activation;
    int64_t block;            // steps per work item
    const void *x;            // [B, T, C]
    const void *state;        // [B, w − 1, C]: the inputs before x
    const void *weight;       // [w, C] (tap-major)
    const void *bias;         // [C] or null
    void *y;                  // forward output [B, T, C]
    const void *grad_y;       // [B, T, C]
    void *grad_x;             // [B, T, C]
    void *grad_state;         // [B, w − 1, C] or null
    void *grad_weight;        // [parts, w, C], accumulated by part
    void *grad_bias;          // [parts, C] or null
};
}

namespace {

// input row u of batch element b, counted from the first state row (u < w − 1: the state)
template <typename T>
const T* input_row(const ConvArgs* a, int64_t b, int64_t u) {
    const int64_t before = a->width - 1;
    if (u >= before) return static_cast<const T*>(a->x) + (b * a->length + u - before) * a->channels;
    return static_cast<const T*>(a->state) + (b * before + u) * a->channels;
}

// p_t for one step: bias plus every tap, into out[C]
template <typename T>
void preactivation(const ConvArgs* a, int64_t b, int64_t t, T* out) {
    const int64_t channels = a->channels;
    const T* weight = static_cast<const T*>(a->weight);
    const T* bias = static_cast<const T*>(a->bias);
    #pragma omp simd
    for (int64_t c = 0; c < channels; ++c) out[c] = bias ? bias[c] : T(0);
    for (int64_t s = 0; s < a->width; ++s) {
        const T* tap = weight + s * channels;
        const T* row = input_row<T>(a, b, t + s);
        #pragma omp simd
        for (int64_t c = 0; c < channels; ++c) out[c] += tap[c] * row[c];
    }
}

template <typename T>
int forward(const ConvArgs* a, int64_t begin, int64_t end) {
    const int64_t channels = a->channels, blocks = (a->length + a->block - 1) / a->block;
    T* y = static_cast<T*>(a->y);
    for (int64_t item = begin; item < end; ++item) {
        const int64_t b = item / blocks, start = (item % blocks) * a->block;
        const int64_t stop = std::min(a->length, start + a->block);
        for (int64_t t = start; t < stop; ++t) {
            T* out = y + (b * a->length + t) * channels;
            preactivation(a, b, t, out);
            if (a->activation) {
                #pragma omp simd
                for (int64_t c = 0; c < channels; ++c) out[c] = out[c] / (T(1) + exponential(-out[c]));
            }
        }
    }
    return 0;
}

template <typename T>
int backward(const ConvArgs* a, int64_t begin, int64_t end, int64_t part) {
    const int64_t channels = a->channels, width = a->width, length = a->length;
    const int64_t blocks = (length + a->block - 1) / a->block, before = width - 1;
    const T* weight = static_cast<const T*>(a->weight);
    const T* grad_y = static_cast<const T*>(a->grad_y);
    T* grad_weight = static_cast<T*>(a->grad_weight) + part * width * channels;
    T* grad_bias = a->grad_bias ? static_cast<T*>(a->grad_bias) + part * channels : nullptr;
    // ∂p of the block's steps and of the w − 1 before them (input row u reads ∂p_{u−s}, s < w)
    T* grad_p = static_cast<T*>(std::malloc(sizeof(T) * (a->block + width - 1) * channels));
    if (!grad_p) return 1;
    for (int64_t item = begin; item < end; ++item) {
        const int64_t b = item / blocks, start = (item % blocks) * a->block;
        const int64_t stop = std::min(length, start + a->block), first = std::max<int64_t>(0, start - (width - 1));
        for (int64_t t = first; t < stop; ++t) {
            T* g = grad_p + (t - first) * channels;
            const T* dy = grad_y + (b * length + t) * channels;
            if (a->activation) {
                preactivation(a, b, t, g);
                #pragma omp simd
                for (int64_t c = 0; c < channels; ++c) {
                    const T gate = T(1) / (T(1) + exponential(-g[c]));
                    g[c] = dy[c] * gate * (T(1) + g[c] * (T(1) - gate));
                }
            } else {
                std::memcpy(g, dy, sizeof(T) * channels);
            }
        }
        for (int64_t t = start; t < stop; ++t) {  // ∂W and ∂b from this block's own steps only
            const T* g = grad_p + (t - first) * channels;
            for (int64_t s = 0; s < width; ++s) {
                const T* row = input_row<T>(a, b, t + s);
                T* gw = grad_weight + s * channels;
                #pragma omp simd
                for (int64_t c = 0; c < channels; ++c) gw[c] += g[c] * row[c];
            }
            if (grad_bias) {
                #pragma omp simd
                for (int64_t c = 0; c < channels; ++c) grad_bias[c] += g[c];
            }
        }
        // input rows u ∈ [start, stop), counted from the first state row (rows before w − 1 are the state's), and
        // in the last block also the w − 1 rows after; row u gets ∂p_{u−s} from the steps reading it
        for (int64_t u = start; u < (stop == length ? length + before : stop); ++u) {
            if (u < before && !a->grad_state) continue;
            T* gx = u < before ? static_cast<T*>(a->grad_state) + (b * before + u) * channels
                               : static_cast<T*>(a->grad_x) + (b * length + u - before) * channels;
            #pragma omp simd
            for (int64_t c = 0; c < channels; ++c) gx[c] = T(0);
            for (int64_t s = 0; s < width; ++s) {
                const int64_t t = u - s;
                if (t < first || t >= stop) continue;
                const T* g = grad_p + (t - first) * channels;
                const T* tap = weight + s * channels;
                #pragma omp simd
                for (int64_t c = 0; c < channels; ++c) gx[c] += tap[c] * g[c];
            }
        }
    }
    std::free(grad_p);
    return 0;
}

}  // namespace

extern "C" {
int seqdyn_conv_forward_f32(const ConvArgs* a, int64_t begin, int64_t end) { return forward<float>(a, begin, end); }
int seqdyn_conv_forward_f64(const ConvArgs* a, int64_t begin, int64_t end) { return forward<double>(a, begin, end); }
int seqdyn_conv_backward_f32(const ConvArgs* a, int64_t begin, int64_t end, int64_t part) {
    return backward<float>(a, begin, end, part);
}
int seqdyn_conv_backward_f64(const ConvArgs* a, int64_t begin, int64_t end, int64_t part) {
    return backward<double>(a, begin, end, part);
}
}
