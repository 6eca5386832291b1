//! cargo-fuzz target: see `fuzz/harness.rs` (`manifests`) and `fuzz/README.md`.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::manifests(data));
