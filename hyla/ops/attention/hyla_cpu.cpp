// HYLA (the `mlp` value network) forward and backward on the CPU: one batch element per OpenMP
// task, every query-key pair computed from q, k, v in registers and nothing of size
// [B, H, Tq, Tk] ever written to memory. The backward recomputes the pair's scores instead of
// reading them back. hyla/ops/attention/cpu_kernel.py compiles this file and states the math;
// tests/test_cpu_kernel.py checks it against attention_naive.
//
// Layouts (heads last, so that every per-pair loop runs along H contiguous values):
//   q [B, Tq, E, H]   k [B, Tk, E, H]   v [B, Tk, Dv, H]   y, grad_y [B, Tq, Dv, H]
//   bias [Gb, Tq, Tk, H]  mask (uint8) [Gm, Tq, Tk]  dropout [Gd, Tq, Tk]   (G = 1 or B)
//   grad_bias [G, Tq, Tk, H]: G = B for a per-example bias, else one slice per thread.

#include <cmath>
#include <cstdint>
#include <cstring>
#ifdef _OPENMP
#include <omp.h>
#endif

extern "C" {

struct HylaArgs {
  int64_t batch, q_len, k_len, heads, qk_dim, v_dim;
  const void *q, *k, *v, *bias, *dropout;
  const uint8_t *mask;
  int64_t bias_per_example, mask_per_example, dropout_per_example;
  double scale, eps;
  int64_t rms_head, relu, threads;
  // forward: out = y; backward: grad_y in, the rest out
  void *out;
  const void *grad_y;
  void *grad_q, *grad_k, *grad_v, *grad_bias;
};

}  // extern "C"

namespace {

constexpr int kMaxHeads = 256;
constexpr int kMaxDim = 64;

int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// Everything one query-key pair needs, recomputed in the forward and the backward.
template <typename T, int HC>
struct Pair {
  int64_t H, E, Dv;
  T s[HC ? HC : kMaxHeads];  // scores + bias, one per head
  T z0[kMaxDim];             // sum_h s[h] v[h, d]
  T inv, c;                  // RMS normalizer; c = inv * dropout (the per-pair factor of a)

  // s[h] = scale * <q[:, h], k[:, h]> + bias[h];  inv = rsqrt(mean_h s^2 + eps)
  inline void scores(const T* q, const T* k, const T* bias, T scale, bool rms, T eps) {
    const int64_t heads = HC ? HC : H;
#pragma omp simd
    for (int64_t h = 0; h < heads; ++h) s[h] = 0;
    for (int64_t e = 0; e < E; ++e) {
#pragma omp simd
      for (int64_t h = 0; h < heads; ++h) s[h] += q[e * heads + h] * k[e * heads + h];
    }
    if (bias) {
#pragma omp simd
      for (int64_t h = 0; h < heads; ++h) s[h] = s[h] * scale + bias[h];
    } else {
#pragma omp simd
      for (int64_t h = 0; h < heads; ++h) s[h] *= scale;
    }
    inv = 1;
    if (rms) {
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t h = 0; h < heads; ++h) sum += s[h] * s[h];
      inv = T(1) / std::sqrt(sum / T(heads) + eps);
    }
  }

  // z0[d] = sum_h s[h] v[d, h]  (layer 1 before the per-pair factor)
  inline void layer1(const T* v) {
    const int64_t heads = HC ? HC : H;
    for (int64_t d = 0; d < Dv; ++d) {
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t h = 0; h < heads; ++h) sum += s[h] * v[d * heads + h];
      z0[d] = sum;
    }
  }
};

template <typename T>
const T* at(const void* base, int64_t offset) {
  return base ? static_cast<const T*>(base) + offset : nullptr;
}

template <typename T, int HC>
void forward(const HylaArgs& a) {
  const int64_t B = a.batch, Tq = a.q_len, Tk = a.k_len, H = HC ? HC : a.heads, E = a.qk_dim, Dv = a.v_dim;
  const T scale = T(a.scale), eps = T(a.eps);
#pragma omp parallel for schedule(static) num_threads(a.threads)
  for (int64_t b = 0; b < B; ++b) {
    Pair<T, HC> p{a.heads, E, Dv};
    T acc[kMaxDim * (HC ? HC : kMaxHeads)];
    for (int64_t i = 0; i < Tq; ++i) {
      const T* q = at<T>(a.q, (b * Tq + i) * E * H);
      std::memset(acc, 0, sizeof(T) * Dv * H);
      for (int64_t j = 0; j < Tk; ++j) {
        const int64_t pair = i * Tk + j;
        if (a.mask && !a.mask[(a.mask_per_example ? b * Tq * Tk : 0) + pair]) continue;
        const T drop = a.dropout ? at<T>(a.dropout, a.dropout_per_example ? b * Tq * Tk : 0)[pair] : T(1);
        if (drop == 0) continue;
        const T* bias = at<T>(a.bias, ((a.bias_per_example ? b * Tq * Tk : 0) + pair) * H);
        const T* v = at<T>(a.v, (b * Tk + j) * Dv * H);
        p.scores(q, at<T>(a.k, (b * Tk + j) * E * H), bias, scale, a.rms_head, eps);
        p.c = p.inv * drop;
        p.layer1(v);
        for (int64_t d = 0; d < Dv; ++d) {
          T z = p.c * p.z0[d];
          T w = p.c * (a.relu && z < 0 ? T(0) : z);  // layer 2 weight of this pair: c * act(z)
#pragma omp simd
          for (int64_t h = 0; h < H; ++h) acc[d * H + h] += p.s[h] * w;
        }
      }
      std::memcpy(static_cast<T*>(a.out) + (b * Tq + i) * Dv * H, acc, sizeof(T) * Dv * H);
    }
  }
}

template <typename T, int HC>
void backward(const HylaArgs& a) {
  const int64_t B = a.batch, Tq = a.q_len, Tk = a.k_len, H = HC ? HC : a.heads, E = a.qk_dim, Dv = a.v_dim;
  const T scale = T(a.scale), eps = T(a.eps);
  T* grad_q = static_cast<T*>(a.grad_q);
  T* grad_k = static_cast<T*>(a.grad_k);
  T* grad_v = static_cast<T*>(a.grad_v);
  T* grad_bias = static_cast<T*>(a.grad_bias);
#pragma omp parallel for schedule(static) num_threads(a.threads)
  for (int64_t b = 0; b < B; ++b) {
    Pair<T, HC> p{a.heads, E, Dv};
    T gs[HC ? HC : kMaxHeads], gz0[kMaxDim], u[kMaxDim];
    T* gbias = grad_bias ? grad_bias + (a.bias_per_example ? b : thread_id()) * Tq * Tk * H : nullptr;
    for (int64_t i = 0; i < Tq; ++i) {
      const T* q = at<T>(a.q, (b * Tq + i) * E * H);
      const T* gy = at<T>(a.grad_y, (b * Tq + i) * Dv * H);
      T* gq = grad_q + (b * Tq + i) * E * H;
      for (int64_t j = 0; j < Tk; ++j) {
        const int64_t pair = i * Tk + j;
        if (a.mask && !a.mask[(a.mask_per_example ? b * Tq * Tk : 0) + pair]) continue;
        const T drop = a.dropout ? at<T>(a.dropout, a.dropout_per_example ? b * Tq * Tk : 0)[pair] : T(1);
        if (drop == 0) continue;
        const T* k = at<T>(a.k, (b * Tk + j) * E * H);
        const T* v = at<T>(a.v, (b * Tk + j) * Dv * H);
        p.scores(q, k, at<T>(a.bias, ((a.bias_per_example ? b * Tq * Tk : 0) + pair) * H), scale, a.rms_head, eps);
        p.c = p.inv * drop;
        p.layer1(v);
        // layer 2: y[h, d] += s[h] w[d], w = c u, u = act(c z0)
        T grad_c = 0;
#pragma omp simd
        for (int64_t h = 0; h < H; ++h) gs[h] = 0;
        for (int64_t d = 0; d < Dv; ++d) {
          const T z = p.c * p.z0[d];
          u[d] = a.relu && z < 0 ? T(0) : z;
          const T w = p.c * u[d];
          T gw = 0;
#pragma omp simd reduction(+ : gw)
          for (int64_t h = 0; h < H; ++h) {
            gs[h] += gy[d * H + h] * w;
            gw += p.s[h] * gy[d * H + h];
          }
          // w = c u: dc += gw u; du = c gw; dz = du [z > 0]; z = c z0: dc += dz z0, dz0 = c dz
          const T gz = a.relu && z <= 0 ? T(0) : p.c * gw;
          grad_c += gw * u[d] + gz * p.z0[d];
          gz0[d] = p.c * gz;
        }
        // layer 1: z0[d] = sum_h s[h] v[d, h]
        T* gv = grad_v + (b * Tk + j) * Dv * H;
        for (int64_t d = 0; d < Dv; ++d) {
#pragma omp simd
          for (int64_t h = 0; h < H; ++h) {
            gs[h] += gz0[d] * v[d * H + h];
            gv[d * H + h] += p.s[h] * gz0[d];
          }
        }
        // c = inv * dropout, inv = (mean_h s^2 + eps)^(-1/2): ds[h] += -inv^3 s[h] / H * dinv
        if (a.rms_head) {
          const T coeff = -p.inv * p.inv * p.inv * grad_c * drop / T(H);
#pragma omp simd
          for (int64_t h = 0; h < H; ++h) gs[h] += coeff * p.s[h];
        }
        if (gbias) {
          T* gb = gbias + pair * H;
#pragma omp simd
          for (int64_t h = 0; h < H; ++h) gb[h] += gs[h];
        }
        // s[h] = scale <q[:, h], k[:, h]> + bias[h]
        T* gk = grad_k + (b * Tk + j) * E * H;
        for (int64_t e = 0; e < E; ++e) {
#pragma omp simd
          for (int64_t h = 0; h < H; ++h) {
            gq[e * H + h] += scale * gs[h] * k[e * H + h];
            gk[e * H + h] += scale * gs[h] * q[e * H + h];
          }
        }
      }
    }
  }
}

template <typename T>
int dispatch(const HylaArgs& a, bool is_backward) {
  if (a.heads > kMaxHeads || a.v_dim > kMaxDim) return 1;
#define HYLA_HEADS(N) \
  case N:             \
    is_backward ? backward<T, N>(a) : forward<T, N>(a); \
    return 0;
  switch (a.heads) {
    HYLA_HEADS(4)
    HYLA_HEADS(8)
    HYLA_HEADS(16)
    HYLA_HEADS(32)
    default:
      is_backward ? backward<T, 0>(a) : forward<T, 0>(a);
      return 0;
  }
#undef HYLA_HEADS
}

}  // namespace

extern "C" {

// Return 0 on success, 1 for sizes the kernel does not take (heads > 256 or Dv > 64).
int hyla_forward_f32(const HylaArgs* a) { return dispatch<float>(*a, false); }
int hyla_forward_f64(const HylaArgs* a) { return dispatch<double>(*a, false); }
int hyla_backward_f32(const HylaArgs* a) { return dispatch<float>(*a, true); }
int hyla_backward_f64(const HylaArgs* a) { return dispatch<double>(*a, true); }

}  // extern "C"
