//! Starting what the lanes allow: each started record is attempted at its
//! subscription as it is *now*, or, when that subscription is disabled, deleted
//! or another tenant's, handed on unattempted as a dead letter (its slot freed
//! at once, its offset finished by the transaction that writes it); a payload
//! over `--max-payload-bytes` is refused without being sent (and dead-lettered
//! by the attempt as `payload_too_large`); a delivery whose subscription's
//! breaker is open is parked on a tier until the breaker may probe, unattempted —
//! or, from `deliveries.strict`, held at the head of its lane until then; while
//! its probe is out, it waits for the probe's answer at the head of its lane.

use std::time::SystemTime;

use hookline_core::{epoch, Started};

use super::{Action, Decision, Directory, Machine, Note, Running};
use hookline_envelope::subscription_state::DisabledReason;

use crate::{
    attempt::Refusal,
    part::{Key, NoTarget, Part},
};

impl Machine {
    /// Starts every record the lanes allow at `now`.
    pub fn start_ready(&mut self, now: SystemTime, dir: &impl Directory) {
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
            let delivery = queued.delivery;
            let strict = input.strict;
            // A strict head read again with the due time it had (restored from
            // the shared topic) waits for it in place, as before the restart.
            let due = epoch::from_millis(delivery.due_at);
            if strict && delivery.attempt > 0 && due > now {
                self.notes.push(Note::Held {
                    subscription_id: delivery.subscription_id.clone(),
                    attempt: delivery.attempt,
                    until: due,
                    breaker: false,
                });
                self.defer(key, started, delivery, queued.ready_since, due);
                continue;
            }
            let target = match dir.target(&delivery) {
                Ok(target) => target,
                Err(why) => {
                    self.hand_on(key, &started);
                    self.actions.push(Action::Unattempted {
                        key,
                        delivery,
                        why,
                        disable: false,
                    });
                    continue;
                }
            };
            let probe = match self.breakers.admit(&delivery.subscription_id, now) {
                Decision::Send { probe } => probe,
                // Its probe is out: it waits at the head of its lane, in memory,
                // until the probe answers (which wakes it) — sent at once if that
                // closed the breaker, parked if it opened it again.
                Decision::Wait { until } => {
                    if strict {
                        self.notes.push(Note::Held {
                            subscription_id: delivery.subscription_id.clone(),
                            attempt: delivery.attempt,
                            until,
                            breaker: true,
                        });
                    }
                    self.probe_waiters
                        .entry(delivery.subscription_id.clone())
                        .or_default()
                        .insert(key);
                    self.defer(key, started, delivery, queued.ready_since, until);
                    continue;
                }
                // A strict head parks in place: nothing behind it may pass.
                Decision::Park {
                    until,
                    disable: false,
                } if strict => {
                    self.notes.push(Note::Held {
                        subscription_id: delivery.subscription_id.clone(),
                        attempt: delivery.attempt,
                        until,
                        breaker: true,
                    });
                    self.defer(key, started, delivery, queued.ready_since, until);
                    continue;
                }
                // Disabled now: the head is its first dead letter, the rest follow.
                Decision::Park { disable: true, .. } if strict => {
                    self.hand_on(key, &started);
                    self.actions.push(Action::Unattempted {
                        key,
                        delivery,
                        why: NoTarget::Disabled {
                            reason: Some(DisabledReason::BreakerOpen.as_str().to_owned()),
                        },
                        disable: true,
                    });
                    continue;
                }
                Decision::Park { until, disable } => {
                    self.hand_on(key, &started);
                    let wait = until.duration_since(now).unwrap_or_default();
                    self.actions.push(Action::Park {
                        key,
                        delivery,
                        tier: self.ladder.park_tier(wait),
                        until,
                        disable,
                    });
                    continue;
                }
            };
            self.running.insert(
                key,
                Running::Attempt {
                    started,
                    delivery: delivery.clone(),
                    ready_since: queued.ready_since,
                    probe,
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
                strict,
            });
        }
    }

    /// A started record that will not be attempted but written (kept or parked):
    /// its lane slot is freed at once, and it counts as a pending write until its
    /// transaction finishes it.
    fn hand_on(&mut self, key: Key, started: &Started<Part>) {
        if let Err(error) = self.lanes.complete(started) {
            self.notes
                .push(Note::LanesRefusedCompletion(error.to_string()));
        }
        self.start_write(key, started.job.bytes);
    }
}
