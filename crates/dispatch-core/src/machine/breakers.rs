//! The machine's circuit breakers, one per subscription (`hookline_core::breaker`):
//! asked before each start whether to send, parking what an open breaker holds
//! back, and told each attempt's signal when it ends.

use std::{collections::HashMap, time::SystemTime};

use hookline_core::{Admit, Breaker, BreakerSettings, Signal, Transition};

/// The breakers of the subscriptions that have one (any failure counted).
#[derive(Debug)]
pub struct Breakers {
    settings: BreakerSettings,
    by_subscription: HashMap<String, Breaker>,
}

/// What a start may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Send {
        probe: bool,
    },
    /// Park until `until`; `disable` once its breaker has been open too long.
    Park {
        until: SystemTime,
        disable: bool,
    },
    /// Its probe is out: wait in place for the answer, until `until` at most.
    Wait {
        until: SystemTime,
    },
}

impl Breakers {
    pub fn new(settings: BreakerSettings) -> Self {
        Self {
            settings,
            by_subscription: HashMap::new(),
        }
    }

    /// Whether a due delivery of `subscription_id` may be sent at `now`.
    pub fn admit(&mut self, subscription_id: &str, now: SystemTime) -> Decision {
        if !self.settings.enabled() {
            return Decision::Send { probe: false };
        }
        let Some(b) = self.by_subscription.get_mut(subscription_id) else {
            return Decision::Send { probe: false };
        };
        match b.admit(&self.settings, now) {
            Admit::Attempt => Decision::Send { probe: false },
            Admit::Probe => Decision::Send { probe: true },
            Admit::Park { until } => Decision::Park {
                until,
                disable: b.disable_due(&self.settings, now),
            },
            Admit::Wait { until } => Decision::Wait { until },
        }
    }

    /// An attempt of `subscription_id` ended at `now` with `signal`.
    pub fn record(
        &mut self,
        subscription_id: &str,
        now: SystemTime,
        signal: Signal,
        probe: bool,
    ) -> Option<Transition> {
        if !self.settings.enabled() {
            return None;
        }
        if signal != Signal::Failure
            && !probe
            && !self.by_subscription.contains_key(subscription_id)
        {
            // Nothing to count: a healthy subscription keeps no breaker.
            return None;
        }
        self.by_subscription
            .entry(subscription_id.to_owned())
            .or_default()
            .record(&self.settings, now, signal, probe)
    }

    /// Breakers now open or probing.
    pub fn open(&self) -> usize {
        self.by_subscription
            .values()
            .filter(|b| b.is_open())
            .count()
    }

    /// Forgets the breakers that are closed with nothing counted.
    pub fn prune(&mut self) {
        self.by_subscription.retain(|_, b| !b.is_idle());
    }
}
