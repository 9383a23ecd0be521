//! Starting what the lanes allow: each started record is attempted at its
//! subscription as it is *now*, or, when that subscription is disabled, deleted
//! or another tenant's, handed on unattempted as a dead letter (its slot freed
//! at once, its offset finished by the transaction that writes it); a payload
//! over `--max-payload-bytes` is refused without being sent (and dead-lettered
//! by the attempt as `payload_too_large`).

use std::time::SystemTime;

use super::{Action, Directory, Machine, Note, Running};
use crate::attempt::Refusal;

impl Machine {
    /// Starts every record the lanes allow at `now`.
    pub(crate) fn start_ready(&mut self, now: SystemTime, dir: &impl Directory) {
        while let Some(started) = self.lanes.pop_ready_at(now) {
            let key = (started.job.partition, started.job.offset);
            let Some(queued) = self.queued.remove(&key) else {
                self.notes.push(Note::StartedNotQueued(key));
                let _ = self.lanes.complete(&started);
                continue;
            };
            let input = &self.inputs[usize::from(key.0.input)];
            if input.retry() {
                let late = now.duration_since(queued.ready_since).unwrap_or_default();
                self.notes.push(Note::RetryLate {
                    label: input.label,
                    late,
                });
            }
            let delivery = Box::new(queued.delivery);
            let target = match dir.target(&delivery) {
                Ok(target) => target,
                Err(why) => {
                    if let Err(error) = self.lanes.complete(&started) {
                        self.notes
                            .push(Note::LanesRefusedCompletion(error.to_string()));
                    }
                    self.running.insert(key, Running::Write);
                    let mut out = Vec::new();
                    self.gate.write_started(key.0, &mut out);
                    self.gate_actions(out);
                    self.actions
                        .push(Action::Unattempted { key, delivery, why });
                    continue;
                }
            };
            self.running.insert(
                key,
                Running::Attempt {
                    started,
                    delivery: delivery.clone(),
                    ready_since: queued.ready_since,
                },
            );
            let len = delivery.payload.len();
            let refusal = (len > self.max_payload_bytes)
                .then(|| Refusal::payload_too_large(len, self.max_payload_bytes));
            self.actions.push(Action::Attempt {
                key,
                delivery,
                target,
                refusal,
            });
        }
    }
}
