//! Quickstart: the Table API a database calls. Open a store, write, delete, flush and
//! close it; then reopen the same files once per `disk_access_mode` and read them back
//! with `get` and `scan`. The access mode is a choice made at open: the files are the
//! same whichever way they are read.
//!
//! `cargo run --release --example quickstart [DIR]` (DIR: where the store goes; a
//! temporary directory by default)

use std::time::Instant;

use segstore::{Config, DiskAccessMode, Store};

const USERS: u32 = 100_000;

fn key(i: u32) -> Vec<u8> {
    format!("user{i:08}").into_bytes()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp;
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };

    // Write: every user, then delete every tenth; flush the memtable into a segment.
    let t = Instant::now();
    let store = Store::open(&dir, Config::default())?;
    let users = store.table("users")?;
    for i in 0..USERS {
        users.put(key(i), format!("profile of user {i}").as_bytes())?;
    }
    for i in (0..USERS).step_by(10) {
        users.delete(key(i))?;
    }
    users.flush()?;
    let segments = users.stats().segments;
    drop(users);
    let report = store.close()?;
    assert!(report.is_clean(), "{report:?}");
    println!(
        "wrote {USERS} users, deleted {}, flushed into {segments} segment(s) under {} in {:.1?}",
        USERS / 10,
        dir.display(),
        t.elapsed()
    );

    // Read the same files in each access mode.
    for mode in DiskAccessMode::all() {
        let store = Store::open(&dir, Config::builder().disk_access_mode(mode).build()?)?;
        let users = store.table("users")?;
        let t = Instant::now();
        let (mut gets, mut hits) = (0u32, 0u32);
        for i in (0..USERS).step_by(7) {
            gets += 1;
            if let Some(value) = users.get(key(i))? {
                assert_eq!(value, format!("profile of user {i}").as_bytes());
                hits += 1;
            }
        }
        let took = t.elapsed();
        // Keys 100..=119 without the deleted 100 and 110.
        let rows = users
            .scan(key(100).as_slice()..key(120).as_slice())?
            .collect::<segstore::Result<Vec<_>>>()?;
        assert_eq!(rows.len(), 18);
        let stats = store.stats();
        println!(
            "{mode:>15}: data {:<8} index {:<8} {hits} of {gets} gets hit in {took:.1?}; \
             scan of 20 keys: {} rows; open mappings: {}",
            stats.modes.data,
            stats.modes.index,
            rows.len(),
            stats.mappings.maps
        );
        drop(rows);
        drop(users);
        let report = store.close()?;
        assert!(report.is_clean(), "{report:?}");
    }
    Ok(())
}
