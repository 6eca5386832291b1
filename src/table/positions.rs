//! The commit log positions file, `commitlog/positions`: how far each table's flushed
//! segments reach into the commit log, so that replay skips what is already in segments.
//!
//! ```text
//! segstore-commitlog-positions 1
//! replay_from <seq>          lowest sequence number any table may still need
//! table <name> <seq>         every record of <name> numbered <= seq is in a segment
//! crc32c <8 hex digits>      of every line above, newlines included
//! ```
//!
//! Replaced atomically (invariant 5) after a flush has added its segment to the table's
//! manifest and before any commit log file is released. A crash between the manifest
//! and this file makes replay re-apply records that are already in a segment: harmless,
//! since the cells are identical and reconcile to themselves.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
#[cfg(test)]
use crate::io::FileRules;
use crate::io::StoreFs;
use crate::segment::validate_name;

/// File name, inside the commit log directory.
pub const FILE: &str = "positions";
const HEADER: &str = "segstore-commitlog-positions 1";

/// The decoded file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Positions {
    /// Replay starts here (records below are in segments for every table).
    pub replay_from: u64,
    /// Per table: every record numbered at or below this is in a segment.
    pub flushed: BTreeMap<String, u64>,
}

impl Default for Positions {
    fn default() -> Self {
        Positions {
            replay_from: 1,
            flushed: BTreeMap::new(),
        }
    }
}

impl Positions {
    /// Encode.
    pub fn encode(&self) -> Vec<u8> {
        let mut t = format!("{HEADER}\nreplay_from {}\n", self.replay_from);
        for (name, seq) in &self.flushed {
            t.push_str(&format!("table {name} {seq}\n"));
        }
        let crc = crate::format::checksum(t.as_bytes());
        t.push_str(&format!("crc32c {crc:08x}\n"));
        t.into_bytes()
    }

    /// Decode, naming `path` in errors.
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<Positions> {
        let bad = |off: usize, why: &str| Error::corrupt(path, off as u64, why.to_string());
        let text = std::str::from_utf8(bytes).map_err(|e| bad(e.valid_up_to(), "not UTF-8"))?;
        let body_end = text
            .trim_end_matches('\n')
            .rfind('\n')
            .map(|i| i + 1)
            .ok_or_else(|| bad(0, "no checksum line"))?;
        let (body, crc_line) = text.split_at(body_end);
        let want = crc_line
            .trim_end()
            .strip_prefix("crc32c ")
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| bad(body_end, "bad checksum line"))?;
        if crate::format::checksum(body.as_bytes()) != want {
            return Err(bad(body_end, "checksum mismatch"));
        }
        let mut lines = body.lines();
        if lines.next() != Some(HEADER) {
            return Err(bad(0, "unknown header"));
        }
        let mut p = Positions {
            replay_from: 0,
            flushed: BTreeMap::new(),
        };
        let mut off = HEADER.len() + 1;
        for line in lines {
            let w: Vec<&str> = line.split(' ').collect();
            match w.as_slice() {
                ["replay_from", n] => {
                    p.replay_from = n.parse().map_err(|_| bad(off, "bad number"))?;
                }
                ["table", name, n] => {
                    validate_name("table", name).map_err(|e| bad(off, &e.to_string()))?;
                    let n = n.parse().map_err(|_| bad(off, "bad number"))?;
                    p.flushed.insert(name.to_string(), n);
                }
                _ => return Err(bad(off, "unknown line")),
            }
            off += line.len() + 1;
        }
        if p.replay_from == 0 {
            return Err(bad(0, "no replay_from line"));
        }
        Ok(p)
    }

    /// Read `dir/positions`; a missing file is a new log (replay everything).
    pub fn load(dir: &Path) -> Result<Positions> {
        let path = dir.join(FILE);
        match std::fs::read(&path) {
            Ok(b) => Positions::decode(&path, &b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Positions::default()),
            Err(e) => Err(Error::io("read", &path, e)),
        }
    }

    /// Replace `dir/positions` atomically and durably.
    pub fn store(&self, dir: &Path, fs: &StoreFs) -> Result<()> {
        fs.write_atomic(&dir.join(FILE), &self.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects_damage() {
        let p = Positions {
            replay_from: 42,
            flushed: [("users".to_string(), 41), ("t2".to_string(), 7)]
                .into_iter()
                .collect(),
        };
        let b = p.encode();
        let path = Path::new("commitlog/positions");
        assert_eq!(Positions::decode(path, &b).unwrap(), p);
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x02;
            assert!(Positions::decode(path, &c).is_err(), "flip at {i}");
        }
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Positions::load(dir.path()).unwrap(), Positions::default());
        p.store(dir.path(), &StoreFs::new(dir.path(), &FileRules::posix()))
            .unwrap();
        assert_eq!(Positions::load(dir.path()).unwrap(), p);
    }
}
