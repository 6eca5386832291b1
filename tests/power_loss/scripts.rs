//! The scripted workloads, each run once per crash point, and the expiry clock they
//! and the check use.

use segstore::{CompactionStrategy, Result, TableConfig};

use crate::model::Ctx;

pub(crate) type Script = fn(&mut Ctx<'_>) -> Result<()>;

pub(crate) fn writes(c: &mut Ctx<'_>, t: &str, round: u32, n: u32) -> Result<()> {
    for i in 0..n {
        c.put(t, &format!("k{i:03}"), &format!("v{round}-{i}"))?;
    }
    c.delete(t, &format!("k{:03}", round % n))
}

/// Puts, deletes and overwrites; flushes; a compaction; more writes left in the log.
pub(crate) fn flush_and_compact(c: &mut Ctx<'_>) -> Result<()> {
    writes(c, "a", 1, 6)?;
    c.flush("a")?;
    writes(c, "a", 2, 6)?;
    writes(c, "b", 2, 3)?;
    c.flush("a")?;
    c.compact("a")?;
    writes(c, "a", 3, 4)?;
    c.sync()
}

/// Range deletes in the memtable, flushed into a segment (one holding only a range
/// tombstone too), compacted with the cells they cover, and left in the log.
pub(crate) fn range_deletes(c: &mut Ctx<'_>) -> Result<()> {
    writes(c, "a", 1, 8)?;
    c.flush("a")?;
    c.delete_range("a", "k002", "k006")?;
    c.flush("a")?;
    c.put("a", "k003", "back")?;
    writes(c, "b", 1, 3)?;
    c.delete_range("b", "k000", "k002")?;
    c.compact("a")?;
    c.delete_range("a", "k005", "k009")?;
    c.sync()
}

/// The expiry clock of the TTL script's start, and of every check (scripts without
/// TTL cells do not notice it).
const TTL_T0: u64 = 1_700_000_000_000_000;
pub(crate) const TTL_CHECK: u64 = TTL_T0 + 100 * 1_000_000;

/// TTL: expiring cells that expire before the check and others that do not, over older
/// values, in the memtable, flushed, and compacted across their expiry in a table with
/// `gc_grace` 0 (expired cells become tombstones or are purged), some left in the log.
pub(crate) fn ttl(c: &mut Ctx<'_>) -> Result<()> {
    c.store.set_expiry_clock(Some(TTL_T0));
    let mut t = TableConfig::default();
    t.background_compaction = false;
    t.gc_grace_secs = 0;
    c.store.table_with("e", t)?;
    writes(c, "e", 1, 6)?;
    c.flush("e")?;
    for i in 0..6 {
        let ttl = if i % 2 == 0 { 10 } else { 1000 };
        c.put_ttl("e", &format!("k{i:03}"), &format!("ttl-{i}"), ttl)?;
    }
    c.put_ttl("a", "k000", "short", 5)?;
    c.flush("e")?;
    c.store.set_expiry_clock(Some(TTL_CHECK));
    c.compact("e")?;
    c.store.set_expiry_clock(Some(TTL_CHECK - 1_000_000));
    c.put_ttl("e", "k007", "logged", 1)?;
    c.put_ttl("e", "k008", "logged", 1000)?;
    c.compact("e")?;
    c.sync()
}

/// Leveled compactions (table `l`: segments of 1 KiB, level 1 of 2 KiB): level 0 into
/// level 1 cut into several segments, pushes down to level 2, a range delete clipped
/// between output segments, and a major compaction into one level.
pub(crate) fn leveled(c: &mut Ctx<'_>) -> Result<()> {
    let mut t = TableConfig::default();
    t.background_compaction = false;
    t.compaction.strategy = CompactionStrategy::Leveled;
    t.compaction.target_segment_size = 1024;
    t.compaction.base_level_size = 2048;
    t.compaction.level_multiplier = 2;
    t.compaction.l0_trigger = 2;
    c.store.table_with("l", t)?;
    let pad = "p".repeat(300);
    for round in 1..=4 {
        for i in 0..10 {
            c.put("l", &format!("k{i:03}"), &format!("v{round}-{i}-{pad}"))?;
        }
        c.flush("l")?;
        if round % 2 == 0 {
            c.table("l")?.compact_pending()?;
        }
    }
    c.delete_range("l", "k002", "k007")?;
    c.put("l", "k004", "back")?;
    c.flush("l")?;
    c.flush("l")?;
    c.table("l")?.compact_pending()?;
    c.compact("l")?;
    writes(c, "l", 5, 4)?;
    c.sync()
}

/// Table `m`: level 0 kept to one segment (`l0_merge_bytes`), merged at the second
/// and third flushes, into level 1 at the fourth.
pub(crate) fn level_0_merges(c: &mut Ctx<'_>) -> Result<()> {
    let mut t = TableConfig::default();
    t.background_compaction = false;
    t.compaction.strategy = CompactionStrategy::Leveled;
    t.compaction.l0_trigger = 4;
    t.compaction.l0_merge_bytes = 1 << 20;
    c.store.table_with("m", t)?;
    for round in 1..=4 {
        for i in (round..12).step_by(3) {
            c.put("m", &format!("k{i:03}"), &format!("v{round}-{i}"))?;
        }
        c.flush("m")?;
        c.table("m")?.compact_pending()?;
    }
    c.sync()
}

/// Snapshot, clear, and re-use of the tag; writes between.
pub(crate) fn snapshots(c: &mut Ctx<'_>) -> Result<()> {
    writes(c, "a", 1, 4)?;
    c.snapshot("s1")?;
    writes(c, "a", 2, 4)?;
    c.snapshot("s2")?;
    c.clear("s1")?;
    writes(c, "a", 3, 2)?;
    c.snapshot("s1")?;
    c.sync()
}

/// Deferred deletions completing: a snapshot reader maps segments that a compaction and
/// a clear make obsolete; dropping the reader lets their deletions run.
pub(crate) fn deferred(c: &mut Ctx<'_>) -> Result<()> {
    writes(c, "a", 1, 4)?;
    c.flush("a")?;
    writes(c, "a", 2, 4)?;
    c.snapshot("s")?;
    let view = c.store.open_snapshot("s")?;
    c.compact("a")?;
    c.clear("s")?;
    writes(c, "a", 3, 3)?;
    drop(view);
    c.flush("a")?;
    c.snapshot("s")?;
    c.sync()
}

/// Tables dropped with flushed and logged data, one of them written again under the
/// same name, and a snapshot naming the dropped table's segments.
pub(crate) fn drop_tables(c: &mut Ctx<'_>) -> Result<()> {
    writes(c, "a", 1, 5)?;
    writes(c, "b", 1, 3)?;
    c.flush("a")?;
    c.snapshot("s")?;
    writes(c, "a", 2, 5)?;
    c.drop_table("a")?;
    writes(c, "a", 3, 3)?;
    c.flush("a")?;
    c.drop_table("b")?;
    writes(c, "b", 4, 2)?;
    c.sync()
}

/// Snapshots on a file system without hard links: their files are copies.
pub(crate) fn copied_snapshots(c: &mut Ctx<'_>) -> Result<()> {
    writes(c, "a", 1, 4)?;
    c.snapshot("s1")?;
    writes(c, "a", 2, 2)?;
    c.snapshot("s2")?;
    c.clear("s1")?;
    c.sync()
}
