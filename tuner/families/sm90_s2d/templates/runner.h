// Binds an sm90_conv kernel, run on a space-to-depth fold, to the tuner's problem array (the sm90_s2d
// family). A stride-s conv over C channels is the stride-1 conv over s*s*C channels of the input folded
// s x s: x'[n, i, j, (a, b, c)] = x[n, i*s + a - pad_h, j*s + b - pad_w, c], zero outside the image and in the
// channels padded up to a multiple of 8; the filter folds the same way with pad 0 (taps past R or S zero).
// run() folds the activations, then runs the conv; initialize() folds the filter once, as an inference
// build does with its constant weights. Both folds live in the workspace.
namespace tuner_s2d {

struct Fold {
  int n, h, w, c;   // the source, NHWC (or a KRSC filter)
  int stride, pad_h, pad_w;
  int h2, w2, c2;   // the folded tensor: n x h2 x w2 x c2, c2 a multiple of 8
};

// One thread folds one pixel: all c2 channels, in 16-byte stores, walking the source taps (a, b) and
// channels c with counters (a first version divided per element and took 36 us on the batch-32 stem,
// compute-bound on the integer divisions, ncu).
template <typename T>
__global__ void fold(const T *__restrict__ source, T *__restrict__ folded, Fold f) {
  const int pixels = f.n * f.h2 * f.w2;
  for (int pixel = blockIdx.x * blockDim.x + threadIdx.x; pixel < pixels; pixel += gridDim.x * blockDim.x) {
    const int j = pixel % f.w2;
    const int rest = pixel / f.w2;
    const int i = rest % f.h2;
    const int image = rest / f.h2;
    const int top = i * f.stride - f.pad_h, left = j * f.stride - f.pad_w;
    const T *image_base = source + int64_t(image) * f.h * f.w * f.c;
    uint4 *out = reinterpret_cast<uint4 *>(folded + int64_t(pixel) * f.c2);
    constexpr int kPerStore = 16 / sizeof(T);  // 8 16-bit elements, 4 of 32 bits (tf32)
    int a = 0, b = 0, c = 0;  // the source tap and channel of the next folded channel
    for (int group = 0; group < f.c2 / kPerStore; ++group) {
      alignas(16) T values[kPerStore];
#pragma unroll
      for (int e = 0; e < kPerStore; ++e) {
        const int y = top + a, x = left + b;
        T value = T(0);
        if (a < f.stride && y >= 0 && y < f.h && x >= 0 && x < f.w) {
          value = image_base[(int64_t(y) * f.w + x) * f.c + c];
        }
        values[e] = value;
        if (++c == f.c) {
          c = 0;
          if (++b == f.stride) { b = 0; ++a; }
        }
      }
      out[group] = *reinterpret_cast<const uint4 *>(values);
    }
  }
}

inline size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace tuner_s2d

template <typename Conv>
class Sm90S2dRunner {
  using Inner = Sm90ConvRunner<Conv>;
  using Element = typename Inner::ElementA;
  static_assert(sizeof(Element) == 2 || sizeof(Element) == 4, "the fold writes whole elements in 16-byte stores");

 public:
  using ElementA = typename Inner::ElementA;
  using ElementB = typename Inner::ElementB;
  using ElementC = typename Inner::ElementC;

  static cutlass::Status can_implement(const TunerProblem &p) {
    if (p.n <= 0 || p.h <= 0 || p.w <= 0 || p.c <= 0 || p.k <= 0 || p.r <= 0 || p.s <= 0 || p.pad_h < 0 ||
        p.pad_w < 0) {
      return cutlass::Status::kErrorInvalidProblem;
    }
    // one fold of s x s pixels: the same stride on both axes
    if (p.stride_h < 2 || p.stride_w != p.stride_h || p.dilation_h != 1 || p.dilation_w != 1 || p.split_k != 1 ||
        p.groups != 1) {
      return cutlass::Status::kErrorNotSupported;
    }
    const int P = (p.h + 2 * p.pad_h - p.r) / p.stride_h + 1;
    const int Q = (p.w + 2 * p.pad_w - p.s) / p.stride_w + 1;
    if (P <= 0 || Q <= 0 || P != p.p || Q != p.q) return cutlass::Status::kErrorInvalidProblem;
    const FoldSizes sizes = sizes_of(p);
    if (sizes.activations >= (int64_t(1) << 31) || sizes.filter >= (int64_t(1) << 31)) {
      return cutlass::Status::kErrorNotSupported;  // the fold indexes pixels in int
    }
    return Inner::can_implement(folded(p));
  }

  static size_t workspace_bytes(const TunerProblem &p) {
    const FoldSizes sizes = sizes_of(p);
    return tuner_s2d::round_up(size_t(sizes.activations) * sizes.channels * sizeof(Element)) +
           tuner_s2d::round_up(size_t(sizes.filter) * sizes.channels * sizeof(Element)) +
           Inner::workspace_bytes(folded(p));
  }

  static void grid(const TunerProblem &p, int32_t *grid) { Inner::grid(folded(p), grid); }

  static cudaError_t attributes(int32_t *attrs) { return Inner::attributes(attrs); }

  // The folded conv has the layer's output, so the epilogue's operands pass through unchanged.
  cutlass::Status initialize(const TunerProblem &p, void *x, void *w, void *y, const TunerEpilogue &epilogue,
                             void *workspace, cudaStream_t stream) {
    if (workspace == nullptr) return cutlass::Status::kErrorWorkspaceNull;
    const TunerProblem kernel = folded(p);
    const FoldSizes sizes = sizes_of(p);
    char *base = static_cast<char *>(workspace);
    Element *x2 = reinterpret_cast<Element *>(base);
    base += tuner_s2d::round_up(size_t(sizes.activations) * sizes.channels * sizeof(Element));
    Element *w2 = reinterpret_cast<Element *>(base);
    base += tuner_s2d::round_up(size_t(sizes.filter) * sizes.channels * sizeof(Element));
    activations_ = {p.n, p.h, p.w, p.c, p.stride_h, p.pad_h, p.pad_w, kernel.h, kernel.w, kernel.c};
    const tuner_s2d::Fold filter{p.k, p.r, p.s, p.c, p.stride_h, 0, 0, kernel.r, kernel.s, kernel.c};
    x_ = static_cast<const Element *>(x);
    x2_ = x2;
    blocks_ = blocks_for(sizes.activations);
    tuner_s2d::fold<<<blocks_for(sizes.filter), kThreads, 0, stream>>>(static_cast<const Element *>(w), w2, filter);
    if (cudaGetLastError() != cudaSuccess) return cutlass::Status::kErrorInternal;
    return inner_.initialize(kernel, x2, w2, y, epilogue, base, stream);
  }

  cutlass::Status run(cudaStream_t stream) {
    tuner_s2d::fold<<<blocks_, kThreads, 0, stream>>>(x_, x2_, activations_);
    if (cudaGetLastError() != cudaSuccess) return cutlass::Status::kErrorInternal;
    return inner_.run(stream);
  }

 private:
  using Fold = tuner_s2d::Fold;
  static constexpr int kThreads = 256;
  struct FoldSizes { int64_t activations, filter, channels; };  // pixels of each folded tensor; their channels

  static int blocks_for(int64_t pixels) {
    return int(std::min<int64_t>((pixels + kThreads - 1) / kThreads, int64_t(1) << 16));
  }

  // The stride-1 problem the conv kernel runs: ceil(R/s) x ceil(S/s) taps over s*s*C channels (padded to
  // a multiple of 8), unpadded, on a folded input of P + R' - 1 rows, so its output is the layer's.
  static TunerProblem folded(const TunerProblem &p) {
    const int stride = p.stride_h;
    TunerProblem kernel = p;
    kernel.r = (p.r + stride - 1) / stride;
    kernel.s = (p.s + stride - 1) / stride;
    kernel.h = p.p + kernel.r - 1;
    kernel.w = p.q + kernel.s - 1;
    kernel.c = (stride * stride * p.c + 7) / 8 * 8;
    kernel.pad_h = kernel.pad_w = 0;
    kernel.stride_h = kernel.stride_w = kernel.dilation_h = kernel.dilation_w = 1;
    kernel.split_k = 1;
    return kernel;
  }

  static FoldSizes sizes_of(const TunerProblem &p) {
    const TunerProblem kernel = folded(p);
    return {int64_t(kernel.n) * kernel.h * kernel.w, int64_t(kernel.k) * kernel.r * kernel.s, kernel.c};
  }

  Inner inner_;
  Fold activations_{};
  const Element *x_ = nullptr;
  Element *x2_ = nullptr;
  int blocks_ = 1;
};
