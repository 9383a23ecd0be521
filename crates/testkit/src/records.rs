//! Builders of contract records for tests, with every field filled.

use hookline_envelope::{decode, fixtures::DeliveryBuilder, DomainEvent, Record, Subscription};
use rdkafka::message::Message;

/// A JSON domain event of `tenant` and `event_type` with id `event_id`.
pub fn event(event_id: &str, tenant: &str, event_type: &str) -> DomainEvent {
    DomainEvent {
        event_id: event_id.to_owned(),
        tenant_id: tenant.to_owned(),
        event_type: event_type.to_owned(),
        occurred_at: 1_764_000_000_000,
        content_type: "application/json".to_owned(),
        payload: format!(r#"{{"id":"{event_id}","type":"{event_type}"}}"#).into_bytes(),
        attributes: Default::default(),
    }
}

/// An enabled subscription of `tenant` to `patterns`, version 1.
pub use hookline_envelope::fixtures::subscription;

/// A delivery of `invoice.paid` event `event_id` to `sub`, as fan-out writes
/// it at `at_ms`: a first attempt, due then; the payload `{}` until set.
pub fn delivery(sub: &Subscription, event_id: &str, at_ms: i64) -> DeliveryBuilder {
    DeliveryBuilder::for_event(event_id, &sub.tenant_id, &sub.subscription_id)
        .event_type("invoice.paid")
        .at(at_ms)
}

/// The contract record in `m`, or an error naming its topic, partition, offset
/// and the type it is not.
pub fn decoded<T: Record>(m: &impl Message) -> anyhow::Result<T> {
    let want = std::any::type_name::<T>()
        .rsplit("::")
        .next()
        .unwrap_or("record");
    decode(m.payload().unwrap_or_default()).map_err(|e| {
        anyhow::anyhow!(
            "a record on {} at {}/{} is not a {want}: {e}",
            m.topic(),
            m.partition(),
            m.offset()
        )
    })
}
