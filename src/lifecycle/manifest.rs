//! Manifests: which segments are live (invariant 3: a segment a manifest names is never
//! deleted). Replaced atomically with temp + fsync + rename + fsync dir (invariant 5).
//!
//! Text format, one record per line, ending in a checksum line:
//! ```text
//! segstore-manifest 1
//! table <name>
//! next_id <n>
//! segment <id>          (zero or more, ascending)
//! crc32c <8 hex digits> (of every line above, newlines included)
//! ```
//! A snapshot manifest (`snapshots/<tag>/manifest`) uses header
//! `segstore-snapshot 1`, then `created_micros <n>`, `ephemeral <0|1>`, and one
//! `segment <table> <id>` line per segment.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::error::{Error, Result};
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

const TABLE_HEADER: &str = "segstore-manifest 1";
const SNAP_HEADER: &str = "segstore-snapshot 1";

fn seal(mut text: String) -> Vec<u8> {
    let crc = crate::format::checksum(text.as_bytes());
    text.push_str(&format!("crc32c {crc:08x}\n"));
    text.into_bytes()
}

/// Check the checksum line and header; return the body lines after the header with
/// their byte offsets.
fn unseal<'a>(path: &Path, bytes: &'a [u8], header: &str) -> Result<Vec<(u64, &'a str)>> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| Error::corrupt(path, e.valid_up_to() as u64, "manifest is not UTF-8"))?;
    let crc_at = text
        .trim_end_matches('\n')
        .rfind('\n')
        .map(|i| i + 1)
        .ok_or_else(|| Error::corrupt(path, 0, "manifest has no checksum line"))?;
    let (body, crc_line) = text.split_at(crc_at);
    let want = crc_line
        .trim_end()
        .strip_prefix("crc32c ")
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| Error::corrupt(path, crc_at as u64, "bad checksum line"))?;
    if crate::format::checksum(body.as_bytes()) != want {
        return Err(Error::corrupt(
            path,
            crc_at as u64,
            "manifest checksum mismatch",
        ));
    }
    let mut out = Vec::new();
    let mut off = 0u64;
    let mut lines = body.lines();
    if lines.next() != Some(header) {
        return Err(Error::corrupt(
            path,
            0,
            format!("expected header {header:?}"),
        ));
    }
    off += header.len() as u64 + 1;
    for l in lines {
        out.push((off, l));
        off += l.len() as u64 + 1;
    }
    Ok(out)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io("read", path, e))
}

fn num(path: &Path, off: u64, s: Option<&str>) -> Result<u64> {
    s.and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::corrupt(path, off, "expected a number"))
}

impl Manifest {
    /// Encode.
    pub fn encode(&self) -> Vec<u8> {
        let mut t = format!(
            "{TABLE_HEADER}\ntable {}\nnext_id {}\n",
            self.table, self.next_id
        );
        for id in &self.segments {
            t.push_str(&format!("segment {id}\n"));
        }
        seal(t)
    }

    /// Decode, naming `path` in errors.
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<Manifest> {
        let mut m = Manifest::default();
        let mut have_table = false;
        for (off, line) in unseal(path, bytes, TABLE_HEADER)? {
            let mut w = line.split(' ');
            match w.next() {
                Some("table") => {
                    let t = w.next().unwrap_or("");
                    validate_name("table", t)
                        .map_err(|e| Error::corrupt(path, off, e.to_string()))?;
                    m.table = t.to_string();
                    have_table = true;
                }
                Some("next_id") => m.next_id = num(path, off, w.next())?,
                Some("segment") => {
                    m.segments.insert(num(path, off, w.next())?);
                }
                _ => return Err(Error::corrupt(path, off, format!("unknown line {line:?}"))),
            }
        }
        if !have_table {
            return Err(Error::corrupt(path, 0, "manifest names no table"));
        }
        if m.segments.last().is_some_and(|&l| l >= m.next_id) {
            return Err(Error::corrupt(path, 0, "a segment id is not below next_id"));
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
        let mut t = format!(
            "{SNAP_HEADER}\ncreated_micros {}\nephemeral {}\n",
            self.created_micros, self.ephemeral as u8
        );
        for (table, ids) in &self.tables {
            if ids.is_empty() {
                t.push_str(&format!("table {table}\n"));
            }
            for id in ids {
                t.push_str(&format!("segment {table} {id}\n"));
            }
        }
        seal(t)
    }

    /// Decode, naming `path` in errors.
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<SnapshotManifest> {
        let mut m = SnapshotManifest::default();
        for (off, line) in unseal(path, bytes, SNAP_HEADER)? {
            let mut w = line.split(' ');
            match w.next() {
                Some("created_micros") => m.created_micros = num(path, off, w.next())?,
                Some("ephemeral") => m.ephemeral = num(path, off, w.next())? != 0,
                Some(kind @ ("segment" | "table")) => {
                    let t = w.next().unwrap_or("");
                    validate_name("table", t)
                        .map_err(|e| Error::corrupt(path, off, e.to_string()))?;
                    let ids = m.tables.entry(t.to_string()).or_default();
                    if kind == "segment" {
                        ids.insert(num(path, off, w.next())?);
                    }
                }
                _ => return Err(Error::corrupt(path, off, format!("unknown line {line:?}"))),
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
        };
        let b = m.encode();
        let p = Path::new("t1.manifest");
        assert_eq!(Manifest::decode(p, &b).unwrap(), m);
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x04;
            assert!(Manifest::decode(p, &c).is_err(), "flip at {i} undetected");
        }
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
}
