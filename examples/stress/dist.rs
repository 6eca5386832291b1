//! Key choice: a xorshift PRNG, a Zipf sampler (rejection-inversion), and the fixed-width
//! decimal keys the tool reads and writes.

/// xorshift64* (Vigna): fast, small state, good enough to pick keys. Never zero.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded through splitmix64, so nearby seeds give unrelated streams.
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 0x2545_F491_4F6C_DD1D } else { z })
    }

    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1), 53 bits.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [0, n) by multiply-shift (bias below 2^-64 * n; fine for key choice).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Fill `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let b = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
    }
}

/// Zipf distribution over ranks `1..=n` with exponent `s > 0`: P(k) ∝ k^-s.
///
/// Rejection-inversion sampling (Hörmann and Derflinger, 1996), as in Apache Commons
/// Math and `rand_distr`: O(1) per sample with no table, whatever `n` is.
#[derive(Debug, Clone)]
pub struct Zipf {
    s: f64,
    t: f64,
    q: f64,
}

impl Zipf {
    /// Zipf over `1..=n` with exponent `s` (callers validate `n >= 1`, `s > 0`).
    pub fn new(n: u64, s: f64) -> Zipf {
        let n = n as f64;
        let q = if s != 1.0 { 1.0 / (1.0 - s) } else { 0.0 };
        let t = if s != 1.0 {
            (n.powf(1.0 - s) - s) * q
        } else {
            1.0 + n.ln()
        };
        Zipf { s, t, q }
    }

    /// Inverse of the integral of the hat function, scaled by `t`.
    fn inv_cdf(&self, p: f64) -> f64 {
        let pt = p * self.t;
        if pt <= 1.0 {
            pt
        } else if self.s != 1.0 {
            (pt * (1.0 - self.s) + self.s).powf(self.q)
        } else {
            (pt - 1.0).exp()
        }
    }

    /// One rank in `1..=n` (1 is the most frequent).
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let inv_b = self.inv_cdf(rng.next_f64());
            let x = (inv_b + 1.0).floor();
            let mut ratio = x.powf(-self.s);
            if x > 1.0 {
                ratio *= inv_b.powf(self.s);
            }
            if rng.next_f64() < ratio {
                return x as u64;
            }
        }
    }
}

/// How keys are chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    /// Every key equally likely.
    Uniform,
    /// Zipf with this exponent; hot keys are spread over the key space.
    Zipf(f64),
}

impl std::fmt::Display for KeyDist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyDist::Uniform => f.write_str("uniform"),
            KeyDist::Zipf(s) => write!(f, "zipf({s})"),
        }
    }
}

/// Picks key numbers in `0..n` following a [`KeyDist`].
#[derive(Debug, Clone)]
pub struct KeyChooser {
    n: u64,
    zipf: Option<Zipf>,
    /// Multiplier coprime with `n`: rank r maps to key (r - 1) * mult mod n, a bijection
    /// that scatters the hot ranks over the key space (and so over index blocks).
    mult: u64,
}

impl KeyChooser {
    /// A chooser over `0..n` (`n >= 1`).
    pub fn new(n: u64, dist: KeyDist) -> KeyChooser {
        let mut mult = 2_654_435_761 % n.max(1);
        while gcd(mult, n) != 1 {
            mult += 1;
        }
        KeyChooser {
            n,
            zipf: match dist {
                KeyDist::Uniform => None,
                KeyDist::Zipf(s) => Some(Zipf::new(n, s)),
            },
            mult,
        }
    }

    /// The key number of rank `rank` (1-based) under the scattering permutation.
    #[inline]
    pub fn key_of_rank(&self, rank: u64) -> u64 {
        ((rank - 1) as u128 * self.mult as u128 % self.n as u128) as u64
    }

    /// Next key number.
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        match &self.zipf {
            None => rng.below(self.n),
            Some(z) => self.key_of_rank(z.sample(rng)),
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Decimal digits needed to write `n - 1` (the largest key number).
pub fn digits_for(n: u64) -> usize {
    n.saturating_sub(1).max(1).ilog10() as usize + 1
}

/// Write key number `i` as zero-padded decimal filling all of `buf`, so keys sort in
/// numeric order. `buf` must be at least [`digits_for`] long (checked by the caller).
#[inline]
pub fn write_key(mut i: u64, buf: &mut [u8]) {
    for b in buf.iter_mut().rev() {
        *b = b'0' + (i % 10) as u8;
        i /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generalised harmonic number H(n, s).
    fn harmonic(n: u64, s: f64) -> f64 {
        (1..=n).map(|k| (k as f64).powf(-s)).sum()
    }

    #[test]
    fn zipf_frequencies_follow_the_law() {
        let n = 1000;
        for s in [0.99, 1.0, 1.5] {
            let z = Zipf::new(n, s);
            let mut rng = Rng::new(7);
            let draws = 400_000;
            let mut counts = vec![0u64; n as usize + 1];
            for _ in 0..draws {
                let k = z.sample(&mut rng);
                assert!((1..=n).contains(&k), "rank {k} out of 1..={n}");
                counts[k as usize] += 1;
            }
            let h = harmonic(n, s);
            for k in [1u64, 2, 10] {
                let want = (k as f64).powf(-s) / h;
                let got = counts[k as usize] as f64 / draws as f64;
                assert!(
                    (got - want).abs() < 0.05 * want + 0.001,
                    "s={s} rank {k}: frequency {got:.5}, law says {want:.5}"
                );
            }
            // The head is heavy, the tail light but present.
            let top10: u64 = counts[1..=10].iter().sum();
            let want10 = (1..=10).map(|k| (k as f64).powf(-s)).sum::<f64>() / h;
            let got10 = top10 as f64 / draws as f64;
            assert!(
                (got10 - want10).abs() < 0.02,
                "s={s}: top 10 {got10} vs {want10}"
            );
            assert!(counts[n as usize / 2..].iter().sum::<u64>() > 0);
        }
    }

    #[test]
    fn uniform_choice_is_flat() {
        let c = KeyChooser::new(10, KeyDist::Uniform);
        let mut rng = Rng::new(1);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[c.next(&mut rng) as usize] += 1;
        }
        for (k, &n) in counts.iter().enumerate() {
            assert!((9_000..11_000).contains(&n), "key {k}: {n} of 100000");
        }
    }

    #[test]
    fn zipf_keys_are_a_permutation_of_the_key_space() {
        for n in [1u64, 2, 97, 100, 2_654_435_761 * 2] {
            let c = KeyChooser::new(n, KeyDist::Zipf(0.99));
            assert_eq!(gcd(c.mult, n), 1);
            if n <= 100 {
                let mut seen: Vec<u64> = (1..=n).map(|r| c.key_of_rank(r)).collect();
                seen.sort_unstable();
                assert_eq!(seen, (0..n).collect::<Vec<_>>());
            }
            let mut rng = Rng::new(3);
            for _ in 0..1000 {
                assert!(c.next(&mut rng) < n);
            }
        }
    }

    #[test]
    fn keys_are_fixed_width_decimal() {
        assert_eq!(digits_for(1), 1);
        assert_eq!(digits_for(10), 1);
        assert_eq!(digits_for(11), 2);
        assert_eq!(digits_for(200_000), 6);
        let mut k = [0u8; 10];
        write_key(12_345, &mut k);
        assert_eq!(&k, b"0000012345");
    }
}
