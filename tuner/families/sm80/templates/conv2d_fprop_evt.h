// The sm80 family's fused-epilogue kernel: CUTLASS 2.x implicit-GEMM conv2d fprop whose epilogue is an
// sm80 Epilogue Visitor Tree (EVT) computing y = act(scale[k] * acc + bias[k] + beta * residual).
// CUTLASS 4.2 has the sm80 EVT nodes (cutlass/epilogue/threadblock/fusion/visitors.hpp) and a GEMM kernel
// that takes them (cutlass/gemm/kernel/gemm_universal_with_visitor.h), but no conv kernel that does; its
// 2.x conv epilogues (cutlass/conv/kernel/default_conv2d_fprop_with_broadcast.h) take at most one broadcast
// vector besides the source tensor, too few for a per-channel scale, a bias and a residual.
// ImplicitGemmConvolutionWithVisitor is cutlass/conv/kernel/implicit_gemm_convolution.h's main loop with
// GemmWithEpilogueVisitor's epilogue (EpilogueWithVisitorCallbacks), driven by the stock device adapter
// cutlass::conv::device::ImplicitGemmConvolution. The family's includes (tuner/families/sm80/codegen.py)
// bring in the CUTLASS headers it needs.
namespace sm80_fusion {

template <typename Mma_, typename Epilogue_, typename ThreadblockSwizzle_, typename Fusion_, typename ElementC_,
          typename ElementCompute_, cutlass::conv::GroupMode GroupMode_ = cutlass::conv::GroupMode::kNone>
struct ImplicitGemmConvolutionWithVisitor {
  using Mma = Mma_;
  using Epilogue = Epilogue_;  // EpilogueWithVisitorCallbacks
  using EpilogueOutputOp = typename Epilogue::OutputOp;
  using FusionCallbacks = typename Epilogue::FusionCallbacks;
  using Fusion = Fusion_;      // the ConvFusedEpilogue that built FusionCallbacks: the runner binds through it
  using ThreadblockSwizzle = ThreadblockSwizzle_;
  // Only fprop: its output NPQK, packed, is the row-major (N*P*Q) x K matrix the visitors address.
  static cutlass::conv::Operator const kConvolutionalOperator = cutlass::conv::Operator::kFprop;

  using ElementA = typename Mma::IteratorA::Element;
  using LayoutA = typename Mma::IteratorA::Layout;
  using ElementB = typename Mma::IteratorB::Element;
  using LayoutB = typename Mma::IteratorB::Layout;
  using ElementC = ElementC_;
  using LayoutC = LayoutA;
  using ElementAccumulator = typename Epilogue::ElementAccumulator;
  using ElementCompute = ElementCompute_;

  using WarpMmaOperator = typename Mma::Policy::Operator;
  using ArchMmaOperator = typename WarpMmaOperator::ArchMmaOperator;
  using MathOperator = typename ArchMmaOperator::Operator;
  using OperatorClass = typename WarpMmaOperator::OperatorClass;
  using ArchTag = typename WarpMmaOperator::ArchTag;
  using ThreadblockShape = typename Mma::Shape;
  using WarpShape = typename WarpMmaOperator::Shape;
  using InstructionShape = typename ArchMmaOperator::Shape;

  static int const kStages = Mma::kStages;
  static cutlass::conv::IteratorAlgorithm const kIteratorAlgorithm = Mma::IteratorA::kIteratorAlgorithm;
  static cutlass::conv::StrideSupport const kStrideSupport = Mma::IteratorA::kStrideSupport;

  using WarpCount = typename Mma::WarpCount;
  static int const kThreadCount = 32 * WarpCount::kCount;

  using TensorRefA = typename Mma::IteratorA::TensorRef;
  using TensorRefB = typename Mma::IteratorB::TensorRef;

  static int const kConvDim = Mma::IteratorA::kConvDim;
  using ConvProblemSize = cutlass::conv::Conv2dProblemSize;
  static cutlass::conv::GroupMode const kGroupMode = GroupMode_;  // a grouped main loop (sm80_group) or none

  using ProblemShape = cute::Shape<int32_t, int32_t, int32_t>;  // (M, N, L) = (N*P*Q, K, 1)

  struct Arguments {
    ConvProblemSize problem_size;
    TensorRefA ref_A;
    TensorRefB ref_B;
    typename FusionCallbacks::Arguments output_op;  // the visitor tree's arguments: it also holds y
    cutlass::conv::SplitKMode split_k_mode = cutlass::conv::SplitKMode::kSerial;

    Arguments() {}
    Arguments(ConvProblemSize const &problem_size, TensorRefA const &ref_A, TensorRefB const &ref_B,
              typename FusionCallbacks::Arguments const &output_op,
              cutlass::conv::SplitKMode split_k_mode = cutlass::conv::SplitKMode::kSerial)
        : problem_size(problem_size), ref_A(ref_A), ref_B(ref_B), output_op(output_op), split_k_mode(split_k_mode) {}
  };

  struct Params {
    ConvProblemSize problem_size;
    cutlass::gemm::GemmCoord grid_tiled_shape;
    cutlass::gemm::GemmCoord implicit_gemm_problem_size;
    int swizzle_log_tile;
    int gemm_k_iterations;
    int gemm_k_iterations_per_channel;
    typename Mma::IteratorA::Params iterator_A;
    typename Mma::IteratorA::Element const *ptr_A;
    typename Mma::IteratorB::Params iterator_B;
    typename Mma::IteratorB::Element const *ptr_B;
    ProblemShape problem_shape;
    typename FusionCallbacks::Params output_op;
    int *semaphore;
    cutlass::conv::SplitKMode split_k_mode;

    CUTLASS_HOST_DEVICE
    Params() : swizzle_log_tile(0), gemm_k_iterations(0) {}

    CUTLASS_HOST_DEVICE
    Params(Arguments const &args, int *semaphore = nullptr)
        : problem_size(args.problem_size),
          implicit_gemm_problem_size(
              cutlass::conv::implicit_gemm_problem_size(kConvolutionalOperator, args.problem_size)),
          iterator_A(Mma::IteratorA::getParams(args.problem_size, args.ref_A.layout())),
          ptr_A(args.ref_A.data()),
          iterator_B(args.problem_size, args.ref_B.layout()),
          ptr_B(args.ref_B.data()),
          problem_shape(implicit_gemm_problem_size.m(), implicit_gemm_problem_size.n(), 1),
          output_op(FusionCallbacks::to_underlying_arguments(problem_shape, args.output_op, nullptr)),
          semaphore(semaphore),
          split_k_mode(args.split_k_mode) {
      gemm_k_iterations = cutlass::conv::implicit_gemm_k_iterations(
          kConvolutionalOperator, ThreadblockShape::kK, args.problem_size, kIteratorAlgorithm, kGroupMode,
          ThreadblockShape::kN);
      gemm_k_iterations_per_channel = cutlass::conv::implicit_gemm_k_iterations_per_channel(
          kConvolutionalOperator, args.problem_size, kIteratorAlgorithm);
      ThreadblockSwizzle threadblock_swizzle;
      grid_tiled_shape = threadblock_swizzle.get_tiled_shape(
          implicit_gemm_problem_size, {ThreadblockShape::kM, ThreadblockShape::kN, ThreadblockShape::kK},
          args.problem_size.split_k_slices);
      swizzle_log_tile = threadblock_swizzle.get_log_tile(grid_tiled_shape);
    }
  };

  union SharedStorage {
    typename Mma::SharedStorage main_loop;
    typename Epilogue::SharedStorage epilogue;
  };

  // The visitors have no set_k_partition, so split-K slices cannot be reduced (the sm80 GEMM's EVT kernel,
  // gemm_universal_with_visitor.h, refuses them too); the device adapter's can_implement does not know this.
  static cutlass::Status can_implement_epilogue(Arguments const &args) {
    return args.problem_size.split_k_slices == 1 ? cutlass::Status::kSuccess : cutlass::Status::kErrorNotSupported;
  }

  CUTLASS_HOST_DEVICE
  ImplicitGemmConvolutionWithVisitor() {}

  CUTLASS_DEVICE
  void operator()(Params const &params, SharedStorage &shared_storage) {
    ThreadblockSwizzle threadblock_swizzle;
    cutlass::gemm::GemmCoord threadblock_tile_idx = threadblock_swizzle.get_tile_offset(params.swizzle_log_tile);
    if (params.grid_tiled_shape.m() <= threadblock_tile_idx.m() ||
        params.grid_tiled_shape.n() <= threadblock_tile_idx.n()) {
      return;
    }
    int thread_idx = threadIdx.x;
    int column_A = threadblock_tile_idx.k() * Mma::Shape::kK;
    if constexpr (kGroupMode != cutlass::conv::GroupMode::kNone) {
      // The first input channel of the tile's first group, as kernel/implicit_gemm_convolution.h finds it.
      int k_per_group = params.problem_size.K / params.problem_size.groups;
      int group = threadblock_tile_idx.n() * Mma::Shape::kN / k_per_group;
      column_A += group * (params.problem_size.C / params.problem_size.groups);
    }
    typename Mma::IteratorA iterator_A(
        params.iterator_A, params.problem_size, params.ptr_A, thread_idx,
        cutlass::MatrixCoord(threadblock_tile_idx.m() * Mma::Shape::kM, column_A));
    typename Mma::IteratorB iterator_B(
        params.iterator_B, params.problem_size, params.ptr_B, thread_idx,
        cutlass::MatrixCoord(threadblock_tile_idx.k() * Mma::Shape::kK, threadblock_tile_idx.n() * Mma::Shape::kN));
    int warp_idx = cutlass::canonical_warp_idx_sync();
    int lane_idx = threadIdx.x % 32;

    Mma mma(shared_storage.main_loop, thread_idx, warp_idx, lane_idx);
    typename Mma::FragmentC accumulators;
    accumulators.clear();
    mma(params.gemm_k_iterations, accumulators, iterator_A, iterator_B, accumulators,
        params.gemm_k_iterations_per_channel);

    // Recomputed rather than kept live through the main loop, as ImplicitGemmConvolution does. The visitors
    // load and store global memory themselves, guarded against problem_shape; the tile's k() is their L
    // coordinate, 0 without split-K.
    threadblock_tile_idx = threadblock_swizzle.get_tile_offset(params.swizzle_log_tile);
    Epilogue epilogue(params.output_op, shared_storage.epilogue, thread_idx, warp_idx, lane_idx);
    epilogue(accumulators, threadblock_tile_idx, params.problem_shape, thread_idx);
  }
};

// A base kernel's main loop (and group mode) with the visitor tree of a ConvFusedEpilogue as its epilogue.
template <typename Base, typename Fusion, typename ThreadblockSwizzle, typename ElementC,
          cutlass::conv::GroupMode GroupMode = cutlass::conv::GroupMode::kNone>
struct WithVisitor {
  static_assert(cutlass::platform::is_base_of<typename Base::Epilogue::OutputTileIterator::ThreadMap,
                                              typename Fusion::ThreadMap>::value,
                "the visitors' OutputTileThreadLayout must be the base epilogue's thread map");
  using Epilogue = cutlass::epilogue::threadblock::EpilogueWithVisitorCallbacks<
      typename Base::Epilogue, typename Fusion::EVT, Fusion::ThreadMap::Stages>;
  using Kernel = ImplicitGemmConvolutionWithVisitor<typename Base::Mma, Epilogue, ThreadblockSwizzle, Fusion,
                                                    ElementC, typename Fusion::ElementCompute, GroupMode>;
};

// DefaultConv2dFprop's knobs, its output op replaced by a ConvFusedEpilogue, plus the output alignment. The
// base kernel's epilogue (of a LinearCombination) supplies the accumulator-to-shared-memory path and the
// thread map, which the visitors' thread map must equal.
template <typename ElementA, typename LayoutA, typename ElementB, typename LayoutB, typename ElementC,
          typename LayoutC, typename ElementAccumulator, typename OperatorClass, typename ArchTag,
          typename ThreadblockShape, typename WarpShape, typename InstructionShape, typename Fusion,
          typename ThreadblockSwizzle, int Stages, typename MathOperatorTag,
          cutlass::conv::IteratorAlgorithm IteratorAlgorithm, cutlass::conv::StrideSupport StrideSupport,
          int AlignmentA, int AlignmentB, int AlignmentC>
struct DefaultConv2dFpropWithVisitor {
  using ElementCompute = typename Fusion::ElementCompute;
  using Base = typename cutlass::conv::kernel::DefaultConv2dFprop<
      ElementA, LayoutA, ElementB, LayoutB, ElementC, LayoutC, ElementAccumulator, OperatorClass, ArchTag,
      ThreadblockShape, WarpShape, InstructionShape,
      cutlass::epilogue::thread::LinearCombination<ElementC, AlignmentC, ElementAccumulator, ElementCompute>,
      ThreadblockSwizzle, Stages, MathOperatorTag, IteratorAlgorithm, StrideSupport, AlignmentA, AlignmentB>::Kernel;
  using Kernel = typename WithVisitor<Base, Fusion, ThreadblockSwizzle, ElementC>::Kernel;
};

// y = act(scale[k] * acc + bias[k] + beta * residual) as a visitor tree. kScale and kBias compile the
// per-channel vectors in; ElementResidual is void where the kernel reads no residual. Act is one of
// cutlass/epilogue/thread/activation.h's functors, applied to Array<ElementCompute, N>.
template <class ThreadMap_, class ElementD_, class ElementResidual_, class ElementVector_, class ElementCompute_,
          bool kScale_, bool kBias_, template <class> class Act>
struct ConvFusedEpilogue {
  using ThreadMap = ThreadMap_;  // an OutputTileThreadLayout
  using ElementD = ElementD_;
  using ElementResidual = ElementResidual_;
  using ElementVector = ElementVector_;
  using ElementCompute = ElementCompute_;
  static constexpr bool kScale = kScale_;
  static constexpr bool kBias = kBias_;
  static constexpr bool kResidual = !cute::is_void_v<ElementResidual>;
  // Bytes of one access of each operand (visitor_load.hpp, visitor_store.hpp: up to 16): its pointer
  // must be aligned to them.
  static constexpr int kOutputAccessBytes = cute::min(16, ThreadMap::kElementsPerAccess * int(sizeof(ElementD)));
  static constexpr int kVectorAccessBytes =
      cute::min(16, ThreadMap::kElementsPerAccess * int(sizeof(ElementVector)));

  using StrideTensor = cute::Stride<int64_t, cute::_1, int64_t>;   // (K, 1, M*K): packed NPQK
  using StrideVector = cute::Stride<cute::_0, cute::_1, int32_t>;  // one value per output channel
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  using Accum = cutlass::epilogue::threadblock::VisitorAccFetch;
  // EnableNullptr (the default): a null vector reads as its null_default and is not loaded.
  using Vector = cutlass::epilogue::threadblock::VisitorRowBroadcast<ThreadMap, ElementVector, StrideVector>;
  using Beta = cutlass::epilogue::threadblock::VisitorScalarBroadcast<ElementCompute>;
  template <template <class> class Op>
  using Compute = cutlass::epilogue::threadblock::VisitorCompute<Op, ElementCompute, ElementCompute, kRound>;
  using Store = cutlass::epilogue::threadblock::VisitorAuxStore<ThreadMap, ElementD, kRound, StrideTensor>;
  template <class Node, class... Children>
  using Tree = cutlass::epilogue::threadblock::Sm80EVT<Node, Children...>;

  // scale * acc + bias, scale * acc, acc + bias or acc
  using Affine = cute::conditional_t<
      kScale,
      cute::conditional_t<kBias, Tree<Compute<cutlass::homogeneous_multiply_add>, Vector, Accum, Vector>,
                          Tree<Compute<cutlass::multiplies>, Vector, Accum>>,
      cute::conditional_t<kBias, Tree<Compute<cutlass::plus>, Accum, Vector>, Accum>>;
  using Residual = cutlass::epilogue::threadblock::VisitorAuxLoad<ThreadMap, ElementResidual, StrideTensor>;
  // beta * residual + Affine, or Affine. The residual is read whatever beta is: VisitorAuxLoad has no null check.
  using Sum = cute::conditional_t<kResidual, Tree<Compute<cutlass::homogeneous_multiply_add>, Beta, Residual, Affine>,
                                  Affine>;
  using EVT = Tree<Store, Tree<Compute<Act>, Sum>>;
  using Arguments = typename EVT::Arguments;

  // Arguments in the tree's order, children before their node. A null scale reads as 1 and a null bias as 0.
  static Arguments arguments(int64_t gemm_m, int64_t gemm_n, ElementVector const *scale, ElementVector const *bias,
                             void const *residual, ElementCompute beta, ElementD *y) {
    StrideTensor stride{gemm_n, cute::_1{}, gemm_m * gemm_n};
    typename Vector::Arguments scale_args{scale, ElementVector(1), {cute::_0{}, cute::_1{}, int32_t(0)}};
    typename Vector::Arguments bias_args{bias, ElementVector(0), {cute::_0{}, cute::_1{}, int32_t(0)}};
    typename Affine::Arguments affine = [&]() -> typename Affine::Arguments {
      if constexpr (kScale && kBias) return {scale_args, {}, bias_args, {}};
      else if constexpr (kScale) return {scale_args, {}, {}};
      else if constexpr (kBias) return {{}, bias_args, {}};
      else return {};
    }();
    typename Sum::Arguments sum = [&]() -> typename Sum::Arguments {
      if constexpr (kResidual) {
        using Element = ElementResidual;
        typename Beta::Arguments beta_args{{beta}, {}, {}};
        typename Residual::Arguments residual_args{
            const_cast<Element *>(static_cast<Element const *>(residual)), Element(0), stride};
        return {beta_args, residual_args, affine, {}};
      } else {
        return affine;
      }
    }();
    return Arguments{{sum, {}}, {y, stride}};
  }
};

}  // namespace sm80_fusion
