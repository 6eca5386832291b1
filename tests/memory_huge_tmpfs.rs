//! Huge pages of segment maps on a `huge=always` tmpfs show in `Store::stats().memory.huge`
//! (issue 18 item 1).
//!
//! The bug: a map of a tmpfs file is shared memory, so the kernel counts its huge pages
//! in smaps' `ShmemPmdMapped`, not in `FilePmdMapped` or `AnonHugePages`; the stats read
//! only those two and said 0 while the kernel had 14 MiB of the segments mapped with huge
//! pages. The oracle here is the test's own reading of smaps: the `ShmemPmdMapped` of
//! every VMA whose path is a segment file under the mount.
//!
//! It mounts a tmpfs (`mount -t tmpfs -o huge=always`), so it needs root (or
//! `CAP_SYS_ADMIN`), and the kernel must allow huge pages on tmpfs. Where it cannot
//! mount, where `shmem_enabled` overrides the mount option with `deny`, or where the
//! kernel granted no huge page (`ShmemPmdMapped` 0 for every segment map), it prints a
//! `SKIP` line with the reason and passes. Only the last case needs the oracle: "not
//! granted" (oracle 0) is a skip, "not counted" (oracle above 0, stats 0) is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use segstore::{Config, DiskAccessMode, HugePages, MemoryOptions, Store};

const SHMEM_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

/// A tmpfs mounted on a temporary directory, unmounted (and the directory removed) on
/// drop.
struct Mount {
    dir: tempfile::TempDir,
}

impl Mount {
    /// Mount, or say why not.
    fn huge_tmpfs() -> Result<Mount, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "huge=always,size=256m", "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs -o huge=always refused: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Mount { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        match Command::new("umount").arg(self.dir.path()).output() {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "umount {} failed: {}",
                self.dir.path().display(),
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => eprintln!("cannot run umount: {e}"),
        }
    }
}

/// The kernel's `ShmemPmdMapped` summed over the VMAs that map files under `dir`, read
/// from `/proc/self/smaps` here, independently of `segstore::io::kstats`.
fn shmem_pmd_mapped_under(dir: &Path) -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let dir = dir.to_string_lossy();
    let mut ours = false;
    let mut sum = 0;
    for l in text.lines() {
        let head = l.split_whitespace().next().unwrap_or("");
        if head.contains('-') && !head.ends_with(':') {
            ours = l
                .split_whitespace()
                .nth(5)
                .is_some_and(|p| p.starts_with(&*dir));
        } else if ours && l.starts_with("ShmemPmdMapped:") {
            let kb: u64 = l.split_whitespace().nth(1).unwrap().parse().unwrap();
            sum += kb * 1024;
        }
    }
    sum
}

fn meminfo(field: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    Some(line[field.len()..].trim().to_string())
}

/// One store under `dir` with `huge_pages`: write about 12 MiB, flush, read every key
/// through the maps, and compare the store's huge page figure with the kernel's.
/// Returns the kernel's figure (0: the kernel granted none).
fn check(dir: PathBuf, huge_pages: HugePages) -> u64 {
    let mut cfg = Config::default();
    cfg.disk_access_mode = DiskAccessMode::Mmap;
    cfg.memory = MemoryOptions::default();
    cfg.memory.huge_pages = huge_pages;
    let store = Store::open(&dir, cfg).unwrap();
    let t = store.table("t").unwrap();
    let value = [7u8; 200];
    let n = 60_000u32;
    for i in 0..n {
        t.put(format!("key{i:08}").as_bytes(), value).unwrap();
    }
    t.flush().unwrap();
    for i in 0..n {
        assert!(t.get(format!("key{i:08}").as_bytes()).unwrap().is_some());
    }
    let before = shmem_pmd_mapped_under(&dir);
    let s = store.stats();
    let after = shmem_pmd_mapped_under(&dir);
    println!(
        "huge_pages {huge_pages:?}: {} mappings, {} KiB mapped, stats huge {} KiB, kernel \
         ShmemPmdMapped {} KiB (then {} KiB), meminfo ShmemHugePages {:?}",
        s.memory.mappings,
        s.memory.bytes / 1024,
        s.memory.huge / 1024,
        before / 1024,
        after / 1024,
        meminfo("ShmemHugePages:")
    );
    assert_eq!(s.memory.mappings, 2, "{s:?}");
    if before > 0 {
        assert!(
            (before.min(after)..=before.max(after)).contains(&s.memory.huge),
            "the kernel mapped {before} bytes of the segment with huge pages, stats say {}",
            s.memory.huge
        );
        assert!(s.memory.huge <= s.memory.bytes);
    }
    drop(t);
    assert!(store.close().unwrap().is_clean());
    before
}

#[test]
fn huge_pages_of_tmpfs_maps_show_in_store_stats() {
    let shmem = std::fs::read_to_string(SHMEM_ENABLED).unwrap_or_default();
    if shmem.is_empty() {
        println!("SKIP huge tmpfs: {SHMEM_ENABLED} is absent (no THP for shared memory)");
        return;
    }
    if shmem.contains("[deny]") {
        println!("SKIP huge tmpfs: shmem_enabled is [deny], which overrides huge=always");
        return;
    }
    let mount = match Mount::huge_tmpfs() {
        Ok(m) => m,
        Err(why) => {
            println!("SKIP huge tmpfs: {why}");
            return;
        }
    };
    let mut granted = 0;
    for (sub, huge) in [("off", HugePages::Off), ("advise", HugePages::Advise)] {
        granted += check(mount.path().join(sub), huge);
    }
    if granted == 0 {
        println!(
            "SKIP huge tmpfs: the kernel granted no huge page to any segment map \
             (ShmemPmdMapped 0; shmem_enabled: {})",
            shmem.trim()
        );
    }
}
