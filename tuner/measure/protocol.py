"""What the parent and the GPU worker process say to each other, typed: one JSON object per line
each way (tuner/measure/worker.py, tuner/measure/evaluate.py, tuner/analysis/profile.py)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from tuner.families.base import LaunchArgs
from tuner.core.problem import ConvProblem, problem_from_dict, problem_to_dict

EVALUATE = "evaluate"


class MessageError(ValueError):
    """A request the worker cannot read."""


@dataclass(frozen=True)
class EvaluateRequest:
    """Validate (and unless validate_only, time) one compiled candidate on one problem."""

    library: str
    kernel_index: int
    problem: ConvProblem
    launch: LaunchArgs
    seed: int
    l2_bytes: int = 0
    repeats: int = 30
    validate_only: bool = False
    # Tests plant a wrong kernel by handing it another problem than the buffers hold.
    kernel_problem: ConvProblem | None = None

    def to_dict(self) -> dict:
        message = {"op": EVALUATE, "library": self.library, "kernel_index": self.kernel_index,
                   "problem": problem_to_dict(self.problem),
                   "launch": asdict(self.launch), "seed": self.seed, "l2_bytes": self.l2_bytes,
                   "repeats": self.repeats, "validate_only": self.validate_only}
        if self.kernel_problem is not None:
            message["kernel_problem"] = problem_to_dict(self.kernel_problem)
        return message

    @classmethod
    def from_dict(cls, message: dict) -> "EvaluateRequest":
        try:
            kernel_problem = message.get("kernel_problem")
            return cls(library=str(message["library"]), kernel_index=int(message.get("kernel_index", 0)),
                       problem=problem_from_dict(message["problem"]),
                       launch=LaunchArgs(**{k: int(v) for k, v in message["launch"].items()}),
                       seed=int(message["seed"]), l2_bytes=int(message.get("l2_bytes", 0)),
                       repeats=int(message.get("repeats", 30)), validate_only=bool(message.get("validate_only")),
                       kernel_problem=problem_from_dict(kernel_problem) if kernel_problem else None)
        except (KeyError, TypeError, ValueError) as error:
            raise MessageError(f"unreadable evaluate request ({type(error).__name__}: {error})") from None
