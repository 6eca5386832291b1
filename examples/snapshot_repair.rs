//! Snapshot repair between two replicas of a table: the tour of segstore.
//!
//! `cargo run --release --example snapshot_repair -- [DIR] [--windows-emulation]`
//!
//! Two stores, `DIR/replica1` and `DIR/replica2` (DIR is a temporary directory by
//! default), hold the LSM table `users`, read through memory maps. Both get a common
//! base; then each misses writes and deletes the other got, some flushed to segments,
//! some still in memtables. A sequential repair takes an ephemeral snapshot of each
//! replica (flushing its memtable first), builds a Merkle tree per replica from its
//! snapshot, streams the rows of the token ranges that differ both ways, and rebuilds
//! the trees to check the roots agree. The example then compares every key on both
//! replicas, shows the snapshots' files waiting for their last mapping to close (the
//! Windows rule, kept on every OS by `DeletePolicy::DeferWhileMapped`) and gone once it
//! does, and prints the stores' mapping and deletion counters.
//!
//! Exits non-zero if the replicas did not converge, a store did not close clean, or the
//! Windows emulation had to refuse deleting a mapped file. Logs go to stderr at WARN;
//! `RUST_LOG=segstore=info` shows more.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Parser;
use segstore::io::registry;
use segstore::lifecycle::PendingReason;
use segstore::repair::{
    LocalTransport, Parallelism, RepairOptions, RepairReport, RepairSession, Replica, ReplicaId,
    TableReplica,
};
use segstore::{Config, DeletePolicy, DiskAccessMode, FileRules, Store, Table, WriteBatch};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Repair two diverged replicas of a table with a sequential (snapshot) repair.
#[derive(Parser)]
struct Args {
    /// Directory for `replica1/` and `replica2/` (default: a temporary directory).
    dir: Option<PathBuf>,
    /// Emulate the Windows file rules: refuse to delete, replace or truncate a file
    /// that is mapped (checked against /proc/self/maps).
    #[arg(long)]
    windows_emulation: bool,
}

const TABLE: &str = "users";
const BASE_KEYS: u32 = 20_000;
const SECOND: u64 = 1_000_000; // timestamps are microseconds

fn key(i: u32) -> String {
    format!("user{i:06}")
}

/// A write with an explicit timestamp: key number, value (`None`: a delete), timestamp.
type Op = (u32, Option<String>, u64);

/// What each replica got beyond the common base (replica 1's, replica 2's). Some
/// writes arrive "late" with an older timestamp than the other replica's, and lose.
fn divergent_writes(t0: u64) -> (Vec<Op>, Vec<Op>) {
    let (mut r1, mut r2) = (Vec::new(), Vec::new());
    let put = |i, who: &str, ts| (i, Some(format!("profile {i} v2 from {who}")), ts);
    for i in 0..BASE_KEYS {
        match i {
            _ if i % 67 == 1 => r1.push(put(i, "replica 1", t0 + SECOND)), // 2 missed it
            _ if i % 71 == 2 => r2.push(put(i, "replica 2", t0 + SECOND)), // 1 missed it
            _ if i % 89 == 3 => r1.push((i, None, t0 + 2 * SECOND)),
            _ if i % 97 == 4 => r2.push((i, None, t0 + 2 * SECOND)),
            _ if i % 101 == 5 => {
                // Both overwrote; replica 2's write is newer and wins everywhere.
                r1.push(put(i, "replica 1", t0 + 3 * SECOND));
                r2.push(put(i, "replica 2", t0 + 4 * SECOND));
            }
            _ if i % 103 == 6 => {
                // Replica 2 deleted; replica 1's write is older: the delete wins.
                r2.push((i, None, t0 + 5 * SECOND));
                r1.push(put(i, "replica 1", t0 + SECOND / 2));
            }
            _ => {}
        }
    }
    for i in 0..200 {
        r1.push(put(BASE_KEYS + i, "replica 1", t0 + 6 * SECOND)); // new keys
        r2.push(put(BASE_KEYS + 200 + i, "replica 2", t0 + 6 * SECOND));
    }
    (r1, r2)
}

fn write(t: &Table, ops: &[Op]) -> Res<()> {
    let mut batch = WriteBatch::new();
    for (i, value, ts) in ops {
        match value {
            Some(v) => batch.put_at(key(*i), v.as_str(), *ts),
            None => batch.delete_at(key(*i), *ts),
        };
    }
    t.write(&batch)?;
    Ok(())
}

/// Write the base (then flush) and `ops`: the first half flushed into a segment, the
/// second half left in the memtable. Returns a line describing what was written.
fn load(t: &Table, t0: u64, ops: &[Op]) -> Res<String> {
    let base: Vec<Op> = (0..BASE_KEYS)
        .map(|i| (i, Some(format!("profile {i} v1")), t0))
        .collect();
    for chunk in base.chunks(1000) {
        write(t, chunk)?;
    }
    t.flush()?;
    let (flushed, in_memtable) = ops.split_at(ops.len() / 2);
    write(t, flushed)?;
    t.flush()?;
    write(t, in_memtable)?;
    let deletes = ops.iter().filter(|o| o.1.is_none()).count();
    let st = t.stats();
    Ok(format!(
        "{} puts and {deletes} deletes the other missed: {} flushed, {} in the memtable; {} segments",
        ops.len() - deletes,
        flushed.len(),
        st.memtable_keys,
        st.segments
    ))
}

fn print_repair(report: &RepairReport) {
    for ((id, root), (_, rows)) in report.roots_before.iter().zip(&report.rows_hashed) {
        println!("  Merkle root before  {id}: {root}  ({rows} rows)");
    }
    println!(
        "  differing           {} of {} leaves, in {} token ranges; the first ones:",
        report.differing_leaves,
        report.shape.leaves(),
        report.differing_ranges.len()
    );
    for r in report.differing_ranges.iter().take(4) {
        println!("                      {r}");
    }
    for s in &report.streams {
        println!(
            "  rows streamed       {} -> {}: {} rows in {} batches ({} bytes)",
            s.from, s.to, s.rows, s.batches, s.bytes
        );
    }
    for (id, root) in &report.roots_after {
        println!("  Merkle root after   {id}: {root}");
    }
    let verdict = if report.converged() {
        "EQUAL"
    } else {
        "DIFFERENT"
    };
    println!(
        "  roots after repair  {verdict} (repair took {:.1?})",
        report.timings.total
    );
}

/// Compare every key's winning cell (value, timestamp, tombstone) on both tables, by
/// full scans and by point reads. Returns the number of keys and the differing keys.
fn compare(a: &Table, b: &Table) -> Res<(usize, Vec<String>)> {
    let sa = a.scan_cells(..)?.collect::<Result<Vec<_>, _>>()?;
    let sb = b.scan_cells(..)?.collect::<Result<Vec<_>, _>>()?;
    let keys: BTreeSet<&[u8]> = sa.iter().chain(&sb).map(|c| c.key.as_slice()).collect();
    let mut differ = Vec::new();
    for k in &keys {
        if a.get_cell(k)? != b.get_cell(k)? {
            differ.push(String::from_utf8_lossy(k).into_owned());
        }
    }
    if sa != sb && differ.is_empty() {
        differ.push("(the scans differ)".into());
    }
    Ok((keys.len(), differ))
}

/// Print the deletions still waiting under `snapshots/`.
fn print_pending_snapshot_files(r: &TableReplica<'_>) {
    let mut pending = r.store().deleter().pending();
    pending.retain(|d| d.path.starts_with("snapshots"));
    match pending.len() {
        0 => println!("  {}: no snapshot path pending: DONE", r.id()),
        n => println!("  {}: {n} snapshot paths PENDING:", r.id()),
    }
    for d in &pending {
        let why = match &d.reason {
            _ if r.store().dir().join(&d.path).is_dir() => "directory: goes after its files",
            PendingReason::Mapped => "waits for the last mapping of this file to close",
            PendingReason::Refused(_) => "refused by the OS, retried",
            PendingReason::Queued => "queued",
            PendingReason::NotEmpty => "directory: goes after its files",
            PendingReason::Held => "obsolete, still held by a handle",
        };
        println!("      {:<52} {why}", d.path.display());
    }
}

fn main() -> Res<ExitCode> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env();
    tracing_subscriber::fmt()
        .with_env_filter(filter.unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let tmp = tempfile::tempdir()?;
    let root = args.dir.unwrap_or_else(|| tmp.path().to_path_buf());
    let rules = match args.windows_emulation {
        true => FileRules::windows_emulation(),
        false => FileRules::posix(),
    };
    let mut config = Config::default();
    config.disk_access_mode = DiskAccessMode::Mmap;
    config.delete_policy = DeletePolicy::DeferWhileMapped; // the Windows rule, on every OS
    config.track_leaks = true;
    config.file_rules = rules.clone();
    // No background compaction: the example compacts when it wants to show it.
    config.table.background_compaction = false;
    let s1 = Store::open(root.join("replica1"), config.clone())?;
    let s2 = Store::open(root.join("replica2"), config)?;
    let a = TableReplica::new(ReplicaId(1), &s1, TABLE)?;
    let b = TableReplica::new(ReplicaId(2), &s2, TABLE)?;
    let m = s1.stats().modes;
    println!("segstore snapshot repair: two replicas of table {TABLE:?}");
    println!("  directories       {}/replica{{1,2}}", root.display());
    println!(
        "  disk_access_mode  {} -> data files {}, index files {}",
        m.configured, m.data, m.index
    );
    println!(
        "  deletions         deferred while a file is mapped; file rules: {}",
        match args.windows_emulation {
            true => "Windows emulation (deleting a mapped file is refused)",
            false => "POSIX (--windows-emulation enforces the Windows rule)",
        }
    );

    let t0 = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros() as u64;
    let (ops1, ops2) = divergent_writes(t0);
    println!("\n1. Writes through the Table API: a common base of {BASE_KEYS} keys, then");
    println!("  {}: {}", a.id(), load(a.lsm(), t0, &ops1)?);
    println!("  {}: {}", b.id(), load(b.lsm(), t0, &ops2)?);

    println!("\n2. Sequential repair: an ephemeral snapshot of each replica (its memtable");
    println!("   flushed first), then one Merkle tree at a time from the snapshots");
    let mut opts = RepairOptions::default();
    opts.parallelism = Parallelism::Sequential;
    let report = RepairSession::run(&[&a, &b], &LocalTransport::new(), &opts)?;
    print_repair(&report);

    println!("\n3. Every key, cell by cell (value, timestamp, tombstone), on both replicas");
    let (keys, differ) = compare(a.lsm(), b.lsm())?;
    if !differ.is_empty() || !report.converged() {
        let shown = &differ[..differ.len().min(5)];
        eprintln!(
            "FAILED: the replicas did not converge: {} of {keys} keys differ, e.g. {shown:?}",
            differ.len()
        );
        return Ok(ExitCode::FAILURE);
    }
    println!("  {keys} keys compared: all identical");

    println!("\n4. The ephemeral snapshots' files");
    println!("  Repair cleared each snapshot right after building its tree from it:");
    for s in &report.snapshots {
        let (o, c) = (s.while_open, s.after_close);
        println!(
            "  {}: {}: {} mappings open, {} deletions PENDING; reader closed: {} mappings, {} PENDING",
            s.replica, s.tag, o.mappings, o.pending_deletions, c.mappings, c.pending_deletions
        );
    }
    println!("  They still wait: a snapshot's files are hard links of the live segments' files");
    println!("  (one file identity), which the live table keeps mapped. Files never mapped");
    println!("  (the Meta components, the manifest) went at once.");
    for r in [&a, &b] {
        print_pending_snapshot_files(r);
    }
    println!("  Compacting each table (flush, merge every segment into one): the old segments");
    println!("  become obsolete, their last mappings close, and the deferred deletions run.");
    for r in [&a, &b] {
        let before = registry().stats_under(r.store().dir()).files;
        r.lsm().compact()?;
        let after = registry().stats_under(r.store().dir()).files;
        println!("  {}: compacted; mapped files {before} -> {after}", r.id());
        print_pending_snapshot_files(r);
    }

    println!("\n5. Store counters (store.stats())");
    for r in [&a, &b] {
        let st = r.store().stats();
        let (mp, d) = (st.mappings, st.deletions);
        println!(
            "  {}: mappings open {} ({} files, {} KiB); live segments {:?}",
            r.id(),
            mp.maps,
            mp.files,
            mp.bytes / 1024,
            st.segments
        );
        println!(
            "             deletions requested {}, completed {}, pending {}, deferred while mapped {}, refused {}",
            d.requested, d.completed, d.pending, d.deferred_mapped, d.refused
        );
    }
    println!(
        "  (refused: the OS said no and the deleter retried; mappings opened in this process: {})",
        registry().stats().opened_total
    );

    println!("\n6. Close");
    drop((a, b));
    let mut ok = true;
    for (id, s) in [(1, s1), (2, s2)] {
        if s.close()?.is_clean() {
            println!("  replica {id}: closed clean (no leaked handle or mapping, nothing left to delete)");
        } else {
            eprintln!("FAILED: replica {id} did not close clean (see the errors above)");
            ok = false;
        }
    }
    let c = rules.counts();
    println!(
        "  file rules: {} refused_mapped, {} refused_random, {} allowed",
        c.refused_mapped, c.refused_random, c.allowed
    );
    if c.refused_mapped != 0 {
        eprintln!(
            "FAILED: the Windows emulation refused deleting a mapped file {} times",
            c.refused_mapped
        );
        ok = false;
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
