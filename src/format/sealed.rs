//! Sealed text: the one codec of the store's small text files (table and snapshot
//! manifests, `commitlog/positions`, the deleter's journal `deletions.pending`).
//!
//! ```text
//! <format> <version>\n          header: format name ([a-z0-9-]+), decimal version
//! <field> <field> ...\n         zero or more body lines of one or more fields each,
//!                               separated by exactly one space
//! crc32c <8 lowercase hex>\n    crc32c of every byte before this line; ends the file
//! ```
//!
//! Fields are escaped so that no value can forge a field or a line: a field's encoding
//! never holds a space, a newline, a carriage return or any other control character.
//! - `\\` is a backslash;
//! - `\xNN` (two lowercase hex digits) is the byte `NN`: used for the space, for the
//!   bytes of every control character (`U+0000`-`U+001F`, `U+007F`-`U+009F`) and for
//!   every byte that is not part of valid UTF-8 (a Unix path may hold any byte but `/`
//!   and NUL);
//! - `\e`, alone, is the empty field;
//! - every other character stands for itself, so files stay readable text (UTF-8).
//!
//! Encoding is canonical, and the decoder accepts only the canonical form (a raw control
//! byte, an escape of a byte that needs none, an uppercase hex digit, an empty field, a
//! blank line, bytes after the checksum line are all [`Malformed`]): whatever decodes
//! re-encodes to the same bytes. The decoder is total (invariant 6).

use std::borrow::Cow;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use super::{checksum, Malformed};

const CRC_PREFIX: &[u8] = b"crc32c ";
/// Length of the checksum line, newline included.
const CRC_LINE_LEN: usize = CRC_PREFIX.len() + 8 + 1;

/// Builds one sealed file: header, lines, then [`SealedWriter::finish`] appends the
/// checksum line.
#[derive(Debug, Clone)]
pub struct SealedWriter {
    text: String,
}

impl SealedWriter {
    /// Start a file of `format` (a constant of `[a-z0-9-]+`), version `version`.
    pub fn new(format: &str, version: u32) -> SealedWriter {
        debug_assert!(valid_format_name(format.as_bytes()), "{format:?}");
        SealedWriter {
            text: format!("{format} {version}\n"),
        }
    }

    /// Append a line of `fields` (at least one), each escaped.
    pub fn line<F: AsRef<[u8]>>(&mut self, fields: impl IntoIterator<Item = F>) -> &mut Self {
        let start = self.text.len();
        for f in fields {
            if self.text.len() > start {
                self.text.push(' ');
            }
            escape_into(&mut self.text, f.as_ref());
        }
        // A line of no fields would be blank, which the decoder refuses: write one empty
        // field instead (the decoder gives it back as such).
        if self.text.len() == start {
            escape_into(&mut self.text, b"");
        }
        self.text.push('\n');
        self
    }

    /// Append the checksum line and return the file's bytes.
    pub fn finish(self) -> Vec<u8> {
        let mut text = self.text;
        let crc = checksum(text.as_bytes());
        text.push_str(&format!("crc32c {crc:08x}\n"));
        text.into_bytes()
    }
}

/// Encode a whole file: `format` `version`, then `lines` of fields.
pub fn encode<L, F>(format: &str, version: u32, lines: impl IntoIterator<Item = L>) -> Vec<u8>
where
    L: IntoIterator<Item = F>,
    F: AsRef<[u8]>,
{
    let mut w = SealedWriter::new(format, version);
    for l in lines {
        w.line(l);
    }
    w.finish()
}

fn valid_format_name(b: &[u8]) -> bool {
    !b.is_empty()
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

fn push_hex(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('\\');
    out.push('x');
    out.push(HEX[(b >> 4) as usize] as char);
    out.push(HEX[(b & 15) as usize] as char);
}

/// Append the escaped form of `field` to `out` (see the module docs).
pub fn escape_into(out: &mut String, field: &[u8]) {
    if field.is_empty() {
        out.push_str("\\e");
        return;
    }
    for chunk in field.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else if c == ' ' || c.is_control() {
                let mut buf = [0u8; 4];
                for &b in c.encode_utf8(&mut buf).as_bytes() {
                    push_hex(out, b);
                }
            } else {
                out.push(c);
            }
        }
        for &b in chunk.invalid() {
            push_hex(out, b);
        }
    }
}

/// The escaped form of `field`.
pub fn escape(field: &[u8]) -> String {
    let mut s = String::new();
    escape_into(&mut s, field);
    s
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Decode one escaped field. Errors carry the offset within `token`.
pub fn unescape(token: &[u8]) -> Result<Vec<u8>, Malformed> {
    if token == b"\\e" {
        return Ok(Vec::new());
    }
    if token.is_empty() {
        return Err(Malformed::new(0, "empty field"));
    }
    let mut out = Vec::with_capacity(token.len());
    let mut i = 0;
    while let Some(&c) = token.get(i) {
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        match token.get(i + 1) {
            Some(b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            Some(b'x') => {
                let hi = token.get(i + 2).copied().and_then(hex_digit);
                let lo = token.get(i + 3).copied().and_then(hex_digit);
                match (hi, lo) {
                    (Some(h), Some(l)) => out.push(h << 4 | l),
                    _ => {
                        return Err(Malformed::new(
                            i as u64,
                            "\\x must be followed by two lowercase hex digits",
                        ))
                    }
                }
                i += 4;
            }
            _ => return Err(Malformed::new(i as u64, "unknown escape")),
        }
    }
    // One encoding per value: a raw space or control byte, a needless escape or a raw
    // byte of invalid UTF-8 is not what the encoder writes.
    if escape(&out).as_bytes() != token {
        return Err(Malformed::new(0, "field is not in canonical escaped form"));
    }
    Ok(out)
}

/// A decoded sealed file: its version and its body lines, not yet split into fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed<'a> {
    /// The header's version.
    pub version: u32,
    /// The body lines, in order.
    pub lines: Vec<Line<'a>>,
}

/// One body line as stored (escaped, without its newline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line<'a> {
    /// Offset of the line in the file.
    pub offset: u64,
    /// Its bytes, escaped, without the newline.
    pub text: &'a [u8],
}

impl<'a> Line<'a> {
    /// Split into fields and unescape them.
    pub fn fields(&self) -> Result<Fields, Malformed> {
        let mut items = Vec::new();
        let mut at = 0usize;
        for tok in self.text.split(|&b| b == b' ') {
            let offset = self.offset + at as u64;
            if tok.is_empty() {
                return Err(Malformed::new(
                    offset,
                    "empty field (a doubled, leading or trailing space)",
                ));
            }
            let value = unescape(tok).map_err(|m| m.at(offset))?;
            items.push((offset, value));
            at += tok.len() + 1;
        }
        Ok(Fields {
            offset: self.offset,
            items,
        })
    }
}

/// The unescaped fields of one line, each with its offset in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fields {
    /// Offset of the line.
    pub offset: u64,
    items: Vec<(u64, Vec<u8>)>,
}

impl Fields {
    /// Number of fields (at least one).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Never true: a line has at least one field.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The first field: the line's keyword, by convention.
    pub fn keyword(&self) -> &[u8] {
        self.items.first().map_or(&[][..], |(_, v)| v)
    }

    /// Fail unless the line has exactly `n` fields.
    pub fn expect_len(&self, n: usize) -> Result<(), Malformed> {
        if self.items.len() == n {
            Ok(())
        } else {
            Err(Malformed::new(
                self.offset,
                format!(
                    "{} line has {} fields, expected {n}",
                    escape(self.keyword()),
                    self.items.len()
                ),
            ))
        }
    }

    fn item(&self, i: usize) -> Result<&(u64, Vec<u8>), Malformed> {
        self.items
            .get(i)
            .ok_or_else(|| Malformed::new(self.offset, format!("missing field {i}")))
    }

    /// Field `i`'s bytes.
    pub fn bytes(&self, i: usize) -> Result<&[u8], Malformed> {
        Ok(&self.item(i)?.1)
    }

    /// Field `i` as UTF-8.
    pub fn str(&self, i: usize) -> Result<&str, Malformed> {
        let (off, v) = self.item(i)?;
        std::str::from_utf8(v).map_err(|_| Malformed::new(*off, "field is not UTF-8"))
    }

    /// Field `i` as a decimal u64 in canonical form (no sign, no leading zeros).
    pub fn u64(&self, i: usize) -> Result<u64, Malformed> {
        let (off, v) = self.item(i)?;
        std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<u64>().ok().filter(|n| n.to_string() == s))
            .ok_or_else(|| Malformed::new(*off, "expected a decimal number"))
    }

    /// Field `i` as a path (see [`path_from_bytes`]).
    pub fn path(&self, i: usize) -> Result<PathBuf, Malformed> {
        let (off, v) = self.item(i)?;
        path_from_bytes(v).ok_or_else(|| Malformed::new(*off, "path is not valid on this OS"))
    }
}

/// Decode a sealed file of `format` whose version lies in `versions`: check the checksum
/// line, then the header. Body lines are returned unsplit (see [`Line::fields`]), so a
/// caller may still read an older version's lines its own way.
pub fn decode<'a>(
    bytes: &'a [u8],
    format: &str,
    versions: RangeInclusive<u32>,
) -> Result<Sealed<'a>, Malformed> {
    let len = bytes.len();
    if bytes.last() != Some(&b'\n') {
        return Err(Malformed::new(
            len as u64,
            "does not end with a newline (empty or torn)",
        ));
    }
    let crc_at = bytes[..len - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let crc_line = &bytes[crc_at..];
    let want = (crc_line.len() == CRC_LINE_LEN && crc_line.starts_with(CRC_PREFIX))
        .then(|| &crc_line[CRC_PREFIX.len()..CRC_LINE_LEN - 1])
        .and_then(|hex| {
            hex.iter()
                .try_fold(0u32, |acc, &c| Some(acc << 4 | hex_digit(c)? as u32))
        })
        .ok_or_else(|| {
            Malformed::new(
                crc_at as u64,
                "last line is not `crc32c <8 lowercase hex digits>`",
            )
        })?;
    let body = &bytes[..crc_at];
    if checksum(body) != want {
        return Err(Malformed::new(crc_at as u64, "checksum mismatch"));
    }
    let Some(header_end) = body.iter().position(|&b| b == b'\n') else {
        return Err(Malformed::new(0, "no header line"));
    };
    let header = &body[..header_end];
    let version = header
        .strip_prefix(format.as_bytes())
        .and_then(|rest| rest.strip_prefix(b" "))
        .ok_or_else(|| {
            Malformed::new(
                0,
                format!(
                    "expected a {format:?} header, found {:?}",
                    String::from_utf8_lossy(header)
                ),
            )
        })?;
    let version = std::str::from_utf8(version)
        .ok()
        .and_then(|s| s.parse::<u32>().ok().filter(|n| n.to_string() == s))
        .ok_or_else(|| Malformed::new(format.len() as u64 + 1, "bad version number"))?;
    if !versions.contains(&version) {
        return Err(Malformed::new(
            format.len() as u64 + 1,
            format!(
                "{format} version {version} is not supported (this build reads {}..={})",
                versions.start(),
                versions.end()
            ),
        ));
    }
    let mut lines = Vec::new();
    let mut off = header_end + 1;
    while off < crc_at {
        // The body ends with a newline (it is followed by the checksum line).
        let end = off
            + body[off..]
                .iter()
                .position(|&b| b == b'\n')
                .unwrap_or(crc_at - off);
        if end == off {
            return Err(Malformed::new(off as u64, "blank line"));
        }
        lines.push(Line {
            offset: off as u64,
            text: &body[off..end],
        });
        off = end + 1;
    }
    Ok(Sealed { version, lines })
}

/// A path's bytes, for [`escape_into`]: every byte on Unix (lossless; the escapes keep
/// bytes that are not UTF-8); elsewhere the path as Unicode, or `None` if it is not.
#[cfg(unix)]
pub fn path_bytes(p: &Path) -> Option<Cow<'_, [u8]>> {
    use std::os::unix::ffi::OsStrExt;
    Some(Cow::Borrowed(p.as_os_str().as_bytes()))
}

/// A path's bytes, for [`escape_into`]: every byte on Unix (lossless; the escapes keep
/// bytes that are not UTF-8); elsewhere the path as Unicode, or `None` if it is not.
#[cfg(not(unix))]
pub fn path_bytes(p: &Path) -> Option<Cow<'_, [u8]>> {
    p.to_str().map(|s| Cow::Borrowed(s.as_bytes()))
}

/// The inverse of [`path_bytes`]: any bytes on Unix; elsewhere only UTF-8.
#[cfg(unix)]
pub fn path_from_bytes(b: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(b)))
}

/// The inverse of [`path_bytes`]: any bytes on Unix; elsewhere only UTF-8.
#[cfg(not(unix))]
pub fn path_from_bytes(b: &[u8]) -> Option<PathBuf> {
    std::str::from_utf8(b).ok().map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FMT: &str = "segstore-test";

    /// Lines of field values.
    type Body = Vec<Vec<Vec<u8>>>;

    /// Decode into plain field values (every line split and unescaped).
    fn decode_all(b: &[u8]) -> Result<(u32, Body), Malformed> {
        let s = decode(b, FMT, 0..=u32::MAX)?;
        let mut lines = Vec::new();
        for l in &s.lines {
            let f = l.fields()?;
            lines.push((0..f.len()).map(|i| f.bytes(i).unwrap().to_vec()).collect());
        }
        Ok((s.version, lines))
    }

    /// Bytes that stress the escapes: separators, controls, backslash, the letters of
    /// the escapes, a C1 control in UTF-8, a multi-byte character, invalid UTF-8.
    fn field() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(b"\n".to_vec()),
            Just(b"\r".to_vec()),
            Just(b" ".to_vec()),
            Just(b"\\".to_vec()),
            Just(b"\\e".to_vec()),
            Just(b"\\x4".to_vec()),
            Just(b"x".to_vec()),
            Just(b"e".to_vec()),
            Just(b"\0".to_vec()),
            Just(b"\t".to_vec()),
            Just(b"\x7f".to_vec()),
            Just("\u{85}".as_bytes().to_vec()),
            Just("é€".as_bytes().to_vec()),
            Just(vec![0xc3]),
            Just(vec![0xff, 0xfe]),
            Just(b"crc32c 00000000".to_vec()),
            any::<u8>().prop_map(|b| vec![b]),
            "[a-z0-9_./-]{1,6}".prop_map(String::into_bytes),
        ];
        proptest::collection::vec(piece, 0..6).prop_map(|v| v.concat())
    }

    fn lines() -> impl Strategy<Value = Body> {
        proptest::collection::vec(proptest::collection::vec(field(), 1..4), 0..6)
    }

    fn config() -> ProptestConfig {
        // Cheap cases: 256 by default; `PROPTEST_CASES` overrides.
        ProptestConfig {
            cases: crate::test_support::proptest_cases(256),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn fields_round_trip_exactly(version in any::<u32>(), lines in lines()) {
            let b = encode(FMT, version, &lines);
            prop_assert!(std::str::from_utf8(&b).is_ok(), "sealed files are UTF-8 text");
            // One line per body line: no value added a line.
            prop_assert_eq!(b.iter().filter(|&&c| c == b'\n').count(), lines.len() + 2);
            prop_assert_eq!(decode_all(&b).unwrap(), (version, lines));
        }

        #[test]
        fn single_field_escape_round_trips(f in field()) {
            let e = escape(&f);
            prop_assert!(!e.bytes().any(|c| c <= b' ' || c == 0x7f), "{:?}", e);
            prop_assert_eq!(unescape(e.as_bytes()).unwrap(), f);
        }

        #[test]
        fn arbitrary_bytes_never_panic_and_decode_canonically(
            b in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            if let Ok((v, lines)) = decode_all(&b) {
                prop_assert_eq!(encode(FMT, v, &lines), b);
            }
        }

        #[test]
        fn arbitrary_sealed_bodies_never_panic_and_decode_canonically(
            body in proptest::collection::vec(
                prop_oneof![Just(b'\\'), Just(b' '), Just(b'\n'), Just(b'x'), Just(b'e'),
                            Just(b'a'), Just(b'0'), Just(b'f'), any::<u8>()],
                0..120),
        ) {
            // Past a valid header and checksum, so the line and field parsers see it.
            let mut b = format!("{FMT} 2\n").into_bytes();
            b.extend_from_slice(&body);
            if b.last() != Some(&b'\n') {
                b.push(b'\n');
            }
            let crc = checksum(&b);
            b.extend_from_slice(format!("crc32c {crc:08x}\n").as_bytes());
            if let Ok((v, lines)) = decode_all(&b) {
                prop_assert_eq!(encode(FMT, v, &lines), b);
            }
        }

        #[test]
        fn a_mutated_byte_is_rejected_or_changes_nothing(
            lines in lines(),
            at in any::<prop::sample::Index>(),
            xor in 1u8..,
            cut in any::<bool>(),
        ) {
            let good = encode(FMT, 2, &lines);
            let mut b = good.clone();
            let i = at.index(b.len());
            if cut {
                b.truncate(i);
            } else {
                b[i] ^= xor;
            }
            match decode_all(&b) {
                Err(m) => prop_assert!(m.offset <= b.len() as u64),
                Ok(got) => prop_assert_eq!(got, (2, lines)),
            }
        }
    }

    #[test]
    fn values_cannot_forge_lines() {
        let evil = b"a\ncrc32c 00000000\nsegment 7\r\n\\".to_vec();
        let b = encode(FMT, 2, [[&b"path"[..], &evil[..]]]);
        let text = String::from_utf8(b.clone()).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.contains(r"path a\x0acrc32c\x2000000000\x0asegment\x207\x0d\x0a\\"));
        assert_eq!(
            decode_all(&b).unwrap().1,
            vec![vec![b"path".to_vec(), evil]]
        );
    }

    #[test]
    fn non_canonical_and_damaged_files_are_malformed() {
        let seal = |body: &str| {
            let mut b = format!("{FMT} 2\n{body}").into_bytes();
            let crc = checksum(&b);
            b.extend_from_slice(format!("crc32c {crc:08x}\n").as_bytes());
            b
        };
        assert!(decode_all(&seal("a b\n")).is_ok());
        for bad in [
            "a  b\n", " a\n", "a \n", "\n", "a\tb\n", "a\rb\n", "\\x41\n", "\\x0A\n", "\\x0\n",
            "\\q\n", "\\\n", "a\\e\n", "\u{85}\n",
        ] {
            let e = decode_all(&seal(bad)).unwrap_err();
            assert!(e.offset >= (FMT.len() + 3) as u64, "{bad:?}: {e:?}");
        }
        let good = seal("a b\n");
        let mut upper = good.clone();
        let n = upper.len();
        upper[n - 2] = upper[n - 2].to_ascii_uppercase();
        if upper != good {
            assert!(decode(&upper, FMT, 2..=2).is_err());
        }
        let mut trailing = good.clone();
        trailing.extend_from_slice(b"x\n");
        assert!(decode(&trailing, FMT, 2..=2).is_err());
        assert!(decode(&good, FMT, 3..=4).is_err(), "version out of range");
        assert!(
            decode(&good, "segstore-other", 2..=2).is_err(),
            "other format"
        );
        assert!(decode(b"", FMT, 2..=2).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_paths_round_trip() {
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"snapshots/t\xff\xfe/a b\nc"));
        let b = encode(FMT, 2, [[path_bytes(p).unwrap()]]);
        let s = decode(&b, FMT, 2..=2).unwrap();
        assert_eq!(s.lines[0].fields().unwrap().path(0).unwrap(), p);
    }
}
