//! Reading past a bursting tenant: the adapter half of
//! [`hookline_core::read_past`]. The loop's group consumer is the *front*
//! reader; a partition with a tenant read past gets a *back* reader here, a
//! group-less `read_committed` consumer assigned to the same partition from
//! the lowest read-past tenant's offset, which hands the loop that tenant's
//! records to fan out at a share of each transaction.
//!
//! What is done above the committed offset rides in the offset's metadata,
//! written in the same transaction as the offset ([`encode`]), with the
//! admission window's stream time, so a new owner of the partition knows
//! which records the previous one already fanned out ([`decode`]). Metadata
//! written by an older release (the stream time alone) reads as a checkpoint
//! with nothing read past.

use std::time::Duration;

use hookline_core::read_past::{Checkpoint, ReadPast};
use hookline_runtime::{config::CommonArgs, kafka, RuntimeError};
use rdkafka::{
    consumer::{BaseConsumer, Consumer},
    message::OwnedMessage,
    Message, Offset, TopicPartitionList,
};

/// Metadata written before reading past existed: the stream time alone.
const V1: &str = "hookline.dedup.v1;stream_time=";
/// `hookline.fanout.v2;stream_time=<ms or ->;front=<offset>;past=` then, per
/// read-past tenant, `<offset>:<bytes>:<tenant id>`.
const V2: &str = "hookline.fanout.v2;stream_time=";
/// Kept below the broker's default `offset.metadata.max.bytes` (4,096): a
/// tenant is not read past if its id would take the metadata past this.
pub(crate) const MAX_METADATA_BYTES: usize = 3_072;

/// Whether `tenant` can be read past on `past`'s partition without the
/// committed metadata outgrowing [`MAX_METADATA_BYTES`]: a generous bound of
/// the numbers' digits per tenant, plus the ids.
pub(crate) fn room_for(past: &ReadPast, tenant: &str) -> bool {
    const FIXED: usize = V2.len() + 64;
    const PER_TENANT: usize = 2 * 20 + 2;
    let ids: usize = past.tenants().map(|(t, _)| t.len()).sum();
    let tenants = past.behind() + 1;
    FIXED + tenants * PER_TENANT + ids + tenant.len() <= MAX_METADATA_BYTES
}

/// The metadata to commit with `checkpoint.watermark`.
pub(crate) fn encode(checkpoint: &Checkpoint) -> String {
    use std::fmt::Write;
    let mut s = String::from(V2);
    match checkpoint.stream_time {
        Some(t) => {
            let _ = write!(s, "{t}");
        }
        None => s.push('-'),
    }
    let _ = write!(s, ";front={};past=", checkpoint.front);
    for (tenant, from) in &checkpoint.tenants {
        let _ = write!(s, "{from}:{}:{tenant}", tenant.len());
    }
    s
}

/// What a committed offset's metadata says, with the committed `offset`:
/// `None` when hookline did not write it (the window then reaches back from
/// now, and nothing above the offset is done).
pub(crate) fn decode(metadata: &str, offset: i64) -> Option<Checkpoint> {
    if let Some(t) = metadata.strip_prefix(V1) {
        return Some(Checkpoint {
            watermark: offset,
            front: offset,
            tenants: Vec::new(),
            stream_time: Some(t.parse().ok()?),
        });
    }
    let rest = metadata.strip_prefix(V2)?;
    let (stream_time, rest) = rest.split_once(";front=")?;
    let stream_time = match stream_time {
        "-" => None,
        t => Some(t.parse().ok()?),
    };
    let (front, mut past) = rest.split_once(";past=")?;
    let front: i64 = front.parse().ok()?;
    let mut tenants = Vec::new();
    while !past.is_empty() {
        let (from, rest) = past.split_once(':')?;
        let (len, rest) = rest.split_once(':')?;
        let len: usize = len.parse().ok()?;
        let tenant = rest.get(..len)?;
        tenants.push((tenant.to_owned(), from.parse().ok()?));
        past = &rest[len..];
    }
    Some(Checkpoint {
        watermark: offset,
        front: front.max(offset),
        tenants,
        stream_time,
    })
}

/// The back reader of one partition.
pub(crate) struct BackReader {
    consumer: BaseConsumer,
    /// A record the front has not read yet, handed back by the loop: offered
    /// again first, and nothing after it is polled meanwhile.
    held: Option<OwnedMessage>,
}

impl std::fmt::Debug for BackReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackReader")
            .field("held", &self.held.as_ref().map(Message::offset))
            .finish_non_exhaustive()
    }
}

impl BackReader {
    /// A reader of `topic`'s `partition` from `offset` on.
    pub(crate) fn new(
        common: &CommonArgs,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<Self, RuntimeError> {
        let err = |e| RuntimeError::kafka("creating a read-past reader".to_owned(), e);
        let consumer: BaseConsumer =
            kafka::reader_config(common, "hookline-fanout-read-past", kafka::AtEnd::Quiet)?
                .create()
                .map_err(err)?;
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(topic, partition, Offset::Offset(offset))
            .map_err(err)?;
        consumer.assign(&assignment).map_err(err)?;
        Ok(Self {
            consumer,
            held: None,
        })
    }

    /// The next record, if one is ready: the held one first. Errors are
    /// logged and end the poll (the next poll tries again).
    pub(crate) fn next(&mut self) -> Option<OwnedMessage> {
        if let Some(held) = self.held.take() {
            return Some(held);
        }
        match self.consumer.poll(Duration::ZERO)? {
            Ok(msg) => Some(msg.detach()),
            Err(error) => {
                tracing::warn!(%error, "read-past reader error");
                None
            }
        }
    }

    /// Keeps `msg` (the front has not read it yet) to be offered again.
    pub(crate) fn hold(&mut self, msg: OwnedMessage) {
        self.held = Some(msg);
    }

    /// The offset of the held record, if one is held.
    pub(crate) fn held_at(&self) -> Option<i64> {
        self.held.as_ref().map(Message::offset)
    }

    /// Closes the reader off the runtime (destroying a librdkafka client blocks).
    pub(crate) fn close(self) {
        tokio::task::spawn_blocking(move || drop(self));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_survives_its_metadata() {
        let c = Checkpoint {
            watermark: 7,
            front: 90,
            tenants: vec![("whale".into(), 7), ("a:b;c=".into(), 40), ("".into(), 80)],
            stream_time: Some(1_700_000_000_000),
        };
        assert_eq!(decode(&encode(&c), 7), Some(c.clone()));
        let none = Checkpoint {
            stream_time: None,
            tenants: Vec::new(),
            ..c
        };
        assert_eq!(decode(&encode(&none), 7), Some(none));
    }

    #[test]
    fn a_tenant_is_read_past_only_while_the_metadata_has_room() {
        let mut past = ReadPast::default();
        past.front(0, "x", (None, None));
        let long = "t".repeat(1_000);
        assert!(room_for(&past, &long));
        past.promote(&long);
        past.promote(&"u".repeat(1_000));
        assert!(!room_for(&past, &"v".repeat(1_000)));
        assert!(room_for(&past, "small"));
        // What room_for allows always encodes within the bound.
        past.promote("small");
        past.front(1, "y", (Some(i64::MAX), Some(i64::MAX)));
        let c = past.checkpoint().expect("checkpoint");
        assert!(
            encode(&c).len() <= MAX_METADATA_BYTES,
            "{}",
            encode(&c).len()
        );
    }

    #[test]
    fn an_older_releases_metadata_is_the_stream_time_alone() {
        assert_eq!(
            decode("hookline.dedup.v1;stream_time=123", 9),
            Some(Checkpoint {
                watermark: 9,
                front: 9,
                tenants: Vec::new(),
                stream_time: Some(123),
            })
        );
    }

    #[test]
    fn foreign_or_damaged_metadata_is_none() {
        for m in [
            "",
            "something else",
            "hookline.fanout.v2;stream_time=x;front=1;past=",
            "hookline.fanout.v2;stream_time=1;front=2;past=5:9:ab",
            "hookline.fanout.v2;stream_time=1;front=2;past=5:ab",
        ] {
            assert_eq!(decode(m, 1), None, "{m}");
        }
    }
}
