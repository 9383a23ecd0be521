//! The S3 path: the real sink archives into an S3-compatible bucket (moto in server mode,
//! from `make venv`, on a free 127.0.0.1 port), and `inspect --from-archive` reads it back.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::{dead_letter, Env};
use hookline_envelope::encode;
use hookline_testkit::kafka;

/// moto's S3 server, stopped on drop.
struct Moto {
    child: Child,
    port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    fn start() -> Self {
        let bin = kafka::repo_root().join(".venv/bin/moto_server");
        assert!(
            bin.exists(),
            "{} is missing: run `make venv` (tests/contract/requirements.txt installs moto[server])",
            bin.display()
        );
        let port = free_port();
        let child = Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server");
        let moto = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto did not listen within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn request(&self, method: &str, path: &str) -> (u16, String) {
        http(self.port, method, path)
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One plain HTTP/1.1 request to 127.0.0.1; returns the status code and the response.
fn http(port: u16, method: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, response)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sink_archives_to_an_s3_compatible_bucket_and_inspect_reads_it() {
    let moto = Moto::start();
    let (status, body) = moto.request("PUT", "/hookline-archive");
    assert_eq!(status, 200, "create bucket: {body}");

    let env = Env::new("sink-s3").await;
    let dlq = env.topics.dlq().to_owned();
    let mut coords = Vec::new();
    for n in 0..20 {
        let tenant = ["acme", "globex"][n % 2];
        let dl = dead_letter(tenant, n, "exhausted");
        coords.push(
            env.send(&dlq, Some(tenant.as_bytes()), &encode(&dl), None)
                .await,
        );
    }
    coords.push(env.send(&dlq, None, b"raw bytes, not avro", None).await);

    let endpoint = moto.endpoint();
    let url = "s3://hookline-archive/dlq/v1";
    let s3_args = [
        "--archive-url",
        url,
        "--s3-endpoint",
        &endpoint,
        "--s3-allow-http",
    ];
    let aws = [
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_REGION", "us-east-1"),
    ];
    let ops_port = free_port();
    let ops_addr = format!("127.0.0.1:{ops_port}");
    let mut sink_args = s3_args.to_vec();
    sink_args.extend(["--http-addr", &ops_addr]);
    let mut sink = env.spawn_with_env(&sink_args, &aws);

    let mut inspect = vec!["inspect", "--from-archive", "--output", "json"];
    inspect.extend(s3_args);
    let deadline = Instant::now() + Duration::from_secs(60);
    let rows: Vec<serde_json::Value> = loop {
        let (code, stdout, stderr) = env.cli_with_env(&inspect, &aws);
        assert_eq!(code, 0, "{stderr}");
        let rows: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if rows.len() >= coords.len() {
            break rows;
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {} rows in S3 after 60 s",
            rows.len(),
            coords.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for (topic, partition, offset) in &coords {
        assert!(
            rows.iter().any(|r| r["topic"] == topic.as_str()
                && r["partition"] == *partition
                && r["offset"] == *offset),
            "{topic}/{partition}@{offset} missing"
        );
    }
    assert_eq!(
        rows.iter().filter(|r| r["reason"] == "undecodable").count(),
        1
    );

    // The objects are Hive-style under the prefix.
    let (status, listing) = moto.request(
        "GET",
        "/hookline-archive?list-type=2&prefix=dlq/v1/kind%3Ddlq/",
    );
    assert_eq!(status, 200, "{listing}");
    for dir in [
        "/tenant=acme/part-",
        "/tenant=globex/part-",
        "/tenant=_unknown/part-",
    ] {
        assert!(listing.contains(dir), "{dir} not in {listing}");
    }
    assert!(listing.contains("dlq/v1/kind=dlq/date="), "{listing}");

    // Metrics count archived records by bounded reason, and the writes.
    let (status, metrics) = http(ops_port, "GET", "/metrics");
    assert_eq!(status, 200, "{metrics}");
    let line = |name: &str, labels: &[&str]| {
        metrics
            .lines()
            .find(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
            .unwrap_or_else(|| panic!("no {name} {labels:?} in\n{metrics}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    let archived = "hookline_dlq_sink_records_archived_total";
    assert_eq!(
        line(archived, &[r#"reason="exhausted""#, r#"topic="dlq""#]),
        20.0
    );
    assert_eq!(
        line(archived, &[r#"reason="undecodable""#, r#"topic="dlq""#]),
        1.0
    );
    assert!(line("hookline_dlq_sink_files_written_total", &[r#"topic="dlq""#]) >= 3.0);
    assert!(
        line(
            "hookline_dlq_sink_archive_write_duration_seconds_count",
            &["ok"]
        ) >= 3.0
    );
    assert!(line("hookline_dlq_sink_archive_write_bytes_count", &[]) >= 3.0);
    assert_eq!(
        line("hookline_dlq_sink_oldest_unarchived_age_seconds", &[]),
        0.0
    );

    // SIGTERM drains and commits everything that was archived.
    let status = Command::new("kill")
        .args(["-TERM", &sink.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || sink.wait().unwrap())
        .await
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    let (committed, high) = kafka::group_progress(&env.group, &dlq).await.unwrap();
    assert_eq!(committed, high);
}
