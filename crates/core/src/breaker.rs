//! A circuit breaker per subscription: after a run of failures (or too high a
//! failure ratio over a window) it opens, and while it is open nothing is sent
//! to the endpoint: due deliveries are parked (on a retry tier, without spending
//! an attempt) until it is time to probe. Then one delivery probes, and the
//! subscription's other due deliveries wait for its answer in memory
//! ([`Admit::Wait`]); a success closes the breaker and releases them at once, a
//! failure opens it again for twice as long, up to a cap.
//! A breaker open longer than `disable_after` asks for its subscription to be
//! disabled (its deliveries are then kept for replay).
//!
//! What counts ([`Signal::of`]): a delivery is a success; a 5xx, a timeout or a
//! transport error is a failure; anything else says nothing of the endpoint's
//! health — a throttle (429, or 503 with `Retry-After`) is waited out exactly by
//! the ladder, a 4xx is an answer, and our own refusals (egress, payload size, a
//! missing secret) never reached it.
//!
//! Pure: `now` is an argument. The window is ten buckets of a tenth of it each,
//! so a breaker's memory is fixed whatever the attempt rate.

use std::time::{Duration, SystemTime};

use crate::classify::{Classification, FailureKind, Outcome, Verdict};

/// What an attempt says about its endpoint's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Success,
    Failure,
    /// Says nothing: a throttle, a 4xx or 3xx answer, or a refusal before sending.
    Neutral,
}

impl Signal {
    /// The signal of a classified attempt.
    pub fn of(c: &Classification) -> Self {
        match (c.verdict, c.outcome) {
            (Verdict::Delivered, _) => Self::Success,
            (Verdict::Rejected { .. }, _) => Self::Neutral,
            (Verdict::Retry { .. }, Outcome::Response(429)) => Self::Neutral,
            (Verdict::Retry { retry_after }, Outcome::Response(503)) if retry_after.is_some() => {
                Self::Neutral
            }
            (Verdict::Retry { .. }, Outcome::Failed(FailureKind::MissingSecret)) => Self::Neutral,
            (Verdict::Retry { .. }, _) => Self::Failure,
        }
    }
}

/// When a breaker opens, how long it stays open, and when it gives up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerSettings {
    /// Opens after this many failures in a row; 0: never for a run.
    pub consecutive_failures: u32,
    /// Opens when the failures over `window` reach this share of at least
    /// `min_attempts` attempts; 0: never for a ratio.
    pub failure_ratio: f64,
    pub min_attempts: u32,
    pub window: Duration,
    /// First open period; doubled on every failed probe, up to `open_max`.
    pub open_for: Duration,
    pub open_max: Duration,
    /// An open breaker asks to disable its subscription after this long;
    /// `None`: never.
    pub disable_after: Option<Duration>,
}

impl BreakerSettings {
    /// 10 in a row, or half of at least 20 over a minute; open 30 s doubling to
    /// 10 m; disable after 5 days open.
    pub const DEFAULT: Self = Self {
        consecutive_failures: 10,
        failure_ratio: 0.5,
        min_attempts: 20,
        window: Duration::from_secs(60),
        open_for: Duration::from_secs(30),
        open_max: Duration::from_secs(600),
        disable_after: Some(Duration::from_secs(5 * 24 * 3600)),
    };

    /// Never opens.
    pub const OFF: Self = Self {
        consecutive_failures: 0,
        failure_ratio: 0.0,
        ..Self::DEFAULT
    };

    /// Whether the breaker can open at all.
    pub fn enabled(&self) -> bool {
        self.consecutive_failures > 0 || self.failure_ratio > 0.0
    }

    /// Checks the settings; the error names the setting.
    pub fn validate(&self) -> Result<(), BreakerError> {
        if !(0.0..=1.0).contains(&self.failure_ratio) {
            return Err(BreakerError::Ratio(self.failure_ratio));
        }
        if self.failure_ratio > 0.0 && (self.window.is_zero() || self.min_attempts == 0) {
            return Err(BreakerError::Window);
        }
        if self.enabled() && (self.open_for.is_zero() || self.open_max < self.open_for) {
            return Err(BreakerError::OpenFor {
                open_for: self.open_for,
                open_max: self.open_max,
            });
        }
        Ok(())
    }
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BreakerError {
    #[error("the failure ratio {0} is not within 0..=1")]
    Ratio(f64),
    #[error("a failure ratio needs a non-zero window and minimum of attempts")]
    Window,
    #[error("the open period {open_for:?} must be non-zero and at most the maximum {open_max:?}")]
    OpenFor {
        open_for: Duration,
        open_max: Duration,
    },
}

/// What to do with a due delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Send it.
    Attempt,
    /// Send it as the one probe of a breaker ready to close.
    Probe,
    /// Do not send it; park it until `until`, without spending an attempt.
    Park { until: SystemTime },
    /// The probe is out: keep it (in memory, nothing written) until the probe
    /// answers, and ask again then, or at `until` at the latest. A successful
    /// probe thus releases what waits for it at once, not an open period later.
    Wait { until: SystemTime },
}

/// A change of state, for the metrics and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Opened,
    /// A probe failed: open again, for `for_`.
    Reopened {
        for_: Duration,
    },
    Closed,
}

impl Transition {
    /// The state entered: the metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Opened | Self::Reopened { .. } => "open",
            Self::Closed => "closed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    /// Nothing is sent before `until`.
    Open {
        since: SystemTime,
        until: SystemTime,
        period: Duration,
    },
    /// One probe may go; `out` while it is in flight.
    Probing {
        since: SystemTime,
        period: Duration,
        out: bool,
    },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Bucket {
    /// Which tenth-of-a-window this bucket counts (the window index since the epoch).
    slot: u64,
    attempts: u32,
    failures: u32,
}

const BUCKETS: usize = 10;

/// One subscription's breaker.
#[derive(Debug, Clone)]
pub struct Breaker {
    state: State,
    consecutive: u32,
    buckets: [Bucket; BUCKETS],
    /// When it last opened, opened again or closed (here or, adopted, on
    /// another replica): what decides between two replicas' states.
    changed_at: SystemTime,
}

impl Default for Breaker {
    fn default() -> Self {
        Self {
            state: State::Closed,
            consecutive: 0,
            buckets: [Bucket::default(); BUCKETS],
            changed_at: SystemTime::UNIX_EPOCH,
        }
    }
}

/// An open breaker as replicas share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// When it first opened in its current run of openings: the disable clock.
    pub since: SystemTime,
    /// When a delivery may probe.
    pub until: SystemTime,
    /// The current open period.
    pub period: Duration,
}

/// A breaker's state as the replicas share it: written when it changes, and
/// adopted by every replica ([`Breaker::adopt`]). Of two, the later
/// `changed_at` wins; on a tie, the open one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shared {
    /// `None`: closed.
    pub open: Option<Opened>,
    pub changed_at: SystemTime,
}

impl Shared {
    /// Whether `self` wins over a state that changed at `changed_at` and is
    /// open or not.
    fn wins_over(&self, changed_at: SystemTime, open: bool) -> bool {
        self.changed_at > changed_at
            || (self.changed_at == changed_at && self.open.is_some() && !open)
    }
}

impl Breaker {
    /// Whether it is closed with nothing counted and never changed: it can be
    /// forgotten. One that has changed is kept, so a late, older state of
    /// another replica cannot win over its closing.
    pub fn is_idle(&self) -> bool {
        self.state == State::Closed
            && self.consecutive == 0
            && self.buckets.iter().all(|b| b.attempts == 0)
            && self.changed_at == SystemTime::UNIX_EPOCH
    }

    /// Whether nothing may be sent now but a probe (open or probing).
    pub fn is_open(&self) -> bool {
        self.state != State::Closed
    }

    /// Its state as the replicas share it.
    pub fn shared(&self) -> Shared {
        let open = match self.state {
            State::Closed => None,
            State::Open {
                since,
                until,
                period,
            } => Some(Opened {
                since,
                until,
                period,
            }),
            // Probing since its open period ended.
            State::Probing { since, period, .. } => Some(Opened {
                since,
                until: self.changed_at + period,
                period,
            }),
        };
        Shared {
            open,
            changed_at: self.changed_at,
        }
    }

    /// Takes `shared` (another replica's state, or one written before a
    /// restart) when it wins over its own: later, or as late and open. An
    /// adopted opening keeps the earlier of the two opening times, so the
    /// disable clock counts from the first opening any replica saw; the open
    /// period is capped by `s`. Returns whether it changed.
    pub fn adopt(&mut self, s: &BreakerSettings, shared: Shared) -> bool {
        if !shared.wins_over(self.changed_at, self.is_open()) {
            return false;
        }
        let before = self.state;
        match shared.open {
            None => *self = Self::default(),
            Some(o) => {
                let since = match self.state {
                    State::Open { since, .. } | State::Probing { since, .. } => since.min(o.since),
                    State::Closed => o.since,
                };
                self.state = State::Open {
                    since,
                    until: o.until,
                    period: o.period.clamp(s.open_for.min(s.open_max), s.open_max),
                };
                self.consecutive = 0;
                self.buckets = [Bucket::default(); BUCKETS];
            }
        }
        self.changed_at = shared.changed_at;
        self.state != before
    }

    /// Whether a due delivery may be sent at `now`.
    pub fn admit(&mut self, s: &BreakerSettings, now: SystemTime) -> Admit {
        match self.state {
            State::Closed => Admit::Attempt,
            State::Open {
                since,
                until,
                period,
            } => {
                if now < until {
                    Admit::Park { until }
                } else {
                    self.state = State::Probing {
                        since,
                        period,
                        out: true,
                    };
                    Admit::Probe
                }
            }
            State::Probing { since, period, out } => {
                if out {
                    // Woken by the probe's answer; `until` bounds the wait if
                    // that were ever missed.
                    Admit::Wait {
                        until: now + s.open_for.min(period),
                    }
                } else {
                    self.state = State::Probing {
                        since,
                        period,
                        out: true,
                    };
                    Admit::Probe
                }
            }
        }
    }

    /// The result of an attempt that ended at `now`; `probe` when it was
    /// admitted as the probe.
    pub fn record(
        &mut self,
        s: &BreakerSettings,
        now: SystemTime,
        signal: Signal,
        probe: bool,
    ) -> Option<Transition> {
        if probe {
            if let State::Probing { since, period, .. } = self.state {
                return match signal {
                    Signal::Success => {
                        *self = Self::default();
                        self.changed_at = now;
                        Some(Transition::Closed)
                    }
                    Signal::Failure => {
                        let period = (period * 2).min(s.open_max);
                        self.state = State::Open {
                            since,
                            until: now + period,
                            period,
                        };
                        self.changed_at = now;
                        Some(Transition::Reopened { for_: period })
                    }
                    Signal::Neutral => {
                        self.state = State::Probing {
                            since,
                            period,
                            out: false,
                        };
                        None
                    }
                };
            }
        }
        if self.state != State::Closed || signal == Signal::Neutral {
            // Attempts started before it opened say nothing new.
            return None;
        }
        let failed = signal == Signal::Failure;
        self.consecutive = if failed { self.consecutive + 1 } else { 0 };
        let (attempts, failures) = self.count(s, now, failed);
        let by_run = s.consecutive_failures > 0 && self.consecutive >= s.consecutive_failures;
        let by_ratio = s.failure_ratio > 0.0
            && attempts >= s.min_attempts
            && f64::from(failures) >= s.failure_ratio * f64::from(attempts);
        if failed && (by_run || by_ratio) {
            self.state = State::Open {
                since: now,
                until: now + s.open_for,
                period: s.open_for,
            };
            self.changed_at = now;
            self.consecutive = 0;
            self.buckets = [Bucket::default(); BUCKETS];
            return Some(Transition::Opened);
        }
        None
    }

    /// Whether it has been open (or probing) for `disable_after` at `now`.
    pub fn disable_due(&self, s: &BreakerSettings, now: SystemTime) -> bool {
        let since = match self.state {
            State::Closed => return false,
            State::Open { since, .. } | State::Probing { since, .. } => since,
        };
        s.disable_after
            .is_some_and(|after| now.duration_since(since).is_ok_and(|open| open >= after))
    }

    /// Adds one attempt to the window; returns the window's attempts and failures.
    fn count(&mut self, s: &BreakerSettings, now: SystemTime, failed: bool) -> (u32, u32) {
        let width = (s.window.as_millis() / BUCKETS as u128).max(1);
        let ms = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let slot = u64::try_from(ms / width).unwrap_or(u64::MAX);
        let b = &mut self.buckets[(slot % BUCKETS as u64) as usize];
        if b.slot != slot {
            *b = Bucket {
                slot,
                ..Bucket::default()
            };
        }
        b.attempts += 1;
        b.failures += u32::from(failed);
        let oldest = slot.saturating_sub(BUCKETS as u64 - 1);
        self.buckets
            .iter()
            .filter(|b| b.slot >= oldest && b.slot <= slot)
            .fold((0, 0), |(a, f), b| (a + b.attempts, f + b.failures))
    }
}

#[cfg(test)]
#[path = "breaker_tests.rs"]
mod tests;
