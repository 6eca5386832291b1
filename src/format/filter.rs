//! A blocked bloom filter: each key touches one 512-bit block (one cache line), so a
//! miss costs about one cache miss.
//!
//! ```text
//! k           u8       probes per key (1..=16); 0 with no blocks = "maybe" for all
//! num_blocks  u32 LE
//! words       num_blocks * 8 u64 LE
//! ```
//!
//! For a key with hash `h = key_hash(key)`: its block is `((h >> 32) * num_blocks) >> 32`;
//! with `x = h as u32` and `step = (x >> 17) | 1`, probe `j` (0..k) tests bit
//! `(x + j * step) & 511` of the block (mod 2^32), bit `b` being bit `b % 64` of the
//! block's word `b / 64`. Built with `num_blocks = ceil(max(n * bits_per_key, 512) / 512)`
//! and `k = round(bits_per_key * ln 2)` clamped to 1..=16.

use super::{read_u32, read_u64, Malformed};

const WORDS_PER_BLOCK: usize = 8;

/// A built filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    k: u8,
    num_blocks: u32,
    words: Vec<u64>,
}

impl Filter {
    /// Build from key hashes with about `bits_per_key` bits each (0: no filter).
    pub fn build(hashes: &[u64], bits_per_key: u32) -> Filter {
        if bits_per_key == 0 || hashes.is_empty() {
            return Filter {
                k: 0,
                num_blocks: 0,
                words: Vec::new(),
            };
        }
        let bits = (hashes.len() as u64 * bits_per_key as u64).max(512);
        let num_blocks = bits.div_ceil(512).min(u32::MAX as u64) as u32;
        let k = ((bits_per_key as f64 * std::f64::consts::LN_2).round() as u8).clamp(1, 16);
        let mut f = Filter {
            k,
            num_blocks,
            words: vec![0; num_blocks as usize * WORDS_PER_BLOCK],
        };
        for &h in hashes {
            let (base, mut bit, step) = f.probe_start(h);
            for _ in 0..f.k {
                let b = (bit & 511) as usize;
                f.words[base + b / 64] |= 1 << (b % 64);
                bit = bit.wrapping_add(step);
            }
        }
        f
    }

    #[inline]
    fn probe_start(&self, h: u64) -> (usize, u32, u32) {
        let block = (((h >> 32) * self.num_blocks as u64) >> 32) as usize;
        let lo = h as u32;
        (block * WORDS_PER_BLOCK, lo, (lo >> 17) | 1)
    }

    /// Start loading the line [`Self::may_contain`] will read for hash `h`, so that miss
    /// overlaps the caller's other work.
    #[inline]
    pub fn prefetch(&self, h: u64) {
        if self.num_blocks != 0 {
            crate::io::prefetch::prefetch_read(&self.words, self.probe_start(h).0);
        }
    }

    /// False only if the key with hash `h` was certainly not added.
    #[inline]
    pub fn may_contain(&self, h: u64) -> bool {
        if self.num_blocks == 0 {
            return true;
        }
        let (base, mut bit, step) = self.probe_start(h);
        for _ in 0..self.k {
            let b = (bit & 511) as usize;
            if self.words[base + b / 64] & (1 << (b % 64)) == 0 {
                return false;
            }
            bit = bit.wrapping_add(step);
        }
        true
    }

    /// Bytes of memory held.
    pub fn size_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// Append the encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.k);
        out.extend_from_slice(&self.num_blocks.to_le_bytes());
        for w in &self.words {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }

    /// Decode from exactly the bytes `encode` wrote.
    pub fn decode(b: &[u8]) -> Result<Filter, Malformed> {
        let k = *b.first().ok_or_else(|| Malformed::new(0, "empty filter"))?;
        let num_blocks = read_u32(b, 1).ok_or_else(|| Malformed::new(1, "truncated filter"))?;
        // u64 arithmetic: on 32-bit targets num_blocks * 64 can overflow usize.
        let need = 5 + num_blocks as u64 * WORDS_PER_BLOCK as u64 * 8;
        if b.len() as u64 != need {
            return Err(Malformed::new(
                1,
                format!(
                    "filter of {num_blocks} blocks needs {need} bytes, has {}",
                    b.len()
                ),
            ));
        }
        let nwords = num_blocks as usize * WORDS_PER_BLOCK;
        if (num_blocks == 0) != (k == 0) || k > 16 {
            return Err(Malformed::new(0, format!("bad filter probe count {k}")));
        }
        let words = (0..nwords)
            .map(|i| read_u64(b, 5 + i * 8).unwrap_or(0))
            .collect();
        Ok(Filter {
            k,
            num_blocks,
            words,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::key_hash;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let hashes: Vec<u64> = (0..10_000u32).map(|i| key_hash(&i.to_le_bytes())).collect();
        let f = Filter::build(&hashes, 10);
        assert!(hashes.iter().all(|&h| f.may_contain(h)));
        let fp = (10_000..110_000u32)
            .filter(|i| f.may_contain(key_hash(&i.to_le_bytes())))
            .count();
        // 10 bits/key blocked bloom: about 1%; allow 3%.
        assert!(fp < 3_000, "false positives {fp} / 100000");
        let mut b = Vec::new();
        f.encode(&mut b);
        assert_eq!(Filter::decode(&b).unwrap(), f);
        assert!(Filter::decode(&b[..b.len() - 1]).is_err());
    }

    #[test]
    fn disabled_filter_says_maybe() {
        let f = Filter::build(&[1, 2, 3], 0);
        assert!(f.may_contain(12345));
    }
}
