"""What happened to a candidate, in one enum, and how each outcome reaches Optuna."""
from __future__ import annotations

import enum

from optuna.trial import TrialState


class Status(enum.Enum):
    ok = "ok"
    invalid = "invalid"
    compile_failed = "compile_failed"
    launch_failed = "launch_failed"
    wrong_result = "wrong_result"
    infra_error = "infra_error"

    @property
    def trial_state(self) -> TrialState:
        """Only measured candidates complete. Everything else is PRUNED, never FAIL: Optuna's
        samplers ignore FAIL trials and would propose the same configuration again."""
        return TrialState.COMPLETE if self is Status.ok else TrialState.PRUNED
