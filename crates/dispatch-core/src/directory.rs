//! Where a delivery goes, decided from its subscription as the table has it
//! now: the rules behind the machine's [`Directory`](crate::machine::Directory).
//! The dispatcher's adapter only looks the record up; these functions decide.
//!
//! - A delivery is attempted only for its own tenant's subscription: a
//!   subscription id that now belongs to another tenant is not a target.
//! - A disabled subscription — or one this replica has just written back
//!   disabled, which the table does not show yet ([`Disabling`]) — is not a
//!   target either; its deliveries become dead letters for `replay`.
//! - A strictly ordered subscription runs one delivery at a time, whatever its
//!   `max_in_flight` says.
//!
//! [`Disabling`]: crate::disable::Disabling

use hookline_core::LaneSettings;
use hookline_envelope::{subscription_state::DisabledReason, Delivery, Subscription};

use crate::{attempt::Target, disable::Disabling, part::NoTarget};

/// Where to send `delivery` now, given its subscription's record in the table
/// (`None`: deleted or never known here) and the disables this replica wrote.
pub fn target(
    record: Option<&Subscription>,
    delivery: &Delivery,
    disabling: &Disabling,
) -> Result<Target, NoTarget> {
    let s = record.ok_or(NoTarget::Deleted)?;
    if s.tenant_id != delivery.tenant_id {
        return Err(NoTarget::OtherTenant);
    }
    if disabling.overrides(&delivery.subscription_id, s.version) {
        return Err(NoTarget::Disabled {
            reason: Some(DisabledReason::Gone.as_str().to_owned()),
        });
    }
    if !s.enabled {
        return Err(NoTarget::Disabled {
            reason: s.disabled_reason.clone(),
        });
    }
    Ok(Target {
        url: s.url.clone(),
        secret_ref: s.secret_ref.clone(),
    })
}

/// The lane settings of a subscription: one in flight and no rate when it is
/// unknown; one in flight when it is strictly ordered. Non-positive or
/// non-finite rates are unlimited (`LaneSettings`).
pub fn lane_settings(record: Option<&Subscription>) -> LaneSettings {
    record.map_or(LaneSettings::unlimited_rate(1), |s| LaneSettings {
        max_in_flight: if s.is_strict() {
            1
        } else {
            u32::try_from(s.max_in_flight).unwrap_or(1)
        },
        rate_per_s: s.rate_limit_per_s,
    })
}

#[cfg(test)]
mod tests {
    use hookline_envelope::subscription_state::{disabled, DisabledReason};

    use super::*;
    use crate::build::tests::{delivery, subscription};

    #[test]
    fn an_enabled_subscription_of_the_same_tenant_is_the_target() {
        let s = subscription("s", "acme");
        let t = target(Some(&s), &delivery("s", "acme"), &Disabling::default()).expect("target");
        assert_eq!((&t.url, &t.secret_ref), (&s.url, &s.secret_ref));
    }

    #[test]
    fn a_deleted_subscription_is_no_target() {
        let got = target(None, &delivery("s", "acme"), &Disabling::default());
        assert_eq!(got.unwrap_err(), NoTarget::Deleted);
    }

    #[test]
    fn a_subscription_of_another_tenant_is_no_target() {
        // The id now belongs to another tenant: never send acme's payload there.
        let s = subscription("s", "globex");
        let got = target(Some(&s), &delivery("s", "acme"), &Disabling::default());
        assert_eq!(got.unwrap_err(), NoTarget::OtherTenant);
    }

    #[test]
    fn another_tenant_wins_over_disabled() {
        let s = disabled(&subscription("s", "globex"), DisabledReason::Operator, 5);
        let got = target(Some(&s), &delivery("s", "acme"), &Disabling::default());
        assert_eq!(got.unwrap_err(), NoTarget::OtherTenant);
    }

    #[test]
    fn a_disabled_subscription_is_no_target_with_its_reason() {
        let s = disabled(&subscription("s", "acme"), DisabledReason::Operator, 5);
        let got = target(Some(&s), &delivery("s", "acme"), &Disabling::default());
        assert_eq!(
            got.unwrap_err(),
            NoTarget::Disabled {
                reason: Some("operator".into())
            }
        );
    }

    #[test]
    fn a_subscription_disabled_here_is_no_target_before_the_table_shows_it() {
        let s = subscription("s", "acme");
        let mut disabling = Disabling::default();
        let written = disabling
            .on_disable(
                Some(&s),
                ("s", "acme"),
                DisabledReason::Gone,
                "subscriptions",
                9,
            )
            .expect("disables");
        assert_eq!(written.record.version, s.version + 1);
        let got = target(Some(&s), &delivery("s", "acme"), &disabling);
        assert_eq!(
            got.unwrap_err(),
            NoTarget::Disabled {
                reason: Some("gone".into())
            }
        );
        // Once the table shows the disabled version, the table's record decides.
        let shown = written.record.clone();
        disabling.prune(|_| Some(shown.version));
        let got = target(Some(&shown), &delivery("s", "acme"), &disabling);
        assert_eq!(
            got.unwrap_err(),
            NoTarget::Disabled {
                reason: Some("gone".into())
            }
        );
    }

    #[test]
    fn lane_settings_follow_the_record() {
        let mut s = subscription("s", "acme");
        s.max_in_flight = 7;
        s.rate_limit_per_s = Some(3.0);
        let got = lane_settings(Some(&s));
        assert_eq!((got.max_in_flight, got.rate_per_s), (7, Some(3.0)));
        s.ordering = "strict".into();
        assert_eq!(lane_settings(Some(&s)).max_in_flight, 1);
        assert_eq!(lane_settings(None).max_in_flight, 1);
        s.max_in_flight = -3;
        s.ordering = "unordered".into();
        assert_eq!(lane_settings(Some(&s)).max_in_flight, 1);
    }
}
