"""The README's quick start, run as written against the real broker.

The block after ``<!-- quickstart -->`` in README.md is extracted and run by
bash from the repository root, with one substitution: the broker is
``HOOKLINE_TEST_BROKERS`` instead of ``$(make -s kafka-up)``. The environment
isolates the run from other tests on the same broker and host (its own topic
prefix, consumer groups, receiver port and ``--http-addr 127.0.0.1:0``); the
commands themselves are the README's. It passes only when the receiver (which
verifies with the ``standardwebhooks`` package) prints ``verified`` for the
published payload.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROKER_LINE = "export HOOKLINE_BROKERS=$(make -s kafka-up)"


def quickstart_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- quickstart -->\n```sh\n(.*?)\n```", text, re.S)
    assert match, "README.md has no <!-- quickstart --> sh block"
    return match.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_block_is_short_and_starts_from_make_kafka_up() -> None:
    lines = [l for l in quickstart_block().splitlines() if l.strip()]
    assert lines[0].split("#")[0].strip() == BROKER_LINE
    assert len(lines) < 10, lines


def test_quickstart_delivers_a_verified_webhook(tmp_path: Path) -> None:
    brokers = os.environ.get("HOOKLINE_TEST_BROKERS")
    if not brokers:
        pytest.skip("HOOKLINE_TEST_BROKERS is not set (make test starts a broker and sets it)")
    script = quickstart_block()
    assert BROKER_LINE in script
    script = script.replace(BROKER_LINE, 'export HOOKLINE_BROKERS="$HOOKLINE_TEST_BROKERS"')
    run = uuid.uuid4().hex[:8]
    env = dict(os.environ)
    env.update(
        HOOKLINE_TOPIC_PREFIX=f"qs-{run}.",
        HOOKLINE_FANOUT_GROUP=f"qs-{run}-fanout",
        HOOKLINE_DISPATCHER_GROUP=f"qs-{run}-dispatcher",
        HOOKLINE_HTTP_ADDR="127.0.0.1:0",
        DEV_RECEIVER=f"127.0.0.1:{free_port()}",
    )
    log = tmp_path / "quickstart.log"
    with log.open("wb") as out:
        shell = subprocess.Popen(
            ["bash", "-e", "-c", script],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        # The block ends with the publish; it must succeed.
        assert shell.wait(timeout=900) == 0, log.read_text(errors="replace")
        deadline = time.monotonic() + 60
        while True:
            text = log.read_text(errors="replace")
            verified = [l for l in text.splitlines() if l.startswith("verified ")]
            if verified:
                break
            assert "REJECTED" not in text, text
            assert time.monotonic() < deadline, f"no verified webhook within 60 s:\n{text}"
            time.sleep(0.2)
        assert verified[0].endswith('{"order": 42}'), verified
        assert verified[0].split()[1].startswith("msg_"), verified
    finally:
        try:
            os.killpg(shell.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        # The background services drain on SIGTERM; none may outlive the test.
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            try:
                os.killpg(shell.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            os.killpg(shell.pid, signal.SIGKILL)
