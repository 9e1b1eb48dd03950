"""rmb-peer's answer envelope (grid/schemas/rmb.json Response) judged by cases written from rmb-rs 15f2092,
each naming the lines it comes from: the connection a sender may name in `src`, and the answer the peer
makes itself when it cannot deliver a call (`src` "", `now` 0, an `err`)."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings

from tests.contracts_support import documents, examples, problems

DAT = base64.b64encode(json.dumps({"zos": "v3.14.8", "zinit": "v0.2.14"}).encode()).decode()


def answer(**fields) -> dict:
    """A node's answer as src/peer/storage/mod.rs:452-484 (TryFrom<&Envelope> for JsonIncomingResponse) makes it,
    with the request's ref put back by src/peer/mod.rs:264-266."""
    return {
        "ver": 1,
        "ref": "call-1",
        "dat": DAT,
        "src": "4711",
        "shm": None,
        "now": 1_733_480_000,
        "err": None,
    } | fields


# src/peer/postman.rs:140-163 (undeliverable): the peer's own answer when Writer::write failed; the code and
# message are ProtocolError's (src/peer/protocol.rs:19-58, here UnknownTwin: 103, "unknown twin id '4711'").
UNDELIVERABLE = {
    "ver": 1,
    "ref": "call-1",
    "dat": "",
    "src": "",
    "shm": None,
    "now": 0,
    "err": {"code": 103, "message": "unknown twin id '4711'"},
}


@pytest.mark.parametrize(
    ("envelope", "source"),
    [
        (answer(), "storage/mod.rs:470 source: env.source.stringify(), the twin alone"),
        (answer(src="4711:zos"), 'types/mod.rs:111-116 stringify: "<twin>:<connection>"'),
        (answer(src="4711:"), "types/mod.rs:101-105 from_string: a connection may be empty"),
        (answer(src="4294967295"), "a twin id is a u32 (types Address.twin)"),
        (answer(dat="", err={"code": 500, "message": "other: failed to deploy"}), "storage/mod.rs:473-480"),
        (answer(ref=None), "storage/mod.rs:409-410 reference: Option<String>"),
        (UNDELIVERABLE, "postman.rs:150-158 undeliverable"),
        (UNDELIVERABLE | {"ref": None, "err": {"code": 500, "message": "other: relay is down"}}, "postman.rs:152"),
    ],
)
def test_the_answers_rmb_peer_sends_conform(envelope, source):
    assert problems("rmb", "Response", envelope, strict=True) == [], source


@pytest.mark.parametrize(
    ("envelope", "why"),
    [
        (answer(src=""), "an empty src is only the undeliverable answer's, which always has an err"),
        (UNDELIVERABLE | {"err": None}, "an undeliverable answer carries its error"),
        (UNDELIVERABLE | {"now": 1_733_480_000}, "postman.rs:156 timestamp: 0"),
        (UNDELIVERABLE | {"dat": DAT}, "postman.rs:153 data: String::default()"),
        (answer(src="twin-4711"), "types/mod.rs:99 the twin id is a number"),
        (answer(src=":zos"), "types/mod.rs:102-104 the twin before the connection is a number"),
        (answer(src="42949672950"), "a twin id is a u32: at most 10 digits"),
        (answer(src=4711), "storage/mod.rs:413-414 source: String"),
        ({k: v for k, v in answer().items() if k != "src"}, "source is no Option: always sent"),
        (answer(err={"code": -1, "message": "x"}), "storage/mod.rs:88 code: u32"),
    ],
)
def test_what_rmb_peer_never_sends_is_refused(envelope, why):
    assert problems("rmb", "Response", envelope), why


@settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents("rmb", "Response"))
def test_every_answer_the_schema_admits_with_no_source_is_an_undeliverable_one(envelope):
    if envelope["src"] == "":
        assert isinstance(envelope["err"], dict) and envelope["now"] == 0 and envelope["dat"] == ""
    else:
        assert envelope["src"].split(":", 1)[0].isdigit()
