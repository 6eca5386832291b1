//! Manifests: which segments are live (invariant 3: a segment a manifest names is never
//! deleted). Replaced atomically with temp + fsync + rename + fsync dir (invariant 5).
//!
//! Sealed text (`format::sealed`: header, lines of escaped fields, crc32c line):
//! ```text
//! segstore-manifest 2
//! table <name>
//! next_id <n>
//! segment <id>          (zero or more, ascending)
//! segment <id> <level>  (version 4 only: a segment at a level of leveled compaction, >= 1)
//! setting <key> <value> (versions 3 and 4, zero or more, keys ascending, each once)
//! crc32c <8 hex digits> (of every byte above)
//! ```
//! `setting` lines hold the table's own settings (`Store::table_with`; the table layer
//! encodes them, `table::settings`). A manifest with settings is written as version 3,
//! one without as version 2, so stores that never use per-table settings stay readable
//! by builds that predate them, and a build that predates them refuses a manifest that
//! has them (unknown version) rather than ignoring its settings. A manifest naming a
//! segment's level (leveled compaction, `table::leveled`) is written as version 4, its
//! settings lines optional; a segment named without a level is at level 0.
//! A snapshot manifest (`snapshots/<tag>/manifest`) uses header
//! `segstore-snapshot 2`, then `created_micros <n>`, `ephemeral <0|1>`, one
//! `segment <table> <id>` line per segment and a `table <table>` line per table without
//! segments.
//!
//! Version 1 files (before the codec) hold the same lines and are read as they are;
//! the next replacement writes version 2.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::path::Path;

use crate::error::{Error, Result};
use crate::format::sealed::{self, Fields, SealedWriter};
use crate::format::Malformed;
use crate::io::StoreFs;
use crate::segment::validate_name;

/// The live segments of one table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Table name.
    pub table: String,
    /// The next segment id to hand out (ids are never reused).
    pub next_id: u64,
    /// Live segment ids.
    pub segments: BTreeSet<u64>,
    /// The table's own settings, by key (empty: the store's defaults apply).
    pub settings: BTreeMap<String, String>,
    /// Levels of live segments in leveled compaction, 1 or more (a segment absent
    /// here is at level 0).
    pub levels: BTreeMap<u64, u32>,
}

/// A snapshot's contents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotManifest {
    /// Creation time, microseconds since the Unix epoch.
    pub created_micros: u64,
    /// Cleared automatically at close and at next open.
    pub ephemeral: bool,
    /// Segment ids per table.
    pub tables: BTreeMap<String, BTreeSet<u64>>,
}

const TABLE_FORMAT: &str = "segstore-manifest";
const SNAP_FORMAT: &str = "segstore-snapshot";
/// The version written (for a table manifest without settings; with them,
/// [`SETTINGS_VERSION`]).
const VERSION: u32 = 2;
/// The version of a table manifest with `setting` lines.
const SETTINGS_VERSION: u32 = 3;
/// The version of a table manifest with segment levels.
const LEVELS_VERSION: u32 = 4;
/// The versions read (1: the same lines, written before the sealed codec).
const READS: RangeInclusive<u32> = 1..=VERSION;

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io("read", path, e))
}

/// Field `i` of `f` as a valid table name.
fn table_name(f: &Fields, i: usize) -> std::result::Result<String, Malformed> {
    let t = f.str(i)?;
    validate_name("table", t).map_err(|e| Malformed::new(f.offset, e.to_string()))?;
    Ok(t.to_string())
}

fn unknown(f: &Fields) -> Malformed {
    Malformed::new(
        f.offset,
        format!("unknown line {:?}", sealed::escape(f.keyword())),
    )
}

fn duplicate(f: &Fields) -> Malformed {
    Malformed::new(
        f.offset,
        format!("second {:?} line", sealed::escape(f.keyword())),
    )
}

impl Manifest {
    /// Encode.
    pub fn encode(&self) -> Vec<u8> {
        let version = if !self.levels.is_empty() {
            LEVELS_VERSION
        } else if self.settings.is_empty() {
            VERSION
        } else {
            SETTINGS_VERSION
        };
        let mut w = SealedWriter::new(TABLE_FORMAT, version);
        w.line(["table", self.table.as_str()]);
        w.line(["next_id", &self.next_id.to_string()]);
        for id in &self.segments {
            match self.levels.get(id) {
                Some(level) => w.line(["segment", &id.to_string(), &level.to_string()]),
                None => w.line(["segment", &id.to_string()]),
            };
        }
        for (k, v) in &self.settings {
            w.line(["setting", k.as_str(), v.as_str()]);
        }
        w.finish()
    }

    /// Decode, naming `path` in errors.
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<Manifest> {
        Self::decode_body(bytes).map_err(|m| m.into_error(path))
    }

    fn decode_body(bytes: &[u8]) -> std::result::Result<Manifest, Malformed> {
        let mut m = Manifest::default();
        let (mut have_table, mut have_next) = (false, false);
        let decoded = sealed::decode(bytes, TABLE_FORMAT, 1..=LEVELS_VERSION)?;
        let with_settings = decoded.version >= SETTINGS_VERSION;
        let with_levels = decoded.version == LEVELS_VERSION;
        for line in decoded.lines {
            let f = line.fields()?;
            match f.keyword() {
                b"table" => {
                    f.expect_len(2)?;
                    if std::mem::replace(&mut have_table, true) {
                        return Err(duplicate(&f));
                    }
                    m.table = table_name(&f, 1)?;
                }
                b"next_id" => {
                    f.expect_len(2)?;
                    if std::mem::replace(&mut have_next, true) {
                        return Err(duplicate(&f));
                    }
                    m.next_id = f.u64(1)?;
                }
                b"segment" if with_levels && f.len() == 3 => {
                    let id = f.u64(1)?;
                    let level = u32::try_from(f.u64(2)?)
                        .ok()
                        .filter(|&l| l >= 1)
                        .ok_or_else(|| Malformed::new(f.offset, "bad segment level"))?;
                    m.segments.insert(id);
                    m.levels.insert(id, level);
                }
                b"segment" => {
                    f.expect_len(2)?;
                    m.segments.insert(f.u64(1)?);
                }
                b"setting" if with_settings => {
                    f.expect_len(3)?;
                    let key = f.str(1)?;
                    let ok = !key.is_empty()
                        && key
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
                    if !ok {
                        return Err(Malformed::new(f.offset, format!("bad setting key {key:?}")));
                    }
                    if m.settings
                        .insert(key.to_string(), f.str(2)?.to_string())
                        .is_some()
                    {
                        return Err(Malformed::new(f.offset, format!("setting {key} twice")));
                    }
                }
                _ => return Err(unknown(&f)),
            }
        }
        if decoded.version == SETTINGS_VERSION && m.settings.is_empty() {
            return Err(Malformed::new(0, "version 3 manifest without settings"));
        }
        if with_levels && m.levels.is_empty() {
            return Err(Malformed::new(0, "version 4 manifest without levels"));
        }
        if !have_table {
            return Err(Malformed::new(0, "manifest names no table"));
        }
        if m.segments.last().is_some_and(|&l| l >= m.next_id) {
            return Err(Malformed::new(0, "a segment id is not below next_id"));
        }
        Ok(m)
    }

    /// Read and decode.
    pub fn load(path: &Path) -> Result<Manifest> {
        Self::decode(path, &read(path)?)
    }

    /// Replace atomically and durably.
    pub fn store(&self, path: &Path, fs: &StoreFs) -> Result<()> {
        fs.write_atomic(path, &self.encode())
    }
}

impl SnapshotManifest {
    /// Encode.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = SealedWriter::new(SNAP_FORMAT, VERSION);
        w.line(["created_micros", &self.created_micros.to_string()]);
        w.line(["ephemeral", if self.ephemeral { "1" } else { "0" }]);
        for (table, ids) in &self.tables {
            if ids.is_empty() {
                w.line(["table", table.as_str()]);
            }
            for id in ids {
                w.line(["segment", table.as_str(), &id.to_string()]);
            }
        }
        w.finish()
    }

    /// Decode, naming `path` in errors.
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<SnapshotManifest> {
        Self::decode_body(bytes).map_err(|m| m.into_error(path))
    }

    fn decode_body(bytes: &[u8]) -> std::result::Result<SnapshotManifest, Malformed> {
        let mut m = SnapshotManifest::default();
        let (mut have_created, mut have_ephemeral) = (false, false);
        for line in sealed::decode(bytes, SNAP_FORMAT, READS)?.lines {
            let f = line.fields()?;
            match f.keyword() {
                b"created_micros" => {
                    f.expect_len(2)?;
                    if std::mem::replace(&mut have_created, true) {
                        return Err(duplicate(&f));
                    }
                    m.created_micros = f.u64(1)?;
                }
                b"ephemeral" => {
                    f.expect_len(2)?;
                    if std::mem::replace(&mut have_ephemeral, true) {
                        return Err(duplicate(&f));
                    }
                    m.ephemeral = match f.u64(1)? {
                        0 => false,
                        1 => true,
                        _ => return Err(Malformed::new(f.offset, "ephemeral is not 0 or 1")),
                    };
                }
                b"table" => {
                    f.expect_len(2)?;
                    m.tables.entry(table_name(&f, 1)?).or_default();
                }
                b"segment" => {
                    f.expect_len(3)?;
                    let id = f.u64(2)?;
                    m.tables.entry(table_name(&f, 1)?).or_default().insert(id);
                }
                _ => return Err(unknown(&f)),
            }
        }
        Ok(m)
    }

    /// Read and decode.
    pub fn load(path: &Path) -> Result<SnapshotManifest> {
        Self::decode(path, &read(path)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects_damage() {
        let m = Manifest {
            table: "t1".into(),
            next_id: 9,
            segments: [1, 4, 8].into_iter().collect(),
            settings: BTreeMap::new(),
            levels: BTreeMap::new(),
        };
        let mut with = m.clone();
        with.settings.insert("gc_grace_secs".into(), "0".into());
        with.settings
            .insert("memtable_flush_bytes".into(), "1024".into());
        let b = with.encode();
        assert!(b.starts_with(b"segstore-manifest 3\n"));
        assert_eq!(
            Manifest::decode(Path::new("t1.manifest"), &b).unwrap(),
            with
        );
        let b = m.encode();
        assert!(b.starts_with(b"segstore-manifest 2\n"));
        let p = Path::new("t1.manifest");
        assert_eq!(Manifest::decode(p, &b).unwrap(), m);
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x04;
            assert!(Manifest::decode(p, &c).is_err(), "flip at {i} undetected");
        }
        let mut leveled = m.clone();
        leveled.levels.insert(4, 2);
        let lb = leveled.encode();
        assert!(lb.starts_with(b"segstore-manifest 4\n"));
        assert_eq!(Manifest::decode(p, &lb).unwrap(), leveled);
        leveled.settings = with.settings.clone();
        assert_eq!(Manifest::decode(p, &leveled.encode()).unwrap(), leveled);
        let e = Manifest::decode(p, &b[..b.len() - 3]).unwrap_err();
        assert!(
            e.is_corrupt() && e.to_string().contains("t1.manifest"),
            "{e}"
        );

        let s = SnapshotManifest {
            created_micros: 5,
            ephemeral: true,
            tables: [
                ("a".to_string(), [1u64, 2].into_iter().collect()),
                ("b".to_string(), BTreeSet::new()),
            ]
            .into_iter()
            .collect(),
        };
        assert_eq!(SnapshotManifest::decode(p, &s.encode()).unwrap(), s);
    }

    fn seal_v1(text: &str) -> Vec<u8> {
        let crc = crate::format::checksum(text.as_bytes());
        format!("{text}crc32c {crc:08x}\n").into_bytes()
    }

    /// Files written before the sealed codec (version 1) still read.
    #[test]
    fn version_1_files_read() {
        let p = Path::new("t1.manifest");
        let v1 = seal_v1("segstore-manifest 1\ntable t1\nnext_id 9\nsegment 1\nsegment 8\n");
        let m = Manifest::decode(p, &v1).unwrap();
        assert_eq!(m.table, "t1");
        assert_eq!(m.next_id, 9);
        assert_eq!(m.segments, [1, 8].into_iter().collect());
        assert!(m.encode().starts_with(b"segstore-manifest 2\n"));

        let v1 =
            seal_v1("segstore-snapshot 1\ncreated_micros 5\nephemeral 1\nsegment a 1\ntable b\n");
        let s = SnapshotManifest::decode(p, &v1).unwrap();
        assert!(s.ephemeral);
        assert_eq!(s.created_micros, 5);
        assert_eq!(s.tables.len(), 2);
        assert_eq!(s.tables["a"], [1].into_iter().collect());
    }

    #[test]
    fn duplicate_and_malformed_lines_are_corrupt() {
        let p = Path::new("t1.manifest");
        for text in [
            "segstore-manifest 2\ntable t1\ntable t2\nnext_id 9\n",
            "segstore-manifest 2\ntable t1\nnext_id 9\nnext_id 10\n",
            "segstore-manifest 2\ntable t1\nnext_id 9\nsegment 1 2\n",
            "segstore-manifest 2\ntable t\\x0a1\nnext_id 9\n",
            "segstore-manifest 2\ntable t1\nnext_id 09\n",
            "segstore-manifest 3\ntable t1\nnext_id 9\n",
            "segstore-manifest 3\ntable t1\nnext_id 9\nsegment 1 1\nsetting a 1\n",
            "segstore-manifest 4\ntable t1\nnext_id 9\nsegment 1\n",
            "segstore-manifest 4\ntable t1\nnext_id 9\nsegment 1 0\n",
            "segstore-manifest 4\ntable t1\nnext_id 9\nsegment 1 01\n",
            "segstore-manifest 4\ntable t1\nnext_id 9\nsegment 1 1 1\n",
        ] {
            let e = Manifest::decode(p, &seal_v1(text)).unwrap_err();
            assert!(
                e.is_corrupt() && e.to_string().contains("t1.manifest"),
                "{e}"
            );
        }
    }
}
