// Runs every layer of a cutlass-conv-tuner header through its tuned kernel (a CUTLASS type, or a CuTe DSL
// object's entry points behind the same runner interface): checks the output against CUTLASS's device reference, times it the way the tuner does (a CUDA graph of launches
// rotating over copies larger than 3x L2, events, median per launch) and compares with the table.
//
//   ./tuned_convs [--max-deviation 0.10] [--layer NAME] [--seed N]
//
// Exit code 0: every layer right (and, with --max-deviation, within that fraction of its tuned time);
// 1: a layer failed validation or ran, or deviated too far; 2: bad command line or no usable GPU.
// CMake passes TUNED_HEADER_FILE, TUNED_NAMESPACE and TUNED_FOR_EACH (see CMakeLists.txt).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/conv/conv2d_problem_size.h"
#include "cutlass/layout/tensor.h"
#include "cutlass/numeric_types.h"
#include "cutlass/tensor_ref.h"
#include "cutlass/util/reference/device/convolution.h"

#if !defined(TUNED_HEADER_FILE) || !defined(TUNED_NAMESPACE) || !defined(TUNED_FOR_EACH)
#error "Build with CMake (CMakeLists.txt), or define TUNED_HEADER_FILE, TUNED_NAMESPACE and TUNED_FOR_EACH"
#endif

#include TUNED_HEADER_FILE

namespace tuned = cutlass_conv_tuner::TUNED_NAMESPACE;

namespace {

// The tuner's measurement protocol (tuner/measure.py).
constexpr int kL2Multiple = 3;
constexpr int kMaxCopies = 2048;
constexpr int kMinLaunchesPerReplay = 64;
constexpr int kWarmupReplays = 3;
constexpr int kTimedReplays = 30;

// An e4m3 layer's runner (DslScaledRunner) takes the input's and the filter's per-tensor scales besides the
// epilogue's operands: these, which the reference folds into its alpha.
constexpr float kInputScale = 0.75f, kFilterScale = 1.5f;
template <typename Runner>
constexpr bool kTakesScales = std::is_same_v<typename Runner::ElementA, cutlass::float_e4m3_t>;

// ---- errors ---------------------------------------------------------------------------------------

struct LayerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check_cuda(cudaError_t error, const char *call, int line) {
  if (error != cudaSuccess) {
    throw LayerError(std::string(call) + " (main.cu:" + std::to_string(line) + "): " +
                     cudaGetErrorName(error) + ": " + cudaGetErrorString(error));
  }
}

void check_cutlass(cutlass::Status status, const char *call, int line) {
  if (status != cutlass::Status::kSuccess) {
    throw LayerError(std::string(call) + " (main.cu:" + std::to_string(line) + "): cutlass::Status " +
                     cutlassGetStatusString(status));
  }
}

#define CHECK_CUDA(call) check_cuda((call), #call, __LINE__)
#define CHECK_CUTLASS(call) check_cutlass((call), #call, __LINE__)

// ---- RAII for the few CUDA objects (destructors ignore errors: they may run while unwinding) --------

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_) CHECK_CUDA(cudaMalloc(&ptr_, bytes_));
  }
  DeviceBuffer(DeviceBuffer &&other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) {
    other.ptr_ = nullptr;
    other.bytes_ = 0;
  }
  DeviceBuffer &operator=(DeviceBuffer &&) = delete;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  template <typename T>
  T *as() const { return static_cast<T *>(ptr_); }
  void *get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void *ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct Stream {
  cudaStream_t handle = nullptr;
  Stream() { CHECK_CUDA(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking)); }
  ~Stream() { if (handle) cudaStreamDestroy(handle); }
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
};

struct Event {
  cudaEvent_t handle = nullptr;
  Event() { CHECK_CUDA(cudaEventCreate(&handle)); }
  ~Event() { if (handle) cudaEventDestroy(handle); }
  Event(const Event &) = delete;
  Event &operator=(const Event &) = delete;
};

struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  Graph() = default;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;
};

// ---- random inputs ---------------------------------------------------------------------------------

// Uniform in [-1, 1) from a hash of (seed, index): no cuRAND needed (CUTLASS's tensor_fill.h wants
// curand_kernel.h, which slim CUDA installs lack).
template <typename Element>
__global__ void fill_uniform(Element *data, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 1;  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float unit = float(z >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
    data[i] = Element(2.0f * unit - 1.0f);
  }
}

template <typename Element>
void fill_random(Element *data, size_t count, uint64_t seed, cudaStream_t stream) {
  const int threads = 256;
  const int blocks = int(std::min<size_t>((count + threads - 1) / threads, 4096));
  fill_uniform<Element><<<std::max(blocks, 1), threads, 0, stream>>>(data, count, seed);
  CHECK_CUDA(cudaGetLastError());
}

// ---- the device -----------------------------------------------------------------------------------

struct DeviceInfo {
  std::string name;
  int compute_capability = 0;  // 90 for 9.0, as in the header
  int sm_count = 0;
  size_t l2_bytes = 0;
};

DeviceInfo query_device() {
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  cudaDeviceProp props;
  CHECK_CUDA(cudaGetDeviceProperties(&props, device));
  DeviceInfo info;
  info.name = props.name;
  info.compute_capability = props.major * 10 + props.minor;
  info.sm_count = props.multiProcessorCount;
  info.l2_bytes = size_t(props.l2CacheSize);
  return info;
}

// ---- validation -----------------------------------------------------------------------------------

// ||output - reference|| / ||reference|| in double; infinity when any output is NaN or Inf
// (the output was poisoned with NaN, so an element the kernel never wrote shows up here).
template <typename Element>
double relative_l2(const Element *output_device, const std::vector<float> &reference, long *non_finite) {
  const size_t count = reference.size();
  std::vector<Element> output(count);
  CHECK_CUDA(cudaMemcpy(output.data(), output_device, count * sizeof(Element), cudaMemcpyDeviceToHost));
  double difference = 0.0, scale = 0.0;
  long bad = 0;
  for (size_t i = 0; i < count; ++i) {
    double y = double(float(output[i]));
    double r = double(reference[i]);
    if (!std::isfinite(y)) {
      ++bad;
      continue;
    }
    difference += (y - r) * (y - r);
    scale += r * r;
  }
  *non_finite = bad;
  if (bad) return INFINITY;
  return scale > 0.0 ? std::sqrt(difference / scale) : std::sqrt(difference);
}

// ---- the epilogue ---------------------------------------------------------------------------------

// The activation a layer's kernel applies (TunedLayer::activation), in double as tuner/epilogue.py does.
double activate(const char *activation, double v) {
  if (std::strcmp(activation, "relu") == 0) return v > 0.0 ? v : 0.0;
  if (std::strcmp(activation, "silu") == 0) return v / (1.0 + std::exp(-v));
  if (std::strcmp(activation, "gelu") == 0) return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
  if (std::strcmp(activation, "none") == 0) return v;
  throw std::runtime_error(std::string("unknown activation ") + activation);
}

// Per-channel values in [lo, hi) from a small LCG: the epilogue's scale and bias vectors.
std::vector<float> random_vector(size_t count, uint64_t seed, float lo, float hi) {
  std::vector<float> values(count);
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (float &v : values) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = lo + (hi - lo) * float(state >> 40) / float(1ull << 24);
  }
  return values;
}

// ---- one layer ------------------------------------------------------------------------------------

struct LayerResult {
  std::string name;
  double tuned_us = 0.0;
  double measured_us = NAN;
  double error = NAN;
  bool passed = false;
  std::string message;  // why it failed, or a note
};

// How many (input, filter, output) sets to rotate over so that their total exceeds 3x L2
// (tuner/measure.py rotation_copies), within half of the free device memory.
int rotation_copies(size_t bytes_per_set, size_t l2_bytes, size_t free_bytes) {
  bytes_per_set = std::max<size_t>(1, bytes_per_set);
  size_t wanted = std::max<size_t>(2, (kL2Multiple * l2_bytes + bytes_per_set - 1) / bytes_per_set);
  size_t affordable = std::max<size_t>(2, (free_bytes / 2) / bytes_per_set);
  return int(std::min<size_t>({wanted, affordable, size_t(kMaxCopies)}));
}

int launches_per_replay(int copies) {
  int rounds = std::max(1, (kMinLaunchesPerReplay + copies - 1) / copies);
  return copies * rounds;
}

template <typename Runner>
void run_layer(const tuned::TunedLayer &layer, const DeviceInfo &device, uint64_t seed, LayerResult &result) {
  using ElementA = typename Runner::ElementA;
  using ElementB = typename Runner::ElementB;
  using ElementC = typename Runner::ElementC;
  using Layout = cutlass::layout::TensorNHWC;

  const int n = layer.n, h = layer.h, w = layer.w, c = layer.c, k = layer.k, r = layer.r, s = layer.s;
  const int kc = layer.kernel_c;  // channels the kernel reads; c..kc-1 are zeros
  const int p = tuned::output_p(layer), q = tuned::output_q(layer);
  // A transposed layer's weight is w[C,R,S,K] (K contiguous), and its kernel pads no channels.
  const bool transposed = layer.transposed;
  if (kc < c || p <= 0 || q <= 0 || layer.split_k < 1 || layer.groups != 1 || (transposed && kc != c)) {
    throw LayerError("inconsistent row in kLayers");
  }

  // The kernel's problem (padded channels, run-time arguments), as the tuner hands it over, and the
  // reference's (the layer's own C).
  int32_t problem_array[tuned::kTunerProblemFields];
  tuned::problem_array(layer, problem_array);
  const tuned::TunerProblem kernel_problem(problem_array);
  const cutlass::conv::Conv2dProblemSize reference_problem(
      n, h, w, c, k, r, s, p, q, layer.pad_h, layer.pad_w, layer.stride_h, layer.stride_w, layer.dilation_h,
      layer.dilation_w, cutlass::conv::Mode::kCrossCorrelation, 1, 1);

  const Layout layout_y = Layout::packed({n, p, q, k});
  const Layout layout_x0 = Layout::packed({n, h, w, c});
  const Layout layout_w0 = transposed ? Layout::packed({c, r, s, k}) : Layout::packed({k, r, s, c});

  // The filter's rows: of w_row contiguous elements, w_kernel_row as the kernel reads them.
  const size_t x_rows = size_t(n) * h * w, w_rows = size_t(transposed ? c : k) * r * s;
  const int w_row = transposed ? k : c, w_kernel_row = transposed ? k : kc;
  const size_t y_count = size_t(n) * p * q * k;
  const size_t x_bytes = x_rows * kc * sizeof(ElementA);
  const size_t w_bytes = w_rows * w_kernel_row * sizeof(ElementB);
  const size_t y_bytes = y_count * sizeof(ElementC);

  CHECK_CUTLASS(Runner::can_implement(kernel_problem));
  const size_t workspace_bytes = Runner::workspace_bytes(kernel_problem);

  Stream stream;

  // Random x and w in [-1, 1] at the layer's own C, and the reference output (float, float accumulation).
  DeviceBuffer x0(x_rows * c * sizeof(ElementA)), w0(w_rows * w_row * sizeof(ElementB));
  DeviceBuffer reference(y_count * sizeof(float));
  fill_random(x0.as<ElementA>(), x_rows * c, seed, stream.handle);
  fill_random(w0.as<ElementB>(), w_rows * w_row, seed + 1, stream.handle);
  CHECK_CUDA(cudaMemsetAsync(reference.get(), 0xFF, reference.bytes(), stream.handle));  // NaN
  if (transposed) {
    // The data gradient of the convolution y -> x: x is its dy, w its KRSC filter, y its dx.
    const cutlass::conv::Conv2dProblemSize dgrad_problem(
        n, p, q, k, c, r, s, h, w, layer.pad_h, layer.pad_w, layer.stride_h, layer.stride_w, layer.dilation_h,
        layer.dilation_w, cutlass::conv::Mode::kCrossCorrelation, 1, 1);
    CHECK_CUTLASS((cutlass::reference::device::Conv2dDgrad<ElementA, Layout, ElementB, Layout, float, Layout,
                                                            float, float>(
        dgrad_problem, {x0.as<ElementA>(), layout_x0}, {w0.as<ElementB>(), layout_w0},
        {reference.as<float>(), layout_y}, {reference.as<float>(), layout_y}, 1.0f, 0.0f, stream.handle)));
  } else {
    const float alpha = kTakesScales<Runner> ? kInputScale * kFilterScale : 1.0f;
    CHECK_CUTLASS((cutlass::reference::device::Conv2dFprop<ElementA, Layout, ElementB, Layout, float, Layout,
                                                            float, float>(
        reference_problem, {x0.as<ElementA>(), layout_x0}, {w0.as<ElementB>(), layout_w0},
        {reference.as<float>(), layout_y}, {reference.as<float>(), layout_y}, alpha, 0.0f, stream.handle)));
  }

  // The epilogue's operands, as the tuner validates them: scale in [0.5, 1.5), bias in [-1, 1), and a
  // residual in [-1, 1] of the output's type; a part the layer lacks stays a null pointer.
  const size_t residual_bytes = layer.has_residual ? y_bytes : 0;
  const std::vector<float> scale_h = random_vector(layer.has_scale ? k : 0, seed + 2, 0.5f, 1.5f);
  const std::vector<float> bias_h = random_vector(layer.has_bias ? k : 0, seed + 3, -1.0f, 1.0f);
  DeviceBuffer scale(scale_h.size() * sizeof(float)), bias(bias_h.size() * sizeof(float)), residual0(residual_bytes);
  if (!scale_h.empty()) CHECK_CUDA(cudaMemcpy(scale.get(), scale_h.data(), scale.bytes(), cudaMemcpyHostToDevice));
  if (!bias_h.empty()) CHECK_CUDA(cudaMemcpy(bias.get(), bias_h.data(), bias.bytes(), cudaMemcpyHostToDevice));
  std::vector<ElementC> residual_h(layer.has_residual ? y_count : 0);
  if (layer.has_residual) {
    fill_random(residual0.as<ElementC>(), y_count, seed + 4, stream.handle);
    CHECK_CUDA(cudaStreamSynchronize(stream.handle));
    CHECK_CUDA(cudaMemcpy(residual_h.data(), residual0.get(), residual_bytes, cudaMemcpyDeviceToHost));
  }

  // Copies of (input, filter, output, scale, bias, residual, workspace): > 3x L2 in all, within half of
  // the free memory. The vectors rotate too, as in the tuner (tuner/run.py TensorSet.copy): shared, they
  // would stay in L2 and flatter the fused kernels.
  size_t free_bytes = 0, total_bytes = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int copies = rotation_copies(x_bytes + w_bytes + y_bytes + scale.bytes() + bias.bytes() + residual_bytes,
                                     device.l2_bytes, free_bytes);
  struct TensorSet {
    DeviceBuffer x, w, y, scale, bias, residual, workspace;
  };
  std::vector<TensorSet> sets;
  sets.reserve(copies);
  for (int i = 0; i < copies; ++i) {
    TensorSet set{DeviceBuffer(x_bytes), DeviceBuffer(w_bytes), DeviceBuffer(y_bytes), DeviceBuffer(scale.bytes()),
                  DeviceBuffer(bias.bytes()), DeviceBuffer(residual_bytes), DeviceBuffer(workspace_bytes)};
    for (auto [to, from] : {std::pair{&set.scale, &scale}, std::pair{&set.bias, &bias}}) {
      if (from->bytes()) {
        CHECK_CUDA(cudaMemcpyAsync(to->get(), from->get(), from->bytes(), cudaMemcpyDeviceToDevice, stream.handle));
      }
    }
    if (residual_bytes) {
      CHECK_CUDA(cudaMemcpyAsync(set.residual.get(), residual0.get(), residual_bytes, cudaMemcpyDeviceToDevice,
                                 stream.handle));
    }
    if (kc > c) {  // the extra channels are zeros
      CHECK_CUDA(cudaMemsetAsync(set.x.get(), 0, x_bytes, stream.handle));
      CHECK_CUDA(cudaMemsetAsync(set.w.get(), 0, w_bytes, stream.handle));
    }
    CHECK_CUDA(cudaMemcpy2DAsync(set.x.get(), kc * sizeof(ElementA), x0.get(), c * sizeof(ElementA),
                                 c * sizeof(ElementA), x_rows, cudaMemcpyDeviceToDevice, stream.handle));
    CHECK_CUDA(cudaMemcpy2DAsync(set.w.get(), w_kernel_row * sizeof(ElementB), w0.get(), w_row * sizeof(ElementB),
                                 w_row * sizeof(ElementB), w_rows, cudaMemcpyDeviceToDevice, stream.handle));
    CHECK_CUDA(cudaMemsetAsync(set.y.get(), 0xFF, y_bytes, stream.handle));  // all-ones bits: NaN in f32/f16/bf16
    sets.push_back(std::move(set));
  }

  // One operator per set, with the layer's epilogue operands (and an e4m3 layer's scales, read by every
  // launch from operand_scales); initialize() also prepares the set's workspace (split-K semaphores, stream-K
  // partials), as the tuner's entry points do.
  const float scales_h[2] = {kInputScale, kFilterScale};
  DeviceBuffer operand_scales(kTakesScales<Runner> ? sizeof(scales_h) : 0);
  if (operand_scales.bytes()) {
    CHECK_CUDA(cudaMemcpy(operand_scales.get(), scales_h, sizeof(scales_h), cudaMemcpyHostToDevice));
  }
  std::vector<std::unique_ptr<Runner>> ops;
  ops.reserve(copies);
  for (TensorSet &set : sets) {
    if (set.workspace.bytes()) CHECK_CUDA(cudaMemsetAsync(set.workspace.get(), 0, set.workspace.bytes(), stream.handle));
    const tuned::TunerEpilogue epilogue{layer.has_scale ? set.scale.as<float>() : nullptr,
                                        layer.has_bias ? set.bias.as<float>() : nullptr,
                                        layer.has_residual ? set.residual.get() : nullptr,
                                        float(layer.residual_scale)};
    ops.push_back(std::make_unique<Runner>());
    if constexpr (kTakesScales<Runner>) {
      const typename Runner::Operands operands{epilogue, operand_scales.as<float>(), operand_scales.as<float>() + 1};
      CHECK_CUTLASS(ops.back()->initialize(kernel_problem, set.x.get(), set.w.get(), set.y.get(), operands,
                                           set.workspace.get(), stream.handle));
    } else {
      CHECK_CUTLASS(ops.back()->initialize(kernel_problem, set.x.get(), set.w.get(), set.y.get(), epilogue,
                                           set.workspace.get(), stream.handle));
    }
  }

  // Correct first: one launch into the NaN-poisoned output of set 0.
  CHECK_CUTLASS(ops[0]->run(stream.handle));
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaStreamSynchronize(stream.handle));
  std::vector<float> expected(y_count);
  CHECK_CUDA(cudaMemcpy(expected.data(), reference.get(), reference.bytes(), cudaMemcpyDeviceToHost));
  const long reference_bad = long(std::count_if(expected.begin(), expected.end(),
                                                [](float v) { return !std::isfinite(v); }));
  if (reference_bad) throw LayerError("the reference left " + std::to_string(reference_bad) + " outputs non-finite");
  for (size_t i = 0; i < y_count; ++i) {  // the epilogue on the reference (NHWC: the channel is i % K)
    double v = expected[i];
    if (layer.has_scale) v *= scale_h[i % k];
    if (layer.has_bias) v += bias_h[i % k];
    if (layer.has_residual) v += layer.residual_scale * double(float(residual_h[i]));
    expected[i] = float(activate(layer.activation, v));
  }
  const double tol = layer.tolerance;  // derived from the layer's types (tuner/validate.py)
  long non_finite = 0;
  result.error = relative_l2(static_cast<const ElementC *>(sets[0].y.get()), expected, &non_finite);
  if (non_finite) {
    result.message = std::to_string(non_finite) + " of " + std::to_string(y_count) +
                     " outputs NaN or Inf (unwritten or overflowed)";
    return;
  }
  if (!(result.error <= tol)) {
    char text[128];
    std::snprintf(text, sizeof(text), "relative L2 error %.2e exceeds %.1e for %s", result.error, tol,
                  layer.types);
    result.message = text;
    return;
  }

  // Device time: one graph of launches rotating over the sets, 3 warm-up replays, 30 timed ones.
  const int launches = launches_per_replay(copies);
  Graph graph;
  CHECK_CUDA(cudaStreamBeginCapture(stream.handle, cudaStreamCaptureModeThreadLocal));
  cutlass::Status captured = cutlass::Status::kSuccess;
  for (int i = 0; i < launches && captured == cutlass::Status::kSuccess; ++i) {
    captured = ops[i % copies]->run(stream.handle);
  }
  cudaError_t capture_end = cudaStreamEndCapture(stream.handle, &graph.graph);  // ends it even after a failure
  CHECK_CUTLASS(captured);
  CHECK_CUDA(capture_end);
  CHECK_CUDA(cudaGraphInstantiateWithFlags(&graph.exec, graph.graph, 0));
  for (int i = 0; i < kWarmupReplays; ++i) CHECK_CUDA(cudaGraphLaunch(graph.exec, stream.handle));
  CHECK_CUDA(cudaStreamSynchronize(stream.handle));
  Event start, stop;
  std::vector<double> per_launch_us;
  for (int i = 0; i < kTimedReplays; ++i) {
    CHECK_CUDA(cudaEventRecord(start.handle, stream.handle));
    CHECK_CUDA(cudaGraphLaunch(graph.exec, stream.handle));
    CHECK_CUDA(cudaEventRecord(stop.handle, stream.handle));
    CHECK_CUDA(cudaEventSynchronize(stop.handle));
    float ms = 0.0f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start.handle, stop.handle));
    per_launch_us.push_back(double(ms) * 1e3 / launches);
  }
  std::sort(per_launch_us.begin(), per_launch_us.end());
  const size_t mid = per_launch_us.size() / 2;
  result.measured_us = per_launch_us.size() % 2 ? per_launch_us[mid]
                                                : 0.5 * (per_launch_us[mid - 1] + per_launch_us[mid]);

  // Repeated launches must keep giving the right answer (split-K semaphores, races): the last set's
  // output was NaN until the timed launches wrote it.
  const double after = relative_l2(static_cast<const ElementC *>(sets.back().y.get()), expected, &non_finite);
  if (non_finite || !(after <= tol)) {
    char text[128];
    std::snprintf(text, sizeof(text), "after timing: relative L2 error %.2e (%ld non-finite) for %s", after,
                  non_finite, layer.types);
    result.error = after;
    result.message = text;
    return;
  }
  result.passed = true;
  result.message = std::to_string(copies) + " copies, " + std::to_string(launches) + " launches per replay";
}

template <typename Runner>
LayerResult run_tuned_layer(int index, const DeviceInfo &device, uint64_t seed) {
  const tuned::TunedLayer &layer = tuned::kLayers[index];
  LayerResult result;
  result.name = layer.name;
  result.tuned_us = layer.runtime_us;
  try {
    run_layer<Runner>(layer, device, seed + 2 * uint64_t(index), result);
  } catch (const LayerError &error) {
    result.passed = false;
    result.message = error.what();
  } catch (const std::bad_alloc &) {
    result.passed = false;
    result.message = "out of host memory";
  }
  return result;
}

void usage(const char *program) {
  std::printf(
      "usage: %s [--max-deviation X] [--layer NAME] [--seed N]\n"
      "  Validates and times every layer of the tuned table for %s.\n"
      "  --max-deviation X  fail when any |measured/tuned - 1| exceeds X (e.g. 0.10)\n"
      "  --layer NAME       only this layer\n"
      "  --seed N           seed of the random inputs (default 2024)\n",
      program, tuned::kGpuName);
}

}  // namespace

int main(int argc, char **argv) {
  double max_deviation = -1.0;  // negative: no timing check
  const char *only_layer = nullptr;
  uint64_t seed = 2024;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--max-deviation") {
      char *end = nullptr;
      const char *text = value();
      max_deviation = std::strtod(text, &end);
      if (end == text || *end != '\0' || !(max_deviation >= 0.0)) {
        std::fprintf(stderr, "--max-deviation wants a non-negative fraction, e.g. 0.10; got %s\n", text);
        return 2;
      }
    } else if (arg == "--layer") {
      only_layer = value();
      if (!tuned::find_layer(only_layer)) {
        std::fprintf(stderr, "no layer %s in the table for %s; layers:", only_layer, tuned::kGpuName);
        for (const auto &layer : tuned::kLayers) std::fprintf(stderr, " %s", layer.name);
        std::fprintf(stderr, "\n");
        return 2;
      }
    } else if (arg == "--seed") {
      seed = std::strtoull(value(), nullptr, 10);
    } else if (arg == "-h" || arg == "--help") {
      usage(argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      usage(argv[0]);
      return 2;
    }
  }

  DeviceInfo device;
  try {
    device = query_device();
  } catch (const LayerError &error) {
    std::fprintf(stderr, "no usable CUDA GPU: %s\n", error.what());
    return 2;
  }
  std::printf("GPU: %s (cc %d.%d, %d SMs, L2 %.1f MiB); table: %s (cc %d.%d, %d SMs), nvcc %s, CUTLASS %s\n",
              device.name.c_str(), device.compute_capability / 10, device.compute_capability % 10,
              device.sm_count, device.l2_bytes / 1048576.0, tuned::kGpuName, tuned::kComputeCapability / 10,
              tuned::kComputeCapability % 10, tuned::kSmCount, tuned::kNvccVersion, tuned::kCutlassVersion);
  if (!tuned::matches_device(device.compute_capability, device.sm_count, device.name.c_str())) {
    std::printf("WARNING: this table was tuned on %s (cc %d.%d, %d SMs), not on this GPU: the kernels run, "
                "but the tuned times are not this GPU's and the choices may not be its best; "
                "tune here and export its own header.\n",
                tuned::kGpuName, tuned::kComputeCapability / 10, tuned::kComputeCapability % 10, tuned::kSmCount);
  }

  int name_width = 5;
  for (const auto &layer : tuned::kLayers) name_width = std::max(name_width, int(std::strlen(layer.name)));
  std::printf("%-*s  %9s  %11s  %6s  %9s  %s\n", name_width, "layer", "tuned_us", "measured_us", "ratio",
              "rel_err", "result");

  std::vector<LayerResult> results;
  int failed = 0, deviated = 0;
  double worst_deviation = 0.0;
  auto report = [&](const LayerResult &result) {
    const double ratio = result.measured_us / result.tuned_us;
    const bool timed = std::isfinite(ratio);
    const double deviation = timed ? std::fabs(ratio - 1.0) : 0.0;
    const bool too_far = timed && max_deviation >= 0.0 && deviation > max_deviation;
    if (timed) worst_deviation = std::max(worst_deviation, deviation);
    failed += !result.passed;
    deviated += too_far;
    std::printf("%-*s  %9.3f  %11.3f  %6.3f  %9.2e  %s", name_width, result.name.c_str(), result.tuned_us,
                result.measured_us, ratio, result.error, result.passed ? "PASS" : "FAIL");
    if (too_far) std::printf(" (|ratio-1| %.3f > %.3f)", deviation, max_deviation);
    if (!result.message.empty()) std::printf("  [%s]", result.message.c_str());
    std::printf("\n");
    std::fflush(stdout);
  };

#define TUNED_CONVS_RUN_LAYER(runner, index)                                            \
  if (!only_layer || std::strcmp(only_layer, tuned::kLayers[index].name) == 0) {        \
    results.push_back(run_tuned_layer<tuned::runner>(index, device, seed));             \
    report(results.back());                                                             \
  }
  TUNED_FOR_EACH(TUNED_CONVS_RUN_LAYER)
#undef TUNED_CONVS_RUN_LAYER

  const int count = int(results.size());
  const bool ok = failed == 0 && deviated == 0;
  std::printf("%s: %d layer%s, %d passed, %d failed validation", ok ? "OK" : "FAILED", count,
              count == 1 ? "" : "s", count - failed, failed);
  if (max_deviation >= 0.0) {
    std::printf(", %d outside +-%.1f%% of the tuned time (worst %.1f%%)", deviated, 100.0 * max_deviation,
                100.0 * worst_deviation);
  } else {
    std::printf(", worst |measured/tuned - 1| %.1f%% (no --max-deviation check)", 100.0 * worst_deviation);
  }
  std::printf("\n");
  return ok ? 0 : 1;
}
