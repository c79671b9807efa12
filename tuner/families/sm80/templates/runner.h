// A kernel of templates/conv2d_fprop_evt.h names the fused epilogue it was built with; CUTLASS's does not.
template <class Kernel, class = void> struct Sm80FusesEpilogue : std::false_type {};
template <class Kernel>
struct Sm80FusesEpilogue<Kernel, std::void_t<typename Kernel::Fusion>> : std::true_type {};

// Binds a CUTLASS 2.x ImplicitGemmConvolution (the sm80 family) to the tuner's problem array:
// the candidate's C entry points and the exported header's users call only this.
template <typename Conv>
class Sm80Runner {
 public:
  using ElementA = typename Conv::ElementA;
  using ElementB = typename Conv::ElementB;
  using ElementC = typename Conv::ElementC;
  using Kernel = typename Conv::UnderlyingKernel;
  static constexpr bool kFused = Sm80FusesEpilogue<Kernel>::value;

  static cutlass::Status can_implement(const TunerProblem &p) {
    // An ungrouped kernel reads the whole of C for every output channel: groups need a grouped one (sm80_group).
    if (p.groups != 1 && Conv::kGroupMode == cutlass::conv::GroupMode::kNone) {
      return cutlass::Status::kErrorNotSupported;
    }
    typename Conv::Arguments args = arguments(p, nullptr, nullptr, nullptr, TunerEpilogue{});
    if constexpr (kFused) {
      cutlass::Status status = Kernel::can_implement_epilogue(args);  // no split-K
      if (status != cutlass::Status::kSuccess) return status;
    }
    return Conv::can_implement(args);
  }

  static size_t workspace_bytes(const TunerProblem &p) {
    return Conv::get_workspace_size(arguments(p, nullptr, nullptr, nullptr, TunerEpilogue{}));
  }

  // grid[6] = {grid x, y, z in blocks, cluster x, y, z}: no clusters before sm90.
  static void grid(const TunerProblem &p, int32_t *grid) {
    auto size = problem_size(p);
    typename Kernel::ThreadblockSwizzle swizzle;
    cutlass::gemm::GemmCoord tiled = swizzle.get_tiled_shape(
        Kernel::kConvolutionalOperator, size,
        {Conv::ThreadblockShape::kM, Conv::ThreadblockShape::kN, Conv::ThreadblockShape::kK},
        size.split_k_slices);
    dim3 launch = swizzle.get_grid_shape(tiled);
    grid[0] = launch.x; grid[1] = launch.y; grid[2] = launch.z;
    grid[3] = 1; grid[4] = 1; grid[5] = 1;
  }

  // attrs[6] = {registers per thread, static smem, dynamic smem, local bytes per thread,
  //             threads per block, max active blocks per SM}.
  static cudaError_t attributes(int32_t *attrs) {
    int smem = int(sizeof(typename Kernel::SharedStorage));
    cudaError_t error = cudaFuncSetAttribute(cutlass::Kernel<Kernel>,
        cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (error != cudaSuccess) return error;
    cudaFuncAttributes attributes;
    error = cudaFuncGetAttributes(&attributes, cutlass::Kernel<Kernel>);
    if (error != cudaSuccess) return error;
    int blocks = 0;
    error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, cutlass::Kernel<Kernel>, Kernel::kThreadCount, smem);
    if (error != cudaSuccess) return error;
    attrs[0] = attributes.numRegs;
    attrs[1] = int32_t(attributes.sharedSizeBytes);
    attrs[2] = smem;
    attrs[3] = int32_t(attributes.localSizeBytes);
    attrs[4] = Kernel::kThreadCount;
    attrs[5] = blocks;
    return cudaSuccess;
  }

  // A kernel takes exactly the operands it was built for: a bare one none; a fused one a residual exactly
  // when it reads one (an unread one, or a missing one, would be a silent wrong answer), and a scale or a
  // bias only where it has them (absent, they read as 1 and 0).
  cutlass::Status initialize(const TunerProblem &p, void *x, void *w, void *y, const TunerEpilogue &epilogue,
                             void *workspace, cudaStream_t stream) {
    if constexpr (kFused) {
      using Fusion = typename Kernel::Fusion;
      if (Fusion::kResidual != (epilogue.residual != nullptr) || (epilogue.scale && !Fusion::kScale) ||
          (epilogue.bias && !Fusion::kBias)) {
        return cutlass::Status::kErrorNotSupported;
      }
      // The visitors load and store each operand in vectors of up to 16 bytes, without checking its address.
      if (!aligned(y, Fusion::kOutputAccessBytes) || !aligned(epilogue.residual, Fusion::kOutputAccessBytes) ||
          !aligned(epilogue.scale, Fusion::kVectorAccessBytes) || !aligned(epilogue.bias, Fusion::kVectorAccessBytes)) {
        return cutlass::Status::kErrorMisalignedOperand;
      }
    } else if (epilogue.scale || epilogue.bias || epilogue.residual) {
      return cutlass::Status::kErrorNotSupported;
    }
    return op_.initialize(arguments(p, x, w, y, epilogue), workspace, stream);
  }

  cutlass::Status run(cudaStream_t stream) { return op_.run(stream); }

 private:
  static cutlass::conv::Conv2dProblemSize problem_size(const TunerProblem &p) {
    return cutlass::conv::Conv2dProblemSize(
        p.n, p.h, p.w, p.c, p.k, p.r, p.s, p.p, p.q, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dilation_h,
        p.dilation_w, cutlass::conv::Mode::kCrossCorrelation, p.split_k, p.groups);
  }

  static bool aligned(const void *ptr, int bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

  static typename Conv::Arguments arguments(const TunerProblem &p, void *x, void *w, void *y,
                                            const TunerEpilogue &epilogue) {
    using Layout = cutlass::layout::TensorNHWC;
    Layout layout_x = Layout::packed({p.n, p.h, p.w, p.c});
    Layout layout_w = Layout::packed({p.k, p.r, p.s, p.c / p.groups});
    if constexpr (kFused) {
      // y and the residual as the visitors address them: a row-major (N*P*Q) x K matrix.
      using Fusion = typename Kernel::Fusion;
      return typename Conv::Arguments(
          problem_size(p),
          {static_cast<ElementA *>(x), layout_x},
          {static_cast<ElementB *>(w), layout_w},
          Fusion::arguments(int64_t(p.n) * p.p * p.q, p.k, epilogue.scale, epilogue.bias, epilogue.residual,
                            epilogue.beta, static_cast<ElementC *>(y)),
          cutlass::conv::SplitKMode::kSerial);
    } else {
      using Compute = typename Conv::EpilogueOutputOp::ElementCompute;
      Layout layout_y = Layout::packed({p.n, p.p, p.q, p.k});
      // beta = 0 and C aliases D: serial split-K partitions after the first read D back themselves.
      return typename Conv::Arguments(
          problem_size(p),
          {static_cast<ElementA *>(x), layout_x},
          {static_cast<ElementB *>(w), layout_w},
          {static_cast<ElementC *>(y), layout_y},
          {static_cast<ElementC *>(y), layout_y},
          {Compute(1), Compute(0)},
          cutlass::conv::SplitKMode::kSerial);
    }
  }

  Conv op_;
};
