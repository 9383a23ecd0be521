//! Reduces a client error to a bounded [`FailureKind`] by walking its source chain
//! for the first error that says what happened (egress refusal, DNS, TLS, an I/O
//! error kind, a hyper protocol error).

use std::error::Error as StdError;

use hookline_core::FailureKind;
use hyper_util::client::legacy::Error as ClientError;

use super::egress::EgressError;

/// The kind of a failed request.
pub fn failure_kind(err: &ClientError) -> FailureKind {
    let connecting = err.is_connect();
    let mut next: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(kind) = kind_of(e, connecting) {
            return kind;
        }
        next = e.source();
    }
    if connecting {
        FailureKind::ConnectRefused
    } else {
        FailureKind::Protocol
    }
}

fn kind_of(e: &(dyn StdError + 'static), connecting: bool) -> Option<FailureKind> {
    if let Some(egress) = e.downcast_ref::<EgressError>() {
        return Some(match egress {
            EgressError::Denied(_) => FailureKind::EgressDenied,
            EgressError::Dns(_) | EgressError::NoAddress => FailureKind::Dns,
        });
    }
    if e.downcast_ref::<rustls::Error>().is_some() {
        return Some(FailureKind::Tls);
    }
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        // hyper-rustls wraps tokio-rustls's io::Error(rustls::Error) in another
        // io::Error, and io::Error::source skips payloads: look inside them first.
        if let Some(kind) = io.get_ref().and_then(|inner| kind_of(inner, connecting)) {
            return Some(kind);
        }
        use std::io::ErrorKind::*;
        return match io.kind() {
            TimedOut if connecting => Some(FailureKind::ConnectTimeout),
            TimedOut => Some(FailureKind::Timeout),
            ConnectionRefused | NetworkUnreachable | HostUnreachable | AddrNotAvailable => {
                Some(FailureKind::ConnectRefused)
            }
            ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | NotConnected => {
                Some(FailureKind::ConnectionReset)
            }
            _ => None,
        };
    }
    if let Some(h) = e.downcast_ref::<hyper::Error>() {
        if h.is_timeout() {
            return Some(FailureKind::Timeout);
        }
        if h.is_incomplete_message() || h.is_closed() || h.is_canceled() {
            return Some(FailureKind::ConnectionReset);
        }
        if h.is_parse() || h.is_parse_status() || h.is_parse_too_large() {
            return Some(FailureKind::Protocol);
        }
    }
    None
}

/// A one-line description: the error chain's messages, which never contain the
/// request's headers or body (and so never a signature or secret).
pub(crate) fn describe(err: &ClientError) -> String {
    let mut parts = vec![err.to_string()];
    let mut next = err.source();
    while let Some(e) = next {
        parts.push(e.to_string());
        next = e.source();
    }
    parts.dedup();
    let mut line = parts.join(": ");
    if line.len() > 300 {
        let mut end = 300;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
    }
    line
}
