//! At-least-once offsets: the committable offset of a partition never passes its
//! lowest tracked-but-unfinished record, so a crash re-attempts work instead of
//! losing it; and while only `track`/`finish` are called it never moves backwards.
//!
//! Kafka semantics: the committed offset is the next offset to read. Offsets are
//! tracked in increasing order but may have gaps (transaction markers, compaction);
//! an untracked offset between two tracked ones is such a gap and never blocks.

use std::collections::BTreeSet;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatermarkError {
    #[error("offset {offset} is negative")]
    Negative { offset: i64 },
    #[error("offset {offset} tracked after {last}; offsets must be tracked in increasing order")]
    NotIncreasing { offset: i64, last: i64 },
    #[error("offset {offset} is not tracked and unfinished (finished twice, never tracked, or dropped by a reset)")]
    NotTracked { offset: i64 },
}

/// Offset tracking for one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionWatermark {
    /// Tracked and not yet finished.
    pending: BTreeSet<i64>,
    /// First and last offset tracked since construction or the last full reset.
    first_tracked: Option<i64>,
    last_tracked: Option<i64>,
}

impl PartitionWatermark {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts tracking a consumed record. Must be greater than every offset tracked
    /// before (since construction or the last [`reset_to`](Self::reset_to)).
    pub fn track(&mut self, offset: i64) -> Result<(), WatermarkError> {
        if offset < 0 {
            return Err(WatermarkError::Negative { offset });
        }
        if let Some(last) = self.last_tracked {
            if offset <= last {
                return Err(WatermarkError::NotIncreasing { offset, last });
            }
        }
        self.pending.insert(offset);
        self.first_tracked.get_or_insert(offset);
        self.last_tracked = Some(offset);
        Ok(())
    }

    /// Marks a tracked record as done (delivered, dead-lettered, cancelled…), in any order.
    pub fn finish(&mut self, offset: i64) -> Result<(), WatermarkError> {
        if self.pending.remove(&offset) {
            Ok(())
        } else {
            Err(WatermarkError::NotTracked { offset })
        }
    }

    /// The offset to commit: the lowest unfinished offset, or one past the last
    /// tracked offset when all are finished; `None` when nothing is tracked.
    pub fn committable(&self) -> Option<i64> {
        self.pending
            .first()
            .copied()
            .or_else(|| self.last_tracked.map(|last| last + 1))
    }

    /// For a seek back to `offset`: forgets every tracked offset ≥ `offset` (they
    /// will be fetched and tracked again) and returns how many unfinished ones were
    /// dropped. Afterwards `committable() ≤ offset`, and offsets from `offset` on
    /// may be tracked again. A finish for a dropped offset returns `NotTracked`.
    pub fn reset_to(&mut self, offset: i64) -> usize {
        let dropped = self.pending.split_off(&offset).len();
        match self.first_tracked {
            Some(first) if first < offset => {
                self.last_tracked = self.last_tracked.map(|last| last.min(offset - 1));
            }
            _ => {
                self.first_tracked = None;
                self.last_tracked = None;
            }
        }
        dropped
    }

    /// Tracked records not yet finished (queued or being attempted).
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    pub fn last_tracked(&self) -> Option<i64> {
        self.last_tracked
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone, Copy)]
    enum Op {
        Track(i64),
        Finish(i64),
        Reset(i64),
    }
    use Op::*;

    fn apply(ops: &[Op]) -> PartitionWatermark {
        let mut w = PartitionWatermark::new();
        for op in ops {
            match *op {
                Track(o) => w.track(o).unwrap(),
                Finish(o) => w.finish(o).unwrap(),
                Reset(o) => {
                    w.reset_to(o);
                }
            }
        }
        w
    }

    #[test]
    fn committable_table() {
        let cases: &[(&[Op], Option<i64>, usize)] = &[
            (&[], None, 0),
            (&[Track(5)], Some(5), 1),
            (&[Track(5), Finish(5)], Some(6), 0),
            (&[Track(5), Track(6), Finish(6)], Some(5), 1),
            (&[Track(5), Track(6), Finish(5)], Some(6), 1),
            // Gaps (transaction markers, compaction) never block.
            (&[Track(5), Track(9), Finish(5)], Some(9), 1),
            (&[Track(5), Track(9), Finish(9), Finish(5)], Some(10), 0),
            (
                &[Track(0), Track(1), Track(2), Finish(2), Finish(0)],
                Some(1),
                1,
            ),
            // Seek back to a paused head: the head and everything after it are dropped.
            (
                &[Track(1), Track(2), Track(3), Finish(1), Reset(2)],
                Some(2),
                0,
            ),
            (&[Track(1), Track(2), Track(3), Reset(2)], Some(1), 1),
            (&[Track(1), Track(5), Finish(1), Reset(5)], Some(5), 0),
            // Seeking past what was tracked keeps the conservative position.
            (&[Track(1), Finish(1), Reset(10)], Some(2), 0),
            // Dropping everything tracked is a full reset.
            (&[Track(4), Track(5), Reset(4)], None, 0),
            (&[Track(4), Finish(4), Reset(0)], None, 0),
            // Re-tracking after a reset starts from the seek target.
            (
                &[Track(1), Track(2), Finish(1), Reset(2), Track(2), Finish(2)],
                Some(3),
                0,
            ),
            (&[Track(4), Reset(4), Track(4)], Some(4), 1),
        ];
        for (ops, committable, in_flight) in cases {
            let w = apply(ops);
            assert_eq!(w.committable(), *committable, "{ops:?}");
            assert_eq!(w.in_flight(), *in_flight, "{ops:?}");
        }
    }

    #[test]
    fn error_table() {
        let cases: &[(&[Op], Op, WatermarkError)] = &[
            (&[], Track(-1), WatermarkError::Negative { offset: -1 }),
            (
                &[Track(5)],
                Track(5),
                WatermarkError::NotIncreasing { offset: 5, last: 5 },
            ),
            (
                &[Track(5)],
                Track(4),
                WatermarkError::NotIncreasing { offset: 4, last: 5 },
            ),
            (
                &[Track(5), Finish(5)],
                Track(3),
                WatermarkError::NotIncreasing { offset: 3, last: 5 },
            ),
            (&[], Finish(1), WatermarkError::NotTracked { offset: 1 }),
            (
                &[Track(1), Finish(1)],
                Finish(1),
                WatermarkError::NotTracked { offset: 1 },
            ),
            (
                &[Track(1), Track(2), Reset(2)],
                Finish(2),
                WatermarkError::NotTracked { offset: 2 },
            ),
        ];
        for (setup, op, expected) in cases {
            let mut w = apply(setup);
            let before = w.clone();
            let got = match *op {
                Track(o) => w.track(o),
                Finish(o) => w.finish(o),
                Reset(_) => unreachable!(),
            };
            assert_eq!(got, Err(expected.clone()), "{setup:?} then {op:?}");
            assert_eq!(w, before, "a refused call must not change state");
        }
    }

    #[test]
    fn reset_reports_dropped_unfinished_records() {
        let mut w = apply(&[Track(1), Track(2), Track(3), Track(4), Finish(3)]);
        assert_eq!(w.reset_to(2), 2); // 2 and 4; 3 was finished
        assert_eq!(w.last_tracked(), Some(1));
    }

    /// Increasing offsets with gaps, and for each step which pending one to finish.
    fn scenario() -> impl Strategy<Value = (Vec<i64>, Vec<(bool, usize)>)> {
        (
            prop::collection::vec(1i64..4, 1..60).prop_map(|gaps| {
                gaps.iter()
                    .scan(0i64, |o, g| {
                        *o += g;
                        Some(*o)
                    })
                    .collect()
            }),
            prop::collection::vec((any::<bool>(), any::<usize>()), 0..200),
        )
    }

    proptest! {
        #[test]
        fn committable_never_passes_lowest_unfinished_and_never_regresses(
            (offsets, steps) in scenario()
        ) {
            let mut w = PartitionWatermark::new();
            let mut next = offsets.iter();
            let mut pending: BTreeSet<i64> = BTreeSet::new();
            let mut last = None;
            let mut previous: Option<i64> = None;
            for (track, pick) in steps {
                if track || pending.is_empty() {
                    let Some(&o) = next.next() else { continue };
                    w.track(o).unwrap();
                    pending.insert(o);
                    last = Some(o);
                } else {
                    let o = *pending.iter().nth(pick % pending.len()).unwrap();
                    w.finish(o).unwrap();
                    pending.remove(&o);
                }
                let c = w.committable();
                if let Some(&lowest) = pending.first() {
                    prop_assert_eq!(c, Some(lowest));
                } else {
                    prop_assert_eq!(c, last.map(|l| l + 1));
                }
                prop_assert!(c >= previous, "regressed from {:?} to {:?}", previous, c);
                previous = c;
                prop_assert_eq!(w.in_flight(), pending.len());
            }
        }

        #[test]
        fn reset_never_lets_committable_pass_the_seek_target(
            (offsets, steps) in scenario(), target in 0i64..200
        ) {
            let mut w = PartitionWatermark::new();
            let mut pending = BTreeSet::new();
            for (&o, (finish, _)) in offsets.iter().zip(steps.iter().chain(std::iter::repeat(&(false, 0)))) {
                w.track(o).unwrap();
                if *finish { w.finish(o).unwrap(); } else { pending.insert(o); }
            }
            let dropped = w.reset_to(target);
            prop_assert_eq!(dropped, pending.range(target..).count());
            if let Some(c) = w.committable() {
                prop_assert!(c <= target);
                if let Some(&lowest) = pending.first() {
                    prop_assert!(c <= lowest);
                }
            }
            // Everything from the target on can be tracked again.
            prop_assert_eq!(w.track(target), Ok(()));
        }
    }
}
