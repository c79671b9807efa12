// The sm80_group family's fused-epilogue kernel: sm80's visitor-tree epilogue (tuner/families/sm80/templates/
// conv2d_fprop_evt.h, emitted before this: its WithVisitor) on DefaultConv2dGroupFprop's grouped main loop. The base
// kernel's epilogue (of a LinearCombination) supplies the accumulator-to-shared-memory path and the thread map.
namespace sm80_group_fusion {

template <typename ElementA, typename LayoutA, typename ElementB, typename LayoutB, typename ElementC,
          typename LayoutC, typename ElementAccumulator, typename OperatorClass, typename ArchTag,
          typename ThreadblockShape, typename WarpShape, typename InstructionShape, typename Fusion,
          typename ThreadblockSwizzle, int Stages, typename MathOperatorTag, cutlass::conv::GroupMode GroupMode,
          cutlass::conv::IteratorAlgorithm IteratorAlgorithm, cutlass::conv::StrideSupport StrideSupport,
          int AlignmentA, int AlignmentB, int AlignmentC>
struct DefaultConv2dGroupFpropWithVisitor {
  using ElementCompute = typename Fusion::ElementCompute;
  using Base = typename cutlass::conv::kernel::DefaultConv2dGroupFprop<
      ElementA, LayoutA, ElementB, LayoutB, ElementC, LayoutC, ElementAccumulator, OperatorClass, ArchTag,
      ThreadblockShape, WarpShape, InstructionShape,
      cutlass::epilogue::thread::LinearCombination<ElementC, AlignmentC, ElementAccumulator, ElementCompute>,
      ThreadblockSwizzle, Stages, MathOperatorTag, GroupMode, IteratorAlgorithm, StrideSupport, AlignmentA,
      AlignmentB>::Kernel;
  using Kernel = typename sm80_fusion::WithVisitor<Base, Fusion, ThreadblockSwizzle, ElementC, GroupMode>::Kernel;
};

}  // namespace sm80_group_fusion
