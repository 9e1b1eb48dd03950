"""A hostile node (or peer) answering over RMB, against real Redis: whatever arrives, that node's answer
is not taken, with its reason, and the other nodes of the round are heard (issue 44, MEDIUM 1).

Node 2310 (twin 3310) answers what each case makes; node 2311 (twin 3311) answers honestly in the same
round. A round of one call is asked too: there an answer that cannot be read can only be its own.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid

import pytest
import redis

from dashboard.grid.rmb import POOLS, RmbPeerFailed, Target
from dashboard.grid.rmb.client import REQUEST_QUEUE
from dashboard.grid.rmb.parse import parse_envelope
from dashboard.grid.types import MalformedPayload, NodeSilent, RmbRefused, RmbUndelivered
from sim.grid.rmb_peer import envelope
from tests.hostile_redis import GOOD_POOLS, ONE_SSD, DripRedis, HungRedis, rmb_client


@pytest.fixture
def redis_url(rmb_redis_url):
    return rmb_redis_url


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def raw_envelope(request: dict, **fields) -> str:
    """An answer to `request` from twin 3310 with `fields` replacing the honest ones."""
    return json.dumps({**envelope(request["ref"], 3310, body=GOOD_POOLS), **fields})


# Each case: what twin 3310 RPUSHes for one request (a list of answers), and the words 2310's result holds.
# `None` for the words: no answer can be matched to the call in a round of two, so the node is silent.
NESTED = "[" * 50_000 + "]" * 50_000  # past any stack, and within 256 KiB as base64
CASES = {
    "nested JSON": (lambda r: [NESTED], "nested deeper", None),
    "nested JSON in dat": (lambda r: [raw_envelope(r, dat=b64(NESTED))], "nested deeper", "nested deeper"),
    "a src of ²": (lambda r: [raw_envelope(r, src="²")], "src is a string ('²')", None),
    "a negative src": (lambda r: [raw_envelope(r, src=-3310)], "not a twin id", None),
    "bytes that are not UTF-8": (lambda r: [b'{"ref": "\xff\xfe"}'], "not JSON", None),
    "NaN in the body": (
        lambda r: [raw_envelope(r, dat=b64('[{"name": "a", "type": "ssd", "size": NaN, "used": 0}]'))],
        "NaN is not a JSON number",
        "NaN is not a JSON number",
    ),
    "an answer of 300 KiB": (lambda r: [raw_envelope(r, pad="x" * 300 * 1024)], "more than the 256 KiB", None),
    "a size as text": (
        lambda r: [raw_envelope(r, dat=b64(json.dumps([{**GOOD_POOLS[0], "size": str(ONE_SSD)}])))],
        "size is a string",
        "size is a string",
    ),
    "a negative used": (
        lambda r: [raw_envelope(r, dat=b64(json.dumps([{**GOOD_POOLS[0], "used": -1}])))],
        "used is -1",
        "used is -1",
    ),
    "a lone surrogate in a pool's name": (
        lambda r: [raw_envelope(r, dat=b64('[{"name": "a\\ud800", "type": "ssd", "size": 1, "used": 0}]'))],
        "pool 0's name is not text",
        "pool 0's name is not text",
    ),
    "dat that is not base64": (lambda r: [raw_envelope(r, dat="%%%")], "not base64", "not base64"),
    "another twin's answer": (lambda r: [raw_envelope(r, src="3999")], "twin 3999 answered", "twin 3999 answered"),
}


@pytest.fixture
def serve_round(redis_url):
    """serve_round(answers_of_3310, requests=N): a peer that takes N requests: twin 3310 gets
    answers_of_3310(request), 3311 an honest answer. Stopped at the test's end, so a request it did not
    get (a call that was never sent) leaves no peer behind to take the next test's."""
    stop = threading.Event()
    threads = []

    def start(answers_of_3310, *, requests: int) -> None:
        conn = redis.Redis.from_url(redis_url)

        def serve():
            served = 0
            while served < requests and not stop.is_set():
                item = conn.blpop([REQUEST_QUEUE], timeout=0.05)
                if item is None:
                    continue
                served += 1
                request = json.loads(item[1])
                if request["dst"] == [3310]:
                    conn.rpush(request["ret"], *answers_of_3310(request))
                else:
                    conn.rpush(request["ret"], json.dumps(envelope(request["ref"], 3311, body=GOOD_POOLS)))

        threads.append(threading.Thread(target=serve, daemon=True))
        threads[-1].start()

    yield start
    stop.set()
    for thread in threads:
        thread.join(5)


TARGETS = [Target(node_id=2310, twin_id=3310, total_sru=ONE_SSD), Target(node_id=2311, twin_id=3311, total_sru=ONE_SSD)]


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_answer_is_refused_with_its_reason_in_a_call_of_its_own(redis_url, serve_round, case):
    answers, words, _in_a_round = CASES[case]
    serve_round(answers, requests=1)
    answer = rmb_client(redis_url).ask_many(POOLS, TARGETS[:1])[2310]
    assert isinstance(answer, MalformedPayload) and words in str(answer)


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_answer_costs_its_node_alone_in_a_round(redis_url, serve_round, case):
    answers, _alone, words = CASES[case]
    serve_round(answers, requests=2)
    got = rmb_client(redis_url).ask_many(POOLS, TARGETS)
    assert got[2311][0].size == ONE_SSD  # the honest node is heard
    if words is None:
        assert isinstance(got[2310], NodeSilent) and "1 answer(s) that matched no call" in str(got[2310])
    else:
        assert isinstance(got[2310], MalformedPayload) and words in str(got[2310])


def test_a_second_answer_to_one_call_is_not_taken_twice(redis_url, serve_round):
    good = json.dumps(envelope("", 3310, body=GOOD_POOLS))
    serve_round(lambda r: [good.replace('"ref": ""', f'"ref": "{r["ref"]}"')] * 2, requests=2)
    got = rmb_client(redis_url).ask_many(POOLS, TARGETS)
    assert (got[2310][0].size, got[2311][0].size) == (ONE_SSD, ONE_SSD)


def test_an_answer_with_a_lone_surrogate_for_a_ref_answers_no_call(redis_url, serve_round):
    serve_round(lambda r: [raw_envelope(r, ref="\ud800")], requests=2)
    got = rmb_client(redis_url).ask_many(POOLS, TARGETS)
    assert isinstance(got[2310], NodeSilent) and got[2311][0].size == ONE_SSD


def test_an_err_with_control_characters_becomes_printable_words(redis_url, serve_round):
    err = {"code": 7, "message": "bad\x1b[31m\ud800"}
    serve_round(lambda r: [raw_envelope(r, err=err, dat="")], requests=1)
    answer = rmb_client(redis_url).ask_many(POOLS, TARGETS[:1])[2310]
    assert isinstance(answer, RmbRefused) and "\x1b" not in str(answer) and "(code 7)" in str(answer)


# --- a flood on the reply queue (MEDIUM 2) -------------------------------------------------------


class SteppingClock:
    """A monotonic clock that moves on by `step` each time it is read (the calls' deadlines read it)."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1000.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_a_flood_of_junk_answers_ends_the_call_at_its_deadline_and_is_left_unread(redis_url, serve_round):
    junk = [json.dumps(envelope(uuid.uuid4().hex, 3310, body=[])) for _ in range(5000)]

    def flood(request):
        return [*junk, json.dumps(envelope(request["ref"], 3310, body=GOOD_POOLS))]

    queue = {}
    serve_round(lambda r: queue.setdefault("ret", r["ret"]) and flood(r), requests=1)
    rmb = rmb_client(redis_url, deadline=1.0, monotonic=SteppingClock(0.0005))
    answer = rmb.ask_many(POOLS, TARGETS[:1])[2310]
    assert isinstance(answer, NodeSilent) and "answer(s) that matched no call came meanwhile" in str(answer)
    assert redis.Redis.from_url(redis_url).llen(queue["ret"]) > 1000  # the call did not drain the flood first


def test_what_a_flood_left_on_the_queue_never_delays_the_next_call(redis_url, serve_round):
    rmb = rmb_client(redis_url)
    leftover = [json.dumps(envelope(uuid.uuid4().hex, 3310, body=[])) for _ in range(20000)]
    redis.Redis.from_url(redis_url).rpush(rmb._reply_queue(), *leftover)
    serve_round(lambda r: [raw_envelope(r)], requests=1)
    assert rmb.ask_many(POOLS, TARGETS[:1])[2310][0].size == ONE_SSD


# --- a hung or dripping Redis (MEDIUM 4): the call ends, and says why --------------------------------


@pytest.mark.parametrize("server", [HungRedis, DripRedis])
def test_a_peer_redis_that_hangs_or_drips_fails_the_round_and_every_node_is_told(server):
    peer = server()
    try:
        rmb = rmb_client(peer.url, deadline=0.2)
        targets = [Target(node_id=n, twin_id=n + 1000) for n in range(2300, 2315)]
        got = rmb.ask_many(POOLS, targets)
    finally:
        peer.close()
    assert all(isinstance(got[t.node_id], RmbPeerFailed) for t in targets)
    assert "failed or did not answer within the call's deadline" in str(got[2300])
    assert "was not asked zos.storage.pools over RMB" in str(got[2314]) and "earlier in this round" in str(got[2314])
    assert peer.accepted <= 3  # the round stopped asking: no connection per node


def test_a_budget_kept_on_a_hung_redis_costs_the_call_its_deadline_only(redis_url, serve_round):
    # The peer's queue answers; only the budget's store hangs: the budget falls back to its own window.
    hung = HungRedis()
    try:
        serve_round(lambda r: [raw_envelope(r)], requests=1)
        rmb = rmb_client(redis_url, deadline=0.5, budget_url=hung.url)
        answer = rmb.ask_many(POOLS, TARGETS[:1])[2310]
    finally:
        hung.close()
    assert isinstance(answer, RmbPeerFailed)  # the in-flight lease lives in that store too: nothing was sent


def test_a_round_begun_past_the_job_steps_deadline_sends_nothing_and_blames_no_redis(redis_url):
    from dashboard.grid.deadline import grid_step_deadline

    with grid_step_deadline(0.001):
        time.sleep(0.01)  # the step's deadline passed before the round began
        got = rmb_client(redis_url).ask_many(POOLS, TARGETS)
    assert all("the job step's deadline had passed" in str(got[t.node_id]) for t in TARGETS)
    assert not any(isinstance(a, RmbPeerFailed) for a in got.values())


# --- the sender as rmb-rs writes it (issue 43) ----------------------------------------------------
# rmb-rs 15f2092 src/types/mod.rs (`stringify`, `from_string`): "<twin>", or "<twin>:<connection>" when the
# sender named a connection, the twin before the first ":". src/peer/postman.rs (`undeliverable`): our
# own peer answers a call it could not deliver with the call's ref, dat "", src "", now 0 and an err
# (src/peer/protocol.rs: 103 an unknown twin). That answer is not the node's: neither malformed nor silent.

UNDELIVERABLE = {"dat": "", "src": "", "now": 0, "err": {"code": 103, "message": "unknown twin id '3310'"}}


@pytest.mark.parametrize("src", ["3310:", "3310:conn-1", "3310:a:b", 3310])
def test_a_sender_with_a_connection_is_its_twin(src):
    assert parse_envelope(json.dumps({"ref": "r", "src": src, "dat": "", "err": None})).src == 3310


@pytest.mark.parametrize("src", [":3310", "x:3310", "²:c", "", None, "33101234567:c"])
def test_a_sender_whose_twin_is_not_a_number_is_refused(src):
    with pytest.raises(MalformedPayload, match="not a twin id"):
        parse_envelope(json.dumps({"ref": "r", "src": src, "dat": "", "err": None}))


def test_an_empty_sender_is_only_the_peers_could_not_deliver():
    assert parse_envelope(json.dumps({"ref": "r", **UNDELIVERABLE})).src is None


def test_an_answer_from_a_named_connection_is_taken_in_a_round(redis_url, serve_round):
    serve_round(lambda r: [raw_envelope(r, src="3310:dashboard-7")], requests=2)
    got = rmb_client(redis_url).ask_many(POOLS, TARGETS)
    assert (got[2310][0].size, got[2311][0].size) == (ONE_SSD, ONE_SSD)
    assert GOOD_POOLS[0]["size"] == ONE_SSD


@pytest.mark.parametrize("targets", [TARGETS[:1], TARGETS], ids=["alone", "in a round"])
def test_a_call_the_peer_could_not_deliver_says_so_for_its_node_alone(redis_url, serve_round, targets):
    serve_round(lambda r: [raw_envelope(r, **UNDELIVERABLE)], requests=len(targets))
    got = rmb_client(redis_url).ask_many(POOLS, targets)
    answer = got[2310]
    assert isinstance(answer, RmbUndelivered) and not isinstance(answer, RmbRefused | NodeSilent)
    assert str(answer) == (
        "the RMB peer could not deliver zos.storage.pools to node 2310 (twin 3310): unknown twin id '3310' "
        "(code 103); the node said nothing"
    )
    if len(targets) == 2:
        assert got[2311][0].size == ONE_SSD
