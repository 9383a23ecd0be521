//! Reading a report a running stage publishes on its ops port (`GET
//! /capacity`), for the operator commands that add several replicas up
//! (`hookline-dispatcher capacity`, `hookline-fanout capacity`). The ops port
//! serves plain HTTP only.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};

/// The URL of `path` on the replica `from`: `host:port` gains `http://`, an
/// empty path becomes `path`. The error says what is wrong with `from`.
pub fn report_url(from: &str, path: &str) -> Result<hyper::Uri, String> {
    let trimmed = from.trim();
    if trimmed.is_empty() {
        return Err("empty; give host:port of a replica's ops port".to_owned());
    }
    let full = if trimmed.contains("://") {
        trimmed.to_owned()
    } else {
        format!("http://{trimmed}")
    };
    let uri: hyper::Uri = full
        .parse()
        .map_err(|e| format!("not an address or URL: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(
            "only http:// (the ops port serves plain HTTP; port-forward it if needed)".to_owned(),
        );
    }
    if uri.host().is_none() {
        return Err("no host".to_owned());
    }
    if matches!(uri.path(), "" | "/") {
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
        return format!("http://{authority}{path}")
            .parse()
            .map_err(|e| format!("not an address or URL: {e}"));
    }
    Ok(uri)
}

/// The body `url` answers with a success status within `timeout`; the error
/// says what went wrong (no answer, the status and the start of the body).
pub async fn fetch(url: &hyper::Uri, timeout: Duration) -> Result<Bytes, String> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let body = async {
        let reply = client
            .get(url.clone())
            .await
            .map_err(|e| format!("GET {url}: {}", hookline_envelope::error_chain(&e)))?;
        let status = reply.status();
        let body = reply
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the answer of {url}: {e}"))?
            .to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            return Err(format!(
                "GET {url} answered {status}: {}",
                text.trim().chars().take(200).collect::<String>()
            ));
        }
        Ok(body)
    };
    tokio::time::timeout(timeout, body)
        .await
        .map_err(|_| format!("GET {url}: no answer within {timeout:?}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_address_gets_the_reports_path() {
        let url = report_url("127.0.0.1:9465", "/capacity").expect("valid");
        assert_eq!(url.to_string(), "http://127.0.0.1:9465/capacity");
        let url = report_url("http://pod-1:9464/other", "/capacity").expect("valid");
        assert_eq!(url.to_string(), "http://pod-1:9464/other");
    }

    #[test]
    fn a_bad_address_says_why() {
        for (from, why) in [
            ("", "empty"),
            ("https://pod:1", "only http://"),
            ("http://", "not an address"),
        ] {
            let err = report_url(from, "/capacity").expect_err(from);
            assert!(err.contains(why), "{from}: {err}");
        }
    }
}
