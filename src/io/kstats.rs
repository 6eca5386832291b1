//! What the kernel says about our memory, read on demand from `/proc` (Linux).
//!
//! - [`SmapsSnapshot`], from `/proc/self/smaps`, read once and queried per address range:
//!   `Rss`, `Locked`, `AnonHugePages`, `FilePmdMapped`, `ShmemPmdMapped`, `THPeligible`
//!   and the VMA flags. The three huge page fields are disjoint: anonymous memory, file
//!   maps of page-cache files (ext4, xfs...), and maps of shared memory files (tmpfs,
//!   `/dev/shm`, memfd). `ShmemHugePages` is a `/proc/meminfo` figure for the whole
//!   system (huge pages in tmpfs page caches, mapped or not), not a per-mapping one, so
//!   no mapping report uses it.
//! - [`ProcessMemory`], from `/proc/self/status` (`VmLck`, `VmRSS`, `VmSize`, the effective
//!   capabilities) and the number of VMAs in `/proc/self/maps`.
//! - [`ThpSupport`], from `/sys/kernel/mm/transparent_hugepage/{enabled,defrag,hpage_pmd_size}`.
//!
//! Everything here is plain parsing of text; where the files do not exist (other OSes,
//! a `/proc` hidden by a sandbox) the readers return `None` and the figures stay unknown.
//! Reading smaps walks the page tables of every mapping of the process, so it is done
//! once per report, not per mapping.

use std::ops::Range;

use serde::Serialize;

/// One VMA of `/proc/self/smaps`, with the fields we report (bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vma {
    /// Address range.
    pub range: Range<usize>,
    /// The path column (empty for anonymous memory).
    pub name: String,
    /// `Rss:`.
    pub rss: u64,
    /// `Locked:` (the kernel counts it like `Pss`: shared pages are divided among sharers).
    pub locked: u64,
    /// `AnonHugePages:`.
    pub anon_huge_pages: u64,
    /// `FilePmdMapped:`.
    pub file_pmd_mapped: u64,
    /// `ShmemPmdMapped:` (maps of tmpfs and other shared memory files).
    pub shmem_pmd_mapped: u64,
    /// `THPeligible:` (absent on old kernels).
    pub thp_eligible: Option<bool>,
    /// The two-letter flags of `VmFlags:` (`lo` locked, `hg` huge page advice, `rr` random).
    pub flags: Vec<String>,
}

/// `/proc/self/smaps` parsed whole.
#[derive(Debug, Clone, Default)]
pub struct SmapsSnapshot {
    vmas: Vec<Vma>,
}

/// The smaps figures of one address range, summed over the VMAs inside it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RangeFigures {
    /// VMAs overlapping the range.
    pub vmas: usize,
    /// Sum of `Rss:` (bytes).
    pub rss: u64,
    /// Sum of `Locked:` (bytes; Pss-like: pages shared with other mappings are divided
    /// among them).
    pub locked: u64,
    /// Sum of `AnonHugePages:` (bytes).
    pub anon_huge_pages: u64,
    /// Sum of `FilePmdMapped:` (bytes).
    pub file_pmd_mapped: u64,
    /// Sum of `ShmemPmdMapped:` (bytes): huge pages of maps of tmpfs files.
    pub shmem_pmd_mapped: u64,
    /// `THPeligible:` of every VMA is 1 (None if the kernel does not say).
    pub thp_eligible: Option<bool>,
    /// Every VMA carries `lo` (locked) in `VmFlags:`.
    pub vm_locked: bool,
    /// Every VMA carries `hg` (`MADV_HUGEPAGE`) in `VmFlags:`.
    pub vm_hugepage: bool,
    /// Every VMA carries `rr` (`MADV_RANDOM`: no readahead on its faults) in `VmFlags:`.
    pub vm_random: bool,
    /// False if a VMA overlapping the range also extends past it (the kernel merged our
    /// anonymous memory with a neighbour's). Such a VMA's figures are left out rather
    /// than claimed: they may belong to someone else.
    pub exact: bool,
}

impl RangeFigures {
    /// Huge page bytes the kernel mapped in the range, whatever backs them:
    /// `AnonHugePages` + `FilePmdMapped` + `ShmemPmdMapped`.
    pub fn huge(&self) -> u64 {
        self.anon_huge_pages + self.file_pmd_mapped + self.shmem_pmd_mapped
    }
}

impl SmapsSnapshot {
    /// Read `/proc/self/smaps`; `None` where it cannot be read.
    pub fn read() -> Option<SmapsSnapshot> {
        std::fs::read_to_string("/proc/self/smaps")
            .ok()
            .map(|t| SmapsSnapshot::parse(&t))
    }

    /// Parse smaps text.
    pub fn parse(text: &str) -> SmapsSnapshot {
        let mut vmas = Vec::new();
        let mut cur: Option<Vma> = None;
        for line in text.lines() {
            if let Some(range) = header_range(line) {
                vmas.extend(cur.take());
                let name = line.split_ascii_whitespace().nth(5).unwrap_or("");
                cur = Some(Vma {
                    range,
                    name: name.to_string(),
                    ..Vma::default()
                });
                continue;
            }
            let Some(v) = cur.as_mut() else { continue };
            let Some((key, rest)) = line.split_once(':') else {
                continue;
            };
            match key {
                "Rss" => v.rss = kb(rest),
                "Locked" => v.locked = kb(rest),
                "AnonHugePages" => v.anon_huge_pages = kb(rest),
                "FilePmdMapped" => v.file_pmd_mapped = kb(rest),
                "ShmemPmdMapped" => v.shmem_pmd_mapped = kb(rest),
                "THPeligible" => v.thp_eligible = Some(rest.trim() == "1"),
                "VmFlags" => v.flags = rest.split_ascii_whitespace().map(String::from).collect(),
                _ => {}
            }
        }
        vmas.extend(cur);
        SmapsSnapshot { vmas }
    }

    /// All VMAs, in address order.
    pub fn vmas(&self) -> &[Vma] {
        &self.vmas
    }

    /// The figures of `range` (see [`RangeFigures`]).
    pub fn range(&self, range: Range<usize>) -> RangeFigures {
        let mut f = RangeFigures {
            exact: true,
            vm_locked: true,
            vm_hugepage: true,
            vm_random: true,
            ..RangeFigures::default()
        };
        let mut eligible = Some(true);
        for v in self
            .vmas
            .iter()
            .filter(|v| v.range.start < range.end && range.start < v.range.end)
        {
            f.vmas += 1;
            if v.range.start < range.start || v.range.end > range.end {
                f.exact = false;
                continue;
            }
            f.rss += v.rss;
            f.locked += v.locked;
            f.anon_huge_pages += v.anon_huge_pages;
            f.file_pmd_mapped += v.file_pmd_mapped;
            f.shmem_pmd_mapped += v.shmem_pmd_mapped;
            eligible = match (eligible, v.thp_eligible) {
                (Some(a), Some(b)) => Some(a && b),
                _ => None,
            };
            f.vm_locked &= v.flags.iter().any(|x| x == "lo");
            f.vm_hugepage &= v.flags.iter().any(|x| x == "hg");
            f.vm_random &= v.flags.iter().any(|x| x == "rr");
        }
        if f.vmas == 0 || !f.exact {
            f.vm_locked = false;
            f.vm_hugepage = false;
            f.vm_random = false;
            eligible = None;
        }
        f.thp_eligible = eligible;
        f
    }
}

/// `start-end perms ...` → start..end, if `line` is a VMA header.
fn header_range(line: &str) -> Option<Range<usize>> {
    let first = line.split_ascii_whitespace().next()?;
    let (a, b) = first.split_once('-')?;
    let a = usize::from_str_radix(a, 16).ok()?;
    let b = usize::from_str_radix(b, 16).ok()?;
    Some(a..b)
}

/// `"   1234 kB"` → bytes.
fn kb(rest: &str) -> u64 {
    rest.split_ascii_whitespace()
        .next()
        .and_then(|n| n.parse::<u64>().ok())
        .map_or(0, |n| n * 1024)
}

/// Process-wide figures from `/proc/self/status` and `/proc/self/maps`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProcessMemory {
    /// `VmLck:` bytes locked (by `mlock`/`mlockall`), counted by mapping size.
    pub vm_lck: u64,
    /// `VmRSS:` bytes resident.
    pub vm_rss: u64,
    /// `VmSize:` bytes of address space.
    pub vm_size: u64,
    /// `CAP_IPC_LOCK` in the effective set (`CapEff:` bit 14): the kernel then lets the
    /// process lock beyond `RLIMIT_MEMLOCK`. `None` if not reported.
    pub cap_ipc_lock: Option<bool>,
    /// VMAs the process has (lines of `/proc/self/maps`), the figure `vm.max_map_count`
    /// limits. `None` if not readable.
    pub vmas: Option<usize>,
}

impl ProcessMemory {
    /// Read the figures; `None` where `/proc/self/status` cannot be read.
    pub fn read() -> Option<ProcessMemory> {
        let text = std::fs::read_to_string("/proc/self/status").ok()?;
        let mut p = ProcessMemory::parse_status(&text);
        p.vmas = std::fs::read_to_string("/proc/self/maps")
            .ok()
            .map(|t| t.lines().count());
        Some(p)
    }

    /// Parse `/proc/<pid>/status` text.
    pub fn parse_status(text: &str) -> ProcessMemory {
        let mut p = ProcessMemory::default();
        for line in text.lines() {
            let Some((key, rest)) = line.split_once(':') else {
                continue;
            };
            match key {
                "VmLck" => p.vm_lck = kb(rest),
                "VmRSS" => p.vm_rss = kb(rest),
                "VmSize" => p.vm_size = kb(rest),
                "CapEff" => {
                    p.cap_ipc_lock = u64::from_str_radix(rest.trim(), 16)
                        .ok()
                        .map(|caps| caps & (1 << 14) != 0)
                }
                _ => {}
            }
        }
        p
    }
}

/// `/sys/kernel/mm/transparent_hugepage/enabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThpMode {
    /// Every eligible anonymous mapping may get huge pages.
    Always,
    /// Only mappings advised with `MADV_HUGEPAGE`.
    Madvise,
    /// Transparent huge pages are off.
    Never,
    /// The kernel does not say (no THP support, not Linux, or unreadable).
    Unknown,
}

/// The kernel's transparent huge page settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThpSupport {
    /// `enabled`.
    pub enabled: ThpMode,
    /// `defrag`, the bracketed choice (for example `madvise`), if readable.
    pub defrag: Option<String>,
    /// `hpage_pmd_size`: size of one huge page (2 MiB on x86-64), if readable.
    pub pmd_size: Option<u64>,
}

impl ThpSupport {
    /// Read the sysfs files.
    pub fn read() -> ThpSupport {
        let dir = "/sys/kernel/mm/transparent_hugepage";
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let enabled = match read("enabled").as_deref().and_then(bracketed) {
            Some("always") => ThpMode::Always,
            Some("madvise") => ThpMode::Madvise,
            Some("never") => ThpMode::Never,
            _ => ThpMode::Unknown,
        };
        ThpSupport {
            enabled,
            defrag: read("defrag")
                .as_deref()
                .and_then(bracketed)
                .map(String::from),
            pmd_size: read("hpage_pmd_size").and_then(|s| s.trim().parse().ok()),
        }
    }

    /// Can an advised anonymous mapping get huge pages at all?
    pub fn anonymous_advisable(&self) -> bool {
        matches!(self.enabled, ThpMode::Always | ThpMode::Madvise)
    }
}

/// `"always [madvise] never"` → `"madvise"`.
fn bracketed(s: &str) -> Option<&str> {
    let a = s.find('[')?;
    let b = s[a..].find(']')? + a;
    Some(&s[a + 1..b])
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
7f0000000000-7f0000400000 r--s 00000000 fe:00 1234                       /d/t-1-Index.db
Size:               4096 kB
Rss:                4096 kB
Locked:             4096 kB
AnonHugePages:         0 kB
FilePmdMapped:      2048 kB
THPeligible:           1
VmFlags: rd sh mr mw me ms lo rr hg
7f0000400000-7f0000600000 r--p 00000000 00:00 0 
Size:               2048 kB
Rss:                2048 kB
Locked:                0 kB
AnonHugePages:      2048 kB
FilePmdMapped:         0 kB
THPeligible:           1
VmFlags: rd mr mw me ac hg
";

    #[test]
    fn parses_vmas_and_sums_a_range() {
        let s = SmapsSnapshot::parse(SMAPS);
        assert_eq!(s.vmas().len(), 2);
        assert_eq!(s.vmas()[0].name, "/d/t-1-Index.db");
        let f = s.range(0x7f00_0000_0000..0x7f00_0040_0000);
        assert_eq!(f.vmas, 1);
        assert!(f.exact && f.vm_locked && f.vm_hugepage);
        assert_eq!(
            (f.rss, f.locked, f.file_pmd_mapped),
            (4 << 20, 4 << 20, 2 << 20)
        );
        assert_eq!(f.thp_eligible, Some(true));
        let f = s.range(0x7f00_0000_0000..0x7f00_0060_0000);
        assert_eq!(f.vmas, 2);
        assert_eq!(f.anon_huge_pages, 2 << 20);
        assert!(!f.vm_locked);
    }

    /// A 16 MiB map of a file on a `huge=always` tmpfs, as Linux 6.18 prints it: its
    /// huge pages show in `ShmemPmdMapped` only.
    const SMAPS_TMPFS: &str = "\
7fb838a00000-7fb839a00000 r--s 00000000 00:28 2                          /mnt/huge/t-1-Data.db
Size:              16384 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:               16384 kB
Pss:               16384 kB
Anonymous:             0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:    14336 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Locked:                0 kB
THPeligible:           1
VmFlags: rd mr me ms 
";

    #[test]
    fn shmem_pmd_mapped_counts_as_huge() {
        let s = SmapsSnapshot::parse(SMAPS_TMPFS);
        assert_eq!(s.vmas().len(), 1);
        assert_eq!(s.vmas()[0].shmem_pmd_mapped, 14336 << 10);
        let f = s.range(0x7fb8_38a0_0000..0x7fb8_39a0_0000);
        assert!(f.exact);
        assert_eq!(
            (f.anon_huge_pages, f.file_pmd_mapped, f.shmem_pmd_mapped),
            (0, 0, 14336 << 10)
        );
        assert_eq!(f.huge(), 14336 << 10);
        // The three kinds add up (disjoint: one VMA is anonymous, file or shmem).
        let both = SmapsSnapshot::parse(&format!("{SMAPS}{SMAPS_TMPFS}"));
        let all = both.range(0x7f00_0000_0000..0x7fb8_39a0_0000);
        assert_eq!(all.huge(), (2 << 20) + (2 << 20) + (14336 << 10));
        // The straddled tmpfs VMA is not claimed.
        assert_eq!(both.range(0x7fb8_38a0_0000..0x7fb8_38c0_0000).huge(), 0);
    }

    #[test]
    fn a_vma_straddling_the_range_is_not_claimed() {
        let s = SmapsSnapshot::parse(SMAPS);
        let f = s.range(0x7f00_0040_0000..0x7f00_0050_0000);
        assert_eq!(f.vmas, 1);
        assert!(!f.exact);
        assert_eq!((f.rss, f.anon_huge_pages), (0, 0));
        assert_eq!(f.thp_eligible, None);
        assert_eq!(s.range(0..4096).vmas, 0);
    }

    #[test]
    fn parses_status_and_thp_settings() {
        let p = ProcessMemory::parse_status(
            "Name:\tx\nVmSize:\t    3896 kB\nVmLck:\t      12 kB\nVmRSS:\t 2192 kB\nCapEff:\t000001fffeffffff\n",
        );
        assert_eq!(
            (p.vm_size, p.vm_lck, p.vm_rss),
            (3896 << 10, 12 << 10, 2192 << 10)
        );
        assert_eq!(p.cap_ipc_lock, Some(true));
        let p = ProcessMemory::parse_status("CapEff:\t000001fffeffbfff\n");
        assert_eq!(p.cap_ipc_lock, Some(false));
        assert_eq!(bracketed("always [madvise] never"), Some("madvise"));
        assert_eq!(bracketed("never"), None);
    }
}
