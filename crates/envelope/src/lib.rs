//! The hookline contract: record types, the Avro single-object codec, delivery ids and
//! topic names. Every byte hookline writes to Kafka is produced and read through this crate,
//! and `schemas/*.avsc` at the repository root are the source of truth it is tested against.
//!
//! - [`records`]: the Rust types, field for field the schemas.
//! - [`schema`]: the schemas, their fingerprints and the registry of known writer versions.
//! - [`codec`]: `C3 01` + fingerprint + datum; [`encode`] and [`decode`].
//! - [`ids`]: [`delivery_id`], the stable `webhook-id`.
//! - [`quarantine`]: [`decode_value`] and [`Unusable::quarantine`], how every stage turns a
//!   record it cannot use into a [`QuarantinedEvent`].
//! - [`topics`]: [`Topics`], every topic name from a prefix and the retry ladder.
//!
//! No Kafka and no async here: other crates build on these values.

pub mod codec;
pub mod fixtures;
mod guard;
mod header;
pub mod ids;
pub mod quarantine;
pub mod records;
pub mod schema;
pub mod subscription_state;
pub mod topics;

pub use codec::{
    decode, encode, fingerprint_of, kind_of, DatumError, DecodeError, HEADER_LEN, MAGIC,
};
pub use ids::{delivery_id, DELIVERY_ID_NAMESPACE, DELIVERY_ID_PREFIX};
pub use quarantine::{decode_value, error_chain, SourceRecord, Unusable};
pub use records::{
    bounded_detail, truncate_detail, AttemptRecord, DeadLetter, Delivery, DomainEvent,
    EndpointHealth, QuarantineReason, QuarantinedEvent, QuarantinedHeader, Record, ReplayOf,
    Subscription, MAX_ATTEMPT_DETAIL_BYTES, MAX_DETAIL_BYTES, ORDERING_STRICT, ORDERING_UNORDERED,
};
pub use schema::{crc64_avro, KnownSchema, RecordKind, Registry, SchemaError, HISTORY};
pub use topics::{TopicError, Topics, DEFAULT_RETRY_TIERS, OVERFLOW_LANES};
