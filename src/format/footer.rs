//! The fixed 32-byte footer that ends every component file.
//!
//! ```text
//! magic     8 bytes  "SEGSTORE"
//! version   u16 LE   the format version the file was written in (2 to 6)
//! kind      u16 LE   1 data, 2 index, 3 meta
//! count     u64 LE   cells (data), entries (index; 0 from version 4), 0 (meta)
//! body_len  u64 LE   bytes before the footer (= file length - 32)
//! crc       u32 LE   crc32c of the 28 bytes above
//! ```

use super::{checksum, read_u16, read_u32, read_u64, Malformed};

/// Footer length in bytes.
pub const FOOTER_LEN: usize = 32;
/// File magic.
pub const MAGIC: &[u8; 8] = b"SEGSTORE";
/// The newest format version this build reads and writes: 8, data blocks
/// (`data_block.rs`) that record every entry's start and hold once a key length, value
/// length or timestamp all their entries share (and store entries that all take the
/// same bytes without heads or starts, `data_block/fixed.rs`), whose summary is in the
/// meta, and an index file holding only its footer; a block may follow fewer than
/// `data_block::PAGE` zero bytes that start it on a page. Version 7 differs only in
/// that its entries are never fixed; version 6 also in that its blocks hold nothing
/// once; version 5 also in that its blocks follow each other with no gap; version 4
/// also in its blocks, which record their groups' starts (`data_block::Layout`).
pub const FORMAT_VERSION: u16 = 8;
/// The last format of records and index blocks, which writers still write when
/// `SegmentOptions::format_version` asks (the default is [`FORMAT_VERSION`]).
pub const RECORD_FORMAT_VERSION: u16 = 3;
/// The oldest format version this build reads. Versions 2 and 3 differ only in the
/// meta component (version 3 adds the page index, `meta.rs`); data and index files
/// are laid out alike.
pub const MIN_READ_VERSION: u16 = 2;

/// Which component a footer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Kind {
    /// `-Data.db`
    Data = 1,
    /// `-Index.db`
    Index = 2,
    /// `-Meta.db`
    Meta = 3,
}

/// A decoded footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// Format version ([`MIN_READ_VERSION`] ..= [`FORMAT_VERSION`]; writers give theirs
    /// to [`Footer::new`]).
    pub version: u16,
    /// Component kind.
    pub kind: Kind,
    /// Records or entries in the file.
    pub count: u64,
    /// Length of the body (everything before the footer).
    pub body_len: u64,
}

impl Footer {
    /// A footer of format `version` (one this build writes: the writer's
    /// `SegmentOptions::format_version`).
    pub fn new(version: u16, kind: Kind, count: u64, body_len: u64) -> Footer {
        Footer {
            version,
            kind,
            count,
            body_len,
        }
    }

    /// Encode.
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut b = [0u8; FOOTER_LEN];
        b[0..8].copy_from_slice(MAGIC);
        b[8..10].copy_from_slice(&self.version.to_le_bytes());
        b[10..12].copy_from_slice(&(self.kind as u16).to_le_bytes());
        b[12..20].copy_from_slice(&self.count.to_le_bytes());
        b[20..28].copy_from_slice(&self.body_len.to_le_bytes());
        let crc = checksum(&b[0..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode the last [`FOOTER_LEN`] bytes of a file of `file_len` bytes, expecting
    /// `kind`. Offsets in errors are file offsets.
    pub fn decode(b: &[u8], file_len: u64, kind: Kind) -> Result<Footer, Malformed> {
        let base = file_len.saturating_sub(FOOTER_LEN as u64);
        if file_len < FOOTER_LEN as u64 || b.len() != FOOTER_LEN {
            return Err(Malformed::new(
                0,
                format!("file is {file_len} bytes, shorter than its {FOOTER_LEN}-byte footer"),
            ));
        }
        if &b[0..8] != MAGIC {
            return Err(Malformed::new(base, "bad magic (not a segstore file)"));
        }
        let crc = read_u32(b, 28).unwrap_or(0);
        if crc != checksum(&b[0..28]) {
            return Err(Malformed::new(base, "footer checksum mismatch"));
        }
        let version = read_u16(b, 8).unwrap_or(0);
        if !(MIN_READ_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(Malformed::new(
                base + 8,
                format!(
                    "unsupported format version {version} (this build reads \
                     {MIN_READ_VERSION} to {FORMAT_VERSION})"
                ),
            ));
        }
        let k = read_u16(b, 10).unwrap_or(0);
        if k != kind as u16 {
            return Err(Malformed::new(
                base + 10,
                format!("footer says component kind {k}, expected {}", kind as u16),
            ));
        }
        let count = read_u64(b, 12).unwrap_or(0);
        let body_len = read_u64(b, 20).unwrap_or(0);
        if body_len != base {
            return Err(Malformed::new(
                base + 20,
                format!("footer says body is {body_len} bytes, file holds {base}"),
            ));
        }
        Ok(Footer {
            version,
            kind,
            count,
            body_len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_each_field_checked() {
        let f = Footer::new(FORMAT_VERSION, Kind::Index, 7, 100);
        let b = f.encode();
        assert_eq!(Footer::decode(&b, 132, Kind::Index), Ok(f));
        assert!(Footer::decode(&b, 132, Kind::Data).is_err());
        assert!(Footer::decode(&b, 133, Kind::Index).is_err());
        assert!(Footer::decode(&b[1..], 131, Kind::Index).is_err());
        for i in 0..FOOTER_LEN {
            let mut c = b;
            c[i] ^= 0x10;
            assert!(Footer::decode(&c, 132, Kind::Index).is_err(), "byte {i}");
        }
    }

    #[test]
    fn reads_every_version_from_the_oldest_supported() {
        for version in 0..=FORMAT_VERSION + 1 {
            let f = Footer {
                version,
                ..Footer::new(FORMAT_VERSION, Kind::Data, 1, 10)
            };
            let got = Footer::decode(&f.encode(), 42, Kind::Data);
            if (MIN_READ_VERSION..=FORMAT_VERSION).contains(&version) {
                assert_eq!(got, Ok(f));
            } else {
                let m = got.unwrap_err();
                assert!(m.reason.contains("unsupported format version"), "{m:?}");
            }
        }
    }
}
