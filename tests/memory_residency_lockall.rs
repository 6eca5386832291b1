//! `lock_memory: all` (`mlockall(MCL_CURRENT | MCL_FUTURE)`) against the kernel's own
//! accounting. It locks the whole process, so it is the only test in this binary, and it
//! undoes itself with `munlockall`. (`mlockall` under a small
//! `RLIMIT_MEMLOCK`, refused or refusing later maps, is tested in child processes of
//! `memory_residency_rlimit.rs`.)

use segstore::io::residency;
use segstore::memory::LockScope;
use segstore::segment::{ReaderOptions, SegmentName, SegmentReader, SegmentWriter};
use segstore::{DiskAccessMode, FileRules, HugePages, LockMemory, SegmentOptions};

fn status(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// (Locked, Rss, has `lo`) of the VMA starting at `start`, from smaps.
fn smaps_locked(start: usize) -> (u64, u64, bool) {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut it = text.lines().skip_while(|l| {
        l.split('-')
            .next()
            .and_then(|a| usize::from_str_radix(a, 16).ok())
            != Some(start)
    });
    it.next().expect("VMA found");
    let (mut locked, mut rss, mut lo) = (0, 0, false);
    for l in it {
        let kb = |l: &str| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024;
        if l.starts_with("Locked:") {
            locked = kb(l);
        } else if l.starts_with("Rss:") {
            rss = kb(l);
        } else if l.starts_with("VmFlags:") {
            lo = l.split_whitespace().any(|f| f == "lo");
            break;
        }
    }
    (locked, rss, lo)
}

#[test]
fn lock_all_report_matches_vmlck_and_locks_later_maps() {
    let dir = tempfile::tempdir().unwrap();
    let name = SegmentName::new("all", 1).unwrap();
    let mut w = SegmentWriter::create(
        dir.path(),
        name.clone(),
        &SegmentOptions::default(),
        &FileRules::posix(),
    )
    .unwrap();
    for i in 0..20_000u32 {
        w.add(format!("k{i:08}").as_bytes(), b"value", 1, false)
            .unwrap();
    }
    w.finish().unwrap();

    assert_eq!(status("VmLck:"), 0, "nothing locked before");
    let mut opts = ReaderOptions::default();
    opts.lock_memory = LockMemory::All;
    let r =
        SegmentReader::open_with(dir.path(), &name, DiskAccessMode::Mmap.resolve(), &opts).unwrap();
    let l = &r.residency().locks[0];
    println!("{l}");
    assert_eq!(l.scope, LockScope::Process);
    assert!(residency::lock_all_active());
    if !l.fully_locked() {
        // Refused (no CAP_IPC_LOCK and the process is larger than RLIMIT_MEMLOCK): the
        // report says so, with the limit to raise, and the open still worked.
        assert!(l.hint().unwrap().contains("RLIMIT_MEMLOCK"), "{l}");
        assert_eq!(l.locked_bytes, status("VmLck:"));
        return;
    }
    // The report's figure is VmLck right after the call; the segment's maps were made
    // after it and are locked too, so VmLck grew by exactly their sizes.
    let mut maps = 0;
    for m in r.mapped_files() {
        let (locked, rss, lo) = smaps_locked(m.addr_range().start);
        let size = (m.addr_range().end - m.addr_range().start) as u64;
        assert!(lo, "{} is locked by MCL_FUTURE", m.path().display());
        assert_eq!((locked, rss), (size, size), "{}", m.path().display());
        let mr = m.residency();
        assert_eq!(mr.locked, Some(locked));
        maps += size;
    }
    assert!(maps > 0);
    let now = status("VmLck:");
    assert!(
        now >= l.locked_bytes + maps,
        "VmLck {now} < reported {} + maps {maps}",
        l.locked_bytes
    );
    assert_eq!(l.vm_lck_after, Some(l.locked_bytes));
    assert_eq!(
        l.beyond_rlimit,
        l.rlimit_memlock
            .and_then(|x| x.soft)
            .is_some_and(|s| l.locked_bytes > s)
    );
    // A second open reuses the process lock (one mlockall per process).
    let r2 =
        SegmentReader::open_with(dir.path(), &name, DiskAccessMode::Mmap.resolve(), &opts).unwrap();
    assert_eq!(&r2.residency().locks[0], l);
    // An anonymous index copy made under MCL_FUTURE is locked, and is advised before the
    // kernel populates it, so it can still get huge pages.
    let mut anon = ReaderOptions::default();
    anon.lock_memory = LockMemory::All;
    anon.huge_pages = HugePages::AnonymousIndex;
    let r3 =
        SegmentReader::open_with(dir.path(), &name, DiskAccessMode::Auto.resolve(), &anon).unwrap();
    let copy = r3.mapped_files().next().unwrap();
    assert!(copy.is_anonymous_copy());
    let (locked, rss, lo) = smaps_locked(copy.addr_range().start);
    let size = (copy.addr_range().end - copy.addr_range().start) as u64;
    assert!(lo);
    assert_eq!((locked, rss), (size, size));
    let huge = copy.residency().huge.unwrap();
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.contains("[never]") || thp.is_empty() {
        println!("SKIP huge pages under mlockall: transparent huge pages are off or absent");
    } else {
        assert!(
            huge > 0,
            "THP is enabled, yet the locked copy got no huge page"
        );
    }
    println!(
        "anonymous copy under mlockall: {} KiB, {} KiB huge",
        size / 1024,
        huge / 1024
    );
    drop((r, r2, r3));
    residency::unlock_all().unwrap();
    assert!(!residency::lock_all_active());
    assert_eq!(status("VmLck:"), 0, "munlockall released everything");
}
