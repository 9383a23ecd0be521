//! Which Kafka coordinates (topic, partition, offset) a reader has already returned, so that
//! `inspect` and `replay` see each record once and count the copies they skip.
//!
//! Guarantees: [`ArchiveCoords::first_time`] is true exactly once per coordinate, in any
//! order (archive files are read by path, not by offset, and a crash can file the same
//! record again in a later file). Its memory is one 8-byte offset per distinct coordinate in
//! a hash set: about 10 to 21 bytes each with the table's control bytes and growth slack,
//! so at most about 210 MB for 10 million rows (310 MB while the table doubles, old and new
//! side by side). [`TopicCursor::first_time`] is exact too, in 8 bytes per partition,
//! because a partition's records arrive in offset order: anything below the next offset
//! expected is a re-delivery.

use std::collections::{HashMap, HashSet};

/// Coordinates returned so far from the archive, read in any order.
#[derive(Debug, Default)]
pub(crate) struct ArchiveCoords {
    /// topic → partition → offsets returned.
    seen: HashMap<String, HashMap<i32, HashSet<i64>>>,
    skipped: u64,
}

impl ArchiveCoords {
    /// Whether this coordinate is new; a repeat is counted as skipped.
    pub(crate) fn first_time(&mut self, topic: &str, partition: i32, offset: i64) -> bool {
        // Look up by `&str` so that a known topic costs no allocation per row.
        let partitions = match self.seen.get_mut(topic) {
            Some(p) => p,
            None => self.seen.entry(topic.to_owned()).or_default(),
        };
        let new = partitions.entry(partition).or_default().insert(offset);
        if !new {
            self.skipped += 1;
        }
        new
    }

    /// Repeats skipped so far.
    pub(crate) fn skipped(&self) -> u64 {
        self.skipped
    }
}

/// The next offset expected per partition of one topic read in order.
#[derive(Debug, Default)]
pub(crate) struct TopicCursor {
    next: HashMap<i32, i64>,
    skipped: u64,
}

impl TopicCursor {
    /// Whether `offset` is past everything returned from `partition`; an offset at or below
    /// it (a fetch repeated after an error or an offset reset) is counted as skipped.
    pub(crate) fn first_time(&mut self, partition: i32, offset: i64) -> bool {
        let next = self.next.entry(partition).or_insert(i64::MIN);
        if offset < *next {
            self.skipped += 1;
            return false;
        }
        *next = offset + 1;
        true
    }

    /// Repeats skipped so far.
    pub(crate) fn skipped(&self) -> u64 {
        self.skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_coords_return_each_coordinate_once_in_any_order() {
        let mut seen = ArchiveCoords::default();
        // Two files of partition 0 (tenants a and b interleaved), then the same records
        // filed again after a crash, in another order, plus the same offsets elsewhere.
        let first = [("dlq", 0, 0), ("dlq", 0, 2), ("dlq", 0, 1), ("dlq", 0, 3)];
        let again = [("dlq", 0, 3), ("dlq", 0, 0), ("dlq", 0, 2), ("dlq", 0, 1)];
        let other = [("dlq", 1, 0), ("quarantine", 0, 0)];
        for (t, p, o) in first.into_iter().chain(other) {
            assert!(seen.first_time(t, p, o), "{t}/{p}@{o} is new");
        }
        for (t, p, o) in again.into_iter().chain(other) {
            assert!(!seen.first_time(t, p, o), "{t}/{p}@{o} is a repeat");
        }
        assert_eq!(seen.skipped(), 6);
        assert!(seen.first_time("dlq", 0, 4));
        assert_eq!(seen.skipped(), 6);
    }

    #[test]
    fn topic_cursor_skips_what_a_partition_already_returned() {
        let mut cursor = TopicCursor::default();
        let mut returned = Vec::new();
        // Partition 0 rewinds to 1 after offset 2 (a repeated fetch); partition 1 starts
        // anywhere and is independent.
        for (p, o) in [
            (0, 0),
            (0, 1),
            (1, 7),
            (0, 2),
            (0, 1),
            (0, 2),
            (1, 7),
            (0, 3),
        ] {
            if cursor.first_time(p, o) {
                returned.push((p, o));
            }
        }
        assert_eq!(returned, [(0, 0), (0, 1), (1, 7), (0, 2), (0, 3)]);
        assert_eq!(cursor.skipped(), 3);
    }
}
