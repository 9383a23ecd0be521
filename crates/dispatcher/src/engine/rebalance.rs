//! Handing partitions over (revoke) and shutting down (drain): in-flight work
//! gets the request timeout to finish, then everything pending is committed
//! (follow-ups with offsets, `commit.rs`); what did not finish stays
//! unfinished and is re-attempted by whoever reads it next.

use tokio::time::Instant;

use crate::{
    config::{DRAIN_SLACK, REVOKE_COMMIT_SLACK},
    consumer::TopicPartition,
    part::{Key, Part},
};

use super::{Engine, LOOP};

/// What of the commit slack the engine leaves the rebalance callback, so its
/// confirmation arrives before the callback stops waiting.
const CONFIRM_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

impl Engine {
    /// Hands partitions of `input`'s consumer over: drop their queued records,
    /// give their in-flight attempts the request timeout, commit what is
    /// pending, forget them.
    pub(super) async fn revoke(&mut self, _input: u16, revoked: &[TopicPartition]) {
        let (parts, lanes) = self.with_lanes(revoked);
        let dropped = self.machine.revoke(&parts);
        let deadline = Instant::now() + self.request_timeout + DRAIN_SLACK;
        let in_flight = self.wait_for(|k| parts.contains(&k.0), deadline).await;
        let committed = self
            .flush(deadline + REVOKE_COMMIT_SLACK - CONFIRM_MARGIN)
            .await;
        let abandoned = self.abandon(|k| parts.contains(&k.0));
        self.machine.forget(&parts);
        self.unassign_lanes(&lanes);
        tracing::info!(
            partitions = parts.len(),
            dropped,
            finished_in_flight = in_flight,
            abandoned,
            committed,
            "revoked partitions handed over"
        );
    }

    /// The machine's partitions of `revoked` and, with them, the lanes'
    /// partitions that follow them (returned apart too, to unassign).
    fn with_lanes(&self, revoked: &[TopicPartition]) -> (Vec<Part>, Vec<Part>) {
        let mut parts: Vec<Part> = revoked
            .iter()
            .filter_map(|(t, p)| self.machine.part(t, *p))
            .collect();
        let lanes = self.lane_parts(&parts);
        parts.extend(&lanes);
        (parts, lanes)
    }

    /// Drops partitions whose assignment was lost with the consumer's group
    /// session: a transaction's offsets carry the group generation, which is
    /// gone, so nothing of them can be committed here again (the broker
    /// answers "unknown member") and a revoke's wait and flush would only hold
    /// the engine — and with it every other consumer's events, and their
    /// rejoins — for the whole revoke wait. Their queued records, in-flight
    /// attempts and uncommitted hand-offs are given up at once; whoever is
    /// assigned the partitions next (this replica, once it rejoins) reads
    /// them again from the last committed offset.
    pub(super) fn drop_lost(&mut self, revoked: &[TopicPartition]) {
        let (parts, lanes) = self.with_lanes(revoked);
        let dropped = self.machine.revoke(&parts);
        let abandoned = self.abandon(|k| parts.contains(&k.0));
        self.machine.forget(&parts);
        self.unassign_lanes(&lanes);
        tracing::warn!(
            partitions = parts.len(),
            dropped,
            abandoned,
            "lost partitions dropped; their uncommitted work is re-read by their next owner"
        );
    }

    /// Processes completions until no attempt task matches `which` or the
    /// deadline; returns how many matching tasks completed.
    async fn wait_for(&mut self, which: impl Fn(&Key) -> bool, deadline: Instant) -> usize {
        let mut completed = 0;
        while self.running.keys().any(&which) {
            tokio::select! {
                Some(done) = self.tasks.join_next_with_id() => {
                    let key = match &done {
                        Ok((_, (key, _))) => Some(*key),
                        Err(e) => self.task_keys.get(&e.id()).copied(),
                    };
                    if key.is_some_and(|k| which(&k)) {
                        completed += 1;
                    }
                    self.on_done(done);
                    self.act();
                }
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        completed
    }

    /// Gives up on work matching `which`: attempt tasks are aborted, hand-offs
    /// not committed are forgotten; their offsets stay unfinished.
    fn abandon(&mut self, which: impl Fn(&Key) -> bool) -> usize {
        let keys = self.machine.abandon(&which);
        for key in &keys {
            if let Some(task) = self.running.remove(key) {
                task.abort.abort();
                self.task_keys.remove(&task.abort.id());
            }
        }
        self.commits.forget(&which);
        self.act();
        keys.len()
    }

    /// Shutdown: stop taking work, let in-flight attempts finish within the
    /// request timeout (and the shutdown grace), commit what is pending.
    pub(super) async fn drain(mut self) {
        self.machine.drop_queued();
        let budget = (self.request_timeout + DRAIN_SLACK).min(self.shutdown_grace);
        let in_flight = self.running.len();
        tracing::info!(in_flight, ?budget, "draining");
        let deadline = Instant::now() + budget;
        self.wait_for(|_| true, deadline).await;
        let committed = self.flush(deadline + REVOKE_COMMIT_SLACK).await;
        self.stop_commits();
        let abandoned = self.abandon(|_| true);
        self.health.forget(LOOP);
        tracing::info!(abandoned, committed, "drained");
    }
}
