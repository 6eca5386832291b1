//! The commit log positions file, `commitlog/positions`: how far each table's flushed
//! segments reach into the commit log, so that replay skips what is already in segments.
//!
//! Sealed text (`format::sealed`: header, lines of escaped fields, crc32c line):
//! ```text
//! segstore-commitlog-positions 2
//! replay_from <seq>          lowest sequence number any table may still need
//! table <name> <seq>         every record of <name> numbered <= seq is in a segment
//! dropped <name> <seq> <id>  (zero or more) table <name> was dropped: its records
//!                            numbered <= seq are dead, and segment ids below <id> and
//!                            a manifest whose next_id is below <id> are the dropped
//!                            table's (see `Store::drop_table`, recovery rule 8)
//! crc32c <8 hex digits>      of every byte above
//! ```
//! Version 1 (before the codec) holds the same lines and is read as it is. `dropped`
//! lines are written only by stores that dropped a table (a reader that predates them
//! refuses the file as unknown rather than replaying a dropped table).
//!
//! Replaced atomically (invariant 5) after a flush has added its segment to the table's
//! manifest and before any commit log file is released. A crash between the manifest
//! and this file makes replay re-apply records that are already in a segment: harmless,
//! since the cells are identical and reconcile to themselves.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::format::sealed::{self, SealedWriter};
use crate::format::Malformed;
#[cfg(test)]
use crate::io::FileRules;
use crate::io::StoreFs;
use crate::segment::validate_name;

/// File name, inside the commit log directory.
pub use crate::layout::POSITIONS_FILE as FILE;
const FORMAT: &str = "segstore-commitlog-positions";
/// The version written; version 1 (the same lines) is read too.
const VERSION: u32 = 2;

/// The decoded file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Positions {
    /// Replay starts here (records below are in segments for every table).
    pub replay_from: u64,
    /// Per table: every record numbered at or below this is in a segment.
    pub flushed: BTreeMap<String, u64>,
    /// Dropped tables (`Store::drop_table`), until nothing needs to know.
    pub dropped: BTreeMap<String, DroppedTable>,
}

/// What the store keeps of a dropped table (a `dropped` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DroppedTable {
    /// Every record of the table numbered at or below this is dead: replay skips it.
    pub through_seq: u64,
    /// Segment ids of the dropped table are below this, and so is its manifest's
    /// `next_id`; a table created again under the name starts its ids here.
    pub first_id: u64,
}

impl Default for Positions {
    fn default() -> Self {
        Positions {
            replay_from: 1,
            flushed: BTreeMap::new(),
            dropped: BTreeMap::new(),
        }
    }
}

impl Positions {
    /// Encode.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = SealedWriter::new(FORMAT, VERSION);
        w.line(["replay_from", &self.replay_from.to_string()]);
        for (name, seq) in &self.flushed {
            w.line(["table", name.as_str(), &seq.to_string()]);
        }
        for (name, d) in &self.dropped {
            w.line([
                "dropped",
                name.as_str(),
                &d.through_seq.to_string(),
                &d.first_id.to_string(),
            ]);
        }
        w.finish()
    }

    /// Decode, naming `path` in errors.
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<Positions> {
        Self::decode_body(bytes).map_err(|m| m.into_error(path))
    }

    fn decode_body(bytes: &[u8]) -> std::result::Result<Positions, Malformed> {
        let mut p = Positions {
            replay_from: 0,
            flushed: BTreeMap::new(),
            dropped: BTreeMap::new(),
        };
        for line in sealed::decode(bytes, FORMAT, 1..=VERSION)?.lines {
            let f = line.fields()?;
            match f.keyword() {
                b"replay_from" => {
                    f.expect_len(2)?;
                    if p.replay_from != 0 {
                        return Err(Malformed::new(f.offset, "second replay_from line"));
                    }
                    p.replay_from = f.u64(1)?;
                    if p.replay_from == 0 {
                        return Err(Malformed::new(f.offset, "replay_from is 0"));
                    }
                }
                b"table" => {
                    f.expect_len(3)?;
                    let name = f.str(1)?;
                    validate_name("table", name)
                        .map_err(|e| Malformed::new(f.offset, e.to_string()))?;
                    let n = f.u64(2)?;
                    if p.flushed.insert(name.to_string(), n).is_some() {
                        return Err(Malformed::new(f.offset, "table named twice"));
                    }
                }
                b"dropped" => {
                    f.expect_len(4)?;
                    let name = f.str(1)?;
                    validate_name("table", name)
                        .map_err(|e| Malformed::new(f.offset, e.to_string()))?;
                    let d = DroppedTable {
                        through_seq: f.u64(2)?,
                        first_id: f.u64(3)?,
                    };
                    if p.dropped.insert(name.to_string(), d).is_some() {
                        return Err(Malformed::new(f.offset, "dropped table named twice"));
                    }
                }
                _ => {
                    return Err(Malformed::new(
                        f.offset,
                        format!("unknown line {:?}", sealed::escape(f.keyword())),
                    ))
                }
            }
        }
        if p.replay_from == 0 {
            return Err(Malformed::new(0, "no replay_from line"));
        }
        Ok(p)
    }

    /// Read `dir/positions`; a missing file is a new log (replay everything).
    pub fn load(dir: &Path) -> Result<Positions> {
        Ok(Self::read(dir)?.unwrap_or_default())
    }

    /// Read `dir/positions`, or `None` if there is none.
    pub fn read(dir: &Path) -> Result<Option<Positions>> {
        let path = dir.join(FILE);
        match std::fs::read(&path) {
            Ok(b) => Positions::decode(&path, &b).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
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
            dropped: [(
                "old".to_string(),
                DroppedTable {
                    through_seq: 40,
                    first_id: 9,
                },
            )]
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

    /// A file written before the sealed codec (version 1) still reads.
    #[test]
    fn version_1_file_reads() {
        let text = "segstore-commitlog-positions 1\nreplay_from 42\ntable t2 7\n";
        let crc = crate::format::checksum(text.as_bytes());
        let v1 = format!("{text}crc32c {crc:08x}\n");
        let p = Positions::decode(Path::new("positions"), v1.as_bytes()).unwrap();
        assert_eq!(p.replay_from, 42);
        assert_eq!(p.flushed["t2"], 7);
    }
}
