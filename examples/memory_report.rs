//! Memory report: write a segment, open it with each residency option, and print what was
//! asked, what was granted, and the kernel's own figures side by side.
//!
//! `cargo run --release --example memory_report [-- --keys 200000] [DIR]`
//!
//! "asked" is the setting; "reported" is what segstore's reports say (the lock call's
//! outcome, the advice call's outcome, and the per-mapping figures it read back);
//! "kernel" is read here directly: the `VmLck` change of the process and the smaps lines
//! of the mapping. `lock_memory: all` runs last because it locks the whole process; the
//! example undoes it with `munlockall` at the end.
//!
//! Things the output shows on Linux 6.x/ext4: a file map gets huge pages
//! (`FilePmdMapped`) only when the page cache holds the file in 2 MiB folios, which the
//! "cold" case arranges by dropping the index from the cache before an advised map reads
//! it back; after that even maps that were not advised (the `lock all` case) are
//! PMD-mapped, because the folios stay in the cache. `MADV_COLLAPSE` of a file map needs
//! `CONFIG_READ_ONLY_THP_FOR_FS`, so it is not used.
#![allow(clippy::disallowed_methods)] // creates its own directory, outside the store's I/O boundary

use std::path::Path;

use segstore::io::residency;
use segstore::memory::{memlock_limit, MapBudget, ProcessMemory, SmapsSnapshot, ThpSupport};
use segstore::segment::{Component, ReaderOptions, SegmentName, SegmentReader, SegmentWriter};
use segstore::{DiskAccessMode, FileRules, HugePages, LockMemory, SegmentOptions};

fn kib(b: u64) -> String {
    format!("{} KiB", b / 1024)
}

fn opt(b: Option<u64>) -> String {
    b.map_or_else(|| "n/a".into(), kib)
}

fn vm_lck() -> u64 {
    ProcessMemory::read().map_or(0, |p| p.vm_lck)
}

struct Case {
    label: &'static str,
    mode: DiskAccessMode,
    lock: LockMemory,
    huge: HugePages,
    budget: Option<usize>,
    cold: bool,
}

fn run(dir: &Path, name: &SegmentName, c: &Case) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "\n== {} (disk_access_mode {}, lock_memory {}, huge_pages {}{}{})",
        c.label,
        c.mode,
        c.lock,
        c.huge,
        c.budget
            .map_or(String::new(), |b| format!(", map budget {b}")),
        if c.cold {
            ", index dropped from the page cache first"
        } else {
            ""
        }
    );
    if c.cold {
        let p = name.path(dir, Component::Index);
        let r = residency::drop_page_cache(&std::fs::File::open(&p)?, &p);
        println!("   drop_page_cache(index): applied {}", r.applied);
    }
    let mut opts = ReaderOptions::default();
    opts.lock_memory = c.lock;
    opts.huge_pages = c.huge;
    opts.map_budget = c
        .budget
        .map(|b| std::sync::Arc::new(MapBudget::with_limit(b)));
    let before = vm_lck();
    let r = match SegmentReader::open_with(dir, name, c.mode.resolve(), &opts) {
        Ok(r) => r,
        Err(e) => {
            println!("   open refused: {e}");
            return Ok(());
        }
    };
    r.verify()?; // touch every index block and record
    let res = r.residency();
    println!(
        "   opened: data {}, index {}{}{}",
        res.data,
        res.index,
        if res.index_copy {
            " (anonymous copy)"
        } else {
            ""
        },
        if res.budget_fallback {
            " (budget fallback)"
        } else {
            ""
        }
    );
    for l in &res.locks {
        println!("   lock reported: {l}");
    }
    for a in &res.advice {
        println!(
            "   advice reported: {} on {}: applied {}{}",
            a.advice,
            a.path.file_name().unwrap_or_default().to_string_lossy(),
            a.applied,
            a.error
                .as_ref()
                .map_or(String::new(), |e| format!(" ({e})"))
        );
    }
    for n in &res.notes {
        println!("   note: {n}");
    }
    if let Some(why) = &res.index_not_locked {
        println!("   not locked: {why}");
    }
    let smaps = SmapsSnapshot::read();
    let report = r.memory_report_in(smaps.as_ref());
    let after = vm_lck();
    println!(
        "   {:<16} {:>10} {:>12} {:>12} {:>12} {:>12} | kernel: {:>10} {:>13} {:>13} {:>14} {:>5} {:>6}",
        "mapping",
        "bytes",
        "resident",
        "locked",
        "huge",
        "rss",
        "Locked",
        "AnonHugePages",
        "FilePmdMapped",
        "ShmemPmdMapped",
        "THPel",
        "flags"
    );
    for m in &report.mappings {
        let k = m.kernel.unwrap_or_default();
        let fname = m.path.file_name().unwrap_or_default().to_string_lossy();
        let short = fname.rsplit('-').next().unwrap_or("");
        println!(
            "   {:<16} {:>10} {:>12} {:>12} {:>12} {:>12} | kernel: {:>10} {:>13} {:>13} {:>14} {:>5} {:>6}",
            format!("{short} ({:?})", m.kind).replace("AnonymousCopy", "copy"),
            kib(m.bytes),
            opt(m.resident),
            opt(m.locked),
            opt(m.huge),
            opt(m.rss),
            kib(k.locked),
            kib(k.anon_huge_pages),
            kib(k.file_pmd_mapped),
            kib(k.shmem_pmd_mapped),
            k.thp_eligible.map_or("?", |e| if e { "1" } else { "0" }),
            format!(
                "{}{}",
                if k.vm_locked { "lo " } else { "" },
                if k.vm_hugepage { "hg" } else { "" }
            )
        );
    }
    let t = &report.totals;
    println!(
        "   totals: {} mappings, {} mapped, {} resident, {} locked, {} huge; process VmLck {} -> {} (delta {})",
        t.mappings,
        kib(t.bytes),
        kib(t.resident),
        kib(t.locked),
        kib(t.huge),
        kib(before),
        kib(after),
        kib(after.saturating_sub(before))
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut keys = 200_000u32;
    let mut dir_arg = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--keys" => keys = args.next().ok_or("--keys needs a number")?.parse()?,
            d => dir_arg = Some(std::path::PathBuf::from(d)),
        }
    }
    let tmp;
    let dir = match dir_arg {
        Some(d) => d,
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    std::fs::create_dir_all(&dir)?;
    let name = SegmentName::new("memory_report", 1)?;
    if !name.path(&dir, Component::Meta).exists() {
        let mut opts = SegmentOptions::default();
        opts.index_block_size = 4096;
        opts.filter_bits_per_key = 10;
        let mut w = SegmentWriter::create(&dir, name.clone(), &opts, &FileRules::posix())?;
        for i in 0..keys {
            w.add(
                format!("key{i:010}").as_bytes(),
                format!("value-{i}").as_bytes(),
                i as u64,
                false,
            )?;
        }
        w.finish()?;
    }
    let thp = ThpSupport::read();
    let pm = ProcessMemory::read().unwrap_or_default();
    let lim = memlock_limit();
    println!(
        "segment {} in {}: {} keys, data {}, index {}",
        name,
        dir.display(),
        keys,
        kib(std::fs::metadata(name.path(&dir, Component::Data))?.len()),
        kib(std::fs::metadata(name.path(&dir, Component::Index))?.len())
    );
    println!(
        "kernel: THP enabled {:?}, defrag {:?}, PMD size {:?}; RLIMIT_MEMLOCK soft {}; CAP_IPC_LOCK {:?}; vm.max_map_count {:?}",
        thp.enabled,
        thp.defrag,
        thp.pmd_size,
        lim.map_or("n/a".into(), |l| l.soft.map_or("unlimited".into(), kib)),
        pm.cap_ipc_lock,
        segstore::io::budget::max_map_count()
    );
    let c = |label, mode, lock, huge| Case {
        label,
        mode,
        lock,
        huge,
        budget: None,
        cold: false,
    };
    use DiskAccessMode::{Auto, Mmap};
    let cases = [
        c("baseline", Mmap, LockMemory::None, HugePages::Off),
        c("lock index", Mmap, LockMemory::Index, HugePages::Off),
        c(
            "advise (warm page cache)",
            Mmap,
            LockMemory::None,
            HugePages::Advise,
        ),
        Case {
            cold: true,
            ..c(
                "advise (cold page cache)",
                Mmap,
                LockMemory::None,
                HugePages::Advise,
            )
        },
        c(
            "anonymous index",
            Auto,
            LockMemory::None,
            HugePages::AnonymousIndex,
        ),
        c(
            "anonymous index, locked",
            Auto,
            LockMemory::Index,
            HugePages::AnonymousIndex,
        ),
        Case {
            budget: Some(0),
            ..c("budget spent, auto", Auto, LockMemory::None, HugePages::Off)
        },
        Case {
            budget: Some(0),
            ..c("budget spent, mmap", Mmap, LockMemory::None, HugePages::Off)
        },
        c("lock all", Mmap, LockMemory::All, HugePages::Off),
    ];
    for case in &cases {
        run(&dir, &name, case)?;
    }
    residency::unlock_all()?;
    println!("\nmunlockall: process VmLck now {}", kib(vm_lck()));
    Ok(())
}
