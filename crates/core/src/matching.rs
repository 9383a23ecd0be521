//! Event-type filters: a validated pattern matches exactly the event types it names,
//! and a filter never matches anything no pattern of it matches.
//!
//! Grammar (validated once, at parse time):
//! - an exact dotted name, `invoice.paid`: segments of `[A-Za-z0-9_-]+` joined by `.`;
//! - `prefix.*`: matches `prefix.x` and `prefix.x.y`, but not `prefix` itself and not
//!   `prefixx.y` (the boundary is the dot);
//! - a lone `*`: matches every event type.
//!
//! `*` is only legal as the whole last segment. Matching is case-sensitive and
//! compares bytes: the event type itself is not validated here (fan-out decides
//! what to do with malformed events), but a pattern can only match a well-formed
//! name plus, for `prefix.*`, a non-empty remainder.

use std::fmt;
use std::str::FromStr;

/// Longest accepted pattern, in bytes. Event types are short identifiers; a cap keeps
/// a hostile subscription from making every match expensive.
pub const MAX_PATTERN_LEN: usize = 255;

/// Why a pattern or filter was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("event-type pattern is empty")]
    Empty,
    #[error("event-type pattern is {len} bytes long; the limit is {max}")]
    TooLong { len: usize, max: usize },
    #[error(
        "event-type pattern `{pattern}` has an empty segment (leading, trailing or doubled `.`)"
    )]
    EmptySegment { pattern: String },
    #[error("event-type pattern `{pattern}` contains `{ch}`; segments allow only A-Z a-z 0-9 _ -")]
    InvalidChar { pattern: String, ch: char },
    #[error("event-type pattern `{pattern}`: `*` is only allowed as the whole last segment (`prefix.*` or `*`)")]
    MisplacedWildcard { pattern: String },
    #[error("event-type filter has no patterns; use `*` to match every event type")]
    EmptyFilter,
}

/// One validated event-type pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventTypePattern {
    /// Matches exactly this name.
    Exact(String),
    /// `prefix.*`; holds the prefix without the trailing `.*`.
    Prefix(String),
    /// `*`: matches everything.
    Any,
}

impl EventTypePattern {
    /// Validates and parses one pattern.
    pub fn parse(pattern: &str) -> Result<Self, PatternError> {
        if pattern.is_empty() {
            return Err(PatternError::Empty);
        }
        if pattern.len() > MAX_PATTERN_LEN {
            return Err(PatternError::TooLong {
                len: pattern.len(),
                max: MAX_PATTERN_LEN,
            });
        }
        if pattern == "*" {
            return Ok(Self::Any);
        }
        let (name, wildcard) = match pattern.strip_suffix(".*") {
            Some(prefix) => (prefix, true),
            None => (pattern, false),
        };
        validate_name(name, pattern)?;
        Ok(if wildcard {
            Self::Prefix(name.to_owned())
        } else {
            Self::Exact(name.to_owned())
        })
    }

    /// Whether `event_type` is selected by this pattern.
    pub fn matches(&self, event_type: &str) -> bool {
        match self {
            Self::Exact(name) => event_type == name,
            Self::Prefix(prefix) => event_type
                .strip_prefix(prefix.as_str())
                .and_then(|rest| rest.strip_prefix('.'))
                .is_some_and(|rest| !rest.is_empty()),
            Self::Any => true,
        }
    }
}

/// Checks a dotted name; `original` is the full pattern, for error messages.
fn validate_name(name: &str, original: &str) -> Result<(), PatternError> {
    for segment in name.split('.') {
        if segment.is_empty() {
            return Err(PatternError::EmptySegment {
                pattern: original.to_owned(),
            });
        }
        if let Some(ch) = segment.chars().find(|c| !is_segment_char(*c)) {
            return Err(if ch == '*' {
                PatternError::MisplacedWildcard {
                    pattern: original.to_owned(),
                }
            } else {
                PatternError::InvalidChar {
                    pattern: original.to_owned(),
                    ch,
                }
            });
        }
    }
    Ok(())
}

fn is_segment_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

impl FromStr for EventTypePattern {
    type Err = PatternError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for EventTypePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(name) => f.write_str(name),
            Self::Prefix(prefix) => write!(f, "{prefix}.*"),
            Self::Any => f.write_str("*"),
        }
    }
}

/// A subscription's filter: matches when any of its (at least one) patterns matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTypeFilter {
    patterns: Vec<EventTypePattern>,
}

impl EventTypeFilter {
    /// Parses every pattern; the first invalid one fails the whole filter, and an
    /// empty list is refused (a subscription that wants everything says `*`).
    pub fn parse<I, S>(patterns: I) -> Result<Self, PatternError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let patterns = patterns
            .into_iter()
            .map(|p| EventTypePattern::parse(p.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        if patterns.is_empty() {
            return Err(PatternError::EmptyFilter);
        }
        Ok(Self { patterns })
    }

    pub fn matches(&self, event_type: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(event_type))
    }

    pub fn patterns(&self) -> &[EventTypePattern] {
        &self.patterns
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn pattern_matching_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("invoice.paid", "invoice.paid", true),
            ("invoice.paid", "invoice.paid.late", false),
            ("invoice.paid", "invoice", false),
            ("invoice.paid", "Invoice.paid", false),
            ("invoice", "invoice", true),
            ("invoice.*", "invoice.paid", true),
            ("invoice.*", "invoice.paid.late", true),
            ("invoice.*", "invoice", false),
            ("invoice.*", "invoice.", false),
            ("invoice.*", "invoicex.paid", false),
            ("invoice.*", "xinvoice.paid", false),
            ("invoice.*", "billing.invoice.paid", false),
            ("a.b.*", "a.b.c", true),
            ("a.b.*", "a.bc.d", false),
            ("a.b.*", "a.c", false),
            ("*", "anything.at.all", true),
            ("*", "x", true),
        ];
        for (pattern, event_type, expected) in cases {
            let p = EventTypePattern::parse(pattern).unwrap();
            assert_eq!(
                p.matches(event_type),
                *expected,
                "{pattern} vs {event_type}"
            );
        }
    }

    #[test]
    fn pattern_validation_table() {
        let long = "a".repeat(MAX_PATTERN_LEN + 1);
        let max = "a".repeat(MAX_PATTERN_LEN);
        let cases: Vec<(&str, Result<EventTypePattern, PatternError>)> = vec![
            (
                "invoice.paid",
                Ok(EventTypePattern::Exact("invoice.paid".into())),
            ),
            (
                "Order_v2.created-x",
                Ok(EventTypePattern::Exact("Order_v2.created-x".into())),
            ),
            ("invoice.*", Ok(EventTypePattern::Prefix("invoice".into()))),
            ("*", Ok(EventTypePattern::Any)),
            (&max, Ok(EventTypePattern::Exact(max.clone()))),
            ("", Err(PatternError::Empty)),
            (
                &long,
                Err(PatternError::TooLong {
                    len: MAX_PATTERN_LEN + 1,
                    max: MAX_PATTERN_LEN,
                }),
            ),
            (
                ".invoice",
                Err(PatternError::EmptySegment {
                    pattern: ".invoice".into(),
                }),
            ),
            (
                "invoice.",
                Err(PatternError::EmptySegment {
                    pattern: "invoice.".into(),
                }),
            ),
            (
                "a..b",
                Err(PatternError::EmptySegment {
                    pattern: "a..b".into(),
                }),
            ),
            (
                ".*",
                Err(PatternError::EmptySegment {
                    pattern: ".*".into(),
                }),
            ),
            (
                "invoice paid",
                Err(PatternError::InvalidChar {
                    pattern: "invoice paid".into(),
                    ch: ' ',
                }),
            ),
            (
                "invoice/paid",
                Err(PatternError::InvalidChar {
                    pattern: "invoice/paid".into(),
                    ch: '/',
                }),
            ),
            (
                "café",
                Err(PatternError::InvalidChar {
                    pattern: "café".into(),
                    ch: 'é',
                }),
            ),
            (
                "inv*",
                Err(PatternError::MisplacedWildcard {
                    pattern: "inv*".into(),
                }),
            ),
            (
                "*.paid",
                Err(PatternError::MisplacedWildcard {
                    pattern: "*.paid".into(),
                }),
            ),
            (
                "a.*.b",
                Err(PatternError::MisplacedWildcard {
                    pattern: "a.*.b".into(),
                }),
            ),
            (
                "a.**",
                Err(PatternError::MisplacedWildcard {
                    pattern: "a.**".into(),
                }),
            ),
            (
                "**",
                Err(PatternError::MisplacedWildcard {
                    pattern: "**".into(),
                }),
            ),
            (
                "a.*.*",
                Err(PatternError::MisplacedWildcard {
                    pattern: "a.*.*".into(),
                }),
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(EventTypePattern::parse(input), expected, "input {input:?}");
        }
    }

    #[test]
    fn filter_matches_if_any_pattern_matches() {
        let f = EventTypeFilter::parse(["invoice.paid", "customer.*"]).unwrap();
        assert!(f.matches("invoice.paid"));
        assert!(f.matches("customer.created"));
        assert!(!f.matches("invoice.created"));
        assert!(!f.matches("customer"));
        assert_eq!(f.patterns().len(), 2);
    }

    #[test]
    fn filter_refuses_empty_list_and_any_bad_pattern() {
        assert_eq!(
            EventTypeFilter::parse(Vec::<String>::new()),
            Err(PatternError::EmptyFilter)
        );
        assert_eq!(
            EventTypeFilter::parse(["ok.name", "bad*"]),
            Err(PatternError::MisplacedWildcard {
                pattern: "bad*".into()
            })
        );
    }

    #[test]
    fn display_round_trips() {
        for s in ["invoice.paid", "invoice.*", "*", "a"] {
            let p: EventTypePattern = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
        }
    }

    fn segment() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_-]{1,6}"
    }

    fn name() -> impl Strategy<Value = String> {
        prop::collection::vec(segment(), 1..4).prop_map(|s| s.join("."))
    }

    proptest! {
        #[test]
        fn valid_names_parse_and_match_only_themselves(a in name(), b in name()) {
            let p = EventTypePattern::parse(&a).unwrap();
            prop_assert!(p.matches(&a));
            prop_assert_eq!(p.matches(&b), a == b);
            prop_assert_eq!(p.to_string(), a);
        }

        #[test]
        fn prefix_matches_exactly_dotted_extensions(prefix in name(), other in name(), rest in name()) {
            let p = EventTypePattern::parse(&format!("{prefix}.*")).unwrap();
            let (dotted, glued) = (format!("{prefix}.{rest}"), format!("{prefix}{rest}"));
            prop_assert!(p.matches(&dotted));
            prop_assert!(!p.matches(&prefix));
            // Without the dot boundary it must not match, even when it shares the bytes.
            prop_assert!(!p.matches(&glued));
            let expected = other.starts_with(&format!("{prefix}."));
            prop_assert_eq!(p.matches(&other), expected);
        }

        #[test]
        fn parse_never_panics_and_accepted_patterns_round_trip(s in "\\PC{0,40}") {
            if let Ok(p) = EventTypePattern::parse(&s) {
                prop_assert_eq!(p.to_string(), s);
            }
        }
    }
}
