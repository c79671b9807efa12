// Binds a CUTLASS 3.x ConvUniversalAdapter (the sm90_conv family) to the tuner's problem array.
// Besides CUTLASS's can_implement it checks what the TMA im2col descriptor needs but CUTLASS only
// assert()s (silent under -DNDEBUG): a traversal stride of 1 to 8 on each axis, and 16-byte aligned tensors.
template <typename Conv>
class Sm90ConvRunner {
 public:
  using Kernel = typename Conv::ConvKernel;
  using ProblemShape = typename Kernel::ProblemShape;
  using Mainloop = typename Kernel::CollectiveMainloop;
  using ElementA = typename Kernel::ElementA;
  using ElementB = typename Kernel::ElementB;
  using ElementC = typename Kernel::ElementD;
  using ElementSource = typename Kernel::ElementC;  // void unless the epilogue reads a residual
  using ClusterShape = typename Kernel::ClusterShape;

  static cutlass::Status can_implement(const TunerProblem &p) {
    if (p.n <= 0 || p.h <= 0 || p.w <= 0 || p.c <= 0 || p.k <= 0 || p.r <= 0 || p.s <= 0 || p.pad_h < 0 ||
        p.pad_w < 0 || p.dilation_h < 1 || p.dilation_w < 1) {
      return cutlass::Status::kErrorInvalidProblem;
    }
    if (p.split_k != 1) return cutlass::Status::kErrorNotSupported;  // no split-K for sm90 conv in 4.2
    if (p.groups != 1) return cutlass::Status::kErrorNotSupported;   // the filter layout below is ungrouped
    if (p.stride_h < 1 || p.stride_h > 8 || p.stride_w < 1 || p.stride_w > 8) {
      return cutlass::Status::kErrorNotSupported;  // TMA elementStrides
    }
    const int P = (p.h + 2 * p.pad_h - ((p.r - 1) * p.dilation_h + 1)) / p.stride_h + 1;
    const int Q = (p.w + 2 * p.pad_w - ((p.s - 1) * p.dilation_w + 1)) / p.stride_w + 1;
    if (P <= 0 || Q <= 0 || P != p.p || Q != p.q) return cutlass::Status::kErrorInvalidProblem;
    return Conv::can_implement(arguments(p, nullptr, nullptr, nullptr, TunerEpilogue{}));
  }

  static size_t workspace_bytes(const TunerProblem &p) {
    return Conv::get_workspace_size(arguments(p, nullptr, nullptr, nullptr, TunerEpilogue{}));
  }

  // grid[6] = {grid x, y, z in CTAs, cluster x, y, z}: what ConvUniversalAdapter::run launches.
  // get_grid_shape reads only the problem shape, so no TMA descriptor is built here.
  static void grid(const TunerProblem &p, int32_t *grid) {
    typename Kernel::Params params{};
    params.problem_shape = Mainloop::get_problem_shape_MNKL(problem_shape(p));
    dim3 launch = Kernel::get_grid_shape(params);
    grid[0] = int32_t(launch.x); grid[1] = int32_t(launch.y); grid[2] = int32_t(launch.z);
    grid[3] = int32_t(cute::size<0>(ClusterShape{}));
    grid[4] = int32_t(cute::size<1>(ClusterShape{}));
    grid[5] = int32_t(cute::size<2>(ClusterShape{}));
  }

  // attrs[6] = {registers per thread, static smem, dynamic smem, local bytes per thread,
  //             threads per block, max active blocks per SM}.
  static cudaError_t attributes(int32_t *attrs) {
    const void *kernel = reinterpret_cast<const void *>(cutlass::device_kernel<Kernel>);
    int smem = int(Kernel::SharedStorageSize);
    cudaError_t error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (error != cudaSuccess) { cudaGetLastError(); return error; }
    cudaFuncAttributes attributes;
    error = cudaFuncGetAttributes(&attributes, kernel);
    if (error != cudaSuccess) { cudaGetLastError(); return error; }
    int blocks = 0;
    error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, int(Kernel::MaxThreadsPerBlock), smem);
    if (error != cudaSuccess) { cudaGetLastError(); return error; }
    attrs[0] = attributes.numRegs;
    attrs[1] = int32_t(attributes.sharedSizeBytes);
    attrs[2] = smem;
    attrs[3] = int32_t(attributes.localSizeBytes);
    attrs[4] = int32_t(Kernel::MaxThreadsPerBlock);
    attrs[5] = blocks;
    return cudaSuccess;
  }

  // initialize() encodes the TMA descriptors (which hold the buffer addresses) once; run() only launches.
  cutlass::Status initialize(const TunerProblem &p, void *x, void *w, void *y, const TunerEpilogue &epilogue,
                             void *workspace, cudaStream_t stream) {
    if (!aligned16(x) || !aligned16(w) || !aligned16(y) || !aligned16(epilogue.residual)) {
      return cutlass::Status::kErrorMisalignedOperand;
    }
    if (!tuner_residual_matches<ElementSource>(epilogue)) return cutlass::Status::kErrorNotSupported;
    typename Conv::Arguments args = arguments(p, x, w, y, epilogue);
    cutlass::Status filled = tuner_fill_epilogue<ElementSource>(args.epilogue.thread, epilogue);
    if (filled != cutlass::Status::kSuccess) return filled;
    return op_.initialize(args, workspace, stream);
  }

  cutlass::Status run(cudaStream_t stream) { return op_.run(stream); }

 private:
  static bool aligned16(const void *ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

  static ProblemShape problem_shape(const TunerProblem &p) {
    return ProblemShape(cutlass::conv::Mode::kCrossCorrelation,
                        {p.n, p.h, p.w, p.c},             // activations NHWC
                        {p.k, p.r, p.s, p.c},             // filters KRSC
                        {p.pad_h, p.pad_w},               // lower padding (h, w)
                        {p.pad_h, p.pad_w},               // upper padding (h, w)
                        {p.stride_h, p.stride_w},         // traversal stride
                        {p.dilation_h, p.dilation_w},
                        1);                               // groups
  }

  static typename Conv::Arguments arguments(const TunerProblem &p, void *x, void *w, void *y,
                                            const TunerEpilogue &epilogue) {
    using StrideC = typename Kernel::StrideC;
    using StrideD = typename Kernel::StrideD;
    ProblemShape shape = problem_shape(p);
    // Output (and residual) stride ((Q,P,N), K, L) from the packed NPQK stride the problem shape computes.
    StrideC stride_c{};
    StrideD stride_d{};
    cute::for_each(cute::make_seq<cute::rank<0>(StrideD{})>{}, [&](auto i) {
      cute::get<0, i>(stride_c) = shape.stride_C[ProblemShape::RankT - 2 - i];
      cute::get<0, i>(stride_d) = shape.stride_C[ProblemShape::RankT - 2 - i];
    });
    typename Conv::Arguments args{
        shape,
        {static_cast<ElementA const *>(x), static_cast<ElementB const *>(w)},
        {{}, static_cast<ElementSource const *>(epilogue.residual), stride_c, static_cast<ElementC *>(y), stride_d}};
    tuner_fill_epilogue<ElementSource>(args.epilogue.thread, epilogue);
    return args;
  }

  Conv op_;
};
