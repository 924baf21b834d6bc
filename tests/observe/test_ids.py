"""The ids gatekeeper makes (request ids, translated answers' item ids): fresh in every run and
every process, whatever an application does with the `random` module."""

from __future__ import annotations

import os
import random
import re

from gatekeeper.observe.redact import new_id, request_id
from gatekeeper.protocols.responses.translate import from_chat

ANSWER = {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}], "usage": {}}


def test_an_application_that_seeds_random_does_not_repeat_gatekeepers_ids():
    state = random.getstate()  # given back: other tests draw from the global generator too
    try:
        random.seed(7)
        first = request_id(None), from_chat(ANSWER, {"model": "m"})["id"]
        random.seed(7)
        again = request_id(None), from_chat(ANSWER, {"model": "m"})["id"]
    finally:
        random.setstate(state)
    assert first[0] != again[0] and first[1] != again[1]
    assert re.fullmatch(r"[0-9a-f]{32}", first[0]) and re.fullmatch(r"resp_[0-9a-f]{24}", first[1])
    assert request_id("client-id-1") == "client-id-1"  # a safe client id is kept


def test_a_forked_worker_makes_other_ids_than_its_parent():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.write(write, " ".join(new_id(128) for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 4096).decode().split()
    os.close(read)
    parent = [new_id(128) for _ in range(3)]
    assert len(child) == 3 and not set(child) & set(parent)
