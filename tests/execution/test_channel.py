"""kcgate.execution.channel: only a line signed with the worker's key and this message's nonce is accepted."""

from __future__ import annotations

import pytest

from kcgate.execution.channel import ChannelError, new_key, new_nonce, sign, verify


def test_a_signed_line_round_trips() -> None:
    key, nonce = new_key(), new_nonce()
    line = sign(key, nonce, {"case_id": "c", "result": {"status": "pass"}})
    assert line.endswith(b"\n") and verify(key, nonce, line[:-1]) == {
        "case_id": "c",
        "result": {"status": "pass"},
    }


@pytest.mark.parametrize(
    "tamper",
    [
        lambda line, key, nonce: line.replace(b'"pass"', b'"fail"'),  # the payload changed
        lambda line, key, nonce: sign(new_key(), nonce, {"case_id": "c"})[:-1],  # another key
        lambda line, key, nonce: sign(key, new_nonce(), {"case_id": "c"})[:-1],  # a replayed earlier answer
        lambda line, key, nonce: b'{"case_id": "c", "status": "pass"}',  # unsigned JSON
        lambda line, key, nonce: b"not json at all",
        lambda line, key, nonce: b"\xff\xfe " + line,
    ],
)
def test_anything_else_is_a_channel_error(tamper) -> None:  # type: ignore[no-untyped-def]
    key, nonce = new_key(), new_nonce()
    line = sign(key, nonce, {"case_id": "c", "result": {"status": "pass"}})[:-1]
    with pytest.raises(ChannelError):
        verify(key, nonce, tamper(line, key, nonce))
