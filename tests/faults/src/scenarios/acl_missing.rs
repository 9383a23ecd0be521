//! `acl_missing`: the `secured` pipeline with one ACL of the table taken
//! away while events flow — the fanout's Write on `deliveries` — and given
//! back. The fanout must fail loudly (its `/readyz` fails on `kafka access`,
//! an error line names the topic and the operation), recover (ready again
//! once the ACL is back) and lose nothing: every event is delivered or
//! dead-lettered as its endpoint dictates.

use std::time::Duration;

use anyhow::{bail, Context};
use hookline_testkit::{pipeline::Pipeline, stage::http_get};
use rand::rngs::StdRng;
use tokio::time::Instant;

use super::{
    finish,
    secured::{grant, principals, run_acls, secured_spec, SecureEnv},
    Report, Workload,
};
use crate::load;

const EVENTS: u64 = 300;
const RATE: f64 = 150.0;
/// How long the fanout may take to show the denial (its stall timeout and
/// librdkafka's retries are shorter).
const NOTICE: Duration = Duration::from_secs(60);

pub async fn run(r: &mut Report, _rng: &mut StdRng) -> anyhow::Result<()> {
    let env = SecureEnv::from_env()?;
    let mut p = Pipeline::create(secured_spec("acl_missing", &env)).await?;
    let lines = grant(&env, &p, &principals(&env)).await?;
    let deliveries = p.topics.deliveries().to_owned();
    let taken = lines
        .iter()
        .find(|l| {
            l.windows(2)
                .any(|w| w[0] == "--topic" && w[1] == deliveries)
                && l.iter().any(|w| w == "User:fanout")
        })
        .context("the acls table gives the fanout no ACL on deliveries")?
        .clone();
    let remove: Vec<String> = taken
        .iter()
        .map(|w| {
            if w == "--add" {
                "--remove".to_owned()
            } else {
                w.clone()
            }
        })
        .chain(["--force".to_owned()])
        .collect();
    let work = Workload::install(&mut p).await?;
    p.start().await?;
    run_acls(&env, std::slice::from_ref(&remove)).await?;
    r.inject(format!("removed: {}", remove.join(" ")));
    let load = load::start(&mut p, &work.tenants, EVENTS, RATE)?;
    let fanout = p.stage("fanout")?;
    let (addr, log) = (fanout.addr(), p.dir().join("fanout.log"));
    let began = Instant::now();
    let (mut unready, mut named) = (None, None);
    while began.elapsed() < NOTICE && (unready.is_none() || named.is_none()) {
        if unready.is_none() {
            if let Ok((status, body)) = http_get(addr, "/readyz").await {
                unready = body
                    .lines()
                    .find(|l| status != 200 && l.starts_with("kafka access: not ready"))
                    .map(str::to_owned);
            }
        }
        if named.is_none() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            named = text
                .lines()
                .find(|l| {
                    l.contains("kafka ACL missing")
                        && l.contains(&deliveries)
                        && l.contains("\"operation\":\"Write\"")
                })
                .map(str::to_owned);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = began.elapsed().as_secs_f64();
    match (&unready, &named) {
        (Some(why), Some(line)) => {
            r.count(format!("fanout /readyz within {after:.1} s: {why}"));
            r.count(format!("fanout log: {line}"));
        }
        _ => bail!(
            "within {NOTICE:?} of losing Write on {deliveries} the fanout's /readyz {} and its log {}",
            unready.map_or("named no missing access".to_owned(), |w| format!("said {w}")),
            named.map_or("named no missing ACL on the topic".to_owned(), |l| format!("said: {l}"))
        ),
    }
    run_acls(&env, std::slice::from_ref(&taken)).await?;
    r.inject(format!("restored: {}", taken.join(" ")));
    let restored = Instant::now();
    loop {
        if let Ok((200, _)) = http_get(addr, "/readyz").await {
            break;
        }
        if restored.elapsed() > NOTICE {
            bail!("the fanout was not ready again {NOTICE:?} after the ACL was restored");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    r.count(format!(
        "fanout ready again {:.1} s after the ACL was restored",
        restored.elapsed().as_secs_f64()
    ));
    load.finish().await?;
    finish(&mut p, r, &work, EVENTS).await?;
    p.stop().await?;
    Ok(())
}
