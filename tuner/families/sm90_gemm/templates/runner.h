// Binds a CUTLASS 3.x GemmUniversalAdapter (the sm90_gemm family) to the tuner's problem array. The
// conv must be a plain GEMM: 1x1, stride 1, no padding, no dilation; C is the GEMM's K.
template <typename Gemm>
class Sm90GemmRunner {
 public:
  using GemmKernel = typename Gemm::GemmKernel;
  using ElementA = typename GemmKernel::ElementA;
  using ElementB = typename GemmKernel::ElementB;
  using ElementC = typename GemmKernel::ElementD;  // the output
  using ElementSource = typename GemmKernel::ElementC;  // void unless the epilogue reads a residual
  using ClusterShape = typename GemmKernel::ClusterShape;
  static constexpr bool kStreamK =
      std::is_same_v<typename GemmKernel::TileSchedulerTag, cutlass::gemm::StreamKScheduler>;
  // A column-major D (unit stride along M) is the swapped product: M along the output channels, A = w.
  static constexpr bool kSwapAB =
      std::is_same_v<cute::remove_cvref_t<decltype(cute::get<0>(typename GemmKernel::StrideD{}))>, cute::Int<1>>;

  static cutlass::Status can_implement(const TunerProblem &p) {
    cutlass::Status status = check_problem(p);
    if (status != cutlass::Status::kSuccess) return status;
    return Gemm::can_implement(arguments(p, nullptr, nullptr, nullptr, TunerEpilogue{}));
  }

  static size_t workspace_bytes(const TunerProblem &p) {
    if (check_problem(p) != cutlass::Status::kSuccess) return 0;
    return Gemm::get_workspace_size(arguments(p, nullptr, nullptr, nullptr, TunerEpilogue{}));
  }

  // grid[6] = {grid x, y, z in CTAs, cluster x, y, z}: the Params the launch uses (a persistent grid
  // depends on the SM count, the cluster occupancy, raster order and swizzle).
  static void grid(const TunerProblem &p, int32_t *grid) {
    for (int i = 0; i < 6; ++i) grid[i] = 0;
    if (check_problem(p) != cutlass::Status::kSuccess) return;
    // to_underlying_arguments encodes TMA descriptors, which want a 16-byte aligned address: a
    // placeholder that is never dereferenced (nothing is launched); the grid does not depend on it.
    void *placeholder = reinterpret_cast<void *>(uintptr_t(1) << 20);
    auto params = GemmKernel::to_underlying_arguments(arguments(p, placeholder, placeholder, placeholder,
                                  TunerEpilogue{nullptr, nullptr, std::is_void_v<ElementSource> ? nullptr : placeholder, 0.0f}), nullptr);
    dim3 launch = GemmKernel::get_grid_shape(params);
    grid[0] = int32_t(launch.x); grid[1] = int32_t(launch.y); grid[2] = int32_t(launch.z);
    grid[3] = int32_t(cute::size<0>(ClusterShape{}));
    grid[4] = int32_t(cute::size<1>(ClusterShape{}));
    grid[5] = int32_t(cute::size<2>(ClusterShape{}));
  }

  // attrs[6] = {registers per thread, static smem, dynamic smem, local bytes per thread,
  //             threads per block, max active blocks per SM}.
  static cudaError_t attributes(int32_t *attrs) {
    const void *kernel = reinterpret_cast<const void *>(cutlass::device_kernel<GemmKernel>);
    int smem = int(GemmKernel::SharedStorageSize);
    cudaError_t error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (error != cudaSuccess) { cudaGetLastError(); return error; }
    cudaFuncAttributes attributes;
    error = cudaFuncGetAttributes(&attributes, kernel);
    if (error != cudaSuccess) { cudaGetLastError(); return error; }
    int blocks = 0;
    error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, int(GemmKernel::MaxThreadsPerBlock), smem);
    if (error != cudaSuccess) { cudaGetLastError(); return error; }
    attrs[0] = attributes.numRegs;
    attrs[1] = int32_t(attributes.sharedSizeBytes);
    attrs[2] = smem;
    attrs[3] = int32_t(attributes.localSizeBytes);
    attrs[4] = int32_t(GemmKernel::MaxThreadsPerBlock);
    attrs[5] = blocks;
    return cudaSuccess;
  }

  // initialize() zeroes the stream-K flags, builds the TMA descriptors and sets the smem attribute.
  cutlass::Status initialize(const TunerProblem &p, void *x, void *w, void *y, const TunerEpilogue &epilogue,
                             void *workspace, cudaStream_t stream) {
    if (!tuner_residual_matches<ElementSource>(epilogue)) return cutlass::Status::kErrorNotSupported;
    if ((reinterpret_cast<uintptr_t>(epilogue.residual) & 15u) != 0) return cutlass::Status::kErrorMisalignedOperand;
    args_ = arguments(p, x, w, y, epilogue);
    cutlass::Status filled = tuner_fill_epilogue<ElementSource>(args_.epilogue.thread, epilogue);
    if (filled != cutlass::Status::kSuccess) return filled;
    workspace_ = workspace;
    return gemm_.initialize(args_, workspace, stream);
  }

  cutlass::Status run(cudaStream_t stream) {
    if constexpr (kStreamK) {
      // Stream-K and split-K peers count their arrivals on flags in the workspace that no kernel
      // resets (sm90_tile_scheduler_stream_k.hpp fixup): zero them again before every launch, one
      // cudaMemsetAsync over the flags (none for a data-parallel decomposition), capturable.
      cutlass::Status zeroed = GemmKernel::initialize_workspace(args_, workspace_, stream);
      if (zeroed != cutlass::Status::kSuccess) return zeroed;
    }
    return gemm_.run(stream);
  }

 private:
  static cutlass::Status check_problem(const TunerProblem &p) {
    const bool gemm = p.r == 1 && p.s == 1 && p.pad_h == 0 && p.pad_w == 0 && p.stride_h == 1 && p.stride_w == 1 &&
                      p.dilation_h == 1 && p.dilation_w == 1 && p.groups == 1 && p.p == p.h && p.q == p.w;
    const int64_t m = int64_t(p.n) * p.p * p.q;
    const bool sizes = p.n > 0 && p.p > 0 && p.q > 0 && p.c > 0 && p.k > 0 && m <= INT32_MAX;
    const bool splits = kStreamK ? p.split_k >= 1 : p.split_k == 1;  // split_k means something to stream-K only
    const bool scheduler = p.raster >= 0 && p.raster <= 2 && p.swizzle >= 1;
    return (gemm && sizes && splits && scheduler) ? cutlass::Status::kSuccess : cutlass::Status::kErrorInvalidProblem;
  }

  // SM count and (cluster > 1) co-resident clusters, queried once per process as CUTLASS's profiler does.
  static cutlass::KernelHardwareInfo hardware_info() {
    static const cutlass::KernelHardwareInfo info = [] {
      cutlass::KernelHardwareInfo hw;
      cudaGetDevice(&hw.device_id);
      hw.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(hw.device_id);
      if constexpr (cute::size(ClusterShape{}) > 1) {
        hw.max_active_clusters = cutlass::KernelHardwareInfo::query_device_max_active_clusters<GemmKernel>();
      }
      return hw;
    }();
    return info;
  }

  // Run-time tile-scheduler knobs; a template so that members only some schedulers have are looked up
  // only where they exist (the non-persistent kernel takes and ignores them).
  template <class SchedulerArguments>
  static void set_scheduler(SchedulerArguments &scheduler, const TunerProblem &p) {
    if constexpr (!std::is_const_v<decltype(scheduler.max_swizzle_size)>) {
      scheduler.max_swizzle_size = p.swizzle;
    }
    if constexpr (!std::is_const_v<decltype(scheduler.raster_order)>) {
      using Raster = decltype(scheduler.raster_order);
      scheduler.raster_order = p.raster == 1 ? Raster::AlongM : p.raster == 2 ? Raster::AlongN : Raster::Heuristic;
    }
    if constexpr (kStreamK) {
      scheduler.splits = p.split_k;  // > 1: plain split-K; 1: the stream-K heuristic decides
    }
  }

  static typename Gemm::Arguments arguments(const TunerProblem &p, void *x, void *w, void *y,
                                            const TunerEpilogue &epilogue) {
    using ElementD = typename GemmKernel::ElementD;
    const int pixels = p.n * p.p * p.q;
    const int m = kSwapAB ? p.k : pixels, n = kSwapAB ? pixels : p.k, k = p.c;
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {m, n, k, 1};
    args.mainloop.ptr_A = static_cast<ElementA const *>(kSwapAB ? w : x);
    args.mainloop.dA = cutlass::make_cute_packed_stride(typename GemmKernel::StrideA{}, cute::make_shape(m, k, 1));
    args.mainloop.ptr_B = static_cast<ElementB const *>(kSwapAB ? x : w);
    args.mainloop.dB = cutlass::make_cute_packed_stride(typename GemmKernel::StrideB{}, cute::make_shape(n, k, 1));
    tuner_fill_epilogue<ElementSource>(args.epilogue.thread, epilogue);
    args.epilogue.ptr_C = static_cast<ElementSource const *>(epilogue.residual);
    args.epilogue.dC = cutlass::make_cute_packed_stride(typename GemmKernel::StrideC{}, cute::make_shape(m, n, 1));
    args.epilogue.ptr_D = static_cast<ElementD *>(y);
    args.epilogue.dD = cutlass::make_cute_packed_stride(typename GemmKernel::StrideD{}, cute::make_shape(m, n, 1));
    args.hw_info = hardware_info();
    set_scheduler(args.scheduler, p);
    return args;
  }

  Gemm gemm_;
  typename Gemm::Arguments args_{};
  void *workspace_ = nullptr;
};
