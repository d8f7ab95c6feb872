// HYLA (the `mlp` value network) forward and backward on the CPU, and multi-head attention (the
// `linear` value network, `linear` set) with the same scores. hyla/ops/kernels/cpp.py compiles this
// file, states the math and checks the inputs; tests/ops/test_cpp_attention.py and
// tests/ops/test_attention.py compare it with attention_naive.
//
// One batch element per OpenMP thread at a time. For each query, the keys are taken L at a time,
// one key per vector lane, so that every sum over the heads (the RMS norm, layer 1) and every
// product with a query value is a plain vector operation; the sums over the keys (layer 2, the
// query gradient) accumulate in lanes and are reduced once per query. Nothing of size
// [B, H, Tq, Tk] is written to memory: the backward recomputes each pair's scores. The lanes are
// a GCC/Clang vector type (`V`), so that every sum stays in a register: written as loops over the
// lanes, GCC kept some sums in memory (a store and a load at every term) and left some loops
// scalar.
//
// Layouts (contiguous): q [B, Tq, H, E], k [B, Tk, H, E], v [B, Tk, H, Dv], y [B, Tq, H, Dv];
// factor [Gf, Tq, Tk] (attention-dropout scale, 0 where masked); bias [Gb, H, Tq, Tk] read
// through its strides (the position bias is a transposed view: no copy per call), its gradient
// written contiguous; G = 1 (shared by the batch) or B. Keys are padded to a multiple of L with
// factor 0.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

extern "C" {

struct HylaArgs {
  int64_t batch, q_len, k_len, heads, qk_dim, v_dim;
  const void *q, *k, *v, *bias, *factor;
  int64_t bias_per_example, factor_per_example;
  double scale, eps;
  int64_t rms_head, relu, threads;
  void *out;  // forward: y
  const void *grad_y;  // backward: in
  void *grad_q, *grad_k, *grad_v, *grad_bias;  // backward: out (grad_bias [Gb, H, Tq, Tk])
  int64_t bias_stride_b, bias_stride_h, bias_stride_q, bias_stride_k;  // in elements
  int64_t linear;  // the linear value network: y[q, h, :] = sum_j c s[h] v[j, h, :]
};

}  // extern "C"

namespace {

#ifdef __AVX512F__
constexpr int64_t L = 16;  // keys per step: one AVX-512 register of float32
#else
constexpr int64_t L = 8;  // keys per step: one AVX2 register of float32
#endif

int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// The sizes of one call; HC, EC, DC > 0 fix heads, qk and v head dims at compile time.
template <typename T, int HC, int EC, int DC>
struct Kernel {
  const HylaArgs& a;
  const int64_t B, Tq, Tk, Tp;
  const T scale, eps;
  const bool rms, relu, linear;

  explicit Kernel(const HylaArgs& args)
      : a(args), B(args.batch), Tq(args.q_len), Tk(args.k_len), Tp((args.k_len + L - 1) / L * L),
        scale(T(args.scale)), eps(T(args.eps)), rms(args.rms_head), relu(args.relu),
        linear(args.linear) {}

  const T* in(const void* p) const { return static_cast<const T*>(p); }

  // Per batch element: keys and values transposed to [H, E or Dv, Tp] (zero padded), the pair
  // factor to [Tq, Tp] (0 in the padding), the bias to [Tq, H, Tp].
  struct Scratch {
    std::vector<T> kt, vt, factor, bias, gkt, gvt, gbias;
  };

  void load(Scratch& m, int64_t b, bool with_bias_rows) const {
    const int64_t H = HC ? HC : a.heads, E = EC ? EC : a.qk_dim, Dv = DC ? DC : a.v_dim;
    m.kt.assign(H * E * Tp, T(0));
    m.vt.assign(H * Dv * Tp, T(0));
    const T* k = in(a.k) + b * Tk * H * E;
    const T* v = in(a.v) + b * Tk * H * Dv;
    for (int64_t j = 0; j < Tk; ++j)
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t e = 0; e < E; ++e) m.kt[(h * E + e) * Tp + j] = k[(j * H + h) * E + e];
        for (int64_t d = 0; d < Dv; ++d) m.vt[(h * Dv + d) * Tp + j] = v[(j * H + h) * Dv + d];
      }
    if (m.factor.empty() || a.factor_per_example) {
      m.factor.assign(Tq * Tp, T(0));
      const T* f = a.factor ? in(a.factor) + (a.factor_per_example ? b * Tq * Tk : 0) : nullptr;
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 0; j < Tk; ++j) m.factor[i * Tp + j] = f ? f[i * Tk + j] : T(1);
    }
    if (with_bias_rows && a.bias && (m.bias.empty() || a.bias_per_example)) {
      m.bias.assign(Tq * H * Tp, T(0));
      const T* bias = in(a.bias) + (a.bias_per_example ? b * a.bias_stride_b : 0);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tq; ++i)
          for (int64_t j = 0; j < Tk; ++j)
            m.bias[(i * H + h) * Tp + j] = bias[h * a.bias_stride_h + i * a.bias_stride_q + j * a.bias_stride_k];
    }
  }

  // L lanes of T, one key per lane; ld and st move them from and to memory at any alignment.
  typedef T V __attribute__((vector_size(L * sizeof(T))));
  static V ld(const T* p) {
    V x;
    std::memcpy(&x, p, sizeof(V));
    return x;
  }
  static void st(T* p, const V& x) { std::memcpy(p, &x, sizeof(V)); }

  // The L pairs (query i, keys j0..j0+L-1): scores s [H] (0 where the factor is 0), the per-pair
  // factor c = rsqrt(mean_h s^2 + eps) * factor, inv; for HYLA z0 [Dv] = sum_h s v, u = act(c z0),
  // w = c u. Returns false when every factor is 0 (nothing to do).
  struct Block {
    V s[HC ? HC : 256], z0[DC ? DC : 64], u[DC ? DC : 64], w[DC ? DC : 64];
    V f, inv, c;
  };

  bool block(Block& r, const Scratch& m, const T* q, int64_t i, int64_t j0) const {
    const int64_t H = HC ? HC : a.heads, E = EC ? EC : a.qk_dim;
    const V zero = {};
    r.f = ld(&m.factor[i * Tp + j0]);
    bool any = false;
    for (int64_t l = 0; l < L; ++l) any |= r.f[l] != T(0);
    if (!any) return false;
    for (int64_t h = 0; h < H; ++h) {
      V s = a.bias ? ld(&m.bias[(i * H + h) * Tp + j0]) : zero;
      for (int64_t e = 0; e < E; ++e) s += (q[h * E + e] * scale) * ld(&m.kt[(h * E + e) * Tp + j0]);
      r.s[h] = r.f != zero ? s : zero;
    }
    r.inv = zero + T(1);
    if (rms) {
      V sum = zero;
      for (int64_t h = 0; h < H; ++h) sum += r.s[h] * r.s[h];
      for (int64_t l = 0; l < L; ++l) r.inv[l] = T(1) / std::sqrt(sum[l] / T(H) + eps);
    }
    r.c = r.inv * r.f;
    if (!linear) hidden(r, m, j0);
    return true;
  }

  void hidden(Block& r, const Scratch& m, int64_t j0) const {
    const int64_t H = HC ? HC : a.heads, Dv = DC ? DC : a.v_dim;
    const V zero = {};
    for (int64_t d = 0; d < Dv; ++d) {
      V z0 = zero;
      for (int64_t h = 0; h < H; ++h) z0 += r.s[h] * ld(&m.vt[(h * Dv + d) * Tp + j0]);
      const V z = r.c * z0;
      r.z0[d] = z0;
      r.u[d] = relu ? (z < zero ? zero : z) : z;
      r.w[d] = r.c * r.u[d];
    }
  }

  static T lane_sum(const V& x) {
    T sum = 0;
    for (int64_t l = 0; l < L; ++l) sum += x[l];
    return sum;
  }

  void forward() const {
    const int64_t H = HC ? HC : a.heads, E = EC ? EC : a.qk_dim, Dv = DC ? DC : a.v_dim;
#pragma omp parallel num_threads(a.threads)
    {
      Scratch m;
      Block r;
      std::vector<T> acc(H * Dv * L);  // [H * Dv][L]
#pragma omp for schedule(static)
      for (int64_t b = 0; b < B; ++b) {
        load(m, b, true);
        for (int64_t i = 0; i < Tq; ++i) {
          const T* q = in(a.q) + (b * Tq + i) * H * E;
          std::fill(acc.begin(), acc.end(), T(0));
          for (int64_t j0 = 0; j0 < Tp; j0 += L) {
            if (!block(r, m, q, i, j0)) continue;
            // HYLA's layer 2: y[h, d] += sum_l s[h][l] w[d][l]; linear: y[h, d] += sum_l c[l] s[h][l] v[h, d][l]
            for (int64_t h = 0; h < H; ++h)
              for (int64_t d = 0; d < Dv; ++d) {
                T* y = &acc[(h * Dv + d) * L];
                st(y, ld(y) + r.s[h] * (linear ? r.c * ld(&m.vt[(h * Dv + d) * Tp + j0]) : r.w[d]));
              }
          }
          T* y = static_cast<T*>(a.out) + (b * Tq + i) * H * Dv;
          for (int64_t hd = 0; hd < H * Dv; ++hd) y[hd] = lane_sum(ld(&acc[hd * L]));
        }
      }
    }
  }

  void backward() const {
    const int64_t H = HC ? HC : a.heads, E = EC ? EC : a.qk_dim, Dv = DC ? DC : a.v_dim;
    T* grad_q = static_cast<T*>(a.grad_q);
    T* grad_k = static_cast<T*>(a.grad_k);
    T* grad_v = static_cast<T*>(a.grad_v);
    T* grad_bias = static_cast<T*>(a.grad_bias);
    const int64_t threads = a.threads;
    // a shared bias: each thread sums its part in its own [Tq, H, Tp], added up at the end
    std::vector<std::vector<T>> bias_parts(grad_bias && !a.bias_per_example ? threads : 0);
#pragma omp parallel num_threads(threads)
    {
      Scratch m;
      Block r;
      V gs[HC ? HC : 256], gz0[DC ? DC : 64];
      std::vector<T> acc(H * E * L);  // [H * E][L]
      std::vector<T>* gbias = nullptr;
      if (grad_bias) {
        gbias = bias_parts.empty() ? &m.gbias : &bias_parts[thread_id()];
        gbias->assign(Tq * H * Tp, T(0));
      }
#pragma omp for schedule(static)
      for (int64_t b = 0; b < B; ++b) {
        load(m, b, true);
        m.gkt.assign(H * E * Tp, T(0));
        m.gvt.assign(H * Dv * Tp, T(0));
        if (grad_bias && a.bias_per_example) std::fill(gbias->begin(), gbias->end(), T(0));
        for (int64_t i = 0; i < Tq; ++i) {
          const T* q = in(a.q) + (b * Tq + i) * H * E;
          const T* gy = in(a.grad_y) + (b * Tq + i) * H * Dv;
          std::fill(acc.begin(), acc.end(), T(0));
          for (int64_t j0 = 0; j0 < Tp; j0 += L) {
            if (!block(r, m, q, i, j0)) continue;
            linear ? linear_backward(r, m, gy, j0, gs) : hyla_backward(r, m, gy, j0, gs, gz0);
            scores_backward(r, m, q, i, j0, gs, acc.data(), gbias);
          }
          T* gq = grad_q + (b * Tq + i) * H * E;
          for (int64_t he = 0; he < H * E; ++he) gq[he] = lane_sum(ld(&acc[he * L])) * scale;
        }
        // back to the caller's layouts
        T* gk = grad_k + b * Tk * H * E;
        T* gv = grad_v + b * Tk * H * Dv;
        for (int64_t j = 0; j < Tk; ++j)
          for (int64_t h = 0; h < H; ++h) {
            for (int64_t e = 0; e < E; ++e) gk[(j * H + h) * E + e] = m.gkt[(h * E + e) * Tp + j];
            for (int64_t d = 0; d < Dv; ++d) gv[(j * H + h) * Dv + d] = m.gvt[(h * Dv + d) * Tp + j];
          }
        if (grad_bias && a.bias_per_example) store_bias(grad_bias + b * H * Tq * Tk, *gbias);
      }
    }
    if (!bias_parts.empty()) {
      for (int64_t t = 1; t < threads; ++t)
        if (!bias_parts[t].empty())
          for (size_t x = 0; x < bias_parts[0].size(); ++x) bias_parts[0][x] += bias_parts[t][x];
      store_bias(grad_bias, bias_parts[0]);
    }
  }

  // HYLA's backward through the L pairs of `block`: into the value gradient, and the scores'
  // gradient gs [H].
  void hyla_backward(const Block& r, Scratch& m, const T* gy, int64_t j0, V* gs, V* gz0) const {
    const int64_t H = HC ? HC : a.heads, Dv = DC ? DC : a.v_dim;
    const V zero = {};
    // layer 2 (y[h, d] = sum s[h] w[d]): gs[h] = sum_d gy[h, d] w[d], gw[d] = sum_h s[h] gy[h, d];
    // w = c u: gc = sum_d gw u, gu = c gw; relu; z = c z0: gc += gz z0, gz0 = c gz
    for (int64_t h = 0; h < H; ++h) {
      V g = zero;
      for (int64_t d = 0; d < Dv; ++d) g += gy[h * Dv + d] * r.w[d];
      gs[h] = g;
    }
    V gc = zero;
    for (int64_t d = 0; d < Dv; ++d) {
      V gw = zero;
      for (int64_t h = 0; h < H; ++h) gw += r.s[h] * gy[h * Dv + d];
      const V z = r.c * r.z0[d];
      const V gz = relu ? (z <= zero ? zero : r.c * gw) : r.c * gw;
      gc += gw * r.u[d] + gz * r.z0[d];
      gz0[d] = r.c * gz;
    }
    // layer 1 (z0[d] = sum_h s[h] v[h, d])
    for (int64_t h = 0; h < H; ++h) {
      V g = gs[h];
      for (int64_t d = 0; d < Dv; ++d) {
        const int64_t at = (h * Dv + d) * Tp + j0;
        g += gz0[d] * ld(&m.vt[at]);
        st(&m.gvt[at], ld(&m.gvt[at]) + r.s[h] * gz0[d]);
      }
      gs[h] = g;
    }
    normalization_backward(r, gc, gs);
  }

  // The linear value network's backward (y[h, d] = sum c s[h] v[h, d]): ga[h] = sum_d gy[h, d] v[h, d],
  // gv[h, d] += c s[h] gy[h, d], gs[h] = c ga[h], gc = sum_h ga[h] s[h].
  void linear_backward(const Block& r, Scratch& m, const T* gy, int64_t j0, V* gs) const {
    const int64_t H = HC ? HC : a.heads, Dv = DC ? DC : a.v_dim;
    const V zero = {};
    V gc = zero;
    for (int64_t h = 0; h < H; ++h) {
      const V weight = r.c * r.s[h];
      V ga = zero;
      for (int64_t d = 0; d < Dv; ++d) {
        const int64_t at = (h * Dv + d) * Tp + j0;
        ga += gy[h * Dv + d] * ld(&m.vt[at]);
        st(&m.gvt[at], ld(&m.gvt[at]) + weight * gy[h * Dv + d]);
      }
      gs[h] = r.c * ga;
      gc += ga * r.s[h];
    }
    normalization_backward(r, gc, gs);
  }

  // c = inv * factor, inv = (mean_h s^2 + eps)^(-1/2): gs[h] += -inv^3 s[h] / H * gc * factor
  void normalization_backward(const Block& r, const V& gc, V* gs) const {
    const int64_t H = HC ? HC : a.heads;
    if (!rms) return;
    const V coeff = -r.inv * r.inv * r.inv * gc * r.f / T(H);
    for (int64_t h = 0; h < H; ++h) gs[h] += coeff * r.s[h];
  }

  // The scores' backward: into the key and bias gradients, and the query gradient's lanes gq_acc
  // [H * E][L] (reduced once per query).
  void scores_backward(const Block& r, Scratch& m, const T* q, int64_t i, int64_t j0, const V* gs, T* gq_acc,
                       std::vector<T>* gbias) const {
    const int64_t H = HC ? HC : a.heads, E = EC ? EC : a.qk_dim;
    // s[h] = scale <q[h], k[h]> + bias[h] (lanes where the factor is 0 have gs = 0)
    for (int64_t h = 0; h < H; ++h) {
      if (gbias) {
        T* gb = &(*gbias)[(i * H + h) * Tp + j0];
        st(gb, ld(gb) + gs[h]);
      }
      for (int64_t e = 0; e < E; ++e) {
        const int64_t at = (h * E + e) * Tp + j0;
        T* gq = &gq_acc[(h * E + e) * L];
        st(gq, ld(gq) + gs[h] * ld(&m.kt[at]));
        st(&m.gkt[at], ld(&m.gkt[at]) + gs[h] * (q[h * E + e] * scale));
      }
    }
  }

  // [Tq, H, Tp] -> the bias layout [H, Tq, Tk]
  void store_bias(T* out, const std::vector<T>& part) const {
    const int64_t H = HC ? HC : a.heads;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 0; j < Tk; ++j) out[(h * Tq + i) * Tk + j] = part[(i * H + h) * Tp + j];
  }
};

template <typename T, int HC, int EC, int DC>
void run(const HylaArgs& a, bool is_backward) {
  const Kernel<T, HC, EC, DC> kernel(a);
  is_backward ? kernel.backward() : kernel.forward();
}

// Sizes known at compile time make the per-block loops straight-line vector code: the paper's
// models (SRAVEN: 16 heads of 4; fuzzy logic: 8 heads of 2) and common head counts.
template <typename T>
int dispatch(const HylaArgs& a, bool is_backward) {
  if (a.heads > 256 || a.v_dim > 64) return 1;
#define HYLA_SIZES(H, E, D)                                                     \
  if (a.heads == H && (E == 0 || a.qk_dim == E) && (D == 0 || a.v_dim == D)) { \
    run<T, H, E, D>(a, is_backward);                                            \
    return 0;                                                                   \
  }
  HYLA_SIZES(16, 4, 4)
  HYLA_SIZES(8, 2, 2)
  HYLA_SIZES(8, 0, 0)
  HYLA_SIZES(16, 0, 0)
#undef HYLA_SIZES
  run<T, 0, 0, 0>(a, is_backward);
  return 0;
}

}  // namespace

extern "C" {

// Return 0 on success, 1 for sizes the kernel does not take (heads > 256 or Dv > 64).
int hyla_forward_f32(const HylaArgs* a) { return dispatch<float>(*a, false); }
int hyla_forward_f64(const HylaArgs* a) { return dispatch<double>(*a, false); }
int hyla_backward_f32(const HylaArgs* a) { return dispatch<float>(*a, true); }
int hyla_backward_f64(const HylaArgs* a) { return dispatch<double>(*a, true); }

}  // extern "C"
