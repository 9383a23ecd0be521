//! The machine's circuit breakers, one per subscription (`hookline_core::breaker`):
//! asked before each start whether to send, parking what an open breaker holds
//! back, and told each attempt's signal when it ends.

use std::{collections::HashMap, time::SystemTime};

use hookline_core::{Admit, Breaker, BreakerSettings, Shared, Signal, Transition};

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

    /// The shared state of `subscription_id`'s breaker, if it has one.
    pub fn shared(&self, subscription_id: &str) -> Option<Shared> {
        self.by_subscription
            .get(subscription_id)
            .map(Breaker::shared)
    }

    /// Takes another replica's (or an earlier run's) state of
    /// `subscription_id`'s breaker when it wins over this one's
    /// ([`Breaker::adopt`]); a closed state of a subscription without a breaker
    /// here is nothing to take. Returns whether it changed.
    pub fn adopt(&mut self, subscription_id: &str, shared: Shared) -> bool {
        if !self.settings.enabled() {
            return false;
        }
        match self.by_subscription.get_mut(subscription_id) {
            Some(b) => b.adopt(&self.settings, shared),
            None if shared.open.is_none() => false,
            None => self
                .by_subscription
                .entry(subscription_id.to_owned())
                .or_default()
                .adopt(&self.settings, shared),
        }
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
