"""What the child says of an exception: the first line of its message, and the cause a wrapper's
header introduces (torch.compile's BackendCompilerFailed said only "backend='inductor' raised:")."""

from __future__ import annotations

import pytest

from attncheck.dynamic.inside.executor import error_message


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("shapes do not match\n  at line 3", "shapes do not match"),
        ("backend='inductor' raised:\nLoweringException: NYI: head dim must be at least 16\n  target: flex",
         "backend='inductor' raised: LoweringException: NYI: head dim must be at least 16"),
        ("only a header:", "only a header:"),
        ("\n\n  ", ""),
    ],
)
def test_the_message_is_its_first_line_and_the_cause_a_header_introduces(message: str, said: str) -> None:
    assert error_message(RuntimeError(message)) == said
