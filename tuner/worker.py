"""The GPU side of a trial, in a process of its own so that a faulting kernel cannot take the
study down: `python -m tuner.worker` reads one JSON request a line on stdin and answers each with
one line `@@TUNER@@ {json}` on stdout. After a CUDA fault the context is unusable, so the worker
answers and exits; the parent starts a fresh one."""
from __future__ import annotations

import json
import sys
import traceback
from dataclasses import asdict
from pathlib import Path

from tuner.measure import rotation_copies, time_graph
from tuner.problem import ConvProblem, DataType
from tuner.run import (KernelLibrary, LaunchError, TensorSet, make_tensor_set, pointer, problem_array,
                       random_inputs)
from tuner.status import Status
from tuner.validate import check_output, reference_fprop

RESPONSE_PREFIX = "@@TUNER@@ "
EXIT_CONTEXT_LOST = 3


def problem_from_dict(values: dict) -> ConvProblem:
    types = {k: DataType(v) for k, v in values.items() if k.endswith("_type")}
    ints = {k: int(v) for k, v in values.items() if not k.endswith("_type")}
    return ConvProblem(**ints, **types)


def problem_to_dict(problem: ConvProblem) -> dict:
    return {k: (v.value if isinstance(v, DataType) else v) for k, v in asdict(problem).items()}


class BoundKernel:
    """A kernel bound to several tensor sets, one CUTLASS operator object each."""

    def __init__(self, library: KernelLibrary, problem_args, sets: list[TensorSet], stream_ptr: int):
        self.library = library
        self.handles = [
            library.create(problem_args, pointer(s.x), pointer(s.w), pointer(s.y), pointer(s.workspace), stream_ptr)
            for s in sets
        ]

    def launch(self, index: int, stream_ptr: int) -> None:
        self.library.launch(self.handles[index], stream_ptr)

    def close(self) -> None:
        for handle in self.handles:
            self.library.destroy(handle)
        self.handles = []


def _copy_set(template: TensorSet) -> TensorSet:
    import cupy

    workspace = None if template.workspace is None else cupy.zeros_like(template.workspace)
    return TensorSet(template.x.copy(), template.w.copy(), cupy.full_like(template.y, cupy.nan), workspace)


def evaluate(request: dict) -> dict:
    """Validate, then time, one compiled candidate on one problem."""
    import cupy

    library = KernelLibrary(Path(request["library"]))
    problem = problem_from_dict(request["problem"])
    split_k = int(request.get("split_k", 1))
    # Tests plant a wrong kernel by handing it another problem than the buffers hold.
    kernel_view = problem_from_dict(request["kernel_problem"]) if "kernel_problem" in request else problem
    args = problem_array(kernel_view, split_k)
    refusal = library.can_implement(args)
    if refusal:
        return {"status": Status.invalid.value, "reason": f"CUTLASS can_implement refused the problem (cutlass::Status {refusal})"}
    facts = {"grid": library.grid(args), "attributes": asdict(library.attributes())}

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:  # every CuPy fill and copy on the kernel's stream: no race with the NaN poison
        return _validate_and_time(request, library, problem, args, stream, facts)


def _validate_and_time(request: dict, library: KernelLibrary, problem: ConvProblem, args, stream, facts: dict) -> dict:
    import cupy

    rng = cupy.random.default_rng(int(request.get("seed", 0)))
    x, w = random_inputs(problem, rng)
    first = make_tensor_set(problem, x, w, library.workspace_bytes(args))
    single = BoundKernel(library, args, [first], stream.ptr)
    single.launch(0, stream.ptr)
    stream.synchronize()
    single.close()
    reference = reference_fprop(x, w, problem)
    validation = check_output(first.y, reference, problem.output_type)
    if not validation.passed:
        return {"status": Status.wrong_result.value, "error": validation.error, "reason": validation.reason, **facts}
    if request.get("validate_only"):
        return {"status": Status.ok.value, "error": validation.error, **facts}

    free_bytes, _ = cupy.cuda.runtime.memGetInfo()
    copies = rotation_copies(first.nbytes, int(request["l2_bytes"]), free_bytes)
    sets = [first] + [_copy_set(first) for _ in range(copies - 1)]
    bound = BoundKernel(library, args, sets, stream.ptr)
    try:
        measurement = time_graph(bound.launch, copies, stream, repeats=int(request.get("repeats", 30)))
    finally:
        stream.synchronize()
        bound.close()
    # Repeated launches must keep giving the right answer (split-K semaphores, races).
    after = check_output(sets[-1].y, reference, problem.output_type)
    if not after.passed:
        return {"status": Status.wrong_result.value, "error": after.error,
                "reason": f"after timing: {after.reason}", **facts}
    return {"status": Status.ok.value, "error": validation.error, "measurement": asdict(measurement), **facts}


def describe_device() -> dict:
    from tuner.device import query_device

    return query_device().to_dict()


def handle(request: dict) -> tuple[dict, bool]:
    """The response, and whether the CUDA context is still usable afterwards."""
    try:
        import cupy
    except ImportError:
        return {"status": Status.infra_error.value,
                "reason": "CuPy is not installed: pip install -e '.[cuda13]' (or .[cuda12])"}, False
    try:
        if request.get("op") == "device":
            return describe_device(), True
        return evaluate(request), True
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
        sys.stdout.write(RESPONSE_PREFIX + json.dumps(response) + "\n")
        sys.stdout.flush()
        if not context_ok:
            return EXIT_CONTEXT_LOST
    return 0


if __name__ == "__main__":
    sys.exit(main())
