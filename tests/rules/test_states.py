"""The four spellings of commit and of rollback, and the three of unknown, map in one place."""

import pytest

from broker.rules.states import (
    CheckAnswer,
    ResolutionAction,
    TransactionState,
    action_of_answer,
    answer_label,
    answer_of_action,
    resolution_of_action,
    state_of_action,
)


@pytest.mark.parametrize(
    ("action", "answer", "resolution", "state"),
    [
        ("commit", "COMMIT_MESSAGE", "COMMIT", "COMMITTED"),
        ("rollback", "ROLLBACK_MESSAGE", "ROLLBACK", "ROLLED_BACK"),
    ],
)
def test_each_resolving_action_has_one_spelling_per_place(action, answer, resolution, state):
    assert answer_of_action(action) == CheckAnswer(answer)
    assert action_of_answer(answer) == action
    assert resolution_of_action(action) == ResolutionAction(resolution)
    assert state_of_action(action) == TransactionState(state)


def test_unknown_is_spelt_unknow_and_resolves_nothing():
    assert answer_of_action("unknown") == CheckAnswer.UNKNOW
    assert action_of_answer("UNKNOW") == "unknown"
    assert action_of_answer("UNKNOWN") == "unknown"  # RocketMQ 5's gRPC spelling
    assert answer_label("UNKNOWN") == CheckAnswer.UNKNOW
    with pytest.raises(KeyError):
        state_of_action("unknown")  # type: ignore[arg-type]
    with pytest.raises(KeyError):
        resolution_of_action("unknown")  # type: ignore[arg-type]


@pytest.mark.parametrize("answer", ["commit_message", "COMMIT", "Commit_Message", "", " UNKNOW"])
def test_anything_else_is_not_an_answer(answer):
    assert action_of_answer(answer) is None
    assert answer_label(answer) is None
