//! Prints the Standard Webhooks headers the dispatcher sends for a body, signed
//! now with the given secrets, as JSON — for the cross-language contract test
//! (`tests/contract/test_signatures.py`), which verifies them with the
//! `standardwebhooks` package from PyPI.
//!
//! ```sh
//! cargo run -q -p hookline-dispatcher --example sign_webhook -- \
//!     --id msg_1 --secret whsec_... [--secret whsec_...] [--timestamp 1700000000] < body
//! ```

use std::io::Read;

use clap::Parser;
use hookline_runtime::signing::{self, SigningKey};

#[derive(Debug, Parser)]
struct Args {
    /// The webhook id (a delivery id).
    #[arg(long)]
    id: String,
    /// A `whsec_...` secret; repeat for a rotation.
    #[arg(long = "secret", required = true)]
    secrets: Vec<String>,
    /// Unix seconds to sign at (default: now).
    #[arg(long)]
    timestamp: Option<i64>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let keys = args
        .secrets
        .iter()
        .map(|s| SigningKey::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut body = Vec::new();
    std::io::stdin().read_to_end(&mut body)?;
    let timestamp = match args.timestamp {
        Some(t) => t,
        None => i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_secs(),
        )?,
    };
    let signed = signing::sign(&keys, &args.id, timestamp, &body);
    let out = serde_json::json!({
        signing::HEADER_ID: signed.id,
        signing::HEADER_TIMESTAMP: signed.timestamp.to_string(),
        signing::HEADER_SIGNATURE: signed.signature,
        "user-agent": hookline_dispatcher::USER_AGENT_VALUE,
    });
    println!("{out}");
    Ok(())
}
