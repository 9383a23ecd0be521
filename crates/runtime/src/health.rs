//! Liveness and readiness as shared state: loops report heartbeats, components
//! report whether they are ready and why not. `/healthz` fails when a loop
//! stops beating; `/readyz` fails until every registered condition holds.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// Shared health state; cheap to clone.
#[derive(Debug, Clone)]
pub struct Health {
    inner: Arc<Mutex<Inner>>,
    stale_after: Duration,
}

#[derive(Debug, Default)]
struct Inner {
    beats: BTreeMap<&'static str, Instant>,
    conditions: BTreeMap<&'static str, Result<(), String>>,
    draining: bool,
    /// Reports a stage publishes for operators (`/capacity`), as JSON.
    reports: BTreeMap<&'static str, String>,
}

/// A verdict with a human-readable explanation for the probe's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the probe passes.
    pub ok: bool,
    /// One line per component.
    pub detail: String,
}

impl Health {
    /// A loop that has not beaten for `stale_after` is reported dead.
    pub fn new(stale_after: Duration) -> Self {
        Self {
            inner: Arc::default(),
            stale_after,
        }
    }

    /// Records that the named loop is alive now.
    pub fn beat(&self, name: &'static str) {
        self.lock().beats.insert(name, Instant::now());
    }

    /// Stops watching a loop (it ended on purpose).
    pub fn forget(&self, name: &'static str) {
        self.lock().beats.remove(name);
    }

    /// Sets a readiness condition; `Err(reason)` keeps the service unready.
    pub fn set_ready(&self, name: &'static str, state: Result<(), String>) {
        self.lock().conditions.insert(name, state);
    }

    /// Publishes a JSON report served at `/<name>` (e.g. the dispatcher's
    /// `capacity`), replacing the previous one.
    pub fn set_report(&self, name: &'static str, json: String) {
        self.lock().reports.insert(name, json);
    }

    /// The report published as `name`, if any.
    pub fn report(&self, name: &str) -> Option<String> {
        self.lock().reports.get(name).cloned()
    }

    /// Marks the service as draining: it reports unready so traffic and
    /// rebalances move away, while liveness stays green.
    pub fn set_draining(&self) {
        self.lock().draining = true;
    }

    /// The liveness verdict at `now`.
    pub fn liveness(&self, now: Instant) -> Verdict {
        let inner = self.lock();
        let mut ok = true;
        let mut detail = String::new();
        for (name, at) in &inner.beats {
            let age = now.saturating_duration_since(*at);
            let alive = age <= self.stale_after;
            ok &= alive;
            detail.push_str(&format!(
                "{name}: {} (last beat {:.1}s ago)\n",
                if alive { "alive" } else { "STALLED" },
                age.as_secs_f64()
            ));
        }
        if detail.is_empty() {
            detail.push_str("starting\n");
        }
        Verdict { ok, detail }
    }

    /// The readiness verdict: all conditions hold and the service is not draining.
    pub fn readiness(&self) -> Verdict {
        let inner = self.lock();
        let mut ok = !inner.draining && !inner.conditions.is_empty();
        let mut detail = String::new();
        if inner.draining {
            detail.push_str("draining: shutting down\n");
        }
        if inner.conditions.is_empty() {
            detail.push_str("starting: no component has reported yet\n");
        }
        for (name, state) in &inner.conditions {
            match state {
                Ok(()) => detail.push_str(&format!("{name}: ready\n")),
                Err(why) => {
                    ok = false;
                    detail.push_str(&format!("{name}: not ready: {why}\n"));
                }
            }
        }
        Verdict { ok, detail }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned lock only means a panic elsewhere; the map is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unready_until_every_condition_holds() {
        let h = Health::new(Duration::from_secs(30));
        assert!(!h.readiness().ok, "nothing reported yet");
        h.set_ready("subscriptions", Err("12 records behind".into()));
        h.set_ready("consumer", Ok(()));
        let v = h.readiness();
        assert!(!v.ok);
        assert!(v.detail.contains("12 records behind"));
        h.set_ready("subscriptions", Ok(()));
        assert!(h.readiness().ok);
        h.set_draining();
        assert!(!h.readiness().ok);
    }

    #[test]
    fn stalled_loop_fails_liveness() {
        let h = Health::new(Duration::from_secs(5));
        let t0 = Instant::now();
        h.beat("consumer");
        assert!(h.liveness(t0).ok);
        let v = h.liveness(t0 + Duration::from_secs(60));
        assert!(!v.ok);
        assert!(v.detail.contains("STALLED"));
        h.forget("consumer");
        assert!(h.liveness(t0 + Duration::from_secs(60)).ok);
    }
}
