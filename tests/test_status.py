import pytest
from optuna.trial import TrialState

from tuner.core.status import Status


def test_the_six_outcomes():
    assert [s.value for s in Status] == ["ok", "invalid", "compile_failed", "launch_failed", "wrong_result",
                                         "infra_error"]


def test_ok_completes():
    assert Status.ok.trial_state is TrialState.COMPLETE


@pytest.mark.parametrize("status", [s for s in Status if s is not Status.ok])
def test_everything_else_is_pruned_never_failed(status):
    assert status.trial_state is TrialState.PRUNED


def test_status_from_stored_text():
    assert Status("wrong_result") is Status.wrong_result
    with pytest.raises(ValueError):
        Status("fail")
