// GELU, tanh approximation, forward and backward in float32 on the CPU: one pass over the
// elements each way. hyla/ops/kernels/gelu.py calls it (and states when); it is compiled into one
// library with hyla_cpu.cpp (hyla/ops/kernels/cpp.py); tests/ops/test_gelu_kernel.py compares it with
// torch's GELU in float64.
//
// The function: gelu(x) = 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3), written as the
// identical x * sigmoid(2z) with one exponential per element, e = exp(-2|z|) in (0, 1]:
//     sigmoid(2z) = 1 / (1 + e) for z >= 0, e / (1 + e) for z < 0
//     gelu'(x)    = sigmoid(2z) + 2 x z' sigmoid(2z) (1 - sigmoid(2z)),   z' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//                 = sigmoid(2z) + 2 x z' e / (1 + e)^2
// Neither form subtracts two numbers near 1, so both keep float32's relative precision. The
// exponential is Cephes' expf (a degree-6 polynomial on [-ln2/2, ln2/2], about 1 ulp); below -87
// (e < 2e-38) it is 0.

#include <cstdint>
#include <cstring>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

#ifdef __AVX512F__
constexpr int64_t L = 16;  // elements per step: one AVX-512 register of float32
#else
constexpr int64_t L = 8;  // one AVX2 register
#endif
constexpr int64_t CHUNK = 1 << 14;  // elements per OpenMP task

typedef float V __attribute__((vector_size(L * sizeof(float))));
typedef int32_t VI __attribute__((vector_size(L * sizeof(int32_t))));

constexpr float SQRT_2_OVER_PI = 0.7978845608028654f, KAPPA = 0.044715f;

// exp(t) for t <= 0 (Cephes expf): t = n ln2 + r, exp(t) = 2^n p(r); 0 below -87.
V exp_nonpositive(V t) {
  const V zero = {};
  const V low = zero - 87.0f;
  const VI underflows = t < low;
  t = underflows ? low : t;
  const V magic = zero + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const V shifted = t * 1.44269504088896341f + magic;
  const V n = shifted - magic;
  const VI n_int = (VI)shifted - (VI)magic;
  const V r = t - n * 0.693359375f - n * -2.12194440e-4f;
  V p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const VI two_to_n = (n_int + 127) << 23;
  return underflows ? zero : p * (V)two_to_n;
}

struct Pieces {
  V s;  // sigmoid(2z)
  V e;  // exp(-2|z|)
};

Pieces pieces(V x) {
  const V zero = {};
  const V z = SQRT_2_OVER_PI * (x + KAPPA * x * x * x);
  const V abs_z = z < zero ? -z : z;
  const V e = exp_nonpositive(-2.0f * abs_z);
  const V s = (z < zero ? e : zero + 1.0f) / (1.0f + e);
  return {s, e};
}

V forward(V x) { return x * pieces(x).s; }

V backward(V x, V g) {
  const Pieces p = pieces(x);
  const V dz = SQRT_2_OVER_PI * (1.0f + 3.0f * KAPPA * x * x);
  const V one_plus_e = 1.0f + p.e;
  return g * (p.s + 2.0f * x * dz * p.e / (one_plus_e * one_plus_e));
}

// count (<= L) elements; the last step of a chunk may have fewer than L
// (a constant size where it is L: a memcpy of a variable size is not one vector load)
V load(const float* p, int64_t count) {
  V x = {};
  if (count == L)
    std::memcpy(&x, p, sizeof(V));
  else
    std::memcpy(&x, p, count * sizeof(float));
  return x;
}

void store(float* p, const V& x, int64_t count) {
  if (count == L)
    std::memcpy(p, &x, sizeof(V));
  else
    std::memcpy(p, &x, count * sizeof(float));
}

// out[i] = f(a[i]) or f(a[i], b[i]) for i < n, L at a time, chunks of CHUNK over `threads` threads.
template <typename F>
void map(int64_t n, int64_t threads, F f) {
  const int64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && chunks > 1)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t end = chunk * CHUNK + CHUNK < n ? chunk * CHUNK + CHUNK : n;
    for (int64_t i = chunk * CHUNK; i < end; i += L) f(i, end - i < L ? end - i : L);
  }
}

}  // namespace

extern "C" {

// y = gelu(x), n elements (contiguous float32)
void gelu_tanh_forward_f32(const float* x, float* y, int64_t n, int64_t threads) {
  map(n, threads, [=](int64_t i, int64_t count) {
    store(y + i, forward(load(x + i, count)), count);
  });
}

// grad_x = grad_y * gelu'(x), n elements (contiguous float32)
void gelu_tanh_backward_f32(const float* x, const float* grad_y, float* grad_x, int64_t n, int64_t threads) {
  map(n, threads, [=](int64_t i, int64_t count) {
    store(grad_x + i, backward(load(x + i, count), load(grad_y + i, count)), count);
  });
}

}  // extern "C"
