"""Cross-implementation check of hookline's webhook signatures.

hookline signs with its own Rust code (``hookline_runtime::signing``); here the
``standardwebhooks`` package from PyPI — an implementation we did not write —
verifies what it produces: one secret, two secrets during a rotation (either
key alone must verify), and tampered ids, timestamps, bodies and wrong keys
must not.

The Rust side is the ``sign_webhook`` example of hookline-dispatcher, built once
with ``cargo build -q -p hookline-dispatcher --example sign_webhook`` (honouring
``CARGO_TARGET_DIR``); set ``HOOKLINE_SIGN_TOOL`` to use a prebuilt binary.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

ROOT = Path(__file__).resolve().parents[2]

NEW = "whsec_" + base64.b64encode(b"the new key, 32 bytes long, ok!!").decode()
OLD = "whsec_" + base64.b64encode(b"the old key that receivers still").decode()
OTHER = "whsec_" + base64.b64encode(b"somebody else's key entirely....").decode()
BODY = b'{"type":"invoice.paid","data":{"id":"inv_1","amount":4200,"note":"caf\xc3\xa9"}}'
MSG_ID = "msg_20e1242c711154e9a82e4856a8cc2c18"


@pytest.fixture(scope="session")
def tool() -> Path:
    prebuilt = os.environ.get("HOOKLINE_SIGN_TOOL")
    if prebuilt:
        return Path(prebuilt)
    subprocess.run(
        ["cargo", "build", "-q", "-p", "hookline-dispatcher", "--example", "sign_webhook"],
        cwd=ROOT,
        check=True,
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR", "target"))
    if not target.is_absolute():
        target = ROOT / target
    path = target / "debug" / "examples" / "sign_webhook"
    assert path.exists(), f"{path} was not built"
    return path


def sign(tool: Path, *secrets: str, body: bytes = BODY, msg_id: str = MSG_ID, ts: int | None = None) -> dict:
    args = [str(tool), "--id", msg_id]
    for s in secrets:
        args += ["--secret", s]
    if ts is not None:
        args += ["--timestamp", str(ts)]
    out = subprocess.run(args, input=body, capture_output=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    return json.loads(out.stdout)


def verify(secret: str, body: bytes, headers: dict) -> None:
    Webhook(secret).verify(body, headers)


def test_single_secret_verifies(tool: Path) -> None:
    headers = sign(tool, NEW)
    assert headers["webhook-id"] == MSG_ID
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
    assert headers["webhook-signature"].startswith("v1,")
    assert " " not in headers["webhook-signature"]
    verify(NEW, BODY, headers)
    assert headers["user-agent"].startswith("hookline/")


def test_rotation_two_secrets_each_verifies_alone(tool: Path) -> None:
    headers = sign(tool, NEW, OLD)
    parts = headers["webhook-signature"].split(" ")
    assert len(parts) == 2 and all(p.startswith("v1,") for p in parts)
    # A receiver that still has only the old key, and one already on the new key.
    verify(OLD, BODY, headers)
    verify(NEW, BODY, headers)
    with pytest.raises(WebhookVerificationError):
        verify(OTHER, BODY, headers)


@pytest.mark.parametrize(
    "tamper",
    ["body", "id", "timestamp", "signature"],
)
def test_tampering_is_detected(tool: Path, tamper: str) -> None:
    headers = sign(tool, NEW, OLD)
    body = BODY
    if tamper == "body":
        body = BODY.replace(b"4200", b"4201")
    elif tamper == "id":
        headers["webhook-id"] = "msg_other"
    elif tamper == "timestamp":
        headers["webhook-timestamp"] = str(int(headers["webhook-timestamp"]) + 1)
    else:
        headers["webhook-signature"] = headers["webhook-signature"].split(" ")[0][:-4] + "AAA="
    with pytest.raises(WebhookVerificationError):
        verify(NEW, body, headers)


def test_stale_timestamp_is_refused_by_the_receiver(tool: Path) -> None:
    # Signed at attempt time: a signature from an hour ago must not verify,
    # which is why hookline never stores signatures.
    headers = sign(tool, NEW, ts=int(time.time()) - 3600)
    with pytest.raises(WebhookVerificationError):
        verify(NEW, BODY, headers)


def test_empty_and_binary_bodies(tool: Path) -> None:
    for body in [b"{}", json.dumps({"bytes": list(range(256))}).encode()]:
        headers = sign(tool, OLD, body=body)
        verify(OLD, body, headers)
