//! The webhook client against hostile endpoints (`hookline_testkit::hostile`):
//! every attempt returns within the request timeout plus a small margin, is
//! classified into the right verdict and outcome, reads a bounded number of
//! response bytes, and closes the connection rather than leaving it to the
//! endpoint. The server's own counters are the evidence, not the client's word.

use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use hookline_core::{
    classify, egress::EgressPolicy, AttemptResult, Classification, FailureKind, RejectReason,
    Verdict,
};
use hookline_runtime::http::{Failure, HttpSettings, Incoming, Outgoing, WebhookClient};
use hookline_testkit::hostile::{
    Behaviour, CertFault, Connection, Framing, HostileServer, Malformed, RedirectTo,
};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use rustls::pki_types::{pem::PemObject, CertificateDer};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Scheduling slack on a shared two-core machine.
const MARGIN: Duration = Duration::from_millis(750);
const MAX_RESPONSE_BYTES: usize = 4096;
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const DRIP: Duration = Duration::from_secs(1);

fn client(extra_ca: Option<&str>) -> WebhookClient {
    let extra_roots = extra_ca
        .map(|pem| {
            CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("test CA parses")
        })
        .unwrap_or_default();
    WebhookClient::new(HttpSettings {
        connect_timeout: CONNECT_TIMEOUT,
        request_timeout: REQUEST_TIMEOUT,
        max_response_bytes: MAX_RESPONSE_BYTES,
        allow_http: true,
        egress: EgressPolicy::new(vec!["127.0.0.0/8".parse().expect("cidr")]),
        extra_roots,
        ..HttpSettings::default()
    })
    .expect("client builds")
}

/// One attempt as the dispatcher makes it, and what came of it.
#[derive(Debug)]
struct Probe {
    result: Result<Incoming, Failure>,
    took: Duration,
    class: Classification,
    conns: Vec<Connection>,
}

impl Probe {
    fn failure(&self) -> FailureKind {
        match &self.result {
            Ok(i) => panic!("expected a failure, got status {}", i.status),
            Err(f) => f.kind,
        }
    }

    fn incoming(&self) -> &Incoming {
        match &self.result {
            Ok(i) => i,
            Err(f) => panic!("expected a response, got {:?}: {}", f.kind, f.detail),
        }
    }
}

/// POSTs once to `server` with `client`, then waits (up to 2 s) for the server
/// to see the connection closed or idle; asserts the time bound and prints the
/// counts.
async fn probe_with(server: &HostileServer, client: &WebhookClient) -> Probe {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        HeaderName::from_static("webhook-id"),
        HeaderValue::from_static("msg_hostile"),
    );
    let started = Instant::now();
    let result = client
        .post(Outgoing {
            url: server.url("/hook"),
            headers,
            body: Bytes::from_static(b"{\"hostile\":true}"),
        })
        .await;
    let took = started.elapsed();
    let attempt = match &result {
        Ok(i) => AttemptResult::Response {
            status: i.status,
            retry_after: i.retry_after.clone(),
        },
        Err(f) => AttemptResult::Failed(f.kind),
    };
    let class = classify(&attempt, SystemTime::now());
    server
        .wait_until(Duration::from_secs(2), |c| {
            c.iter().all(Connection::settled)
        })
        .await;
    let conns = server.connections();
    let detail = match &result {
        Ok(i) => format!("status {} body {} B", i.status, i.body.len()),
        Err(f) => f.detail.clone(),
    };
    println!(
        "{}\n  -> {:?} outcome={} in {:.2?} ({detail})",
        server.behaviour(),
        class.verdict,
        class.outcome,
        took
    );
    for c in &conns {
        let closed = match c.closed_after() {
            Some(after) => format!("client closed after {after:.2?}"),
            None => "open (kept alive or closed by the server)".to_owned(),
        };
        println!(
            "  server: {} request(s) {} B read, {} B written, {closed}{}",
            c.requests,
            c.request_bytes,
            c.response_bytes,
            c.error
                .as_deref()
                .map(|e| format!(", {e}"))
                .unwrap_or_default()
        );
    }
    assert!(
        took <= REQUEST_TIMEOUT + MARGIN,
        "{}: post took {took:?}",
        server.behaviour()
    );
    Probe {
        result,
        took,
        class,
        conns,
    }
}

async fn probe(behaviour: Behaviour) -> (HostileServer, Probe) {
    let server = HostileServer::start(behaviour)
        .await
        .expect("server starts");
    let probe = probe_with(&server, &client(None)).await;
    (server, probe)
}

fn retry() -> Verdict {
    Verdict::Retry { retry_after: None }
}

/// The client closed every connection it opened, within `within` of accepting it.
fn all_closed(conns: &[Connection], within: Duration) {
    assert!(!conns.is_empty(), "the endpoint was never contacted");
    for c in conns {
        let closed = c.closed_after().expect("the client closed the connection");
        assert!(closed <= within, "closed only after {closed:?}");
    }
}

#[tokio::test]
async fn silent_endpoint_times_out_and_the_connection_is_closed() {
    let (_server, p) = probe(Behaviour::Silent).await;
    assert_eq!(p.failure(), FailureKind::Timeout);
    assert_eq!(
        (p.class.verdict, p.class.outcome.as_str()),
        (retry(), "timeout")
    );
    assert!(p.took >= REQUEST_TIMEOUT);
    all_closed(&p.conns, REQUEST_TIMEOUT + MARGIN);
}

#[tokio::test]
async fn status_line_dripped_a_byte_a_second_times_out() {
    let (_server, p) = probe(Behaviour::DripStatus { interval: DRIP }).await;
    assert_eq!(p.failure(), FailureKind::Timeout);
    assert_eq!(
        (p.class.verdict, p.class.outcome.as_str()),
        (retry(), "timeout")
    );
    // About one byte per second of the timeout, never the whole response.
    assert!(p.conns[0].response_bytes <= 4, "{:?}", p.conns[0]);
    all_closed(&p.conns, REQUEST_TIMEOUT + MARGIN);
}

#[tokio::test]
async fn a_200_whose_body_drips_is_delivered_at_the_deadline() {
    // The status line decided the outcome; a slow body must not turn an
    // accepted delivery into a retry (each retry would be another duplicate).
    let (_server, p) = probe(Behaviour::DripBody { interval: DRIP }).await;
    assert_eq!(p.incoming().status, 200);
    assert_eq!(
        (p.class.verdict, p.class.outcome.as_str()),
        (Verdict::Delivered, "http_200")
    );
    assert!(
        p.took >= REQUEST_TIMEOUT,
        "the body is read until the deadline"
    );
    assert!(p.incoming().body.len() <= 4);
    all_closed(&p.conns, REQUEST_TIMEOUT + MARGIN);
}

#[tokio::test]
async fn reset_after_the_request_is_connection_reset() {
    let (_server, p) = probe(Behaviour::Reset).await;
    assert_eq!(p.failure(), FailureKind::ConnectionReset);
    assert_eq!(
        (p.class.verdict, p.class.outcome.as_str()),
        (retry(), "connection_reset")
    );
    assert!(p.took < Duration::from_secs(1));
    assert!(p.conns[0].request_read_at.is_some(), "the request was sent");
}

async fn huge_body(status: u16, framing: Framing) -> Probe {
    let before = hookline_testkit::rss_kib();
    let (server, p) = probe(Behaviour::HugeBody { status, framing }).await;
    let after = hookline_testkit::rss_kib();
    println!(
        "  client VmRSS {} KiB -> {} KiB ({:+} KiB)",
        before,
        after,
        after as i64 - before as i64
    );
    assert_eq!(p.incoming().status, status);
    assert_eq!(p.incoming().body.len(), MAX_RESPONSE_BYTES);
    assert!(p.took < Duration::from_secs(1), "the capped read is quick");
    // The client stopped reading soon after the cap and closed the connection:
    // what the server got rid of is the cap plus the two sockets' buffers.
    let written = server.response_bytes();
    assert!(written <= 16 * MIB, "server wrote {written} bytes");
    all_closed(&p.conns, Duration::from_secs(1));
    // Give a server that is still writing the chance to show it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.response_bytes(), written, "nobody reads any more");
    p
}

#[tokio::test]
async fn huge_500_body_is_capped_and_retried_by_its_status() {
    let p = huge_body(500, Framing::Length(8 * GIB)).await;
    assert_eq!(
        (p.class.verdict, p.class.outcome.as_str()),
        (retry(), "http_500")
    );
}

#[tokio::test]
async fn huge_200_body_is_capped_and_delivered() {
    let p = huge_body(200, Framing::Length(8 * GIB)).await;
    assert_eq!(
        (p.class.verdict, p.class.outcome.as_str()),
        (Verdict::Delivered, "http_200")
    );
}

#[tokio::test]
async fn endless_chunked_body_is_capped() {
    let p = huge_body(503, Framing::Chunked).await;
    assert_eq!(
        (p.class.verdict, p.class.outcome.as_str()),
        (retry(), "http_503")
    );
}

#[tokio::test]
async fn redirect_to_the_metadata_service_is_rejected_not_followed() {
    for status in [302, 307] {
        let (server, p) = probe(Behaviour::Redirect {
            status,
            to: RedirectTo::Metadata,
        })
        .await;
        assert_eq!(p.incoming().status, status);
        assert_eq!(
            p.class.verdict,
            Verdict::Rejected {
                reason: RejectReason::Redirect
            }
        );
        assert_eq!(p.class.outcome.as_str(), format!("http_{status}"));
        // Followed, it would have been a second connection (or an egress refusal).
        assert_eq!(server.connections().len(), 1);
    }
}

#[tokio::test]
async fn redirect_to_an_allowed_loopback_listener_is_never_contacted() {
    // 127.0.0.0/8 is allowed here, so only "never follow" protects the canary.
    let server = HostileServer::start(Behaviour::Redirect {
        status: 307,
        to: RedirectTo::Canary,
    })
    .await
    .expect("server starts");
    let client = client(None);
    for _ in 0..2 {
        let p = probe_with(&server, &client).await;
        assert_eq!(
            p.class.verdict,
            Verdict::Rejected {
                reason: RejectReason::Redirect
            }
        );
    }
    // The complete 307 left the connection reusable, and it was reused.
    let conns = server.connections();
    assert_eq!((conns.len(), conns[0].requests), (1, 2), "{conns:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.canary_hits(), 0, "the redirect target was contacted");
}

#[tokio::test]
async fn malformed_status_lines_are_protocol_errors() {
    for m in [
        Malformed::LetterDigits,
        Malformed::LongCode,
        Malformed::Garbage,
        Malformed::EndlessHeaders,
    ] {
        let (server, p) = probe(Behaviour::Malformed(m)).await;
        assert_eq!(p.failure(), FailureKind::Protocol, "{m:?}");
        assert_eq!(
            (p.class.verdict, p.class.outcome.as_str()),
            (retry(), "protocol")
        );
        assert!(p.took < Duration::from_secs(1), "{m:?} took {:?}", p.took);
        all_closed(&p.conns, Duration::from_secs(1));
        // hyper caps a response head (~400 KiB); the endless one stops there.
        assert!(server.response_bytes() <= 4 * MIB, "{m:?}");
    }
}

#[tokio::test]
async fn status_line_cut_off_by_close_is_connection_reset() {
    // No complete message arrived before the peer closed: hyper reports an
    // incomplete message, which is a transport failure rather than a reply.
    let (_server, p) = probe(Behaviour::Malformed(Malformed::Truncated)).await;
    assert_eq!(p.failure(), FailureKind::ConnectionReset);
    assert_eq!(
        (p.class.verdict, p.class.outcome.as_str()),
        (retry(), "connection_reset")
    );
    assert!(p.took < Duration::from_secs(1));
}

#[tokio::test]
async fn certificate_for_another_host_is_refused_even_from_a_trusted_ca() {
    let server = HostileServer::start(Behaviour::WrongCert(CertFault::OtherHost))
        .await
        .expect("server starts");
    let p = probe_with(&server, &client(server.ca_pem())).await;
    assert_eq!(p.failure(), FailureKind::Tls);
    assert_eq!(
        (p.class.verdict, p.class.outcome.as_str()),
        (retry(), "tls")
    );
    assert!(p.took < Duration::from_secs(1));
    assert_eq!(p.conns[0].request_bytes, 0, "no request over a refused TLS");
    assert!(p.conns[0].error.is_some(), "the handshake failed");
}

#[tokio::test]
async fn certificate_from_an_untrusted_ca_is_refused() {
    let (_server, p) = probe(Behaviour::WrongCert(CertFault::UntrustedCa)).await;
    assert_eq!(p.failure(), FailureKind::Tls);
    assert_eq!(
        (p.class.verdict, p.class.outcome.as_str()),
        (retry(), "tls")
    );
    assert_eq!(p.conns[0].request_bytes, 0);
}
