"""Cross-language contract test: fastavro (Python) and hookline-envelope (Rust) agree.

Both sides work only from ``schemas/*.avsc``:

* Python writes every record type as single-object Avro (``C3 01`` + CRC-64-AVRO fingerprint
  of the Parsing Canonical Form, little-endian + schemaless datum); the Rust ``contract_tool``
  decodes it and every field is compared.
* Rust encodes every record type; fastavro decodes it, every field is compared, and the
  header's fingerprint bytes must equal the ones Python computes.
* Both sides produce byte-identical encodings of the same record (maps sorted by key).
* ``delivery_id`` is re-implemented here from its documented algorithm and must equal Rust's.

Run from the repository root::

    python3 -m venv .venv && .venv/bin/pip install -r tests/contract/requirements.txt
    .venv/bin/python -m pytest tests/contract

The Rust tool is built once with ``cargo build -q -p hookline-envelope --example contract_tool``
(honouring ``CARGO_TARGET_DIR``); set ``HOOKLINE_CONTRACT_TOOL`` to use a prebuilt binary.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from fastavro import schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
MAGIC = b"\xc3\x01"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

FILES = {
    "DomainEvent": "domain_event.avsc",
    "Subscription": "subscription.avsc",
    "Delivery": "delivery.avsc",
    "DeadLetter": "dead_letter.avsc",
    "QuarantinedEvent": "quarantined_event.avsc",
    "AttemptRecord": "attempt_record.avsc",
    "EndpointHealth": "endpoint_health.avsc",
}


def schema_json(name: str) -> dict:
    return json.loads((SCHEMAS / FILES[name]).read_text())


def parsed(name: str) -> dict:
    # A fresh named-type table per file: each file must parse on its own.
    return parse_schema(schema_json(name), named_schemas={})


def header(schema: dict) -> bytes:
    """C3 01 + the 8 little-endian bytes of CRC-64-AVRO(PCF); fastavro returns them as hex."""
    return MAGIC + bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def py_encode(name: str, record: dict) -> bytes:
    buf = io.BytesIO()
    schema = parsed(name)
    schemaless_writer(buf, schema, record, strict=True)
    return header(schema_json(name)) + buf.getvalue()


def py_decode(name: str, data: bytes) -> dict:
    assert data[:2] == MAGIC
    assert data[2:10] == header(schema_json(name))[2:], "fingerprint bytes differ"
    buf = io.BytesIO(data[10:])
    record = schemaless_reader(buf, parsed(name))
    assert buf.tell() == len(data) - 10, "datum has trailing bytes"
    return record


def plain(value):
    """Python/fastavro values in the JSON form contract_tool uses: bytes as lists of ints,
    timestamps (fastavro reads timestamp-millis as datetime) as integer milliseconds."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return list(value)
    if isinstance(value, datetime):
        return (value - EPOCH) // timedelta(milliseconds=1)
    return value


# --- the Rust tool -----------------------------------------------------------------------


@pytest.fixture(scope="session")
def tool() -> Path:
    prebuilt = os.environ.get("HOOKLINE_CONTRACT_TOOL")
    if prebuilt:
        return Path(prebuilt)
    subprocess.run(
        ["cargo", "build", "-q", "-p", "hookline-envelope", "--example", "contract_tool"],
        cwd=ROOT,
        check=True,
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR", "target"))
    if not target.is_absolute():
        target = ROOT / target
    path = target / "debug" / "examples" / "contract_tool"
    assert path.exists(), f"{path} was not built"
    return path


def run(tool: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(tool), *args], input=stdin, capture_output=True, text=True, check=False, timeout=60
    )


def rust_encode(tool: Path, name: str, record: dict) -> bytes:
    out = run(tool, "encode", name, stdin=json.dumps(plain(record)))
    assert out.returncode == 0, out.stderr
    return bytes.fromhex(out.stdout.strip())


def rust_decode(tool: Path, name: str, data: bytes) -> dict:
    out = run(tool, "decode", name, stdin=data.hex())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# --- sample records ----------------------------------------------------------------------

T0 = 1_700_000_000_000
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MAX = 2**63 - 1

EVENT = {
    "event_id": "evt_01J9Z3",
    "tenant_id": "tenant_ä",
    "event_type": "invoice.paid",
    "occurred_at": T0,
    "content_type": "application/json",
    "payload": bytes(range(256)),
    "attributes": {"source": "billing", "trace": "4bf92f35", "ü": "✓"},
}

SUBSCRIPTION = {
    "subscription_id": "sub_1",
    "tenant_id": "tenant_a",
    "url": "https://example.com/hooks?x=1",
    "event_types": ["invoice.*", "customer.created"],
    "secret_ref": "tenant_a/sub_1",
    "enabled": True,
    "max_in_flight": I32_MAX,
    "rate_limit_per_s": 0.1,
    "disabled_reason": None,
    "disabled_at": None,
    "ordering": "unordered",
    "version": I64_MAX,
    "updated_at": -1,
}

DELIVERY = {
    "delivery_id": "msg_20e1242c711154e9a82e4856a8cc2c18",
    "event_id": "evt_1",
    "tenant_id": "tenant_a",
    "subscription_id": "sub_1",
    "event_type": "invoice.paid",
    "occurred_at": T0,
    "content_type": "application/json",
    "payload": b'{"amount":42}',
    "attributes": {"a": "1"},
    "attempt": 3,
    "created_at": T0 + 1,
    "due_at": T0 + 60_000,
    "first_attempt_at": T0 + 2,
    "last_attempt_at": T0 + 30_000,
    "last_outcome": "http_503",
    "policy_version": "ladder-v1",
    "replay_of": {"topic": "deliveries.dlq", "partition": I32_MIN, "offset": I64_MAX},
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "tracestate": "congo=t61rcWkgMzE",
}

DELIVERY_FIRST = {
    **DELIVERY,
    "payload": b"",
    "attributes": {},
    "attempt": 0,
    "first_attempt_at": None,
    "last_attempt_at": None,
    "last_outcome": None,
    "policy_version": None,
    "replay_of": None,
    "traceparent": None,
    "tracestate": None,
}

DEAD_LETTER = {
    "delivery": DELIVERY,
    "reason": "exhausted",
    "last_status": 503,
    "dead_at": T0 + 7_200_000,
    "policy_version": "ladder-v1",
    "detail": "12 attempts over 2h",
}

QUARANTINED = {
    "key": b"tenant_a",
    "value": b"\x00\x00\x00\x00\x2a not avro",
    "headers": [
        {"name": "traceparent", "value": b"00-abc-01"},
        {"name": "empty", "value": None},
        {"name": "bin", "value": b"\xff\x00"},
    ],
    "reason": "not_avro",
    "detail": "bad single-object magic 00 00, expected c3 01",
    "source_topic": "events",
    "source_partition": 7,
    "source_offset": 123_456_789_012,
    "quarantined_at": T0,
}

ATTEMPT = {
    "delivery_id": "msg_20e1242c711154e9a82e4856a8cc2c18",
    "event_id": "evt_1",
    "tenant_id": "tenant_ä",
    "subscription_id": "sub_1",
    "event_type": "invoice.paid",
    "kind": "attempted",
    "outcome": "retried",
    "attempt": I32_MAX,
    "at": T0,
    "duration_ms": I64_MAX,
    "classification": "http_503",
    "status": 503,
    "detail": "connection reset ✓",
    "from_tier": "retry-10s",
    "tier": "retry-1m",
    "next_due_at": T0 + 60_000,
    "replay_of": {"topic": "deliveries.dlq", "partition": I32_MIN, "offset": I64_MAX},
    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    "policy_version": "ladder-v1",
    "created_at": T0 - 5_000,
}

ATTEMPT_CANCELLED = {
    **ATTEMPT,
    "kind": "dead_lettered",
    "outcome": "cancelled",
    "attempt": 0,
    "duration_ms": None,
    "classification": None,
    "status": None,
    "detail": None,
    "from_tier": None,
    "tier": None,
    "next_due_at": None,
    "replay_of": None,
    "trace_id": None,
    "policy_version": None,
    "created_at": None,
}

HEALTH_OPEN = {
    "subscription_id": "sub-42",
    "open_since": T0,
    "open_until": T0 + 60_000,
    "open_period_ms": 60_000,
    "changed_at": T0 + 30_000,
    "written_by": "hookline-dispatcher-0 ✓",
    "head_delivery_id": "msg_2f0d1c6e",
    "head_attempt": 3,
    "head_first_attempt_at": T0 - 40_000,
    "head_last_attempt_at": T0 - 1_000,
    "head_due_at": T0 + 59_000,
    "head_last_outcome": "http_503",
}

HEALTH_CLOSED = {
    **HEALTH_OPEN,
    "open_since": None,
    "open_until": None,
    "open_period_ms": 0,
    "written_by": "",
    "head_delivery_id": None,
    "head_attempt": 0,
    "head_first_attempt_at": None,
    "head_last_attempt_at": None,
    "head_due_at": None,
    "head_last_outcome": None,
}

SAMPLES = [
    ("DomainEvent", EVENT),
    ("DomainEvent", {**EVENT, "payload": b"", "attributes": {}, "event_id": ""}),
    ("Subscription", SUBSCRIPTION),
    ("Subscription", {**SUBSCRIPTION, "rate_limit_per_s": None, "event_types": [], "enabled": False,
                      "disabled_reason": "gone", "disabled_at": T0, "ordering": "strict"}),
    ("Delivery", DELIVERY),
    ("Delivery", DELIVERY_FIRST),
    ("DeadLetter", DEAD_LETTER),
    ("DeadLetter", {**DEAD_LETTER, "delivery": DELIVERY_FIRST, "last_status": None, "detail": None}),
    ("QuarantinedEvent", QUARANTINED),
    ("QuarantinedEvent", {**QUARANTINED, "key": None, "headers": [], "value": b""}),
    ("AttemptRecord", ATTEMPT),
    ("AttemptRecord", ATTEMPT_CANCELLED),
    ("EndpointHealth", HEALTH_OPEN),
    ("EndpointHealth", HEALTH_CLOSED),
]
IDS = [f"{name}-{i % 2}" for i, (name, _) in enumerate(SAMPLES)]


# --- tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FILES)
def test_fingerprint_and_canonical_form_match(tool, name):
    out = run(tool, "fingerprint", name)
    assert out.returncode == 0, out.stderr
    fp_hex, pcf = out.stdout.splitlines()
    assert pcf == to_parsing_canonical_form(schema_json(name))
    assert fp_hex == fingerprint(pcf, "CRC-64-AVRO")


@pytest.mark.parametrize("name,record", SAMPLES, ids=IDS)
def test_python_writes_rust_reads(tool, name, record):
    assert rust_decode(tool, name, py_encode(name, record)) == plain(record)


@pytest.mark.parametrize("name,record", SAMPLES, ids=IDS)
def test_rust_writes_python_reads(tool, name, record):
    data = rust_encode(tool, name, record)
    assert data[2:10] == header(schema_json(name))[2:]
    assert plain(py_decode(name, data)) == plain(record)


@pytest.mark.parametrize("name,record", SAMPLES, ids=IDS)
def test_both_sides_encode_identical_bytes(tool, name, record):
    assert rust_encode(tool, name, record) == py_encode(name, record)


def test_python_reads_an_attempt_record_the_rust_side_wrote(tool):
    """What a consumer of `deliveries.attempts` in another language sees: the record the
    dispatcher's types encode, read with fastavro from the schema file alone."""
    data = rust_encode(tool, "AttemptRecord", ATTEMPT)
    assert data[:2] == MAGIC
    record = py_decode("AttemptRecord", data)
    assert record["kind"] == "attempted" and record["outcome"] == "retried"
    assert record["at"] == EPOCH + timedelta(milliseconds=T0)
    assert record["next_due_at"] == EPOCH + timedelta(milliseconds=T0 + 60_000)
    assert record["replay_of"] == ATTEMPT["replay_of"]
    assert plain(record) == plain(ATTEMPT)


def test_python_fills_defaults_rust_reads_them(tool):
    minimal = {k: v for k, v in DELIVERY_FIRST.items() if k not in {
        "attributes", "first_attempt_at", "last_attempt_at", "last_outcome",
        "policy_version", "replay_of", "traceparent", "tracestate"}}
    buf = io.BytesIO()
    schemaless_writer(buf, parsed("Delivery"), minimal, strict_allow_default=True)
    data = header(schema_json("Delivery")) + buf.getvalue()
    assert rust_decode(tool, "Delivery", data) == plain(DELIVERY_FIRST)


HISTORY = sorted((SCHEMAS / "history").glob("*.avsc"))


def fit(value, schema):
    """`value` with only the fields `schema` (an older writer schema) has, nested records too."""
    if isinstance(schema, list):
        if value is None:
            return None
        branches = [b for b in schema if b != "null"]
        return fit(value, branches[0]) if len(branches) == 1 else value
    if isinstance(schema, dict) and schema.get("type") == "record":
        return {f["name"]: fit(value[f["name"]], f["type"]) for f in schema["fields"]}
    return value


@pytest.mark.parametrize("path", HISTORY, ids=[p.name for p in HISTORY])
def test_every_older_version_python_writes_rust_reads_with_defaults(tool, path):
    """A record written with any schema in schemas/history/ (what an older release wrote)
    is read by Rust exactly as fastavro resolves it to the current schema: the fields it
    lacks, nested ones too, filled with their defaults."""
    older = json.loads(path.read_text())
    name = older["name"]
    assert header(older)[2:] != header(schema_json(name))[2:], f"{path.name} is the current one"
    for current in (record for n, record in SAMPLES if n == name):
        record = fit(current, older)
        buf = io.BytesIO()
        schemaless_writer(buf, parse_schema(older, named_schemas={}), record, strict=True)
        data = header(older) + buf.getvalue()
        resolved = schemaless_reader(
            io.BytesIO(data[10:]), parse_schema(older, named_schemas={}), parsed(name)
        )
        assert resolved != record, "nothing to fill: the history file is not older"
        assert rust_decode(tool, name, data) == plain(resolved)


def test_rust_rejects_a_schema_it_does_not_know(tool):
    newer = schema_json("DomainEvent")
    newer["fields"].append({"name": "extra", "type": "int", "default": 0, "doc": "new"})
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(newer, named_schemas={}), {**EVENT, "extra": 1})
    data = header(newer) + buf.getvalue()
    out = run(tool, "decode", "DomainEvent", stdin=data.hex())
    assert out.returncode == 2
    assert "unknown writer schema fingerprint" in out.stderr


def test_rust_rejects_the_wrong_record_type(tool):
    out = run(tool, "decode", "DomainEvent", stdin=py_encode("Delivery", DELIVERY).hex())
    assert out.returncode == 2
    assert "expected a DomainEvent, found a Delivery" in out.stderr


# delivery_id, re-implemented from the doc comment of hookline_envelope::delivery_id.
NAMESPACE = uuid.UUID("d39456ef-998c-50cb-8263-db6c4e366142")


def py_delivery_id(event_id: str, subscription_id: str) -> str:
    e, s = event_id.encode("utf-8"), subscription_id.encode("utf-8")
    name = len(e).to_bytes(8, "big") + e + len(s).to_bytes(8, "big") + s
    digest = bytearray(hashlib.sha1(NAMESPACE.bytes + name).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    return "msg_" + digest.hex()


def test_delivery_id_namespace_is_derived_as_documented():
    assert uuid.uuid5(uuid.NAMESPACE_URL, "https://hookline.dev/ns/delivery-id/v1") == NAMESPACE


@pytest.mark.parametrize(
    "event_id,subscription_id",
    [
        ("evt_1", "sub_1"),
        ("", ""),
        ("ab", "c"),
        ("a", "bc"),
        ("01J9Z3évènement", "sub_ü"),
        ("x" * 1000, "🦀"),
    ],
)
def test_delivery_id_matches_rust(tool, event_id, subscription_id):
    out = run(tool, "delivery-id", event_id, subscription_id)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == py_delivery_id(event_id, subscription_id)


def test_delivery_id_pinned_vector():
    assert py_delivery_id("evt_1", "sub_1") == "msg_20e1242c711154e9a82e4856a8cc2c18"
    assert py_delivery_id("ab", "c") != py_delivery_id("a", "bc")
