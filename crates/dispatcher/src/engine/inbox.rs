//! The engine's two inboxes: what the pollers and the rebalance callbacks of
//! the *first-attempt* inputs (`deliveries`, `strict`) report, and what those
//! of the *bulk* inputs (retry tiers, overflow lanes) and the peeker report.
//!
//! One inbox made every input wait behind every other's fetched records: when
//! a promoted whale's lane partition was resumed after a buffer pause, its
//! poller put thousands of records in the queue at once, and a small tenant's
//! record fetched from `deliveries` just after waited for all of them to be
//! taken in (the isolation bench: +20–25 ms between readable and the POST for
//! the drain's slowest waits, about once per resume). Now the first-attempt
//! inbox is taken first; every [`BULK_EVERY`]th event comes from the bulk one
//! when both have some, so a flood of first attempts cannot starve retries and
//! lanes (their buffers bound such a flood anyway: a full buffer pauses the
//! partitions that feed it).
//!
//! Each input reports to one inbox only, so its own events (assignment,
//! records, end of partition, revocation) keep their order; only the order
//! between inputs changes, which was never promised (the pollers fetch
//! independently).

use tokio::sync::mpsc::{self, error::TryRecvError};

use crate::{consumer::FromKafka, part::Input};

/// When both inboxes hold events, one in this many comes from the bulk one.
pub(super) const BULK_EVERY: u32 = 8;

/// Capacity of each inbox: a poller whose inbox is full waits (it has
/// fetched further than the engine takes in).
const INBOX_CAPACITY: usize = 1024;

pub(crate) struct Inbox<T = FromKafka> {
    first: mpsc::Receiver<T>,
    bulk: mpsc::Receiver<T>,
    /// Events taken while both inboxes held some, for [`BULK_EVERY`].
    contended: u32,
}

/// The senders of an [`Inbox`].
pub(crate) struct Senders<T = FromKafka> {
    /// For the first-attempt inputs.
    pub first: mpsc::Sender<T>,
    /// For the retry tiers, the overflow lanes and the peeker.
    pub bulk: mpsc::Sender<T>,
}

impl<T> Senders<T> {
    /// The sender for an input: first-attempt inputs report to one inbox,
    /// tiers and lanes to the other ([`Input::bulk`]).
    pub(crate) fn for_input(&self, input: &Input) -> mpsc::Sender<T> {
        if input.bulk() {
            self.bulk.clone()
        } else {
            self.first.clone()
        }
    }
}

pub(crate) fn inbox<T>() -> (Senders<T>, Inbox<T>) {
    let (first_tx, first) = mpsc::channel(INBOX_CAPACITY);
    let (bulk_tx, bulk) = mpsc::channel(INBOX_CAPACITY);
    (
        Senders {
            first: first_tx,
            bulk: bulk_tx,
        },
        Inbox {
            first,
            bulk,
            contended: 0,
        },
    )
}

impl<T> Inbox<T> {
    /// The next event, waiting for one; `None` once every sender of both
    /// inboxes is gone and both are empty. Cancel-safe.
    pub(crate) async fn recv(&mut self) -> Option<T> {
        if let Some(event) = self.try_recv() {
            return Some(event);
        }
        tokio::select! {
            biased;
            Some(event) = self.first.recv() => Some(event),
            Some(event) = self.bulk.recv() => Some(event),
            else => None,
        }
    }

    /// An event already waiting, first-attempt ones first (but see
    /// [`BULK_EVERY`]); `None` when both inboxes are empty right now.
    pub(crate) fn try_recv(&mut self) -> Option<T> {
        let both = !self.first.is_empty() && !self.bulk.is_empty();
        if both {
            self.contended = self.contended.wrapping_add(1);
            if self.contended % BULK_EVERY == 0 {
                return self.bulk.try_recv().ok();
            }
        }
        match self.first.try_recv() {
            Ok(event) => Some(event),
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => self.bulk.try_recv().ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(inbox: &mut Inbox<(char, u32)>) -> Vec<(char, u32)> {
        std::iter::from_fn(|| inbox.try_recv()).collect()
    }

    #[tokio::test]
    async fn first_attempts_are_taken_before_bulk_that_was_waiting() {
        let (tx, mut inbox) = inbox();
        for i in 0..5 {
            tx.bulk.send(('b', i)).await.unwrap();
        }
        tx.first.send(('f', 0)).await.unwrap();
        assert_eq!(inbox.recv().await, Some(('f', 0)));
        let rest = drain(&mut inbox);
        assert_eq!(rest, (0..5).map(|i| ('b', i)).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn each_inbox_keeps_its_order_and_bulk_gets_its_share() {
        let (tx, mut inbox) = inbox();
        let n = 200;
        for i in 0..n {
            tx.first.send(('f', i)).await.unwrap();
            tx.bulk.send(('b', i)).await.unwrap();
        }
        let taken = drain(&mut inbox);
        assert_eq!(taken.len(), 2 * n as usize);
        for side in ['f', 'b'] {
            let seq: Vec<u32> = taken
                .iter()
                .filter(|(s, _)| *s == side)
                .map(|(_, i)| *i)
                .collect();
            assert_eq!(seq, (0..n).collect::<Vec<_>>(), "{side} out of order");
        }
        // While both held events, one in BULK_EVERY was a bulk one: no
        // starvation by a stream of first attempts.
        let first_200: Vec<_> = taken.iter().take(200).collect();
        let bulk = first_200.iter().filter(|(s, _)| *s == 'b').count();
        assert_eq!(bulk, 200 / BULK_EVERY as usize);
    }

    #[tokio::test]
    async fn ends_only_when_both_inboxes_are_closed_and_empty() {
        let (tx, mut inbox) = inbox();
        let Senders { first, bulk } = tx;
        bulk.send(('b', 0)).await.unwrap();
        drop(first);
        assert_eq!(inbox.recv().await, Some(('b', 0)));
        let later = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            bulk.send(('b', 1)).await.unwrap();
        });
        assert_eq!(inbox.recv().await, Some(('b', 1)), "waits on the open one");
        later.await.unwrap();
        assert_eq!(inbox.recv().await, None);
    }

    #[tokio::test]
    async fn a_waiting_receive_is_woken_by_either_inbox() {
        let (tx, mut inbox) = inbox::<(char, u32)>();
        let first = tx.first.clone();
        let waiting = tokio::spawn(async move { (inbox.recv().await, inbox) });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        tx.bulk.send(('b', 7)).await.unwrap();
        let (got, mut inbox) = waiting.await.unwrap();
        assert_eq!(got, Some(('b', 7)));
        first.send(('f', 1)).await.unwrap();
        assert_eq!(inbox.recv().await, Some(('f', 1)));
    }
}
