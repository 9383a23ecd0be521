//! Reading past a bursting tenant at fanout: one `events` partition's
//! progress when two readers share it. Pure state, offsets passed in.
//!
//! A partition of `events` is read in order, so without this a tenant's bulk
//! import delays every tenant behind it on the partition for as long as fanout
//! takes to fan the import out. Instead, a tenant the burst router promotes
//! (`crate::burst`) is *read past*: from the offset the front reader had
//! reached when it was promoted, the front reader only judges its records (the
//! duplicate-admission window sees every record in offset order, whoever fans
//! it out) and leaves them; a back reader on the same partition fans them out,
//! in order, at a share of each transaction. So a small tenant behind the
//! import waits only for the front to *read* past it.
//!
//! Guarantees:
//! - **Nothing is lost, nothing doubled.** The committed offset is the
//!   [`watermark`](ReadPast::watermark): the lowest record not yet fanned out,
//!   the front's or a read-past tenant's. What lies above it that is already
//!   done is told by the [`Checkpoint`] committed with it in the same
//!   transaction: every record below `front` is done except a read-past
//!   tenant's at or above its own offset. A new owner restores it
//!   ([`ReadPast::restore`]) and skips what is done ([`FrontVerdict::Done`]).
//! - **A tenant's order is kept.** Its records are fanned out by the front
//!   below its promotion offset and by the back from there on, each reader in
//!   offset order; the back never takes a record the front has not read, and a
//!   tenant leaves the back ([`ReadPast::settle`]) only once the back has
//!   caught up with the front, so no later record of it can overtake an
//!   earlier one, across promotion and demotion alike.
//! - **The admission window stays exact.** The front judges every record in
//!   offset order; the back only carries out the front's verdict
//!   ([`ReadPast::judged`], kept for the records that are not admitted). The
//!   stream time a rebuild reaches back from is the one before the watermark
//!   (or earlier), from the checkpoints the front leaves every
//!   [`CHECKPOINT_EVERY`] records, so a rebuilt window sees at least what the
//!   live one had.
//! - **Bounded.** At most the router's ceiling of tenants is read past (the
//!   caller promotes only what the router promotes). The front keeps no
//!   record it reads past: only a verdict for each one not admitted (a
//!   duplicate) and a checkpoint every [`CHECKPOINT_EVERY`] records, until
//!   the back has taken them. What it costs to be far ahead is the re-reading
//!   after a crash: a new owner reads again from the watermark.

use std::collections::{BTreeMap, VecDeque};

use crate::admission::Admission;

/// The front leaves a (offset, stream time) checkpoint every this many records.
pub const CHECKPOINT_EVERY: u64 = 1_024;

/// What the front does with a record it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontVerdict {
    /// Fan it out now.
    FanOut,
    /// A read-past tenant's: judge it and leave it to the back.
    Back,
    /// Fanned out before a restart (the restored checkpoint says so): judge it,
    /// write nothing.
    Done,
}

/// What the back does with a record it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackVerdict {
    /// A read-past tenant's: fan it out with the front's verdict.
    FanOut(Admission),
    /// Not the back's (another tenant's, or below the tenant's offset).
    Skip,
    /// The front has not read it yet: keep it and try again later.
    Wait,
}

/// What is committed with the watermark, in the offset's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The offset to commit: the lowest record not yet fanned out.
    pub watermark: i64,
    /// The front's position: records below it are done but for the tenants'.
    pub front: i64,
    /// Read-past tenants and the offset from which their records are not done.
    pub tenants: Vec<(String, i64)>,
    /// A stream time at or before the watermark's record, for the rebuild.
    pub stream_time: Option<i64>,
}

/// One partition's read-past progress.
#[derive(Debug, Clone, Default)]
pub struct ReadPast {
    /// The next offset the front reads (every record below it is judged).
    front: Option<i64>,
    /// Read-past tenants: the offset from which their records are the back's
    /// and not yet taken.
    behind: BTreeMap<String, i64>,
    /// Restored: records below it were judged before a restart; done unless a
    /// read-past tenant's at or above its offset.
    done_below: i64,
    /// Verdicts the front gave read-past records other than `Admit`.
    judged: BTreeMap<i64, Admission>,
    /// (offset, stream time before it), every `CHECKPOINT_EVERY` records.
    checkpoints: VecDeque<(i64, Option<i64>)>,
    /// The stream time before the front's position (at or before it).
    stream_time: Option<i64>,
    /// Records the front has read.
    reads: u64,
}

impl ReadPast {
    /// A partition whose committed checkpoint, if any, is `restored` (from a
    /// previous owner); its front starts at the committed offset.
    pub fn restore(restored: Option<Checkpoint>) -> Self {
        let Some(c) = restored else {
            return Self::default();
        };
        Self {
            front: Some(c.watermark),
            done_below: c.front,
            behind: c
                .tenants
                .into_iter()
                .filter(|(_, offset)| *offset < c.front)
                .collect(),
            checkpoints: VecDeque::from([(c.watermark, c.stream_time)]),
            stream_time: c.stream_time,
            judged: BTreeMap::new(),
            reads: 1,
        }
    }

    /// The front reads the record at `offset` of `tenant`; `stream_times` are
    /// the admission window's before and after it. Call in offset order, for
    /// every record.
    pub fn front(
        &mut self,
        offset: i64,
        tenant: &str,
        stream_times: (Option<i64>, Option<i64>),
    ) -> FrontVerdict {
        let (before, after) = stream_times;
        // Offsets have gaps (transaction markers, compaction): count reads.
        if self.reads % CHECKPOINT_EVERY == 0 {
            self.checkpoints.push_back((offset, before));
        }
        self.reads += 1;
        self.front = Some(offset + 1);
        self.stream_time = after;
        match self.behind.get(tenant) {
            Some(&from) if offset >= from => FrontVerdict::Back,
            _ if offset < self.done_below => FrontVerdict::Done,
            _ => FrontVerdict::FanOut,
        }
    }

    /// The front judged a read-past record other than `Admit`: the back
    /// carries that verdict out.
    pub fn judged(&mut self, offset: i64, admission: Admission) {
        if admission != Admission::Admit {
            self.judged.insert(offset, admission);
        }
    }

    /// The back reads the record at `offset` of `tenant`.
    pub fn back(&mut self, offset: i64, tenant: &str) -> BackVerdict {
        if self.front.is_none_or(|front| offset >= front) {
            return BackVerdict::Wait;
        }
        let mine = self.behind.get(tenant).is_some_and(|&from| offset >= from);
        // The back has passed `offset`: no tenant's record below it is left.
        for from in self.behind.values_mut() {
            *from = (*from).max(offset + 1);
        }
        if !mine {
            return BackVerdict::Skip;
        }
        BackVerdict::FanOut(self.judged.remove(&offset).unwrap_or(Admission::Admit))
    }

    /// Reads `tenant` past from the front's position on (no-op if it is already);
    /// after a restore, from where the previous owner's front was, since its
    /// records below that are done. Returns whether it is newly read past.
    pub fn promote(&mut self, tenant: &str) -> bool {
        let Some(front) = self.reach() else {
            return false;
        };
        if self.behind.contains_key(tenant) {
            return false;
        }
        self.behind.insert(tenant.to_owned(), front);
        true
    }

    /// How far records are judged: the front's position, or, after a restore,
    /// the previous owner's if the front has not re-read that far yet.
    fn reach(&self) -> Option<i64> {
        self.front.map(|front| front.max(self.done_below))
    }

    /// Ends reading past the tenants the back has caught up with (nothing of
    /// theirs below the front is left) and that `keep` no longer wants read
    /// past; returns them. Their next records are the front's again.
    pub fn settle(&mut self, keep: impl Fn(&str) -> bool) -> Vec<String> {
        let front = self.reach().unwrap_or(i64::MIN);
        let done: Vec<String> = self
            .behind
            .iter()
            .filter(|(t, &from)| from >= front && !keep(t))
            .map(|(t, _)| t.clone())
            .collect();
        for t in &done {
            self.behind.remove(t);
        }
        done
    }

    /// Whether the front has read the record at `offset`.
    pub fn has_read(&self, offset: i64) -> bool {
        self.front.is_some_and(|front| offset < front)
    }

    /// Whether `tenant` is read past.
    pub fn is_behind(&self, tenant: &str) -> bool {
        self.behind.contains_key(tenant)
    }

    /// The tenants read past, each with the offset from which its records
    /// are not taken yet.
    pub fn tenants(&self) -> impl Iterator<Item = (&str, i64)> {
        self.behind.iter().map(|(t, &from)| (t.as_str(), from))
    }

    /// How far records are judged (the front's position; after a restore, the
    /// previous owner's until the front has re-read that far).
    pub fn position(&self) -> Option<i64> {
        self.reach()
    }

    /// Tenants read past.
    pub fn behind(&self) -> usize {
        self.behind.len()
    }

    /// Where the back reads from: the lowest read-past tenant's offset, if the
    /// back has anything to do.
    pub fn back_from(&self) -> Option<i64> {
        let front = self.reach()?;
        self.behind.values().copied().filter(|&o| o < front).min()
    }

    /// Records the front is ahead of the watermark.
    pub fn ahead(&self) -> i64 {
        match self.front {
            Some(front) => front - self.watermark().unwrap_or(front),
            None => 0,
        }
    }

    /// The lowest record not yet fanned out (taken by a reader).
    pub fn watermark(&self) -> Option<i64> {
        let front = self.front?;
        Some(self.behind.values().fold(front, |w, &from| w.min(from)))
    }

    /// What to commit now, with the watermark; `None` before the first record.
    pub fn checkpoint(&mut self) -> Option<Checkpoint> {
        let watermark = self.watermark()?;
        let front = self.reach()?;
        // The checkpoints below the watermark but the last are not needed again.
        while self.checkpoints.len() > 1 && self.checkpoints[1].0 <= watermark {
            self.checkpoints.pop_front();
        }
        let stream_time = if Some(watermark) == self.front {
            self.stream_time
        } else {
            self.checkpoints
                .front()
                .filter(|(at, _)| *at <= watermark)
                .and_then(|(_, st)| *st)
        };
        self.judged = self.judged.split_off(&watermark);
        Some(Checkpoint {
            watermark,
            front,
            tenants: self
                .behind
                .iter()
                .filter(|(_, &from)| from < front)
                .map(|(t, &from)| (t.clone(), from))
                .collect(),
            stream_time,
        })
    }
}

#[cfg(test)]
#[path = "read_past_tests.rs"]
mod tests;
