//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): an event's
//! `traceparent` and `tracestate`, taken from its Kafka headers when valid, kept
//! on its deliveries and sent on every webhook request, so the receiver's trace
//! continues the producer's. hookline makes no span of its own, so it passes the
//! context on unchanged, as the spec allows a participant that does not trace.
//!
//! A `traceparent` that is not valid is dropped (the spec: a receiver must not
//! pass on what it cannot parse), and a `tracestate` only ever goes with a valid
//! `traceparent`.

/// The header (and Kafka header) names.
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";

/// Longest `tracestate` passed on: the spec's 512 characters.
pub const MAX_TRACESTATE_LEN: usize = 512;

/// A valid trace context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The context of header values, or `None` when `traceparent` is absent or
    /// invalid. A `tracestate` that is not printable ASCII within
    /// [`MAX_TRACESTATE_LEN`] is dropped, the `traceparent` kept.
    pub fn from_headers(traceparent: Option<&[u8]>, tracestate: Option<&[u8]>) -> Option<Self> {
        let traceparent = std::str::from_utf8(traceparent?).ok()?.trim();
        if !valid_traceparent(traceparent) {
            return None;
        }
        let tracestate = tracestate
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::trim)
            .filter(|s| {
                !s.is_empty()
                    && s.len() <= MAX_TRACESTATE_LEN
                    && s.bytes().all(|b| (0x20..0x7f).contains(&b))
            })
            .map(str::to_owned);
        Some(Self {
            traceparent: traceparent.to_owned(),
            tracestate,
        })
    }

    /// The 32 hex digits of the trace id, for logs.
    pub fn trace_id(&self) -> &str {
        trace_id(&self.traceparent).unwrap_or_default()
    }
}

/// The trace id of a `traceparent`, if it is valid.
pub fn trace_id(traceparent: &str) -> Option<&str> {
    valid_traceparent(traceparent).then(|| &traceparent[3..35])
}

/// `version-traceid-parentid-flags`, lowercase hex: version 2 digits, not `ff`;
/// trace id 32 digits, parent id 16, neither all zeros; flags 2. Version `00` is
/// exactly that; a later version may carry more after a `-`.
pub fn valid_traceparent(v: &str) -> bool {
    let b = v.as_bytes();
    if b.len() < 55 {
        return false;
    }
    let hex = |r: std::ops::Range<usize>| {
        b[r].iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    };
    let zeros = |r: std::ops::Range<usize>| b[r].iter().all(|c| *c == b'0');
    let shape = hex(0..2)
        && b[2] == b'-'
        && hex(3..35)
        && b[35] == b'-'
        && hex(36..52)
        && b[52] == b'-'
        && hex(53..55);
    if !shape || &b[0..2] == b"ff" || zeros(3..35) || zeros(36..52) {
        return false;
    }
    if &b[0..2] == b"00" {
        b.len() == 55
    } else {
        b.len() == 55 || b[55] == b'-'
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_table() {
        let cases: &[(&str, bool)] = &[
            (VALID, true),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
                true,
            ),
            // A later version may append fields after a dash.
            (
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what",
                true,
            ),
            (
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                true,
            ),
            // Version 00 is exactly 55 characters.
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
                false,
            ),
            (
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
                false,
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                false,
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                false,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                false,
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                false,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
                false,
            ),
            (
                "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                false,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
                false,
            ),
            ("", false),
            ("00-abc-01", false),
        ];
        for (v, ok) in cases {
            assert_eq!(valid_traceparent(v), *ok, "{v}");
            assert_eq!(trace_id(v).is_some(), *ok, "{v}");
        }
        assert_eq!(trace_id(VALID), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
    }

    #[test]
    fn from_headers_keeps_a_valid_context_and_drops_the_rest() {
        let tc =
            TraceContext::from_headers(Some(VALID.as_bytes()), Some(b"congo=t61rcWkgMzE")).unwrap();
        assert_eq!(tc.traceparent, VALID);
        assert_eq!(tc.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
        assert_eq!(tc.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        // Surrounding whitespace, as HTTP allows, is trimmed.
        let padded = format!(" {VALID} ");
        assert!(TraceContext::from_headers(Some(padded.as_bytes()), None).is_some());
        // No or a bad traceparent: nothing, not even the tracestate.
        assert_eq!(TraceContext::from_headers(None, Some(b"a=b")), None);
        assert_eq!(
            TraceContext::from_headers(Some(b"00-abc-01"), Some(b"a=b")),
            None
        );
        assert_eq!(TraceContext::from_headers(Some(&[0xff, 0xfe]), None), None);
        // A bad tracestate is dropped, the traceparent kept.
        let long = "a=".to_owned() + &"b".repeat(MAX_TRACESTATE_LEN);
        for bad in [long.as_bytes(), b"a=\x01", b"", &[0xff][..]] {
            let tc = TraceContext::from_headers(Some(VALID.as_bytes()), Some(bad)).unwrap();
            assert_eq!(tc.tracestate, None, "{bad:?}");
        }
    }
}
