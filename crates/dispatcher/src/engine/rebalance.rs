//! Handing partitions over (revoke) and shutting down (drain): in-flight work
//! gets the request timeout to finish, then the watermark is stored and
//! committed; what did not finish stays unfinished and is re-attempted by
//! whoever reads it next.

use crate::{
    config::DRAIN_SLACK,
    consumer::TopicPartition,
    offsets,
    part::{Key, Part},
};

use super::{Engine, LOOP};

impl Engine {
    /// Hands partitions of `input`'s consumer over: drop their queued records,
    /// give their in-flight attempts the request timeout, store and commit,
    /// forget them.
    pub(super) async fn revoke(&mut self, input: u16, revoked: &[TopicPartition]) {
        let parts: Vec<Part> = revoked
            .iter()
            .filter_map(|(t, p)| self.machine.part(t, *p))
            .collect();
        let dropped = self.machine.revoke(&parts);
        let deadline = tokio::time::Instant::now() + self.request_timeout + DRAIN_SLACK;
        let in_flight = self.wait_for(|k| parts.contains(&k.0), deadline).await;
        let abandoned = self.abandon(|k| parts.contains(&k.0));
        self.store(Some(&parts));
        offsets::commit_now(&self.consumers[usize::from(input)..=usize::from(input)]).await;
        self.machine.forget(&parts);
        tracing::info!(
            partitions = parts.len(),
            dropped,
            finished_in_flight = in_flight,
            abandoned,
            "revoked partitions handed over"
        );
    }

    /// Processes completions until no running work matches `which` or the
    /// deadline; returns how many matching tasks completed.
    async fn wait_for(
        &mut self,
        which: impl Fn(&Key) -> bool,
        deadline: tokio::time::Instant,
    ) -> usize {
        let mut completed = 0;
        while self.machine.is_running(&which) {
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

    /// Cancels and aborts matching work; its offsets stay unfinished.
    fn abandon(&mut self, which: impl Fn(&Key) -> bool) -> usize {
        let keys = self.machine.abandon(which);
        for key in &keys {
            if let Some(task) = self.running.remove(key) {
                task.cancel.cancel();
                task.abort.abort();
                self.task_keys.remove(&task.abort.id());
            }
        }
        self.act();
        keys.len()
    }

    /// Shutdown: stop taking work, let in-flight attempts finish within the
    /// request timeout (and the shutdown grace), store and commit.
    pub(super) async fn drain(mut self) {
        self.machine.drop_queued();
        let budget = (self.request_timeout + DRAIN_SLACK).min(self.shutdown_grace);
        let in_flight = self.machine.running();
        tracing::info!(in_flight, ?budget, "draining");
        let deadline = tokio::time::Instant::now() + budget;
        self.wait_for(|_| true, deadline).await;
        let abandoned = self.abandon(|_| true);
        self.store(None);
        offsets::commit_now(&self.consumers).await;
        self.health.forget(LOOP);
        tracing::info!(abandoned, "drained; offsets committed");
    }
}
