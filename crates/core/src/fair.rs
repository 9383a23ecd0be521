//! Worker-seconds fairness for [`Lanes`](crate::Lanes): per-tenant weights, the
//! deficit round robin's quantum, and the decayed usage accounts the lanes keep
//! for attribution.
//!
//! The lanes serve *tenants* by deficit round robin (DRR) charged in
//! worker-seconds: the time each attempt held a slot. Each tenant with queued
//! records has a deficit; a tenant may start a record only while its deficit is
//! positive, and each completed attempt subtracts the time it held its slot.
//! When no tenant that could start has credit left, every backlogged tenant is
//! given `QUANTUM × weight` as many times as it takes for the first of them to
//! reach credit (credit is capped at one quantum, so an idle or capped tenant
//! does not hoard it). Over time each backlogged tenant's worker-seconds are
//! proportional to its weight, whatever its attempts' durations.
//!
//! Weights are per tenant (the unit of isolation: a tenant with a hundred
//! subscriptions gets no more than one with one), default
//! [`DEFAULT_WEIGHT`], and are bounded below by [`MIN_WEIGHT`] so no tenant
//! starves: at the floor a backlogged tenant still gets 1/100 of a default
//! tenant's worker time. Inside a tenant its lanes (subscription × first
//! attempt/retry) take turns round robin.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// The credit a weight-1 tenant gets per DRR round: long enough that a round
/// covers a typical attempt (so short attempts are charged what they cost, with
/// no rounding to a whole quantum), short enough that a tenant in debt waits
/// only a few rounds.
pub const QUANTUM: Duration = Duration::from_millis(100);

/// A tenant's weight when none is configured.
pub const DEFAULT_WEIGHT: f64 = 1.0;
/// The lowest weight accepted: a backlogged tenant at the floor still gets a
/// hundredth of a default tenant's worker-seconds, so none starves.
pub const MIN_WEIGHT: f64 = 0.01;
/// The highest weight accepted.
pub const MAX_WEIGHT: f64 = 100.0;

/// Usage accounts decay with this half-life: [`Usage`] reports
/// worker-seconds of roughly the last few minutes, recent ones counting most.
pub const USAGE_HALF_LIFE: Duration = Duration::from_secs(60);

/// Weights are kept in thousandths, so limits stay comparable (`Eq`).
const MILLI: f64 = 1000.0;

/// Per-tenant weights (`--tenant-weight TENANT=W`); unlisted tenants weigh
/// [`DEFAULT_WEIGHT`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantWeights {
    milli: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WeightError {
    #[error("tenant weight `{0}` is not TENANT=WEIGHT")]
    Syntax(String),
    #[error(
        "tenant `{tenant}` weight `{weight}` must be a number from {MIN_WEIGHT} to {MAX_WEIGHT}"
    )]
    OutOfRange { tenant: String, weight: String },
    #[error("tenant `{0}` is given a weight twice")]
    Twice(String),
}

impl TenantWeights {
    /// No tenant has a weight of its own.
    pub const NONE: Self = Self {
        milli: BTreeMap::new(),
    };

    /// Parses `TENANT=WEIGHT` entries; each tenant at most once.
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, WeightError> {
        let mut weights = Self::NONE;
        for entry in entries {
            let (tenant, weight) = entry
                .rsplit_once('=')
                .filter(|(t, _)| !t.trim().is_empty())
                .ok_or_else(|| WeightError::Syntax(entry.to_owned()))?;
            let tenant = tenant.trim();
            let value: f64 = weight.trim().parse().map_err(|_| WeightError::OutOfRange {
                tenant: tenant.to_owned(),
                weight: weight.to_owned(),
            })?;
            if weights.milli.contains_key(tenant) {
                return Err(WeightError::Twice(tenant.to_owned()));
            }
            weights.set(tenant, value)?;
        }
        Ok(weights)
    }

    /// Sets one tenant's weight, [`MIN_WEIGHT`]..=[`MAX_WEIGHT`].
    pub fn set(&mut self, tenant: &str, weight: f64) -> Result<(), WeightError> {
        if !(MIN_WEIGHT..=MAX_WEIGHT).contains(&weight) {
            return Err(WeightError::OutOfRange {
                tenant: tenant.to_owned(),
                weight: weight.to_string(),
            });
        }
        // In range, so the rounded thousandths fit and stay at least 10.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let milli = (weight * MILLI).round() as u32;
        self.milli.insert(tenant.to_owned(), milli);
        Ok(())
    }

    /// The tenant's weight ([`DEFAULT_WEIGHT`] when unlisted).
    pub fn weight(&self, tenant: &str) -> f64 {
        self.milli
            .get(tenant)
            .map_or(DEFAULT_WEIGHT, |m| f64::from(*m) / MILLI)
    }

    /// Every weight is within [`MIN_WEIGHT`]..=[`MAX_WEIGHT`].
    pub(crate) fn valid(&self) -> bool {
        self.milli
            .values()
            .all(|m| (MIN_WEIGHT..=MAX_WEIGHT).contains(&(f64::from(*m) / MILLI)))
    }

    pub fn is_empty(&self) -> bool {
        self.milli.is_empty()
    }

    /// `(tenant, weight)` of every configured tenant, by tenant.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> {
        self.milli
            .iter()
            .map(|(t, m)| (t.as_str(), f64::from(*m) / MILLI))
    }
}

/// Worker-seconds decayed with [`USAGE_HALF_LIFE`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Decayed {
    value: f64,
    at: SystemTime,
}

impl Decayed {
    pub(crate) fn new(at: SystemTime) -> Self {
        Self { value: 0.0, at }
    }

    /// The value as of `now` (never grows when `now` is behind).
    pub(crate) fn at(&self, now: SystemTime) -> f64 {
        let age = now.duration_since(self.at).unwrap_or_default();
        self.value * (-age.as_secs_f64() / USAGE_HALF_LIFE.as_secs_f64()).exp2()
    }

    pub(crate) fn add(&mut self, seconds: f64, now: SystemTime) {
        if now > self.at {
            self.value = self.at(now);
            self.at = now;
        }
        self.value += seconds;
    }
}

/// What [`Lanes::usage`](crate::Lanes::usage) reports: worker-seconds charged
/// (decayed with [`USAGE_HALF_LIFE`]: a steady use of `n` slots reads about
/// `n × 86.6` s) and records buffered, per tenant and per subscription, for
/// attribution ("who is using the dispatcher").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// By tenant id.
    pub tenants: Vec<TenantUsage>,
    /// By subscription id.
    pub subscriptions: Vec<SubscriptionUsage>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TenantUsage {
    pub tenant_id: String,
    pub weight: f64,
    /// Slot-held seconds charged, decayed.
    pub worker_seconds: f64,
    pub in_flight: u32,
    /// Queued + in flight.
    pub buffered_records: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionUsage {
    pub subscription_id: String,
    /// The tenant of its latest record.
    pub tenant_id: String,
    pub worker_seconds: f64,
    pub in_flight: u32,
    /// Queued + in flight.
    pub buffered_records: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_parse_and_refuse() {
        let w = TenantWeights::parse(["acme=2", "slow = 0.01", "a=b=0.5"]).unwrap();
        assert_eq!(w.weight("acme"), 2.0);
        assert_eq!(w.weight("slow"), 0.01);
        assert_eq!(w.weight("a=b"), 0.5);
        assert_eq!(w.weight("other"), DEFAULT_WEIGHT);
        for bad in [
            "acme",
            "=1",
            "acme=0",
            "acme=0.009",
            "acme=101",
            "acme=NaN",
            "acme=x",
        ] {
            assert!(TenantWeights::parse([bad]).is_err(), "{bad}");
        }
        assert_eq!(
            TenantWeights::parse(["a=1", "a=2"]),
            Err(WeightError::Twice("a".into()))
        );
    }

    #[test]
    fn usage_halves_every_half_life() {
        let t0 = SystemTime::UNIX_EPOCH;
        let mut d = Decayed::new(t0);
        d.add(8.0, t0);
        assert!((d.at(t0 + USAGE_HALF_LIFE) - 4.0).abs() < 1e-9);
        d.add(1.0, t0 + USAGE_HALF_LIFE * 2);
        assert!((d.at(t0 + USAGE_HALF_LIFE * 2) - 3.0).abs() < 1e-9);
    }
}
