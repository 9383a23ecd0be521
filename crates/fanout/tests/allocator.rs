//! `hookline-fanout` allocates with jemalloc, built with the options of
//! `.cargo/config.toml` (docs/operating.md#memory): a build that lost either would
//! fragment and keep its peak under a backlog again.
#![cfg(all(feature = "jemalloc", target_os = "linux"))]

#[test]
fn the_binary_allocates_with_jemalloc_and_the_configured_options() {
    hookline_testkit::allocator::assert_jemalloc_with_configured_options(env!(
        "CARGO_BIN_EXE_hookline-fanout"
    ));
}
