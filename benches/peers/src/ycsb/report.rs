//! The YCSB tables, printed as Markdown (ready for the README): throughput and p99 per
//! workload and thread count, side by side, with segstore / best-peer ratios; bulk load
//! time and bytes on disk; capped gets.

use super::kv;
use super::run::Phase;
use super::workload::Workload;

/// One system's load time and bytes on disk (apparent, allocated).
pub struct Footprint<'a> {
    pub id: &'a str,
    /// The data set was loaded by an earlier run (`--dir`): the bytes are after it.
    pub reused: bool,
    pub load_secs: Option<f64>,
    pub disk: (u64, u64),
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1 << 20) as f64)
}

pub fn footprint(f: &[Footprint]) {
    println!();
    println!("Bulk load (each system's bulk path, flushed, fully compacted, closed) and bytes on disk after it");
    println!();
    println!("| system | bulk load s | disk apparent MiB | disk allocated MiB |");
    println!("| --- | ---: | ---: | ---: |");
    for x in f {
        let secs = x
            .load_secs
            .map_or_else(|| "-".into(), |s| format!("{s:.1}"));
        let note = if x.reused { " (reused data set)" } else { "" };
        println!(
            "| {}{note} | {secs} | {} | {} |",
            kv::label(x.id),
            mib(x.disk.0),
            mib(x.disk.1)
        );
    }
    if f.iter().any(|x| x.reused) {
        println!();
        println!(
            "Reused data sets start from the state earlier runs left (their writes, what \
             compaction did): LMDB's file grows and its writes slow run after run. Compare \
             builds or engines on fresh data sets (no `--dir`)."
        );
    }
}

/// The tables a system's E phase began with in one round ([`kv::Kv::state`]).
pub struct EState {
    pub system: usize,
    pub phase: usize,
    pub round: usize,
    pub state: String,
    /// What the phase left: its scans' side run reads show whether level 0 was read
    /// through a run for the whole phase.
    pub end: Option<String>,
}

/// E's throughput in every round, not only the median, and the tables each segstore
/// round began and ended with: level 0 segments and memtable keys left by the phases
/// before decide E's rate, and the rounds need not meet the same ones; the scans that
/// read a side run (at the end, against the start) show whether level 0 was read
/// through one for the whole phase.
pub fn e_rounds(
    ids: &[&str],
    phases: &[(Workload, usize)],
    results: &[Vec<Vec<Phase>>],
    states: &[EState],
) {
    for (pi, &(wl, threads)) in phases.iter().enumerate() {
        if wl != Workload::E {
            continue;
        }
        println!();
        println!("E at {threads} thread(s), each round, K ops/s:");
        println!();
        for (si, id) in ids.iter().enumerate() {
            let rounds: Vec<String> = results[si][pi]
                .iter()
                .map(|p| format!("{:.1}", p.ops_per_sec / 1e3))
                .collect();
            println!("- {}: {}", kv::label(id), rounds.join(", "));
            for s in states.iter().filter(|s| s.system == si && s.phase == pi) {
                println!("  - round {} began with {}", s.round + 1, s.state);
                if let Some(end) = &s.end {
                    println!("    and ended with {end}");
                }
            }
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    crate::median(&mut v)
}

/// Print one table of `cell` (median over rounds) per phase; `better_high` says whether
/// the best peer is the highest value (throughput) or the lowest (latency), and the
/// ratio columns are segstore / best (throughput) or best / segstore (latency), so > 1
/// always means segstore is better.
fn table(
    title: &str,
    ids: &[&str],
    phases: &[(Workload, usize)],
    results: &[Vec<Vec<Phase>>],
    cell: &dyn Fn(&Phase) -> f64,
    fmt: &dyn Fn(f64) -> String,
    better_high: bool,
) {
    println!();
    println!("{title}");
    println!();
    print!("| workload | threads |");
    for id in ids {
        print!(" {} |", kv::label(id));
    }
    println!(" best peer | auto / best | mmap / best |");
    print!("| --- | ---: |");
    for _ in ids {
        print!(" ---: |");
    }
    println!(" --- | ---: | ---: |");
    for (pi, &(wl, threads)) in phases.iter().enumerate() {
        let med: Vec<f64> = (0..ids.len())
            .map(|si| median(results[si][pi].iter().map(cell).collect()))
            .collect();
        print!("| {} | {threads} |", wl.name());
        for v in &med {
            print!(" {} |", fmt(*v));
        }
        let best = ids.iter().zip(&med).filter(|(id, _)| kv::is_peer(id)).fold(
            None::<(&str, f64)>,
            |b, (id, &v)| match b {
                Some((_, bv)) if (v > bv) != better_high || v == bv => b,
                _ => Some((id, v)),
            },
        );
        let seg = |id: &str| ids.iter().position(|i| *i == id).map(|i| med[i]);
        let ratio = |s: Option<f64>, b: f64| match s {
            Some(s) if better_high => format!("{:.2}", s / b),
            Some(s) => format!("{:.2}", b / s),
            None => "-".into(),
        };
        match best {
            Some((bid, b)) => println!(
                " {} {} | {} | {} |",
                kv::label(bid).split(' ').next().unwrap_or(bid),
                fmt(b),
                ratio(seg("seg_auto"), b),
                ratio(seg("seg_mmap"), b)
            ),
            None => println!(" - | - | - |"),
        }
    }
}

pub fn phases(ids: &[&str], phases: &[(Workload, usize)], results: &[Vec<Vec<Phase>>]) {
    let rounds = results.first().and_then(|r| r.first()).map_or(0, Vec::len);
    table(
        &format!(
            "Throughput, K ops/s (all threads together; median of {rounds} rounds). \
             Ratios: segstore / best peer (> 1: segstore faster)"
        ),
        ids,
        phases,
        results,
        &|p| p.ops_per_sec,
        &|v| format!("{:.1}", v / 1e3),
        true,
    );
    table(
        &format!(
            "p99 latency, µs (median of {rounds} rounds). \
             Ratios: best peer / segstore (> 1: segstore lower)"
        ),
        ids,
        phases,
        results,
        &Phase::p99_us,
        &|v| format!("{v:.1}"),
        false,
    );
    println!();
    println!(
        "* fjall journal buffered: `manual_journal_persist(true)`; writes wait in fjall's \
         8 KiB journal buffer in the process, so a kill loses them; not counted as a peer."
    );
    if ids.contains(&"seg_auto_v3") {
        println!(
            "* segstore auto, format 3: `segment.format_version = 3`, the segment format \
             of records and an index file, beside the default's data blocks."
        );
    }
    if ids.contains(&"seg_auto_zstd") {
        println!(
            "* segstore auto, zstd: `segment.compression = \"zstd\"` (level 3), on random \
             values too, where it leaves blocks as they are."
        );
    }
    if ids.contains(&"seg_auto_v5") || ids.contains(&"seg_mmap_v5") {
        println!(
            "* segstore, format 5: `segment.format_version = 5`, data blocks that follow \
             each other with no padding, beside the default's blocks started on pages."
        );
    }
    if ids.contains(&"seg_auto_v6") {
        println!(
            "* segstore auto, format 6: `segment.format_version = 6`, data blocks that write \
             every cell's key length, value length and timestamp, beside the default's blocks \
             that hold once what all their cells share."
        );
    }
    if ids.contains(&"seg_auto_v7") {
        println!(
            "* segstore auto, format 7: `segment.format_version = 7`, data blocks whose \
             entries each keep a head byte and a start, beside the default's blocks that store \
             live cells of one key and one value length without them."
        );
    }
    if ids.contains(&"seg_auto_m64") {
        println!(
            "* segstore auto, 64 MiB memtables: `table.memtable_flush_bytes = 64 MiB` (the \
             default before 16 MiB; RocksDB's write buffer size), beside the default."
        );
    }
    if ids.contains(&"seg_auto_t2") {
        println!(
            "* segstore auto, tiers of 2: `table.compaction.strategy = size_tiered` with \
             `min_threshold = 2`: size-tiered compaction merging two segments of a size \
             instead of four (fewer segments a scan merges, each cell rewritten more often)."
        );
    }
    if ids.contains(&"seg_auto_st") {
        println!(
            "* segstore auto, size-tiered: `table.compaction.strategy = size_tiered` (the \
             default until issue 19) instead of leveled (the default, as in RocksDB and fjall)."
        );
    }
    if ids.contains(&"seg_auto_pread") {
        println!(
            "* segstore auto, data by pread: `memory.auto_data_map_percent = 0`, so `auto` \
             reads its data with `pread` through the block cache, as every `auto` did before \
             it mapped the data that fits in memory."
        );
    }
}

/// One system's capped gets.
pub struct Capped<'a> {
    pub id: &'a str,
    /// `Err(reason)` when the child failed.
    pub r: Result<CapResult, String>,
    pub data_bytes: u64,
}

/// What the capped child measured.
pub struct CapResult {
    pub gets_per_sec: f64,
    pub p99_us: f64,
    pub gets: u64,
    /// Bytes the child read from storage (`read_bytes` of /proc/self/io) per get.
    pub read_per_get: f64,
    /// Major page faults per get.
    pub majflt_per_get: f64,
    /// The cgroup's peak charge (`memory.max_usage_in_bytes`).
    pub peak: u64,
}

pub fn capped(mib_cap: u64, rows: &[Capped]) {
    println!();
    println!(
        "Uniform random gets, 1 thread, in a memory cgroup capped at {mib_cap} MiB \
         (its files' page cache counts against it)"
    );
    println!();
    println!("| system | data MiB (allocated) | gets/s | p99 µs | gets timed | KiB read per get | major faults per get | cgroup peak MiB |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for c in rows {
        match &c.r {
            Ok(r) => println!(
                "| {} | {} | {:.0} | {:.1} | {} | {:.1} | {:.2} | {} |",
                kv::label(c.id),
                mib(c.data_bytes),
                r.gets_per_sec,
                r.p99_us,
                r.gets,
                r.read_per_get / 1024.0,
                r.majflt_per_get,
                mib(r.peak)
            ),
            Err(e) => println!(
                "| {} | {} | failed: {e} | | | | | |",
                kv::label(c.id),
                mib(c.data_bytes)
            ),
        }
    }
}
