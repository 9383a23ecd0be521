//! Where a `-X key=value` passthrough entry goes: by librdkafka's own scope of
//! the property (the `C/P` column of librdkafka's CONFIGURATION.md, v2.12).
//! A consumer-only property goes to consumers only and a producer-only one to
//! producers only, so `-X session.timeout.ms=…` no longer makes every producer
//! log a CONFWARN; anything else (`*` properties, and names this table does not
//! know) goes to every client, where librdkafka refuses an unknown one clearly.

/// The kind of librdkafka client a configuration is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// A consumer (group member or assign()-reader).
    Consumer,
    /// A producer (transactional or not).
    Producer,
    /// An admin or metadata-only client: gets the `*` properties only.
    Other,
}

/// librdkafka's scope of a property.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `*`: every client (and any property not in the tables below).
    All,
    /// `C`: consumers only.
    Consumer,
    /// `P`: producers only.
    Producer,
}

/// librdkafka's consumer-only (`C`) properties, global and topic-level, except
/// the callbacks (which cannot be set as strings).
const CONSUMER_ONLY: &[&str] = &[
    "auto.commit.enable",
    "auto.commit.interval.ms",
    "auto.offset.reset",
    "check.crcs",
    "consume.callback.max.messages",
    "coordinator.query.interval.ms",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "fetch.error.backoff.ms",
    "fetch.max.bytes",
    "fetch.message.max.bytes",
    "fetch.min.bytes",
    "fetch.queue.backoff.ms",
    "fetch.wait.max.ms",
    "group.id",
    "group.instance.id",
    "group.protocol",
    "group.protocol.type",
    "group.remote.assignor",
    "heartbeat.interval.ms",
    "isolation.level",
    "max.partition.fetch.bytes",
    "max.poll.interval.ms",
    "offset.store.method",
    "offset.store.path",
    "offset.store.sync.interval.ms",
    "partition.assignment.strategy",
    "queued.max.messages.kbytes",
    "queued.min.messages",
    "session.timeout.ms",
];

/// librdkafka's producer-only (`P`) properties, global and topic-level, except
/// the callbacks.
const PRODUCER_ONLY: &[&str] = &[
    "acks",
    "batch.num.messages",
    "batch.size",
    "compression.codec",
    "compression.level",
    "compression.type",
    "delivery.report.only.error",
    "delivery.timeout.ms",
    "enable.gapless.guarantee",
    "enable.idempotence",
    "linger.ms",
    "message.send.max.retries",
    "message.timeout.ms",
    "partitioner",
    "produce.offset.report",
    "queue.buffering.backpressure.threshold",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.messages",
    "queue.buffering.max.ms",
    "queuing.strategy",
    "request.required.acks",
    "request.timeout.ms",
    "retries",
    "sticky.partitioning.linger.ms",
    "transaction.timeout.ms",
    "transactional.id",
];

/// librdkafka's scope of property `key`; [`Scope::All`] when it is not a
/// consumer-only or producer-only one.
pub fn scope(key: &str) -> Scope {
    if CONSUMER_ONLY.contains(&key) {
        Scope::Consumer
    } else if PRODUCER_ONLY.contains(&key) {
        Scope::Producer
    } else {
        Scope::All
    }
}

/// Whether a `-X` entry for `key` goes to a client of `kind`.
pub fn applies(key: &str, kind: ClientKind) -> bool {
    match scope(key) {
        Scope::All => true,
        Scope::Consumer => kind == ClientKind::Consumer,
        Scope::Producer => kind == ClientKind::Producer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_property_goes_where_librdkafka_scopes_it() {
        use ClientKind::{Consumer, Other, Producer};
        for (key, consumer, producer, other) in [
            ("session.timeout.ms", true, false, false),
            ("fetch.max.bytes", true, false, false),
            ("auto.offset.reset", true, false, false),
            ("linger.ms", false, true, false),
            ("compression.type", false, true, false),
            ("acks", false, true, false),
            ("security.protocol", true, true, true),
            ("sasl.password", true, true, true),
            ("socket.timeout.ms", true, true, true),
            // Unknown: everywhere, so librdkafka names it in its refusal.
            ("no.such.property", true, true, true),
        ] {
            assert_eq!(applies(key, Consumer), consumer, "{key} to a consumer");
            assert_eq!(applies(key, Producer), producer, "{key} to a producer");
            assert_eq!(applies(key, Other), other, "{key} to an admin client");
        }
    }

    #[test]
    fn the_tables_are_sorted_and_disjoint() {
        for table in [CONSUMER_ONLY, PRODUCER_ONLY] {
            assert!(table.windows(2).all(|w| w[0] < w[1]), "{table:?}");
        }
        assert!(CONSUMER_ONLY.iter().all(|k| !PRODUCER_ONLY.contains(k)));
    }
}
