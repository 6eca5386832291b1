//! Memory residency: each option's report against the kernel's own accounting.
//!
//! The oracle is read here, independently of `segstore::io::kstats`: the smaps block of
//! the mapping's VMA (`Locked`, `AnonHugePages`, `FilePmdMapped`, `VmFlags`), the
//! process's `VmLck` before and after, and util-linux `fincore` for page-cache residency.
//! Every test takes `SERIAL`: `VmLck`, the mapping registry and the page cache of a file
//! are process-wide, so the tests must not overlap. `lock_memory: all` (mlockall) runs
//! in-process only in its own binary, `memory_residency_lockall.rs`, and under small
//! `RLIMIT_MEMLOCK`s in child processes of `memory_residency_rlimit.rs`.
//!
//! A test skips (with a printed `SKIP` line naming the missing feature) only where the
//! kernel or the machine lacks the feature: transparent huge pages, file maps backed by
//! huge pages, `fincore`, `prlimit`/`setpriv`.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};

use segstore::io::residency;
use segstore::io::{registry, MappedFile};
use segstore::memory::{MapBudget, MappingKind};
use segstore::segment::{Component, ReaderOptions, SegmentName, SegmentReader, SegmentWriter};
use segstore::{
    AccessMode, DiskAccessMode, Error, FileRules, HugePages, LockMemory, SegmentOptions,
};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const PAGE: u64 = 4096;

fn key(i: u32) -> String {
    format!("key{i:010}")
}

/// Write `n` keys; returns the segment's name. 100k keys give an index of about 2.2 MiB.
fn write_segment(dir: &Path, n: u32) -> SegmentName {
    let name = SegmentName::new("res", 1).unwrap();
    let mut opts = SegmentOptions::default();
    // The index file's residency (maps, locks, huge pages): format 3 has one; format
    // 4 keeps its index in the meta, in memory.
    opts.format_version = 3;
    opts.index_block_size = 4096;
    opts.filter_bits_per_key = 10;
    let mut w = SegmentWriter::create(dir, name.clone(), &opts, &FileRules::posix()).unwrap();
    for i in 0..n {
        w.add(
            key(i).as_bytes(),
            format!("v{i}").as_bytes(),
            i as u64,
            false,
        )
        .unwrap();
    }
    w.finish().unwrap();
    name
}

fn index_len(dir: &Path, name: &SegmentName) -> u64 {
    std::fs::metadata(name.path(dir, Component::Index))
        .unwrap()
        .len()
}

fn vm_lck() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmLck:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// The kernel's smaps block for the VMA starting at `start`: byte figures by field name,
/// plus its flags.
struct KernelVma {
    end: usize,
    kb: HashMap<String, u64>,
    flags: Vec<String>,
}

impl KernelVma {
    fn get(&self, k: &str) -> u64 {
        self.kb.get(k).copied().unwrap_or(0)
    }
    fn has_flag(&self, f: &str) -> bool {
        self.flags.iter().any(|x| x == f)
    }
}

fn kernel_vma(start: usize) -> KernelVma {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        let Some((a, b)) = l.split_whitespace().next().and_then(|r| r.split_once('-')) else {
            continue;
        };
        if usize::from_str_radix(a, 16) != Ok(start) {
            continue;
        }
        let end = usize::from_str_radix(b, 16).unwrap();
        let mut v = KernelVma {
            end,
            kb: HashMap::new(),
            flags: Vec::new(),
        };
        for l in lines.by_ref() {
            let Some((k, rest)) = l.split_once(':') else {
                break;
            };
            if k == "VmFlags" {
                v.flags = rest.split_whitespace().map(String::from).collect();
                break;
            }
            if let Some(n) = rest.trim().strip_suffix(" kB") {
                v.kb.insert(k.to_string(), n.trim().parse::<u64>().unwrap() * 1024);
            } else if let Ok(n) = rest.trim().parse::<u64>() {
                v.kb.insert(k.to_string(), n);
            }
        }
        return v;
    }
    panic!("no VMA starts at {start:#x}");
}

fn index_map(r: &SegmentReader) -> &MappedFile {
    r.mapped_files()
        .find(|m| m.path().to_string_lossy().ends_with("Index.db"))
        .expect("index is mapped")
}

fn thp_enabled() -> Option<String> {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let a = s.find('[')?;
    let b = s.find(']')?;
    Some(s[a + 1..b].to_string())
}

fn check_all_keys(r: &SegmentReader, n: u32) {
    for i in (0..n).step_by(97) {
        let v = r.get(key(i).as_bytes()).unwrap().unwrap().value;
        assert_eq!(v, format!("v{i}").into_bytes());
    }
    assert!(r.get(b"key-missing").unwrap().is_none());
}

/// Gets read both files at random: a map with the kernel's default advice reads up to
/// `read_ahead_kb` around every fault (megabytes per get once the data passes memory),
/// so both maps are advised `MADV_RANDOM`, and the report shows the kernel's flag.
#[test]
fn data_and_index_maps_are_advised_random() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let name = write_segment(dir.path(), 2_000);
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Mmap.resolve()).unwrap();
    let rep = r.memory_report();
    assert_eq!(rep.mappings.len(), 2);
    for (m, mr) in r.mapped_files().zip(&rep.mappings) {
        let k = kernel_vma(m.addr_range().start);
        assert!(
            k.has_flag("rr"),
            "{} is not advised random",
            m.path().display()
        );
        assert_eq!(mr.kernel.map(|f| f.vm_random), Some(true));
    }
    // A scan still reads everything (it asks for read-ahead itself).
    assert_eq!(r.iter().unwrap().count(), 2_000);
    check_all_keys(&r, 2_000);
}

#[test]
fn default_open_asks_for_nothing() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let name = write_segment(dir.path(), 2_000);
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Mmap.resolve()).unwrap();
    let res = r.residency();
    assert_eq!(
        (res.lock_memory, res.huge_pages),
        (LockMemory::None, HugePages::Off)
    );
    assert!(res.locks.is_empty() && res.advice.is_empty() && res.notes.is_empty());
    assert_eq!((res.data, res.index), (AccessMode::Mmap, AccessMode::Mmap));
    assert!(!res.index_copy && !res.budget_fallback);
    let rep = r.memory_report();
    assert_eq!(rep.mappings.len(), 2);
    assert_eq!(rep.totals.locked, 0);
    check_all_keys(&r, 2_000);
}

#[test]
fn lock_index_report_matches_smaps_locked_and_vmlck() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let name = write_segment(dir.path(), 60_000);
    let want = index_len(dir.path(), &name).next_multiple_of(PAGE);
    let mut opts = ReaderOptions::default();
    opts.lock_memory = LockMemory::Index;
    let before = vm_lck();
    let r = SegmentReader::open_with(
        dir.path(),
        &name,
        DiskAccessMode::MmapIndexOnly.resolve(),
        &opts,
    )
    .unwrap();
    let delta = vm_lck() - before;
    let rep = &r.residency().locks;
    assert_eq!(rep.len(), 1, "{rep:?}");
    let l = &rep[0];
    println!("{l}");
    assert!(l.fully_locked(), "{l}");
    assert_eq!((l.requested_bytes, l.locked_bytes), (want, want));
    assert_eq!(delta, want, "VmLck grew by exactly the locked bytes");
    let m = index_map(&r);
    let k = kernel_vma(m.addr_range().start);
    assert_eq!(k.end, m.addr_range().end);
    assert!(k.has_flag("lo"));
    assert_eq!(k.get("Locked"), want, "smaps Locked");
    let mem = r.memory_report();
    let mr = &mem.mappings[0];
    assert_eq!(mr.locked, Some(k.get("Rss")), "a locked VMA: all its Rss");
    assert_eq!(mr.locked, Some(k.get("Locked")), "the only map of the file");
    assert_eq!(mr.rss, Some(k.get("Rss")));
    assert_eq!(mr.resident, Some(want), "mlock faulted every page in");
    // A second, unlocked map of the same file: smaps divides `Locked:` between the two
    // maps like Pss; the report still says the whole locked map is locked, and the
    // unlocked one nothing.
    let other =
        SegmentReader::open(dir.path(), &name, DiskAccessMode::MmapIndexOnly.resolve()).unwrap();
    other.verify().unwrap();
    let k = kernel_vma(m.addr_range().start);
    assert!(
        k.get("Locked") < want,
        "smaps shares Locked: {}",
        k.get("Locked")
    );
    assert_eq!(r.memory_report().mappings[0].locked, Some(want));
    assert_eq!(other.memory_report().mappings[0].locked, Some(0));
    assert_eq!(vm_lck() - before, want, "VmLck counts the locked map once");
    drop(other);
    // Honest about CAP_IPC_LOCK: beyond_rlimit is exactly "VmLck > soft RLIMIT_MEMLOCK".
    let soft = l.rlimit_memlock.and_then(|x| x.soft);
    assert_eq!(
        l.beyond_rlimit,
        soft.is_some_and(|s| before + delta > s),
        "{l}"
    );
    check_all_keys(&r, 60_000);
    drop(r);
    assert_eq!(vm_lck(), before, "unmapping released the lock");
}

/// Runs only as a child of `lock_refusal_is_reported_not_fatal`, under a 64 KiB
/// `RLIMIT_MEMLOCK` and without `CAP_IPC_LOCK`.
#[test]
#[ignore = "run by lock_refusal_is_reported_not_fatal in a restricted child process"]
fn lock_refusal_child() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let name = write_segment(dir.path(), 20_000);
    let want = index_len(dir.path(), &name).next_multiple_of(PAGE);
    assert!(want > 64 * 1024);
    let mut opts = ReaderOptions::default();
    opts.lock_memory = LockMemory::Index;
    let before = vm_lck();
    let r = SegmentReader::open_with(dir.path(), &name, DiskAccessMode::Auto.resolve(), &opts)
        .expect("a refused lock never fails the open");
    let l = &r.residency().locks[0];
    println!("child report: {l}");
    assert!(!l.fully_locked());
    assert_eq!(l.errno, Some(12), "ENOMEM: over RLIMIT_MEMLOCK");
    assert_eq!((l.locked_bytes, l.refused_bytes), (0, want));
    assert_eq!(l.rlimit_memlock.and_then(|x| x.soft), Some(64 * 1024));
    assert_eq!(l.cap_ipc_lock, Some(false));
    assert!(!l.beyond_rlimit);
    let hint = l.hint().unwrap();
    assert!(
        hint.contains("RLIMIT_MEMLOCK") && hint.contains("64 KiB"),
        "{hint}"
    );
    assert_eq!(vm_lck(), before, "the failed lock was undone");
    let k = kernel_vma(index_map(&r).addr_range().start);
    assert_eq!(k.get("Locked"), 0);
    assert!(!k.has_flag("lo"));
    check_all_keys(&r, 20_000);
}

#[test]
fn lock_refusal_is_reported_not_fatal() {
    let _g = serial();
    let have = |t: &str| {
        Command::new(t)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have("prlimit") || !have("setpriv") {
        println!("SKIP lock refusal: util-linux prlimit/setpriv not installed");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("prlimit")
        .arg("--memlock=65536:65536")
        .arg("setpriv")
        .args(["--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock", "--"])
        .arg(&exe)
        .args(["lock_refusal_child", "--exact", "--ignored", "--nocapture"])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    if text.contains("setpriv:") && !out.status.success() && !text.contains("child report") {
        println!("SKIP lock refusal: cannot drop CAP_IPC_LOCK here");
        return;
    }
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "{text}");
}

#[test]
fn huge_advise_reports_only_what_the_kernel_granted() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let name = write_segment(dir.path(), 200_000);
    // Fresh writes sit in the page cache as small folios; drop them so the advised map's
    // faults read the index back in, which is when a kernel can use 2 MiB folios.
    let ip = name.path(dir.path(), Component::Index);
    assert!(residency::drop_page_cache(&std::fs::File::open(&ip).unwrap(), &ip).applied);
    let mut opts = ReaderOptions::default();
    opts.huge_pages = HugePages::Advise;
    let r =
        SegmentReader::open_with(dir.path(), &name, DiskAccessMode::Mmap.resolve(), &opts).unwrap();
    r.verify().unwrap(); // touch every page of both maps
    let res = r.residency();
    assert_eq!(res.advice.len(), 2);
    let mem = r.memory_report();
    let mut granted = 0;
    for (m, mr) in r.mapped_files().zip(&mem.mappings) {
        let a = res.advice.iter().find(|a| a.path == m.path()).unwrap();
        let k = kernel_vma(m.addr_range().start);
        assert_eq!(a.applied, k.has_flag("hg"), "{a:?}");
        let kernel_huge = k.get("FilePmdMapped") + k.get("AnonHugePages");
        assert_eq!(mr.kind, MappingKind::File);
        assert_eq!(mr.huge, Some(kernel_huge), "{}", m.path().display());
        assert_eq!(mr.rss, Some(k.get("Rss")));
        granted += kernel_huge;
    }
    assert_eq!(mem.totals.huge, granted);
    println!(
        "advise: kernel granted {} KiB of file huge pages (index {} KiB)",
        granted / 1024,
        index_len(dir.path(), &name) / 1024
    );
    if thp_enabled().as_deref().is_none_or(|m| m == "never") {
        println!("SKIP huge page grant: transparent huge pages are off or absent");
    } else if granted == 0 {
        println!(
            "SKIP huge page grant: this kernel/file system does not back file maps with huge \
             pages (needs large folios in the page cache, e.g. ext4/xfs on Linux 6.x)"
        );
    }
    check_all_keys(&r, 200_000);
}

#[test]
fn anonymous_index_reports_only_what_the_kernel_granted() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let name = write_segment(dir.path(), 200_000);
    let len = index_len(dir.path(), &name);
    let maps_before = registry().stats().maps;
    let copies_before = residency::anonymous_copies();
    let mut opts = ReaderOptions::default();
    opts.huge_pages = HugePages::AnonymousIndex;
    let r =
        SegmentReader::open_with(dir.path(), &name, DiskAccessMode::Auto.resolve(), &opts).unwrap();
    let res = r.residency();
    assert!(res.index_copy);
    assert_eq!(
        (res.data, res.index),
        (AccessMode::Standard, AccessMode::Mmap)
    );
    let m = index_map(&r);
    assert!(m.is_anonymous_copy());
    let range = m.addr_range();
    assert_eq!(range.start % (2 << 20), 0, "copy is 2 MiB aligned");
    assert_eq!(
        (range.end - range.start) as u64,
        len.next_multiple_of(2 << 20)
    );
    assert_eq!(registry().stats().maps, maps_before, "a copy pins no file");
    let copies = residency::anonymous_copies();
    assert_eq!(copies.regions, copies_before.regions + 1);
    assert_eq!(
        copies.bytes,
        copies_before.bytes + len.next_multiple_of(2 << 20)
    );
    let k = kernel_vma(range.start);
    assert_eq!(k.end, range.end, "one VMA, not split by advice");
    let mem = r.memory_report();
    let mr = &mem.mappings[0];
    assert_eq!(mr.kind, MappingKind::AnonymousCopy);
    assert_eq!(
        mr.huge,
        Some(k.get("AnonHugePages") + k.get("FilePmdMapped"))
    );
    assert_eq!(mem.totals.anonymous_copy_bytes, mr.bytes);
    assert_eq!(res.advice.len(), 1);
    assert_eq!(res.advice[0].applied, k.has_flag("hg"));
    println!(
        "anonymous_index: kernel granted {} KiB of {} KiB as huge pages",
        k.get("AnonHugePages") / 1024,
        mr.bytes / 1024
    );
    match thp_enabled().as_deref() {
        None | Some("never") => {
            println!("SKIP huge page grant: transparent huge pages are off or absent")
        }
        Some(_) => assert!(
            k.get("AnonHugePages") > 0,
            "THP is enabled and the copy was advised, yet the kernel gave no huge page"
        ),
    }
    check_all_keys(&r, 200_000);
    r.verify().unwrap();
    drop(r);
    assert_eq!(residency::anonymous_copies(), copies_before);
}

#[test]
fn anonymous_index_locked_matches_vmlck() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let name = write_segment(dir.path(), 50_000);
    let want = index_len(dir.path(), &name).next_multiple_of(2 << 20);
    let mut opts = ReaderOptions::default();
    opts.lock_memory = LockMemory::Index;
    opts.huge_pages = HugePages::AnonymousIndex;
    let before = vm_lck();
    let r =
        SegmentReader::open_with(dir.path(), &name, DiskAccessMode::Auto.resolve(), &opts).unwrap();
    let l = &r.residency().locks[0];
    assert!(l.fully_locked(), "{l}");
    assert_eq!(l.locked_bytes, want);
    assert_eq!(vm_lck() - before, want);
    let k = kernel_vma(index_map(&r).addr_range().start);
    assert_eq!(k.get("Locked"), want);
    assert_eq!(r.memory_report().mappings[0].locked, Some(want));
    check_all_keys(&r, 50_000);
}

#[test]
fn resident_bytes_match_fincore_and_drop_page_cache_empties_it() {
    let _g = serial();
    if !Command::new("fincore")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        println!("SKIP residency vs fincore: util-linux fincore not installed");
        return;
    }
    let fincore = |p: &Path| -> u64 {
        let o = Command::new("fincore")
            .args(["--bytes", "--noheadings", "--output", "RES"])
            .arg(p)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let name = write_segment(dir.path(), 60_000);
    let ip = name.path(dir.path(), Component::Index);
    let len = index_len(dir.path(), &name);
    assert!(residency::drop_page_cache(&std::fs::File::open(&ip).unwrap(), &ip).applied);
    assert_eq!(
        fincore(&ip),
        0,
        "DONTNEED dropped the clean, unmapped cache"
    );
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Mmap.resolve()).unwrap();
    let m = index_map(&r);
    let cold = m.residency().resident.unwrap();
    assert_eq!(cold, fincore(&ip), "only the footer's pages were read");
    assert!(cold < len.next_multiple_of(PAGE));
    r.verify().unwrap();
    let warm = m.residency().resident.unwrap();
    assert_eq!(warm, fincore(&ip));
    assert_eq!(warm, len.next_multiple_of(PAGE));
    // Mapped pages are not dropped: the advice is for files whose maps are closed.
    assert!(residency::drop_page_cache(&std::fs::File::open(&ip).unwrap(), &ip).applied);
    assert_eq!(m.residency().resident.unwrap(), fincore(&ip));
    drop(r);
    assert!(residency::drop_page_cache(&std::fs::File::open(&ip).unwrap(), &ip).applied);
    assert_eq!(fincore(&ip), 0);
}

#[test]
fn budget_auto_falls_back_with_one_warning_and_mmap_fails() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let name = write_segment(dir.path(), 3_000);
    let ((), text) = common::log::with_log(|| {
        // Room for exactly one more map: the first `auto` segment maps its index.
        let budget = Arc::new(MapBudget::with_limit(MapBudget::in_use() + 1));
        let mut opts = ReaderOptions::default();
        opts.map_budget = Some(budget.clone());
        let auto = DiskAccessMode::Auto.resolve();
        let first = SegmentReader::open_with(dir.path(), &name, auto, &opts).unwrap();
        assert_eq!(first.modes().1, auto.index);
        assert!(!first.residency().budget_fallback);
        let mut fallbacks = Vec::new();
        for _ in 0..3 {
            let r = SegmentReader::open_with(dir.path(), &name, auto, &opts).unwrap();
            assert_eq!(r.modes(), (AccessMode::Standard, AccessMode::Standard));
            assert!(r.residency().budget_fallback);
            check_all_keys(&r, 3_000);
            fallbacks.push(r);
        }
        assert_eq!(budget.fallbacks(), 3);
        assert_eq!(budget.stats().in_use, budget.limit());
        for m in [DiskAccessMode::Mmap, DiskAccessMode::MmapIndexOnly] {
            match SegmentReader::open_with(dir.path(), &name, m.resolve(), &opts) {
                Err(Error::MapBudgetExhausted { used, budget: b }) => {
                    assert_eq!((used, b), (budget.limit(), budget.limit()))
                }
                other => panic!("{m}: expected MapBudgetExhausted, got {other:?}"),
            }
        }
        // Closing the first reader frees its map: the next `auto` segment maps again.
        drop(first);
        let again = SegmentReader::open_with(dir.path(), &name, auto, &opts).unwrap();
        assert!(!again.residency().budget_fallback);
        assert_eq!(budget.fallbacks(), 3);
    });
    let warnings = text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("mapping budget reached"))
        .count();
    assert_eq!(warnings, 1, "exactly one warning:\n{text}");
}

/// `lock_memory: index` can only lock an index map: where the index is read with
/// standard access, the report says why nothing was locked, and the totals count it.
#[test]
fn lock_index_without_an_index_map_says_why() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let name = write_segment(dir.path(), 3_000);
    let mut opts = ReaderOptions::default();
    opts.lock_memory = LockMemory::Index;
    let before = vm_lck();
    let r = SegmentReader::open_with(dir.path(), &name, DiskAccessMode::Standard.resolve(), &opts)
        .unwrap();
    let res = r.residency();
    assert!(res.locks.is_empty());
    let why = res.index_not_locked.as_deref().expect("a reason");
    assert!(why.contains("disk_access_mode standard"), "{why}");
    assert_eq!(r.memory_report().totals.indexes_not_locked, 1);
    assert_eq!(vm_lck(), before);
    // Past the mapping budget `auto` reads the index with standard access too.
    opts.map_budget = Some(Arc::new(MapBudget::with_limit(MapBudget::in_use())));
    let r =
        SegmentReader::open_with(dir.path(), &name, DiskAccessMode::Auto.resolve(), &opts).unwrap();
    let why = r.residency().index_not_locked.as_deref().expect("a reason");
    assert!(why.contains("mapping budget"), "{why}");
    // A mapped index is locked and has no such reason.
    opts.map_budget = None;
    let r =
        SegmentReader::open_with(dir.path(), &name, DiskAccessMode::Auto.resolve(), &opts).unwrap();
    assert_eq!(r.residency().index_not_locked, None);
    assert_eq!(r.residency().locks.len(), 1);
    assert_eq!(r.memory_report().totals.indexes_not_locked, 0);
}
