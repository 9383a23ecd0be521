//! The services' allocator: each binary is jemalloc for the whole process,
//! built with the options `.cargo/config.toml` sets (docs/operating.md#memory). Checked
//! on the real binary by asking jemalloc to print its statistics at exit,
//! which only jemalloc does, and which name the options it was built with.

use std::process::Command;

/// The options `.cargo/config.toml` builds into jemalloc.
pub fn configured_options() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../.cargo/config.toml");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .find_map(|l| l.trim().strip_prefix("JEMALLOC_SYS_WITH_MALLOC_CONF"))
        .and_then(|l| l.split('"').nth(1))
        .unwrap_or_else(|| panic!("{path} sets no JEMALLOC_SYS_WITH_MALLOC_CONF"))
        .to_owned()
}

/// Panics unless `bin --version` runs on jemalloc built with
/// [`configured_options`] and those options in effect.
pub fn assert_jemalloc_with_configured_options(bin: &str) {
    let out = Command::new(bin)
        .arg("--version")
        .env("MALLOC_CONF", "stats_print:true")
        .output()
        .unwrap_or_else(|e| panic!("{bin}: {e}"));
    assert!(out.status.success(), "{bin} --version: {}", out.status);
    let stats = String::from_utf8_lossy(&out.stderr);
    assert!(
        stats.contains("___ Begin jemalloc statistics ___"),
        "{bin} does not allocate with jemalloc; its stderr:\n{stats}"
    );
    let options = configured_options();
    assert!(
        stats.contains(&format!("config.malloc_conf: \"{options}\"")),
        "{bin}'s jemalloc was not built with {options:?}; its statistics:\n{stats}"
    );
    for option in options.split(',') {
        let (name, value) = option.split_once(':').unwrap_or((option, ""));
        assert!(
            stats.contains(&format!("opt.{name}: {value}")),
            "{bin}: opt.{name} is not {value}; its statistics:\n{stats}"
        );
    }
}
