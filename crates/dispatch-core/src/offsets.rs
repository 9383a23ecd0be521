//! The one home of offsets: each assigned partition's watermark (the lowest
//! offset not yet finished). Only a watermark is ever committed, and only in a
//! transaction with the follow-ups of the records below it (`crates/dispatcher/src/engine/commit.rs`),
//! so the committed offset never passes a record that is queued, in flight, or
//! whose follow-up is not committed with it: a crash re-attempts (with the same
//! `webhook-id`) rather than loses.

use std::collections::BTreeMap;

use hookline_core::{PartitionWatermark, WatermarkError};

use crate::part::Part;

#[derive(Debug, Default)]
struct Tracked {
    watermark: PartitionWatermark,
    /// The offset last committed for this partition.
    committed: Option<i64>,
}

/// Watermarks of the assigned partitions.
#[derive(Debug, Default)]
pub struct Offsets {
    parts: BTreeMap<Part, Tracked>,
}

impl Offsets {
    /// Starts a partition afresh (on assignment): it is read from its committed offset.
    pub fn assign(&mut self, part: Part) {
        self.parts.insert(part, Tracked::default());
    }

    pub fn track(&mut self, part: Part, offset: i64) -> Result<(), WatermarkError> {
        self.parts.entry(part).or_default().watermark.track(offset)
    }

    /// Marks a record done; a partition no longer assigned is ignored.
    pub fn finish(&mut self, part: Part, offset: i64) -> Result<(), WatermarkError> {
        match self.parts.get_mut(&part) {
            Some(t) => t.watermark.finish(offset),
            None => Ok(()),
        }
    }

    /// The lowest unfinished offset of `part`, or one past the last tracked.
    pub fn committable(&self, part: Part) -> Option<i64> {
        self.parts.get(&part)?.watermark.committable()
    }

    /// The next offset the partition's consumer fetches: one past the last
    /// tracked (`None` when nothing is tracked since the assignment or a full
    /// reset).
    pub fn next_to_fetch(&self, part: Part) -> Option<i64> {
        Some(self.parts.get(&part)?.watermark.last_tracked()? + 1)
    }

    /// For a seek back to `offset`: forgets that offset and every later one (they
    /// are fetched and tracked again), via `PartitionWatermark::reset_to`, so the
    /// committed offset never passes them. Returns how many unfinished were dropped.
    pub fn reset_to(&mut self, part: Part, offset: i64) -> usize {
        self.parts
            .get_mut(&part)
            .map_or(0, |t| t.watermark.reset_to(offset))
    }

    /// Whether `part` has a watermark: assigned, or revoked and not yet
    /// [`forget`](Self::forget)-ten (its revoke's final commit still carries
    /// its offset).
    pub fn is_tracked(&self, part: Part) -> bool {
        self.parts.contains_key(&part)
    }

    /// Forgets partitions (after their final commit on revoke).
    pub fn forget(&mut self, parts: &[Part]) {
        for p in parts {
            self.parts.remove(p);
        }
    }

    /// What the next transaction commits: each partition's watermark, but no
    /// further than `cap` (the offset of its first record whose follow-up is
    /// not in that transaction), where that is past what was last committed.
    pub fn to_commit(&self, cap: impl Fn(Part) -> Option<i64>) -> Vec<(Part, i64)> {
        self.parts
            .iter()
            .filter_map(|(part, t)| {
                let committable = t.watermark.committable()?;
                let offset = cap(*part).map_or(committable, |c| c.min(committable));
                t.committed
                    .is_none_or(|done| offset > done)
                    .then_some((*part, offset))
            })
            .collect()
    }

    /// Records offsets as committed (their transaction committed); a partition
    /// no longer assigned is ignored.
    pub fn committed(&mut self, offsets: &[(Part, i64)]) {
        for (part, offset) in offsets {
            if let Some(t) = self.parts.get_mut(part) {
                t.committed = Some(*offset);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Part = Part {
        input: 0,
        partition: 2,
    };

    #[test]
    fn to_commit_stops_at_the_cap_and_never_goes_back() {
        let mut o = Offsets::default();
        o.assign(P);
        for offset in 10..15 {
            o.track(P, offset).unwrap();
        }
        assert_eq!(o.to_commit(|_| None), vec![(P, 10)], "nothing finished");
        o.committed(&[(P, 10)]);
        assert!(o.to_commit(|_| None).is_empty(), "already committed");
        for offset in [10, 11, 12, 14] {
            o.finish(P, offset).unwrap();
        }
        assert_eq!(o.to_commit(|_| None), vec![(P, 13)], "the watermark");
        // A finished record whose hand-off is left out of the transaction.
        assert_eq!(o.to_commit(|_| Some(11)), vec![(P, 11)]);
        o.committed(&[(P, 11)]);
        assert!(o.to_commit(|_| Some(11)).is_empty(), "already committed");
        assert!(o.to_commit(|_| Some(5)).is_empty(), "never backwards");
        o.finish(P, 13).unwrap();
        assert_eq!(o.to_commit(|_| None), vec![(P, 15)]);
        assert_eq!(
            o.to_commit(|_| Some(99)),
            vec![(P, 15)],
            "a cap past the watermark"
        );
    }
}
