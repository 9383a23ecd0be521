use std::time::Duration;

use hookline_testkit::receiver::{Behaviour, Receiver};
use hyper::header::{HeaderValue, CONTENT_TYPE};

use super::*;

fn settings(allow: &[&str], allow_http: bool) -> HttpSettings {
    HttpSettings {
        allow_http,
        egress: EgressPolicy::new(allow.iter().map(|c| c.parse().unwrap()).collect()),
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(3),
        max_response_bytes: 16,
        ..HttpSettings::default()
    }
}

fn post(url: &str) -> Outgoing {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Outgoing {
        url: url.to_owned(),
        headers,
        body: Bytes::from_static(b"{\"n\":1}"),
    }
}

fn kind(r: Result<Incoming, Failure>) -> FailureKind {
    match r {
        Ok(i) => panic!("expected a failure, got status {}", i.status),
        Err(f) => f.kind,
    }
}

#[tokio::test]
async fn loopback_is_denied_in_every_spelling_without_the_allow_list() {
    let rx = Receiver::start().await.unwrap();
    let port = rx.addr().port();
    let client = WebhookClient::new(settings(&[], true)).unwrap();
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://[::1]:{port}/"),
        format!("http://localhost:{port}/"),
        format!("http://2130706433:{port}/"), // decimal 127.0.0.1, resolved by the system
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://10.0.0.1/".to_owned(),
    ] {
        assert_eq!(
            kind(client.post(post(&url)).await),
            FailureKind::EgressDenied,
            "{url}"
        );
    }
    assert_eq!(rx.count(), 0, "nothing may reach the receiver");
}

#[tokio::test]
async fn a_numeric_ipv4_spelling_is_refused_on_the_first_attempt_over_https_too() {
    let rx = Receiver::start().await.unwrap();
    let port = rx.addr().port();
    let denying = WebhookClient::new(settings(&[], true)).unwrap();
    let allowing = WebhookClient::new(settings(&["127.0.0.0/8"], true)).unwrap();
    for host in [
        "127.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "127.0.0.1.",
    ] {
        for scheme in ["https", "http"] {
            let url = format!("{scheme}://{host}:{port}/");
            let denied = denying.post(post(&url)).await.unwrap_err();
            assert_eq!(denied.kind, FailureKind::EgressDenied, "{url}: {denied:?}");
            assert!(denied.detail.contains("127.0.0.1"), "{}", denied.detail);
            // Allowed by the policy, still not sent: named, not a transport error.
            let allowed = allowing.post(post(&url)).await.unwrap_err();
            assert_eq!(allowed.kind, FailureKind::InvalidUrl, "{url}: {allowed:?}");
            assert!(
                allowed.detail.contains("write it as 127.0.0.1"),
                "{}",
                allowed.detail
            );
        }
    }
    // The IPv6 forms are literals, checked by the connector.
    for host in [
        "[::ffff:7f00:1]",
        "[0:0:0:0:0:ffff:127.0.0.1]",
        "[::127.0.0.1]",
    ] {
        for scheme in ["https", "http"] {
            let url = format!("{scheme}://{host}:{port}/");
            assert_eq!(
                kind(denying.post(post(&url)).await),
                FailureKind::EgressDenied,
                "{url}"
            );
        }
    }
    assert_eq!(rx.count(), 0, "nothing may reach the receiver");
}

#[tokio::test]
async fn plain_http_is_denied_unless_allowed() {
    let rx = Receiver::start().await.unwrap();
    let client = WebhookClient::new(settings(&["127.0.0.0/8"], false)).unwrap();
    assert_eq!(
        kind(client.post(post(&rx.url("/"))).await),
        FailureKind::EgressDenied
    );
    assert_eq!(rx.count(), 0);
}

#[tokio::test]
async fn allowed_post_reads_status_retry_after_and_a_capped_body() {
    let rx = Receiver::start().await.unwrap();
    rx.set(
        "/busy",
        Behaviour::status(503)
            .retry_after("7")
            .body("a body much longer than sixteen bytes"),
    );
    let client = WebhookClient::new(settings(&["127.0.0.0/8"], true)).unwrap();
    let got = client.post(post(&rx.url("/busy"))).await.unwrap();
    assert_eq!(got.status, 503);
    assert_eq!(got.retry_after.as_deref(), Some("7"));
    assert_eq!(&got.body[..], b"a body much long");
    let reqs = rx.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].method, Method::POST);
    assert_eq!(&reqs[0].body[..], b"{\"n\":1}");
    assert_eq!(reqs[0].header("content-type"), "application/json");
}

/// The default pool keeps every connection a burst to one host opened:
/// a second burst as large reuses them instead of connecting again.
#[tokio::test]
async fn a_second_burst_to_one_host_reuses_the_first_bursts_connections() {
    const BURST: usize = 64;
    let rx = Receiver::start().await.unwrap();
    // Slow enough that the whole burst is in flight at once.
    rx.set(
        "/",
        Behaviour::status(204).delay(Duration::from_millis(200)),
    );
    let client = WebhookClient::new(settings(&["127.0.0.0/8"], true)).unwrap();
    let burst = || {
        futures::future::join_all((0..BURST).map(|_| {
            let client = client.clone();
            let url = rx.url("/");
            async move { client.post(post(&url)).await.map(|r| r.status) }
        }))
    };
    for got in burst().await {
        assert_eq!(got.unwrap(), 204);
    }
    let opened = rx.connections();
    assert!(
        opened >= BURST / 2,
        "the first burst opened {opened} connections"
    );
    for got in burst().await {
        assert_eq!(got.unwrap(), 204);
    }
    // With the old default (32 idle per host) the second burst opened 32
    // more; a few may still be on their way back to the pool.
    let reopened = rx.connections() - opened;
    assert!(
        reopened <= BURST / 8,
        "the second burst opened {reopened} new connections beside the first {opened}"
    );
}

#[tokio::test]
async fn redirects_are_returned_not_followed() {
    let rx = Receiver::start().await.unwrap();
    rx.set(
        "/moved",
        Behaviour::status(302).header("location", &rx.url("/target")),
    );
    let client = WebhookClient::new(settings(&["127.0.0.0/8"], true)).unwrap();
    let got = client.post(post(&rx.url("/moved"))).await.unwrap();
    assert_eq!(got.status, 302);
    assert_eq!(rx.count(), 1);
    assert!(rx.requests_to("/target").is_empty());
}

#[tokio::test]
async fn slow_receiver_hits_the_total_timeout() {
    let rx = Receiver::start().await.unwrap();
    rx.set(
        "/slow",
        Behaviour::status(204).delay(Duration::from_secs(10)),
    );
    let client = WebhookClient::new(HttpSettings {
        request_timeout: Duration::from_millis(300),
        ..settings(&["127.0.0.0/8"], true)
    })
    .unwrap();
    let started = std::time::Instant::now();
    assert_eq!(
        kind(client.post(post(&rx.url("/slow"))).await),
        FailureKind::Timeout
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn closed_port_is_connect_refused() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let client = WebhookClient::new(settings(&["127.0.0.0/8"], true)).unwrap();
    assert_eq!(
        kind(
            client
                .post(post(&format!("http://127.0.0.1:{port}/")))
                .await
        ),
        FailureKind::ConnectRefused
    );
}

#[tokio::test]
async fn malformed_urls_are_invalid() {
    let client = WebhookClient::new(settings(&[], false)).unwrap();
    for url in [
        "not a url",
        "ftp://example.com/",
        "https:///nohost",
        "https://user:pw@example.com/",
    ] {
        assert_eq!(
            kind(client.post(post(url)).await),
            FailureKind::InvalidUrl,
            "{url}"
        );
    }
}

#[tokio::test]
async fn https_negotiates_h2_with_a_trusted_test_ca() {
    let rx = Receiver::start_tls().await.unwrap();
    let roots = CertificateDer::pem_slice_iter(rx.ca_pem().unwrap().as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let client = WebhookClient::new(HttpSettings {
        extra_roots: roots,
        ..settings(&["127.0.0.0/8"], false)
    })
    .unwrap();
    let url = format!("https://localhost:{}/tls", rx.addr().port());
    let got = client.post(post(&url)).await.unwrap();
    assert_eq!(got.status, 204);
    assert_eq!(got.version, Version::HTTP_2);
    // A second request reuses the pooled connection.
    client.post(post(&url)).await.unwrap();
    assert_eq!(rx.requests_to("/tls").len(), 2);

    // Without the test CA the certificate is not trusted.
    let untrusting = WebhookClient::new(settings(&["127.0.0.0/8"], false)).unwrap();
    assert_eq!(kind(untrusting.post(post(&url)).await), FailureKind::Tls);
}
