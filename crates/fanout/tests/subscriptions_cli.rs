//! `hookline-fanout subscriptions` against a real broker: `disable` and
//! `enable` flip only `enabled` (and bump the version) without repeating the
//! URL, a later `put` without `--enabled` keeps a disabled subscription
//! disabled, `--enabled true` re-enables it, and `get` prints the record.
// The helpers below run only inside the test; a failure there is the test's.
#![allow(clippy::unwrap_used)]

use clap::Parser;
use hookline_envelope::Subscription;
use hookline_fanout::cli::{self, SubscriptionsCmd};
use hookline_runtime::config::CommonArgs;
use hookline_testkit::kafka::{brokers, create_hookline_topics, unique_name};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(subcommand)]
    cmd: SubscriptionsCmd,
}

async fn run(prefix: &str, args: &[&str]) -> Result<String, cli::CliError> {
    let brokers = brokers();
    let argv = [
        "subscriptions",
        "--brokers",
        &brokers,
        "--topic-prefix",
        prefix,
    ]
    .into_iter()
    .chain(args.iter().copied());
    let parsed = Cli::try_parse_from(argv).expect("valid flags");
    let mut out = Vec::new();
    cli::run(&parsed.common, parsed.cmd, &mut out).await?;
    Ok(String::from_utf8(out).unwrap())
}

async fn get(prefix: &str, id: &str) -> Subscription {
    let text = run(prefix, &["get", "--id", id]).await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test]
async fn disable_enable_and_put_never_flip_enabled_silently() {
    let prefix = format!("{}.", unique_name("subs-cli"));
    create_hookline_topics(&prefix).await.unwrap();
    let put = [
        "put",
        "--id",
        "s1",
        "--tenant",
        "acme",
        "--url",
        "https://hooks.acme.example/in",
        "--event-type",
        "invoice.*",
        "--secret-ref",
        "acme",
    ];
    run(&prefix, &put).await.unwrap();
    let first = get(&prefix, "s1").await;
    assert!(first.enabled);
    assert_eq!(first.version, 1);

    let out = run(&prefix, &["disable", "--id", "s1"]).await.unwrap();
    assert!(out.contains("disabled s1 version 2"), "{out}");
    let off = get(&prefix, "s1").await;
    assert!(!off.enabled);
    assert_eq!(off.version, 2);
    assert_eq!(off.url, first.url, "nothing but the state changes");
    assert_eq!(off.disabled_reason.as_deref(), Some("operator"));
    assert!(
        off.disabled_at.is_some_and(|at| at >= first.updated_at),
        "{off:?}"
    );
    let again = run(&prefix, &["disable", "--id", "s1"]).await.unwrap();
    assert!(again.contains("already disabled"), "{again}");

    // A put without --enabled keeps it disabled, and says so.
    let out = run(&prefix, &put).await.unwrap();
    assert!(out.contains("kept disabled"), "{out}");
    let kept = get(&prefix, "s1").await;
    assert!(!kept.enabled);
    assert_eq!(
        (kept.disabled_reason, kept.disabled_at),
        (off.disabled_reason, off.disabled_at)
    );

    let out = run(&prefix, &["enable", "--id", "s1"]).await.unwrap();
    assert!(out.contains("enabled s1 version 4"), "{out}");
    let on = get(&prefix, "s1").await;
    assert!(on.enabled);
    assert_eq!((on.disabled_reason, on.disabled_at), (None, None));

    let mut off = put.to_vec();
    off.extend(["--enabled", "false"]);
    run(&prefix, &off).await.unwrap();
    let off = get(&prefix, "s1").await;
    assert!(!off.enabled);
    assert_eq!(off.disabled_reason.as_deref(), Some("operator"));

    let err = run(&prefix, &["enable", "--id", "nope"]).await.unwrap_err();
    assert!(
        err.to_string().contains("no subscription with id `nope`"),
        "{err}"
    );
}
