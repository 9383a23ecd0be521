//! Schema evolution: fields are added only with defaults, and then an old reader reads a new
//! writer's records and a new reader reads an old writer's, through Avro schema resolution.
//! The newer and older schemas are fixtures under `tests/fixtures/`.

mod common;

use std::sync::LazyLock;

use common::*;
use hookline_envelope::{
    decode, encode, DecodeError, Delivery, DomainEvent, KnownSchema, Record, RecordKind, Registry,
    SchemaError,
};
use serde::{Deserialize, Serialize};

const DOMAIN_EVENT_V2: &str = include_str!("fixtures/domain_event_v2.avsc");
const DOMAIN_EVENT_V0: &str = include_str!("fixtures/domain_event_v0.avsc");
const DELIVERY_V2: &str = include_str!("fixtures/delivery_v2.avsc");

/// What a future release's DomainEvent type would look like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct DomainEventV2 {
    event_id: String,
    tenant_id: String,
    event_type: String,
    occurred_at: i64,
    content_type: String,
    #[serde(with = "apache_avro::serde::bytes")]
    payload: Vec<u8>,
    attributes: std::collections::BTreeMap<String, String>,
    trace_id: Option<String>,
    priority: i32,
}

impl Record for DomainEventV2 {
    const KIND: RecordKind = RecordKind::DomainEvent;
    fn schema() -> &'static KnownSchema {
        static S: LazyLock<KnownSchema> = LazyLock::new(|| {
            KnownSchema::parse(RecordKind::DomainEvent, DOMAIN_EVENT_V2).expect("fixture parses")
        });
        &S
    }
}

/// An older release's DomainEvent type, before `attributes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct DomainEventV0 {
    event_id: String,
    tenant_id: String,
    event_type: String,
    occurred_at: i64,
    content_type: String,
    #[serde(with = "apache_avro::serde::bytes")]
    payload: Vec<u8>,
}

impl Record for DomainEventV0 {
    const KIND: RecordKind = RecordKind::DomainEvent;
    fn schema() -> &'static KnownSchema {
        static S: LazyLock<KnownSchema> = LazyLock::new(|| {
            KnownSchema::parse(RecordKind::DomainEvent, DOMAIN_EVENT_V0).expect("fixture parses")
        });
        &S
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ReplayOfV2 {
    topic: String,
    partition: i32,
    offset: i64,
    replayed_by: String,
}

/// A future Delivery with a new top-level field and a new field in the nested ReplayOf.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct DeliveryV2 {
    delivery_id: String,
    event_id: String,
    tenant_id: String,
    subscription_id: String,
    event_type: String,
    occurred_at: i64,
    content_type: String,
    #[serde(with = "apache_avro::serde::bytes")]
    payload: Vec<u8>,
    attributes: std::collections::BTreeMap<String, String>,
    attempt: i32,
    created_at: i64,
    due_at: i64,
    first_attempt_at: Option<i64>,
    last_attempt_at: Option<i64>,
    last_outcome: Option<String>,
    policy_version: Option<String>,
    replay_of: Option<ReplayOfV2>,
    traceparent: Option<String>,
    tracestate: Option<String>,
    trace_id: Option<String>,
}

impl Record for DeliveryV2 {
    const KIND: RecordKind = RecordKind::Delivery;
    fn schema() -> &'static KnownSchema {
        static S: LazyLock<KnownSchema> = LazyLock::new(|| {
            KnownSchema::parse(RecordKind::Delivery, DELIVERY_V2).expect("fixture parses")
        });
        &S
    }
}

fn event_v2(e: &DomainEvent) -> DomainEventV2 {
    DomainEventV2 {
        event_id: e.event_id.clone(),
        tenant_id: e.tenant_id.clone(),
        event_type: e.event_type.clone(),
        occurred_at: e.occurred_at,
        content_type: e.content_type.clone(),
        payload: e.payload.clone(),
        attributes: e.attributes.clone(),
        trace_id: Some("4bf92f3577b34da6".into()),
        priority: 9,
    }
}

fn delivery_v2(d: &Delivery) -> DeliveryV2 {
    DeliveryV2 {
        delivery_id: d.delivery_id.clone(),
        event_id: d.event_id.clone(),
        tenant_id: d.tenant_id.clone(),
        subscription_id: d.subscription_id.clone(),
        event_type: d.event_type.clone(),
        occurred_at: d.occurred_at,
        content_type: d.content_type.clone(),
        payload: d.payload.clone(),
        attributes: d.attributes.clone(),
        attempt: d.attempt,
        created_at: d.created_at,
        due_at: d.due_at,
        first_attempt_at: d.first_attempt_at,
        last_attempt_at: d.last_attempt_at,
        last_outcome: d.last_outcome.clone(),
        policy_version: d.policy_version.clone(),
        replay_of: d.replay_of.as_ref().map(|r| ReplayOfV2 {
            topic: r.topic.clone(),
            partition: r.partition,
            offset: r.offset,
            replayed_by: "cli:alice".into(),
        }),
        traceparent: d.traceparent.clone(),
        tracestate: d.tracestate.clone(),
        trace_id: Some("4bf92f3577b34da6".into()),
    }
}

fn registry_with(kind: RecordKind, json: &str) -> Registry {
    let mut registry = Registry::builtin().expect("built-in schemas load");
    registry
        .register(kind, json)
        .expect("fixture is a compatible writer");
    registry
}

#[test]
fn current_reader_reads_a_newer_writer_once_the_version_is_registered() {
    let old = sample_event();
    let bytes = encode(&event_v2(&old));
    assert_ne!(
        DomainEventV2::schema().fingerprint(),
        DomainEvent::schema().fingerprint()
    );

    // Single-object bytes carry no schema: an unlisted version is refused, never guessed at.
    assert!(matches!(
        decode::<DomainEvent>(&bytes),
        Err(DecodeError::UnknownFingerprint { fingerprint })
            if fingerprint == DomainEventV2::schema().fingerprint()
    ));

    let registry = registry_with(RecordKind::DomainEvent, DOMAIN_EVENT_V2);
    let read: DomainEvent = registry.decode(&bytes).unwrap();
    assert_eq!(read, old, "the new fields are dropped, the rest is intact");
}

#[test]
fn newer_reader_reads_the_current_writer_with_defaults() {
    let current = sample_event();
    let bytes = encode(&current);
    let read: DomainEventV2 = Registry::global().decode(&bytes).unwrap();
    let mut want = event_v2(&current);
    want.trace_id = None;
    want.priority = 0;
    assert_eq!(read, want);
}

#[test]
fn current_reader_reads_an_older_writer_with_defaults() {
    let old = DomainEventV0 {
        event_id: "evt_old".into(),
        tenant_id: "t".into(),
        event_type: "invoice.paid".into(),
        occurred_at: 1,
        content_type: "application/json".into(),
        payload: b"{}".to_vec(),
    };
    let bytes = encode(&old);
    let registry = registry_with(RecordKind::DomainEvent, DOMAIN_EVENT_V0);
    let read: DomainEvent = registry.decode(&bytes).unwrap();
    assert_eq!(read.event_id, "evt_old");
    assert_eq!(read.payload, b"{}");
    assert!(read.attributes.is_empty(), "default {{}}");
}

#[test]
fn nested_records_evolve_both_ways() {
    let current = sample_delivery();
    assert!(current.replay_of.is_some());

    // Newer writer, current reader.
    let bytes = encode(&delivery_v2(&current));
    let registry = registry_with(RecordKind::Delivery, DELIVERY_V2);
    let read: Delivery = registry.decode(&bytes).unwrap();
    assert_eq!(read, current);

    // Current writer, newer reader.
    let read: DeliveryV2 = Registry::global().decode(&encode(&current)).unwrap();
    let mut want = delivery_v2(&current);
    want.trace_id = None;
    if let Some(r) = want.replay_of.as_mut() {
        r.replayed_by = "operator".into();
    }
    assert_eq!(read, want);
}

#[test]
fn registering_is_idempotent_and_keeps_the_current_schema() {
    let mut registry = Registry::builtin().unwrap();
    let a = registry
        .register(RecordKind::DomainEvent, DOMAIN_EVENT_V2)
        .unwrap();
    let b = registry
        .register(RecordKind::DomainEvent, DOMAIN_EVENT_V2)
        .unwrap();
    assert_eq!(a, b);
    let builtin = RecordKind::ALL.len() + hookline_envelope::HISTORY.len();
    assert_eq!(registry.known().count(), builtin + 1);
    assert_eq!(
        registry.current(RecordKind::DomainEvent).fingerprint(),
        DomainEvent::schema().fingerprint()
    );
}

#[test]
fn a_writer_the_reader_cannot_resolve_is_refused() {
    // Drops `payload`, which the reader has no default for.
    let mut json: serde_json::Value =
        serde_json::from_str(RecordKind::DomainEvent.current_source()).unwrap();
    json["fields"]
        .as_array_mut()
        .unwrap()
        .retain(|f| f["name"] != "payload");
    let mut registry = Registry::builtin().unwrap();
    let err = registry
        .register(RecordKind::DomainEvent, &json.to_string())
        .unwrap_err();
    assert!(
        matches!(
            err,
            SchemaError::Incompatible {
                record: RecordKind::DomainEvent,
                ..
            }
        ),
        "{err:?}"
    );

    // Changes a field's type.
    let mut json: serde_json::Value =
        serde_json::from_str(RecordKind::DomainEvent.current_source()).unwrap();
    json["fields"][0]["type"] = "int".into();
    assert!(matches!(
        registry.register(RecordKind::DomainEvent, &json.to_string()),
        Err(SchemaError::Incompatible { .. })
    ));
}

#[test]
fn a_schema_for_another_record_is_refused() {
    let mut registry = Registry::builtin().unwrap();
    let err = registry
        .register(
            RecordKind::DomainEvent,
            RecordKind::Delivery.current_source(),
        )
        .unwrap_err();
    assert!(
        matches!(
            &err,
            SchemaError::WrongName { expected, found, .. }
                if expected == "dev.hookline.v1.DomainEvent" && found == "dev.hookline.v1.Delivery"
        ),
        "{err:?}"
    );
    assert!(matches!(
        registry.register(RecordKind::DomainEvent, "{not json"),
        Err(SchemaError::Parse { .. })
    ));
}
