"""The GPU side of a trial, in a process of its own so that a faulting kernel cannot take the
study down: `python -m tuner.measure.worker` reads one JSON request a line on stdin and answers each with
one line `@@TUNER@@ {json}` on stdout. After a CUDA fault the context is unusable, so the worker
answers and exits; the parent starts a fresh one."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from tuner.measure.timing import rotation_copies, time_graph
from tuner.measure.protocol import EVALUATE, EvaluateRequest, MessageError
from tuner.core.problem import ConvProblem, problem_from_dict
from tuner.core.elements import decode, poison
from tuner.core.epilogue import Epilogue, apply_epilogue
from tuner.measure.run import (KernelLibrary, LaunchError, TensorSet, make_tensor_set, pointer, problem_array,
    random_epilogue_operands, random_inputs, random_operand_scales)
from tuner.build.abi import KernelBinary
from tuner.core.status import Status
from tuner.measure.validate import check_output, reference_output

REPO_ROOT = Path(__file__).resolve().parents[2]
RESPONSE_PREFIX = "@@TUNER@@ "
EXIT_CONTEXT_LOST = 3
# Set in a response after which the worker exits: the parent waits for that exit.
CONTEXT_LOST = "context_lost"
# Set in the answer to a device request where the host has no driver or no device (tuner/measure/evaluate.py).
NO_GPU = "no_gpu"


def worker_env(base: dict) -> dict:
    """The environment in which `python -m tuner.measure.worker` finds this repository's tuner package."""
    return {**base, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), base.get("PYTHONPATH")]))}


class BoundKernel:
    """A kernel bound to several tensor sets, one CUTLASS operator object (and workspace) each."""

    def __init__(self, library: KernelLibrary, problem_args, sets: list[TensorSet], stream_ptr: int,
                 epilogue: Epilogue = Epilogue()):
        import cupy

        self.library = library
        workspace_bytes = library.workspace_bytes(problem_args)
        # Serial split-K semaphores: zeroed per set; CUTLASS resets them at the end of every launch.
        self.workspaces = [cupy.zeros(workspace_bytes, dtype=cupy.uint8) if workspace_bytes else None for _ in sets]
        self.handles = [
            library.create(problem_args, pointer(s.x), pointer(s.w), pointer(s.y), pointer(ws), stream_ptr,
                           s.epilogue_operands(epilogue))
            for s, ws in zip(sets, self.workspaces)
        ]

    def launch(self, index: int, stream_ptr: int) -> None:
        self.library.launch(self.handles[index], stream_ptr)

    def close(self) -> None:
        for handle in self.handles:
            self.library.destroy(handle)
        self.handles = []


@dataclass
class Workbench:
    """One problem's random inputs, float64 reference and rotation copies, on one stream; shared by
    every kernel evaluated on that problem."""

    problem: ConvProblem
    reference: object
    sets: list[TensorSet]
    stream: object

    @classmethod
    def prepare(cls, problem: ConvProblem, kernel_channels: int, seed: int, l2_bytes: int, stream,
                timed: bool) -> "Workbench":
        import cupy

        rng = cupy.random.default_rng(seed)
        x, w = random_inputs(problem, rng)
        operands = random_epilogue_operands(problem, rng)
        scales = random_operand_scales(problem, rng)
        first = make_tensor_set(problem, x, w, kernel_channels, operands, scales)
        sets = [first]
        if timed:
            free_bytes, _ = cupy.cuda.runtime.memGetInfo()
            copies = rotation_copies(first.nbytes, l2_bytes, free_bytes)
            sets += [first.copy() for _ in range(copies - 1)]
        scale, bias, residual = operands
        residual = None if residual is None else decode(residual, problem.output_type)
        reference = apply_epilogue(reference_output(x, w, problem, scales), problem.epilogue, scale, bias, residual)
        return cls(problem, reference, sets, stream)

    def poison(self, index: int) -> None:
        poison(self.sets[index].y, self.problem.output_type)

    def check(self, index: int):
        return check_output(self.sets[index].y, self.reference, self.problem)


def grid_and_attributes(library: KernelLibrary, args) -> dict:
    launch = library.grid(args)
    return {"grid": list(launch.grid), "cluster": list(launch.cluster), "attributes": asdict(library.attributes())}


def run_candidate(bench: Workbench, library: KernelLibrary, args, repeats: int, timed: bool) -> dict:
    """Validate one kernel on the workbench's first set; then, if timed, time it over all sets and
    check that repeated launches still give the right answer (split-K semaphores, races)."""
    refusal = library.can_implement(args)
    if refusal:
        return {"status": Status.invalid.value, "reason": f"CUTLASS can_implement refused the problem (cutlass::Status {refusal})"}
    facts = grid_and_attributes(library, args)
    stream = bench.stream
    bench.poison(0)
    single = BoundKernel(library, args, bench.sets[:1], stream.ptr, bench.problem.epilogue)
    try:
        single.launch(0, stream.ptr)
        stream.synchronize()
        validation = bench.check(0)
        if validation.passed:
            # once more on the same operator and workspace: a kernel that leaves its workspace dirty (split-K
            # counters not reset) fails here, where the timed graph's replays only rewrite an output that the
            # first of them got right
            bench.poison(0)
            single.launch(0, stream.ptr)
            stream.synchronize()
            again = bench.check(0)
            if not again.passed:
                validation = dataclasses.replace(again, reason=f"second launch: {again.reason}")
    finally:
        single.close()
    if not validation.passed:
        return {"status": Status.wrong_result.value, "error": validation.error, "reason": validation.reason, **facts}
    if not timed:
        return {"status": Status.ok.value, "error": validation.error, **facts}
    last = len(bench.sets) - 1
    bench.poison(last)
    bound = BoundKernel(library, args, bench.sets, stream.ptr, bench.problem.epilogue)
    try:
        measurement = time_graph(bound.launch, len(bench.sets), stream, repeats=repeats)
    finally:
        stream.synchronize()
        bound.close()
    after = bench.check(last)
    if not after.passed:
        return {"status": Status.wrong_result.value, "error": after.error,
                "reason": f"after timing: {after.reason}", **facts}
    return {"status": Status.ok.value, "error": validation.error, "measurement": asdict(measurement), **facts}


_last_bench: dict[tuple, Workbench] = {}


def workbench_for(problem: ConvProblem, kernel_channels: int, seed: int, l2_bytes: int, timed: bool) -> Workbench:
    """The last workbench again when the request names the same problem, channel padding, seed and
    timing (a landscape sweeps many kernels over one problem); otherwise a new one replaces it."""
    import cupy

    key = (problem, kernel_channels, seed, l2_bytes, timed)
    if key not in _last_bench:
        _last_bench.clear()
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            _last_bench[key] = Workbench.prepare(problem, kernel_channels, seed, l2_bytes, stream, timed)
    return _last_bench[key]


def evaluate(request: EvaluateRequest) -> dict:
    """Validate, then time (unless validate_only), one compiled candidate on one problem."""
    args = problem_array(request.kernel_problem or request.problem, request.launch)
    timed = not request.validate_only
    bench = workbench_for(request.problem, request.launch.kernel_channels, request.seed, request.l2_bytes, timed)
    with bench.stream:  # every CuPy fill and copy on the kernel's stream: no race with the NaN poison
        library = KernelLibrary(KernelBinary(Path(request.library), request.kernel_index))
        return run_candidate(bench, library, args, request.repeats, timed)


def describe_device() -> dict:
    from tuner.core.device import query_device

    return query_device().to_dict()


def handle(request: dict) -> tuple[dict, bool]:
    """The response, and whether the CUDA context is still usable afterwards."""
    if request.get("op") == "device":  # every GPU command's first request: no GPU is said before no CuPy
        from tuner.core.device import missing_gpu

        why = missing_gpu()
        if why is not None:
            return {"status": Status.infra_error.value, "reason": why, NO_GPU: True}, False
    try:
        import cupy
    except ImportError:
        return {"status": Status.infra_error.value,
                "reason": "CuPy is not installed: pip install -e '.[cuda13]' (or .[cuda12])"}, False
    try:
        if request.get("op") == "device":
            return describe_device(), True
        if request.get("op") == "cudnn":
            from tuner.measure.baseline import cudnn_fprop_us

            return cudnn_fprop_us(problem_from_dict(request["problem"]), int(request["l2_bytes"])), True
        if request.get("op") == "ceilings":
            from tuner.measure.baseline import ceilings

            return ceilings(), True
        if request.get("op") == "cublas":
            from tuner.measure.baseline import cublas_gemm_us

            return cublas_gemm_us(problem_from_dict(request["problem"]), int(request["l2_bytes"])), True
        if request.get("op") == "pytorch":
            from tuner.measure.baseline import pytorch_layer_us

            return pytorch_layer_us(problem_from_dict(request["problem"]), int(request["l2_bytes"]),
                                    bool(request.get("compiled"))), True
        if request.get("op") == EVALUATE:
            return evaluate(EvaluateRequest.from_dict(request)), True
        return {"status": Status.infra_error.value, "reason": f"unknown request op {request.get('op')!r}"}, True
    except MessageError as error:
        return {"status": Status.infra_error.value, "reason": str(error)}, True
    except LaunchError as error:
        return {"status": Status.launch_failed.value, "reason": str(error)}, True
    except cupy.cuda.runtime.CUDARuntimeError as error:
        return {"status": Status.launch_failed.value, "reason": f"CUDA error: {error}"}, False
    except Exception as error:  # a bug or an environment problem: keep the study going, say what
        detail = traceback.format_exc(limit=3).strip().splitlines()[-1]
        return {"status": Status.infra_error.value, "reason": f"{type(error).__name__}: {error} ({detail})"}, False


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--once":  # one request from the command line (under ncu)
        response, _ = handle(json.loads(sys.argv[2]))
        sys.stdout.write(RESPONSE_PREFIX + json.dumps(response) + "\n")
        return 0 if response.get("status") == Status.ok.value else 1
    for line in sys.stdin:
        if not line.strip():
            continue
        response, context_ok = handle(json.loads(line))
        if not context_ok:
            response[CONTEXT_LOST] = True
        sys.stdout.write(RESPONSE_PREFIX + json.dumps(response) + "\n")
        sys.stdout.flush()
        if not context_ok:
            return EXIT_CONTEXT_LOST
    return 0


if __name__ == "__main__":
    sys.exit(main())
