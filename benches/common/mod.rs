//! What the benches share: their only randomness, a seeded xorshift64 (`rand` is not a
//! dependency), so every run reads the same keys, and the median they report. Each
//! bench uses part of it.
#![allow(dead_code)]

pub mod e_state;

/// xorshift64 from a nonzero seed.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A random 16-byte key.
    pub fn key(&mut self) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&self.next().to_be_bytes());
        k[8..].copy_from_slice(&self.next().to_be_bytes());
        k
    }

    /// A random number below `n` (above 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The median of `v` (the upper one of an even count), not empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
