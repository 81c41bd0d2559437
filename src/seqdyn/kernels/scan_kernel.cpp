// The scan backend's native kernel: the selective scan of a group of heads step by step, each state in cache.
//
//   S_t = a_t ⊙ S_{t-1} + k_t v_tᵀ,   y_t = S_tᵀ q_t,   a_t = exp(g_t), g_t = Δ_t A (factored) or given
//
// and its adjoint, run backwards block by block from the states saved every `interval` steps:
//
//   ∂S_t += q_t ∂y_tᵀ;  ∂q_t = S_t ∂y_t;  ∂k_t = ∂S_t v_t;  ∂v_t = ∂S_tᵀ k_t;
//   ∂g_t = a_t ⊙ Σ_v ∂S_t ⊙ S_{t-1};  ∂S_{t-1} = a_t ⊙ ∂S_t            (∂Δ_t = ⟨∂g_t, A⟩, ∂A = Σ_t ∂g_t Δ_t)
//
// The same recurrence as BlockScan in seqdyn/core/backends/scan.py (its torch definition); this file only keeps
// each head's state [K, V] in registers and cache over all T steps, which torch's per-step kernels cannot.  It
// registers the operators seqdyn::scan and seqdyn::scan_backward, which take typed tensors (scan.py beside it
// adds their fake implementations and autograd formula), and splits the (batch, group of heads) items over
// torch's intra-op threads.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "native_math.h"

namespace {

// Every tensor is addressed by its strides (in elements) over batch, head and time; its last axis (key or value)
// has unit stride.  A head stride of 0 is one head shared by all.
struct ScanArgs {
    int64_t batch, heads, length, key_dim, value_dim;
    int64_t interval;  // steps between saved states
    int64_t group;     // heads scanned together, step by step (neighbouring heads share cache lines)
    const void *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *rate = nullptr, *initial = nullptr;
    int64_t q_stride[3] = {}, k_stride[3] = {}, v_stride[3] = {}, g_stride[3] = {};
    int64_t g_per_key = 0;         // 1: g [B, H, T, K] (diagonal); 0: g [B, H, T] (scalar, or Δ with a rate)
    int64_t rate_head_stride = 0;  // rate A [H, K] (stride K) or [1, K] (stride 0)
    // forward outputs: y (strided), final [B, H, K, V], saved [B, H, ceil(T / interval), K, V] or null
    void *y = nullptr, *final = nullptr, *saved = nullptr;
    int64_t y_stride[3] = {};
    // backward: grad_y (strided), grad_final [B, H, K, V]
    const void *grad_y = nullptr, *grad_final = nullptr;
    int64_t grad_y_stride[3] = {};
    // outputs: grad_q, grad_k (strided; accumulated, and offset by part * *_part_stride, when shared by all
    // heads), grad_v, grad_g (strided like v and g), grad_rate [B, H, K], grad_initial [B, H, K, V]
    void *grad_q = nullptr, *grad_k = nullptr, *grad_v = nullptr, *grad_g = nullptr, *grad_rate = nullptr,
         *grad_initial = nullptr;
    int64_t grad_q_stride[3] = {}, grad_k_stride[3] = {}, grad_v_stride[3] = {}, grad_g_stride[3] = {};
    int64_t grad_q_part_stride = 0, grad_k_part_stride = 0;  // 0: one gradient per head, written
};

template <typename T>
const T* element(const void* base, const int64_t* stride, int64_t b, int64_t h, int64_t t) {
    return static_cast<const T*>(base) + b * stride[0] + h * stride[1] + t * stride[2];
}

template <typename T>
T* element(void* base, const int64_t* stride, int64_t b, int64_t h, int64_t t) {
    return static_cast<T*>(base) + b * stride[0] + h * stride[1] + t * stride[2];
}

// a_t = exp(g_t) for the K keys of step t
template <typename T>
inline void decays(const ScanArgs& a, int64_t b, int64_t h, int64_t t, T* out, int64_t K) {
    const T* g = element<T>(a.g, a.g_stride, b, h, t);
    if (a.rate) {
        const T* rate = static_cast<const T*>(a.rate) + h * a.rate_head_stride;
        const T step = g[0];
#pragma omp simd
        for (int64_t i = 0; i < K; ++i) out[i] = exponential(step * rate[i]);
    } else if (a.g_per_key) {
#pragma omp simd
        for (int64_t i = 0; i < K; ++i) out[i] = exponential(g[i]);
    } else {
        const T decay = exponential(g[0]);
        for (int64_t i = 0; i < K; ++i) out[i] = decay;
    }
}

// S = a ⊙ S + k vᵀ (a = 1 when decay is null)
template <typename T>
inline void advance(T* S, const T* decay, const T* key, const T* value, int64_t K, int64_t V) {
    if (V == 1) {
        const T x = value[0];
        if (decay) {
#pragma omp simd
            for (int64_t i = 0; i < K; ++i) S[i] = decay[i] * S[i] + key[i] * x;
        } else {
#pragma omp simd
            for (int64_t i = 0; i < K; ++i) S[i] += key[i] * x;
        }
        return;
    }
    for (int64_t i = 0; i < K; ++i) {
        T* row = S + i * V;
        const T d = decay ? decay[i] : T(1), key_i = key[i];
#pragma omp simd
        for (int64_t j = 0; j < V; ++j) row[j] = d * row[j] + key_i * value[j];
    }
}

// y = Sᵀ q
template <typename T>
inline void read_out(const T* S, const T* q, T* y, int64_t K, int64_t V) {
    if (V == 1) {
        T sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < K; ++i) sum += q[i] * S[i];
        y[0] = sum;
        return;
    }
    for (int64_t j = 0; j < V; ++j) y[j] = 0;
    for (int64_t i = 0; i < K; ++i) {
        const T q_i = q[i];
        const T* row = S + i * V;
#pragma omp simd
        for (int64_t j = 0; j < V; ++j) y[j] += q_i * row[j];
    }
}

// heads [h0, h0 + n) of batch b, scanned forwards together; S: their states [n, K, V], decay: [K]
template <typename T, int FixedK>
void forward_group(const ScanArgs& a, int64_t b, int64_t h0, int64_t n, T* S, T* decay) {
    const int64_t H = a.heads, L = a.length, K = FixedK ? FixedK : a.key_dim, V = a.value_dim, KV = K * V;
    const int64_t saves = (L + a.interval - 1) / a.interval;
    for (int64_t h = 0; h < n; ++h) {
        T* state = S + h * KV;
        if (a.initial) std::memcpy(state, static_cast<const T*>(a.initial) + (b * H + h0 + h) * KV, KV * sizeof(T));
        else std::memset(state, 0, KV * sizeof(T));
    }
    for (int64_t t = 0; t < L; ++t) {
        for (int64_t h = 0; h < n; ++h) {
            const int64_t head = h0 + h;
            T* state = S + h * KV;
            if (a.saved && t % a.interval == 0)
                std::memcpy(static_cast<T*>(a.saved) + ((b * H + head) * saves + t / a.interval) * KV, state,
                            KV * sizeof(T));
            if (a.g) decays<T>(a, b, head, t, decay, K);
            advance<T>(state, a.g ? decay : nullptr, element<T>(a.k, a.k_stride, b, head, t),
                       element<T>(a.v, a.v_stride, b, head, t), K, V);
            read_out<T>(state, element<T>(a.q, a.q_stride, b, head, t), element<T>(a.y, a.y_stride, b, head, t), K, V);
        }
    }
    std::memcpy(static_cast<T*>(a.final) + (b * H + h0) * KV, S, n * KV * sizeof(T));
}

// One step of the adjoint for one head: G = ∂S_t (before q_t ∂y_tᵀ is added), S = S_t, previous = S_{t-1};
// writes ∂q_t, ∂k_t (added to when accumulating), ∂v_t and ∂g_t per key into dg, and leaves a_t ⊙ ∂S_t in G.
template <typename T>
inline void adjoint_step(T* G, const T* S, const T* previous, const T* d, const T* q, const T* key, const T* value,
                  const T* dy, T* dq, T* dk, T* dv, T* dg, bool accumulate_q, bool accumulate_k, int64_t K,
                  int64_t V) {
    if (V == 1) {
        const T dy0 = dy[0], x = value[0];
        T dv0 = 0;
#pragma omp simd reduction(+ : dv0)
        for (int64_t i = 0; i < K; ++i) {
            const T grad = G[i] + q[i] * dy0;
            dq[i] = (accumulate_q ? dq[i] : T(0)) + S[i] * dy0;
            dk[i] = (accumulate_k ? dk[i] : T(0)) + grad * x;
            dv0 += grad * key[i];
            if (d) {
                dg[i] = d[i] * grad * previous[i];
                G[i] = d[i] * grad;
            } else {
                G[i] = grad;
            }
        }
        dv[0] = dv0;
        return;
    }
    for (int64_t j = 0; j < V; ++j) dv[j] = 0;
    for (int64_t i = 0; i < K; ++i) {
        T* row = G + i * V;
        const T* S_row = S + i * V;
        const T* previous_row = previous + i * V;
        const T q_i = q[i], key_i = key[i];
        T dq_i = 0, dk_i = 0, dg_i = 0;
#pragma omp simd reduction(+ : dq_i, dk_i, dg_i)
        for (int64_t j = 0; j < V; ++j) {
            const T grad = row[j] + q_i * dy[j];
            dq_i += S_row[j] * dy[j];
            dk_i += grad * value[j];
            dv[j] += grad * key_i;
            dg_i += grad * previous_row[j];
            row[j] = grad;
        }
        dq[i] = (accumulate_q ? dq[i] : T(0)) + dq_i;
        dk[i] = (accumulate_k ? dk[i] : T(0)) + dk_i;
        if (d) {
            const T d_i = d[i];
            dg[i] = d_i * dg_i;
#pragma omp simd
            for (int64_t j = 0; j < V; ++j) row[j] *= d_i;
        }
    }
}

// ∂g_t from its per-key parts: kept per key (diagonal), ⟨∂g_t, A⟩ and ∂A += ∂g_t Δ_t (factored), or summed
template <typename T>
inline void write_decay_grad(const ScanArgs& a, int64_t b, int64_t head, int64_t t, const T* dg, T* rate_grad,
                             int64_t K) {
    T* out = element<T>(a.grad_g, a.grad_g_stride, b, head, t);
    if (a.g_per_key) {
        std::memcpy(out, dg, K * sizeof(T));
        return;
    }
    T sum = 0;
    if (a.rate) {
        const T* rate = static_cast<const T*>(a.rate) + head * a.rate_head_stride;
        const T step = element<T>(a.g, a.g_stride, b, head, t)[0];
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < K; ++i) {
            sum += dg[i] * rate[i];
            rate_grad[i] += dg[i] * step;
        }
    } else {
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < K; ++i) sum += dg[i];
    }
    out[0] = sum;
}

// heads [h0, h0 + n) of batch b, their adjoint run backwards block by block; work as in backward_range
template <typename T, int FixedK>
void backward_group(const ScanArgs& a, int64_t b, int64_t h0, int64_t n, int64_t part, T* work) {
    const int64_t H = a.heads, L = a.length, K = FixedK ? FixedK : a.key_dim, V = a.value_dim, KV = K * V;
    const int64_t interval = a.interval, blocks = (L + interval - 1) / interval;
    T* G = work;                                  // ∂S [n, K, V]
    T* states = G + n * KV;                       // S_{start-1+j} of a block [(interval + 1), n, K, V]
    T* decay = states + (interval + 1) * n * KV;  // a_t of a block [interval, n, K]
    T* rate_grad = decay + interval * n * K;      // ∂A [n, K]
    T* dg = rate_grad + n * K;                    // ∂g_t [K]
    std::memset(rate_grad, 0, n * K * sizeof(T));
    std::memcpy(G, static_cast<const T*>(a.grad_final) + (b * H + h0) * KV, n * KV * sizeof(T));
    T* grad_q = static_cast<T*>(a.grad_q) + part * a.grad_q_part_stride;
    T* grad_k = static_cast<T*>(a.grad_k) + part * a.grad_k_part_stride;
    for (int64_t block = blocks - 1; block >= 0; --block) {
        const int64_t start = block * interval, steps = (L - start < interval) ? L - start : interval;
        for (int64_t h = 0; h < n; ++h)
            std::memcpy(states + h * KV, static_cast<const T*>(a.saved) + ((b * H + h0 + h) * blocks + block) * KV,
                        KV * sizeof(T));
        for (int64_t j = 0; j < steps; ++j) {
            std::memcpy(states + (j + 1) * n * KV, states + j * n * KV, n * KV * sizeof(T));
            for (int64_t h = 0; h < n; ++h) {
                T* d = a.g ? decay + (j * n + h) * K : nullptr;
                if (d) decays<T>(a, b, h0 + h, start + j, d, K);
                advance<T>(states + ((j + 1) * n + h) * KV, d, element<T>(a.k, a.k_stride, b, h0 + h, start + j),
                           element<T>(a.v, a.v_stride, b, h0 + h, start + j), K, V);
            }
        }
        for (int64_t j = steps - 1; j >= 0; --j) {
            const int64_t t = start + j;
            for (int64_t h = 0; h < n; ++h) {
                const int64_t head = h0 + h;
                const T* d = a.g ? decay + (j * n + h) * K : nullptr;
                adjoint_step<T>(G + h * KV, states + ((j + 1) * n + h) * KV, states + (j * n + h) * KV, d,
                                element<T>(a.q, a.q_stride, b, head, t), element<T>(a.k, a.k_stride, b, head, t),
                                element<T>(a.v, a.v_stride, b, head, t), element<T>(a.grad_y, a.grad_y_stride, b, head, t),
                                element<T>(grad_q, a.grad_q_stride, b, head, t), element<T>(grad_k, a.grad_k_stride, b, head, t),
                                element<T>(a.grad_v, a.grad_v_stride, b, head, t), dg, a.grad_q_part_stride != 0,
                                a.grad_k_part_stride != 0, K, V);
                if (d) write_decay_grad<T>(a, b, head, t, dg, rate_grad + h * K, K);
            }
        }
    }
    if (a.rate) std::memcpy(static_cast<T*>(a.grad_rate) + (b * H + h0) * K, rate_grad, n * K * sizeof(T));
    std::memcpy(static_cast<T*>(a.grad_initial) + (b * H + h0) * KV, G, n * KV * sizeof(T));
}

// items: (batch, group of heads) pairs, flattened
template <typename T, typename Body>
void over_items(const ScanArgs& a, int64_t begin, int64_t end, int64_t work_size, Body body) {
    std::unique_ptr<T[]> work(new T[work_size]);
    const int64_t groups = (a.heads + a.group - 1) / a.group;
    for (int64_t item = begin; item < end; ++item) {
        const int64_t b = item / groups, h0 = (item % groups) * a.group;
        body(b, h0, (a.heads - h0 < a.group) ? a.heads - h0 : a.group, work.get());
    }
}

// FixedK: the key dimension known at compile time (0: read at run time), which lets every loop over the keys
// become a few whole vector instructions
template <typename T, int FixedK>
void forward_range(const ScanArgs& a, int64_t begin, int64_t end) {
    const int64_t K = a.key_dim, KV = K * a.value_dim;
    over_items<T>(a, begin, end, a.group * KV + K, [&a, KV](int64_t b, int64_t h0, int64_t n, T* work) {
        forward_group<T, FixedK>(a, b, h0, n, work, work + n * KV);
    });
}

template <typename T, int FixedK>
void backward_range(const ScanArgs& a, int64_t begin, int64_t end, int64_t part) {
    const int64_t K = a.key_dim, KV = K * a.value_dim, n = a.group;
    over_items<T>(a, begin, end, (a.interval + 2) * n * KV + (a.interval + 1) * n * K + K,
                  [&a, part](int64_t b, int64_t h0, int64_t heads, T* work) {
                      backward_group<T, FixedK>(a, b, h0, heads, part, work);
                  });
}

// run(std::integral_constant<int, FixedK>) with the key dimension fixed at compile time where it is the state
// size of Mamba-1 (N = 16) or another common small one, else with FixedK = 0
template <typename Run>
void with_fixed_key(int64_t key_dim, Run run) {
    switch (key_dim) {
        case 8: return run(std::integral_constant<int, 8>{});
        case 16: return run(std::integral_constant<int, 16>{});
        case 32: return run(std::integral_constant<int, 32>{});
        case 64: return run(std::integral_constant<int, 64>{});
        default: return run(std::integral_constant<int, 0>{});
    }
}

// ------------------------------------------------------------------------------------------------ operators
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// The items split into one contiguous range per intra-op thread.
Ranges split_items(int64_t items) {
    const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), items));
    Ranges ranges;
    for (int64_t i = 0; i < parts; ++i) ranges.emplace_back(items * i / parts, items * (i + 1) / parts);
    return ranges;
}

// body(part, begin, end) for every range, one range per thread
template <typename Body>
void over_ranges(const Ranges& ranges, Body body) {
    at::parallel_for(0, static_cast<int64_t>(ranges.size()), 1, [&](int64_t first, int64_t last) {
        for (int64_t part = first; part < last; ++part) body(part, ranges[part].first, ranges[part].second);
    });
}

void set_strides(int64_t* out, const at::Tensor& x) {
    for (int i = 0; i < 3; ++i) out[i] = x.stride(i);
}

// x is [B, H, T] or, with `last` >= 0, [B, H, T, last] with a unit stride along that axis (as the kernel reads it)
void check_steps(const at::Tensor& x, const char* name, const at::Tensor& q, int64_t heads, int64_t last) {
    const bool shape = x.dim() == (last < 0 ? 3 : 4) && x.size(0) == q.size(0) && x.size(1) == heads &&
                       x.size(2) == q.size(2) && (last < 0 || x.size(3) == last);
    TORCH_CHECK(shape, "seqdyn::scan: ", name, " must be [B, H, T", last < 0 ? "]" : ", K|V]", " beside q ", q.sizes(),
                ", got ", x.sizes());
    TORCH_CHECK(last <= 1 || x.stride(3) == 1, "seqdyn::scan: ", name, " needs a unit stride along its last axis");
    TORCH_CHECK(x.scalar_type() == q.scalar_type(), "seqdyn::scan: q, k, v, g, rate must share one dtype, got ",
                x.scalar_type(), " beside q's ", q.scalar_type());
}

// x is a contiguous `layout` of q's dtype with `numel` elements (initial, saved, grad_final: the kernel's own layouts)
void check_block(const at::Tensor& x, const char* name, const char* layout, const at::Tensor& q, int64_t numel) {
    TORCH_CHECK(x.scalar_type() == q.scalar_type() && x.is_contiguous() && x.numel() == numel, "seqdyn::scan: ",
                name, " must be a contiguous ", layout, " of q's dtype (", numel, " elements), got ", x.sizes());
}

// the (batch, group of heads) items split into one contiguous range per intra-op thread
Ranges ranges_of(const ScanArgs& a) { return split_items(a.batch * ((a.heads + a.group - 1) / a.group)); }

// the input half of the arguments: q, k [B, H, T, K], v [B, H, T, V], g [B, H, T(, K)], rate [H|1, K]
ScanArgs inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& g,
                const std::optional<at::Tensor>& rate, int64_t group, int64_t interval) {
    TORCH_CHECK(q.dim() == 4 && v.dim() == 4, "seqdyn::scan: q and v must be [B, H, T, K|V], got ", q.sizes(),
                " and ", v.sizes());
    const int64_t H = q.size(1), K = q.size(3);
    check_steps(q, "q", q, H, K), check_steps(k, "k", q, H, K), check_steps(v, "v", q, H, v.size(3));
    TORCH_CHECK(!g || g->dim() == 3 || g->dim() == 4, "seqdyn::scan: g must be [B, H, T] or [B, H, T, K]");
    if (g) check_steps(*g, "g", q, H, g->dim() == 4 ? K : -1);
    TORCH_CHECK(!rate || (rate->dim() == 2 && (rate->size(0) == 1 || rate->size(0) == H) && rate->size(1) == K &&
                          rate->stride(1) == 1 && rate->scalar_type() == q.scalar_type()),
                "seqdyn::scan: rate must be [H|1, K] of q's dtype with a unit stride along K");
    TORCH_CHECK(group >= 1 && interval >= 1, "seqdyn::scan: group and interval must be positive");
    ScanArgs a{q.size(0), q.size(1), q.size(2), q.size(3), v.size(3), interval, group};
    a.q = q.const_data_ptr(), a.k = k.const_data_ptr(), a.v = v.const_data_ptr();
    set_strides(a.q_stride, q), set_strides(a.k_stride, k), set_strides(a.v_stride, v);
    if (g) {
        a.g = g->const_data_ptr(), a.g_per_key = g->dim() == 4;
        set_strides(a.g_stride, *g);
    }
    if (rate) a.rate = rate->const_data_ptr(), a.rate_head_stride = rate->size(0) > 1 ? rate->stride(0) : 0;
    return a;
}

// (y, S_T, saved): y time-major in memory [B, H, T, V], saved the states every `interval` steps (empty unless keep);
// shared_q, shared_k are the backward's (q or k one head expanded over all), taken here for the autograd formula
std::tuple<at::Tensor, at::Tensor, at::Tensor> scan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                    const std::optional<at::Tensor>& g,
                                                    const std::optional<at::Tensor>& rate,
                                                    const std::optional<at::Tensor>& initial, bool shared_q,
                                                    bool shared_k, bool keep, int64_t group, int64_t interval) {
    ScanArgs a = inputs(q, k, v, g, rate, group, interval);
    const int64_t B = a.batch, H = a.heads, L = a.length, K = a.key_dim, V = a.value_dim;
    if (initial) check_block(*initial, "initial", "[B, H, K, V]", q, B * H * K * V);
    at::Tensor y = q.new_empty({B, L, H, V}).transpose(1, 2);  // [B, H, T, V], time-major in memory
    at::Tensor final = q.new_empty({B, H, K, V});
    at::Tensor saved = keep ? q.new_empty({B, H, (L + interval - 1) / interval, K, V}) : q.new_empty({0});
    a.initial = initial ? initial->const_data_ptr() : nullptr;
    a.y = y.data_ptr(), a.final = final.data_ptr(), a.saved = keep ? saved.data_ptr() : nullptr;
    set_strides(a.y_stride, y);
    const Ranges ranges = ranges_of(a);
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "seqdyn::scan", [&] {
        with_fixed_key(K, [&](auto fixed) {
            over_ranges(ranges, [&](int64_t, int64_t begin, int64_t end) {
                forward_range<scalar_t, decltype(fixed)::value>(a, begin, end);
            });
        });
    });
    return {y, final, saved};
}

// (∂q, ∂k, ∂v, ∂g, ∂rate, ∂S_0) from the states saved by scan; a shared q's or k's gradient summed over the heads
// [B, 1, T, K], ∂rate summed over the batch [H, K], ∂g and ∂rate empty where g and rate are absent
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> scan_backward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& g,
    const std::optional<at::Tensor>& rate, const at::Tensor& saved, const at::Tensor& grad_y,
    const at::Tensor& grad_final, bool shared_q, bool shared_k, int64_t group, int64_t interval) {
    ScanArgs a = inputs(q, k, v, g, rate, group, interval);
    const int64_t B = a.batch, H = a.heads, L = a.length, K = a.key_dim, V = a.value_dim;
    check_block(saved, "saved", "[B, H, ceil(T / interval), K, V]", q, B * H * ((L + interval - 1) / interval) * K * V);
    check_block(grad_final, "grad_final", "[B, H, K, V]", q, B * H * K * V);
    check_steps(grad_y, "grad_y", q, H, V);
    const Ranges ranges = ranges_of(a);
    const int64_t parts = static_cast<int64_t>(ranges.size());
    a.saved = saved.data_ptr(), a.grad_y = grad_y.const_data_ptr(), a.grad_final = grad_final.const_data_ptr();
    set_strides(a.grad_y_stride, grad_y);
    // a shared q's or k's gradient: one [B, T, K] per range of items (part), summed below
    auto gradient = [&](const at::Tensor& x, bool shared, void*& out, int64_t* stride, int64_t& part_stride) {
        at::Tensor grad = shared ? x.new_zeros({parts, B, L, K}) : at::empty_like(x);
        out = grad.data_ptr();
        if (shared) stride[0] = L * K, stride[1] = 0, stride[2] = K, part_stride = B * L * K;
        else set_strides(stride, grad);
        return grad;
    };
    at::Tensor grad_q = gradient(q, shared_q, a.grad_q, a.grad_q_stride, a.grad_q_part_stride);
    at::Tensor grad_k = gradient(k, shared_k, a.grad_k, a.grad_k_stride, a.grad_k_part_stride);
    at::Tensor grad_v = at::empty_like(v), grad_g = g ? at::empty_like(*g) : q.new_empty({0});
    at::Tensor grad_rate = rate ? q.new_empty({B, H, K}) : q.new_empty({0});
    at::Tensor grad_initial = q.new_empty({B, H, K, V});
    a.grad_v = grad_v.data_ptr(), a.grad_initial = grad_initial.data_ptr();
    set_strides(a.grad_v_stride, grad_v);
    if (g) a.grad_g = grad_g.data_ptr(), set_strides(a.grad_g_stride, grad_g);
    if (rate) a.grad_rate = grad_rate.data_ptr();
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "seqdyn::scan_backward", [&] {
        with_fixed_key(K, [&](auto fixed) {
            over_ranges(ranges, [&](int64_t part, int64_t begin, int64_t end) {
                backward_range<scalar_t, decltype(fixed)::value>(a, begin, end, part);
            });
        });
    });
    if (shared_q) grad_q = grad_q.sum(0).unsqueeze(1);
    if (shared_k) grad_k = grad_k.sum(0).unsqueeze(1);
    if (rate) grad_rate = grad_rate.sum(0);
    return {grad_q, grad_k, grad_v, grad_g, grad_rate, grad_initial};
}

}  // namespace

TORCH_LIBRARY(seqdyn, m) {
    m.def("scan(Tensor q, Tensor k, Tensor v, Tensor? g, Tensor? rate, Tensor? initial, bool shared_q, "
          "bool shared_k, bool keep, int group, int interval) -> (Tensor, Tensor, Tensor)");
    m.def("scan_backward(Tensor q, Tensor k, Tensor v, Tensor? g, Tensor? rate, Tensor saved, Tensor grad_y, "
          "Tensor grad_final, bool shared_q, bool shared_k, int group, int interval) "
          "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(seqdyn, CPU, m) {
    m.impl("scan", &scan);
    m.impl("scan_backward", &scan_backward);
}
