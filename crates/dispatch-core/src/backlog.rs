//! The oldest ready record a partition has not fetched, for the oldest-ready
//! and oldest-due gauges. The machine counts what is buffered; a partition held
//! because its buffer share is full (its records in flight) or its writes are
//! pending hides the rest of its backlog from those counts, and the oldest
//! record of that backlog is the one at the partition's position. The engine
//! peeks at it off its loop (`crates/dispatcher/src/engine/peek.rs`); this module decides, without
//! I/O, what to peek at, what an answer means and what it adds.
//!
//! Guarantees (tested below):
//! - a record found counts only while the partition's position is still where
//!   it was found — it is unfetched, held or not; once fetched the machine counts
//!   it (queued) or it is no longer waiting (started), so nothing is counted twice
//!   or after it started;
//! - a partition whose backlog was seen is peeked at again whenever its position
//!   moves, until its end is seen: resuming and fetching on does not hide the
//!   rest of a backlog;
//! - a retry-tier record counts once it is due (`now ≥ due_at`), since when it
//!   has been ready; a first attempt counts at once, since it was made;
//! - one peek per partition and position while a record is found there; the end
//!   of a partition and a failed peek are asked again (at the next refresh, when
//!   the partition is held), so a record written there later is seen.

use std::{collections::BTreeMap, time::SystemTime};

use hookline_core::epoch;
use hookline_envelope::{decode_value, Delivery};

use crate::{
    machine::InputCounts,
    part::{Input, Part},
};

/// What a peek found at (or after) the offset asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peeked {
    /// The first record there: its value.
    Record(Option<Vec<u8>>),
    /// The partition ends there: nothing is unfetched.
    End,
    /// The peek failed or timed out.
    Failed,
}

/// What is known of the record at a partition's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    /// A peek is under way.
    Asked,
    /// A delivery, due at `due`, ready since `ready_since`.
    Found {
        due: SystemTime,
        ready_since: SystemTime,
    },
    /// Not a delivery (the machine quarantines it when it gets there).
    Unusable,
    /// Nothing there yet.
    End,
}

/// The record at the position of each partition that had a backlog, as last
/// peeked.
#[derive(Debug, Default)]
pub struct Backlog {
    heads: BTreeMap<Part, (i64, Head)>,
}

impl Backlog {
    /// What to peek at now. `behind`: every partition held with records
    /// unfetched behind it, and its position (`Machine::unfetched_behind`);
    /// `position`: where any partition's consumer fetches next (`None`: not
    /// assigned). Besides the held ones, a partition whose backlog was seen and
    /// has fetched on since is peeked at again (resumed, it may still be behind);
    /// heads at the end of a partition or of one no longer assigned are dropped.
    /// Report what was sent with [`asked`](Self::asked).
    pub fn peeks_wanted(
        &mut self,
        behind: &[(Part, i64)],
        position: impl Fn(Part) -> Option<i64>,
    ) -> Vec<(Part, i64)> {
        self.heads
            .retain(|part, (_, head)| position(*part).is_some() && !matches!(head, Head::End));
        let mut ask: Vec<(Part, i64)> = self
            .heads
            .iter()
            .filter_map(|(part, (at, _))| {
                let now_at = position(*part)?;
                (now_at != *at).then_some((*part, now_at))
            })
            .collect();
        ask.extend(
            behind
                .iter()
                .filter(|(part, _)| !self.heads.contains_key(part)),
        );
        ask.sort();
        ask
    }

    /// The peeker was asked for these positions.
    pub fn asked(&mut self, positions: &[(Part, i64)]) {
        for (part, at) in positions {
            self.heads.insert(*part, (*at, Head::Asked));
        }
    }

    /// The answer of a peek at `at` on `part`. One for a position no longer
    /// asked about is dropped.
    pub fn peeked(&mut self, part: Part, at: i64, found: Peeked) {
        if self.heads.get(&part).is_none_or(|(asked, _)| *asked != at) {
            return;
        }
        let head = match found {
            Peeked::Record(value) => match decode_value::<Delivery>(value.as_deref()) {
                Ok(d) => Head::Found {
                    due: epoch::from_millis(d.due_at),
                    // As the machine takes it for a fetched record.
                    ready_since: epoch::from_millis(d.due_at.max(d.created_at)),
                },
                Err(_) => Head::Unusable,
            },
            Peeked::End => Head::End,
            Peeked::Failed => {
                self.heads.remove(&part);
                return;
            }
        };
        self.heads.insert(part, (at, head));
    }

    /// Adds the ready records found at partitions' positions to `counts`'
    /// oldest ready time (indexed like `inputs`): a record counts while the
    /// partition's position is still where it was found, i.e. while it is
    /// unfetched (once fetched, the machine counts it).
    pub fn fold(
        &self,
        position: impl Fn(Part) -> Option<i64>,
        inputs: &[Input],
        counts: &mut [InputCounts],
        now: SystemTime,
    ) {
        for (part, (at, head)) in &self.heads {
            let Head::Found { due, ready_since } = head else {
                continue;
            };
            let index = usize::from(part.input);
            let (Some(input), Some(c)) = (inputs.get(index), counts.get_mut(index)) else {
                continue;
            };
            if position(*part) != Some(*at) || (input.retry() && now < *due) {
                continue;
            }
            if c.oldest_ready.is_none_or(|o| *ready_since < o) {
                c.oldest_ready = Some(*ready_since);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hookline_envelope::{encode, fixtures::DeliveryBuilder};

    use super::*;

    const READY: Part = Part {
        input: 0,
        partition: 0,
    };
    const TIER: Part = Part {
        input: 1,
        partition: 3,
    };

    fn inputs() -> Vec<Input> {
        vec![
            Input {
                topic: "deliveries".into(),
                label: "deliveries",
                tier: None,
                strict: false,
                lane: None,
            },
            Input {
                topic: "deliveries.retry-10s".into(),
                label: "retry-10s",
                tier: Some(0),
                strict: false,
                lane: None,
            },
        ]
    }

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    /// A delivery's value, made at `created` and due at `due`.
    fn record(created: u64, due: u64) -> Peeked {
        let ms = |s| epoch::millis(t(s));
        let d = DeliveryBuilder::new("d", "t", "s")
            .event_type("x.y")
            .at(ms(created))
            .due_at(ms(due))
            .build();
        Peeked::Record(Some(encode(&d)))
    }

    /// Positions of assigned partitions.
    #[derive(Default)]
    struct Positions(BTreeMap<Part, i64>);

    impl Positions {
        fn at(&self) -> impl Fn(Part) -> Option<i64> + '_ {
            |p| self.0.get(&p).copied()
        }
    }

    fn oldest(b: &Backlog, pos: &Positions, now: SystemTime) -> Vec<Option<SystemTime>> {
        let mut counts = vec![InputCounts::default(); 2];
        b.fold(pos.at(), &inputs(), &mut counts, now);
        counts.iter().map(|c| c.oldest_ready).collect()
    }

    /// Asks what `peeks_wanted` says, as the engine does; returns it.
    fn ask(b: &mut Backlog, behind: &[(Part, i64)], pos: &Positions) -> Vec<(Part, i64)> {
        let ask = b.peeks_wanted(behind, pos.at());
        b.asked(&ask);
        ask
    }

    #[test]
    fn a_held_partitions_unfetched_head_is_its_oldest_ready_record() {
        let mut b = Backlog::default();
        let pos = Positions([(READY, 40)].into());
        let behind = [(READY, 40)];
        assert_eq!(ask(&mut b, &behind, &pos), vec![(READY, 40)]);
        assert_eq!(
            oldest(&b, &pos, t(100)),
            vec![None, None],
            "not yet answered"
        );
        assert!(ask(&mut b, &behind, &pos).is_empty(), "asked once");
        b.peeked(READY, 40, record(10, 10));
        assert_eq!(oldest(&b, &pos, t(100)), vec![Some(t(10)), None]);
        assert!(
            ask(&mut b, &behind, &pos).is_empty(),
            "a found record is kept"
        );
    }

    #[test]
    fn a_buffered_record_older_than_the_unfetched_head_stays_the_oldest() {
        let mut b = Backlog::default();
        let pos = Positions([(READY, 40)].into());
        ask(&mut b, &[(READY, 40)], &pos);
        b.peeked(READY, 40, record(10, 10));
        let mut counts = vec![InputCounts::default(); 2];
        counts[0].oldest_ready = Some(t(5));
        b.fold(pos.at(), &inputs(), &mut counts, t(100));
        assert_eq!(counts[0].oldest_ready, Some(t(5)));
    }

    #[test]
    fn a_resumed_partition_counts_until_it_fetches_then_is_followed() {
        let mut b = Backlog::default();
        let mut pos = Positions([(READY, 40)].into());
        ask(&mut b, &[(READY, 40)], &pos);
        b.peeked(READY, 40, record(10, 10));
        // Resumed, nothing fetched yet: the record is still unfetched.
        assert_eq!(oldest(&b, &pos, t(100)), vec![Some(t(10)), None]);
        assert!(ask(&mut b, &[], &pos).is_empty());
        // Fetched on to 44, not held: no longer counted, peeked at again.
        pos.0.insert(READY, 44);
        assert_eq!(oldest(&b, &pos, t(100)), vec![None, None]);
        assert_eq!(ask(&mut b, &[], &pos), vec![(READY, 44)]);
        // A late answer for the old position is dropped.
        b.peeked(READY, 40, record(10, 10));
        assert_eq!(oldest(&b, &pos, t(100)), vec![None, None]);
        b.peeked(READY, 44, record(11, 11));
        assert_eq!(oldest(&b, &pos, t(100)), vec![Some(t(11)), None]);
        // Caught up: the end is seen and the partition is no longer followed.
        pos.0.insert(READY, 60);
        assert_eq!(ask(&mut b, &[], &pos), vec![(READY, 60)]);
        b.peeked(READY, 60, Peeked::End);
        assert_eq!(oldest(&b, &pos, t(100)), vec![None, None]);
        assert!(ask(&mut b, &[], &pos).is_empty());
    }

    #[test]
    fn a_partition_no_longer_assigned_is_forgotten() {
        let mut b = Backlog::default();
        let mut pos = Positions([(READY, 40)].into());
        ask(&mut b, &[(READY, 40)], &pos);
        b.peeked(READY, 40, record(10, 10));
        pos.0.clear();
        assert!(ask(&mut b, &[], &pos).is_empty());
        pos.0.insert(READY, 40);
        assert_eq!(oldest(&b, &pos, t(100)), vec![None, None]);
        assert_eq!(
            ask(&mut b, &[(READY, 40)], &pos),
            vec![(READY, 40)],
            "held again: asked again"
        );
    }

    #[test]
    fn what_was_not_asked_is_asked_at_the_next_refresh() {
        let mut b = Backlog::default();
        let pos = Positions([(READY, 40)].into());
        assert_eq!(b.peeks_wanted(&[(READY, 40)], pos.at()), vec![(READY, 40)]);
        // The peeker was busy: nothing marked asked.
        assert_eq!(b.peeks_wanted(&[(READY, 40)], pos.at()), vec![(READY, 40)]);
    }

    #[test]
    fn a_tier_record_counts_from_its_due_time_once_due() {
        let mut b = Backlog::default();
        let pos = Positions([(TIER, 7)].into());
        ask(&mut b, &[(TIER, 7)], &pos);
        b.peeked(TIER, 7, record(10, 20));
        assert_eq!(oldest(&b, &pos, t(19)), vec![None, None], "not due");
        assert_eq!(oldest(&b, &pos, t(20)), vec![None, Some(t(20))]);
        assert_eq!(oldest(&b, &pos, t(90)), vec![None, Some(t(20))]);
    }

    #[test]
    fn the_end_and_failures_are_asked_again_an_unusable_record_is_not() {
        let mut b = Backlog::default();
        let pos = Positions([(READY, 40), (TIER, 7)].into());
        let behind = [(READY, 40), (TIER, 7)];
        ask(&mut b, &behind, &pos);
        b.peeked(READY, 40, Peeked::End);
        b.peeked(TIER, 7, Peeked::Failed);
        assert_eq!(oldest(&b, &pos, t(100)), vec![None, None]);
        assert_eq!(ask(&mut b, &behind, &pos), vec![(READY, 40), (TIER, 7)]);
        b.peeked(READY, 40, Peeked::Record(Some(b"not avro".to_vec())));
        b.peeked(TIER, 7, Peeked::Record(None));
        assert_eq!(oldest(&b, &pos, t(100)), vec![None, None]);
        assert!(ask(&mut b, &behind, &pos).is_empty());
    }

    #[test]
    fn the_oldest_of_several_partitions_of_an_input_wins() {
        let other = Part {
            input: 0,
            partition: 1,
        };
        let mut b = Backlog::default();
        let pos = Positions([(READY, 40), (other, 5)].into());
        ask(&mut b, &[(READY, 40), (other, 5)], &pos);
        b.peeked(READY, 40, record(30, 30));
        b.peeked(other, 5, record(12, 12));
        assert_eq!(oldest(&b, &pos, t(100)), vec![Some(t(12)), None]);
    }
}
