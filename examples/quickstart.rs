//! Quickstart: write a segment, then read it back through every `disk_access_mode`.
//!
//! `cargo run --release --example quickstart [DIR]`
#![allow(clippy::disallowed_methods)] // creates its own directory, outside the store's I/O boundary

use std::time::Instant;

use segstore::io::{registry, FileRules};
use segstore::segment::{SegmentName, SegmentReader, SegmentWriter};
use segstore::{DiskAccessMode, SegmentOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp;
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    std::fs::create_dir_all(&dir)?;
    let name = SegmentName::new("quickstart", 1)?;
    let n = 100_000u32;
    let t = Instant::now();
    let mut w = SegmentWriter::create(
        &dir,
        name.clone(),
        &SegmentOptions::default(),
        &FileRules::posix(),
    )?;
    for i in 0..n {
        w.add(
            format!("user{i:08}").as_bytes(),
            format!("profile of user {i}").as_bytes(),
            i as u64,
            false,
        )?;
    }
    let stats = w.finish()?;
    println!(
        "wrote {} cells ({} data bytes) to {} in {:.1?}",
        stats.entry_count,
        stats.data_len,
        dir.display(),
        t.elapsed()
    );
    for mode in DiskAccessMode::all() {
        let r = SegmentReader::open(&dir, &name, mode.resolve())?;
        let t = Instant::now();
        let mut hits = 0;
        for i in (0..n).step_by(7) {
            hits += r
                .get_with(format!("user{i:08}").as_bytes(), |c| c.value.len())?
                .is_some() as u32;
        }
        let (data, index) = r.modes();
        println!(
            "{mode:>15}: data {data:>8}, index {index:>8}: {hits} hits in {:.1?}; open mappings {}",
            t.elapsed(),
            registry().stats().maps
        );
    }
    println!(
        "after closing every reader: open mappings {}",
        registry().stats().maps
    );
    Ok(())
}
