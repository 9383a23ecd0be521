//! The filters of `inspect` and `replay`, parsed and checked before anything is read, so a
//! bad filter is a usage error that names the flag, never an empty result.

use chrono::{DateTime, NaiveDate, Utc};
use clap::Args;
use hookline_core::matching::EventTypeFilter;

use crate::row::{date_of, ArchiveRow};

/// Filters shared by `inspect` and `replay`. Repeating a flag matches any of its values;
/// different flags must all match. Each also reads a `HOOKLINE_FILTER_*` variable
/// (a comma-separated list for the repeatable ones).
#[derive(Debug, Clone, Default, Args)]
pub struct FilterArgs {
    /// Only this tenant (repeatable).
    #[arg(
        long = "tenant",
        value_name = "TENANT",
        env = "HOOKLINE_FILTER_TENANT",
        value_delimiter = ','
    )]
    pub tenants: Vec<String>,

    /// Only this subscription id (repeatable).
    #[arg(
        long = "subscription",
        value_name = "ID",
        env = "HOOKLINE_FILTER_SUBSCRIPTION",
        value_delimiter = ','
    )]
    pub subscriptions: Vec<String>,

    /// Only this event type, or a `prefix.*` pattern (repeatable).
    #[arg(
        long = "event-type",
        value_name = "TYPE",
        env = "HOOKLINE_FILTER_EVENT_TYPE",
        value_delimiter = ','
    )]
    pub event_types: Vec<String>,

    /// Only this reason, e.g. `exhausted`, `rejected_4xx`, `not_avro`, `undecodable`
    /// (repeatable).
    #[arg(
        long = "reason",
        value_name = "REASON",
        env = "HOOKLINE_FILTER_REASON",
        value_delimiter = ','
    )]
    pub reasons: Vec<String>,

    /// Only records dead-lettered (or quarantined) at or after this time: RFC 3339
    /// (`2026-11-29T10:00:00Z`), a date (`2026-11-29`, UTC) or an age (`2h`, `30m`).
    #[arg(long, value_name = "TIME", env = "HOOKLINE_FILTER_SINCE")]
    pub since: Option<String>,

    /// Only records dead-lettered (or quarantined) before this time; same forms as --since.
    #[arg(long, value_name = "TIME", env = "HOOKLINE_FILTER_UNTIL")]
    pub until: Option<String>,
}

/// A filter argument that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {flag} `{value}`: {why}")]
pub struct FilterError {
    /// The flag.
    pub flag: &'static str,
    /// The value given.
    pub value: String,
    /// What is wrong and how to write it.
    pub why: String,
}

/// A checked filter.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    tenants: Vec<String>,
    subscriptions: Vec<String>,
    event_types: Option<EventTypeFilter>,
    reasons: Vec<String>,
    /// Inclusive lower bound, ms since the epoch.
    pub since_ms: Option<i64>,
    /// Exclusive upper bound, ms since the epoch.
    pub until_ms: Option<i64>,
}

impl FilterArgs {
    /// Checks every value; `now_ms` anchors relative times.
    pub fn build(&self, now_ms: i64) -> Result<Filter, FilterError> {
        let non_empty = |flag: &'static str, values: &[String]| match values
            .iter()
            .find(|v| v.trim().is_empty())
        {
            Some(v) => Err(FilterError {
                flag,
                value: v.clone(),
                why: "is empty".into(),
            }),
            None => Ok(values.to_vec()),
        };
        let tenants = non_empty("--tenant", &self.tenants)?;
        let subscriptions = non_empty("--subscription", &self.subscriptions)?;
        let reasons = non_empty("--reason", &self.reasons)?;
        let event_types = if self.event_types.is_empty() {
            None
        } else {
            Some(
                EventTypeFilter::parse(&self.event_types).map_err(|e| FilterError {
                    flag: "--event-type",
                    value: self.event_types.join(","),
                    why: e.to_string(),
                })?,
            )
        };
        let since_ms = self
            .since
            .as_deref()
            .map(|v| parse_time("--since", v, now_ms))
            .transpose()?;
        let until_ms = self
            .until
            .as_deref()
            .map(|v| parse_time("--until", v, now_ms))
            .transpose()?;
        if let (Some(s), Some(u)) = (since_ms, until_ms) {
            if s >= u {
                return Err(FilterError {
                    flag: "--until",
                    value: self.until.clone().unwrap_or_default(),
                    why: format!(
                        "is not after --since `{}`",
                        self.since.clone().unwrap_or_default()
                    ),
                });
            }
        }
        Ok(Filter {
            tenants,
            subscriptions,
            event_types,
            reasons,
            since_ms,
            until_ms,
        })
    }
}

/// RFC 3339, a UTC date, or an age before `now_ms`.
pub fn parse_time(flag: &'static str, value: &str, now_ms: i64) -> Result<i64, FilterError> {
    let v = value.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(v) {
        return Ok(t.with_timezone(&Utc).timestamp_millis());
    }
    if let Ok(d) = NaiveDate::parse_from_str(v, "%Y-%m-%d") {
        if let Some(t) = d.and_hms_opt(0, 0, 0) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    match hookline_runtime::config::parse_duration(v) {
        Ok(age) => {
            let ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
            Ok(now_ms.saturating_sub(ms))
        }
        Err(_) => Err(FilterError {
            flag,
            value: value.to_owned(),
            why: "is not a time; use RFC 3339 (2026-11-29T10:00:00Z), a date (2026-11-29) \
                  or an age (2h, 30m, 7d)"
                .into(),
        }),
    }
}

impl Filter {
    /// Whether a row passes every filter.
    pub fn matches(&self, row: &ArchiveRow) -> bool {
        let any = |wanted: &[String], have: Option<&str>| {
            wanted.is_empty() || have.is_some_and(|h| wanted.iter().any(|w| w == h))
        };
        let time = row.event_time();
        any(&self.tenants, row.tenant_id.as_deref())
            && any(&self.subscriptions, row.subscription_id.as_deref())
            && any(&self.reasons, Some(&row.reason))
            && self
                .event_types
                .as_ref()
                .is_none_or(|f| row.event_type.as_deref().is_some_and(|t| f.matches(t)))
            && self.since_ms.is_none_or(|s| time >= s)
            && self.until_ms.is_none_or(|u| time < u)
    }

    /// Whether an archive directory `date=<date>` can hold matching rows.
    pub fn may_match_date(&self, date: &str) -> bool {
        // Rows are filed under the UTC date of the same time the filter uses.
        self.since_ms.is_none_or(|s| date >= date_of(s).as_str())
            && self
                .until_ms
                .is_none_or(|u| date <= date_of(u.saturating_sub(1)).as_str())
    }

    /// Whether an archive directory `tenant=<dir>` can hold matching rows.
    pub fn may_match_tenant_dir(&self, dir: &str) -> bool {
        self.tenants.is_empty()
            || self
                .tenants
                .iter()
                .any(|t| crate::row::encode_tenant(t) == dir)
    }

    /// Whether the filter uses subscription or event-type values (not applicable to the
    /// quarantine, whose records have neither).
    pub fn uses_delivery_fields(&self) -> bool {
        !self.subscriptions.is_empty() || self.event_types.is_some()
    }
}

#[cfg(test)]
#[path = "filter_tests.rs"]
mod tests;
