//! YCSB's number generators, as `site.ycsb.generator` defines them (YCSB 0.17.0):
//! `ZipfianGenerator` (Gray et al., "Quickly Generating Billion-Record Synthetic
//! Databases", SIGMOD 1994), `ScrambledZipfianGenerator` (a zipfian over 10^10 items,
//! then FNV-1a-64 of the rank modulo the item count, so the popular items are spread over
//! the key space), `SkewedLatestGenerator` (the most recently inserted items are the most
//! popular) and `UniformLongGenerator`, plus `Utils.fnvhash64`.
//!
//! Each thread owns its generators (YCSB shares one per client, behind a lock where it
//! recomputes zeta); the distribution is the same.

/// YCSB's `ZipfianGenerator.ZIPFIAN_CONSTANT`.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// `ScrambledZipfianGenerator.ITEM_COUNT` in YCSB 0.17.0: the zipfian is drawn over this
/// many items (plus one: the generator is built over `0..=ITEM_COUNT`). YCSB's master
/// later changed it to 10^16 while keeping `ZETAN`, which is zeta(10^10, 0.99); we keep
/// the consistent pair.
pub const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;
/// `ScrambledZipfianGenerator.ZETAN`: zeta(10^10, 0.99), precomputed by YCSB.
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 little-endian bytes of `val`, then the
/// absolute value of the result read as a signed 64-bit number (Java's `Math.abs`, which
/// leaves `Long.MIN_VALUE` negative: it is returned as is, as its bit pattern).
pub fn fnvhash64(mut val: u64) -> u64 {
    let mut h = FNV_OFFSET_BASIS_64;
    for _ in 0..8 {
        let octet = val & 0xff;
        val >>= 8;
        h ^= octet;
        h = h.wrapping_mul(FNV_PRIME_64);
    }
    (h as i64).wrapping_abs() as u64
}

/// A small, fast generator of uniform doubles in `[0, 1)` (splitmix64), one per thread.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x2545_F491_4F6C_DD1D)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, as Java's `Random.nextDouble` (53 random bits).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// YCSB's `ZipfianGenerator` over `base..base + items`: item `base` is the most popular.
pub struct Zipfian {
    items: u64,
    base: u64,
    theta: f64,
    zeta2theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    count_for_zeta: u64,
}

/// zeta(n) continued from zeta(st) = `initial`: `sum over i in st..n of 1 / (i + 1)^theta`.
pub fn zeta_from(st: u64, n: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in st..n {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

impl Zipfian {
    /// Over `min..=max`, computing zeta (O(items)).
    #[cfg(test)]
    pub fn new(min: u64, max: u64, theta: f64) -> Zipfian {
        Zipfian::with_zetan(min, max, theta, zeta_from(0, max - min + 1, theta, 0.0))
    }

    /// Over `min..=max`, with zeta(items) given (YCSB's precomputed constructor).
    pub fn with_zetan(min: u64, max: u64, theta: f64, zetan: f64) -> Zipfian {
        let items = max - min + 1;
        let zeta2theta = zeta_from(0, 2, theta, 0.0);
        Zipfian {
            items,
            base: min,
            theta,
            zeta2theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2theta / zetan),
            count_for_zeta: items,
        }
    }

    /// YCSB's `nextValue`: over the items the generator was built for.
    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        self.next_long(self.items, rng)
    }

    /// YCSB's `nextLong(itemcount)`: a count that grew since the last call extends zeta
    /// incrementally (a smaller one is ignored, as YCSB's `allowitemcountdecrease = false`).
    /// As in YCSB, `eta` keeps the constructor's `items` in `(2 / items)`.
    pub fn next_long(&mut self, itemcount: u64, rng: &mut Rng) -> u64 {
        if itemcount > self.count_for_zeta {
            self.zetan = zeta_from(self.count_for_zeta, itemcount, self.theta, self.zetan);
            self.count_for_zeta = itemcount;
            self.eta = (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta))
                / (1.0 - self.zeta2theta / self.zetan);
        }
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        self.base + (itemcount as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
    }
}

/// YCSB's `ScrambledZipfianGenerator` over `min..=max` with the constant 0.99.
pub struct ScrambledZipfian {
    min: u64,
    itemcount: u64,
    gen: Zipfian,
}

impl ScrambledZipfian {
    pub fn new(min: u64, max: u64) -> ScrambledZipfian {
        ScrambledZipfian {
            min,
            itemcount: max - min + 1,
            gen: Zipfian::with_zetan(0, SCRAMBLED_ITEM_COUNT, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN),
        }
    }

    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        self.min + fnvhash64(self.gen.next(rng)) % self.itemcount
    }
}

/// YCSB's `SkewedLatestGenerator`: `latest - zipfian(latest)`, where `latest` is the
/// highest acknowledged item (`AcknowledgedCounterGenerator.lastValue`), so the newest
/// items are the most popular. The zipfian is built over the items there were at the
/// start and grows with them.
pub struct SkewedLatest {
    zipf: Zipfian,
}

impl SkewedLatest {
    /// `last`: the highest item number acknowledged now (items are `0..=last`).
    #[cfg(test)]
    pub fn new(last: u64) -> SkewedLatest {
        SkewedLatest {
            zipf: Zipfian::new(0, last - 1, ZIPFIAN_CONSTANT),
        }
    }

    /// As `new`, with zeta(`last`, 0.99) given (so a phase does not spend O(items)
    /// computing it on its clock).
    pub fn with_zetan(last: u64, zetan: f64) -> SkewedLatest {
        SkewedLatest {
            zipf: Zipfian::with_zetan(0, last - 1, ZIPFIAN_CONSTANT, zetan),
        }
    }

    pub fn next(&mut self, last: u64, rng: &mut Rng) -> u64 {
        last - self.zipf.next_long(last, rng).min(last)
    }
}

/// YCSB's `UniformLongGenerator` over `lb..=ub`.
pub fn uniform(lb: u64, ub: u64, rng: &mut Rng) -> u64 {
    lb + (rng.next_f64() * (ub - lb + 1) as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_of_zero_matches_java() {
        // FNV-1a over eight zero bytes, as YCSB's Utils.fnvhash64(0) computes it.
        let mut h = FNV_OFFSET_BASIS_64;
        for _ in 0..8 {
            h = h.wrapping_mul(FNV_PRIME_64);
        }
        assert_eq!(fnvhash64(0), (h as i64).wrapping_abs() as u64);
    }

    #[test]
    fn scrambled_zetan_is_zeta_of_item_count() {
        // zeta(n, 0.99) ~ n^0.01 / 0.01 + zeta(0.99), and zeta(0.99) ~ -99.4228.
        let approx = (SCRAMBLED_ITEM_COUNT as f64).powf(0.01) / 0.01 - 99.4228;
        assert!((approx - SCRAMBLED_ZETAN).abs() < 0.05, "{approx}");
    }

    #[test]
    fn zipfian_favours_low_ranks_and_stays_in_range() {
        let mut rng = Rng::new(1);
        let mut z = Zipfian::new(0, 999, ZIPFIAN_CONSTANT);
        let mut zeros = 0;
        for _ in 0..100_000 {
            let v = z.next(&mut rng);
            assert!(v < 1000);
            zeros += (v == 0) as u32;
        }
        // P(0) = 1 / zeta(1000, 0.99), about 0.13.
        assert!((10_000..16_000).contains(&zeros), "{zeros}");
    }

    #[test]
    fn scrambled_and_latest_stay_in_range() {
        let mut rng = Rng::new(2);
        let mut s = ScrambledZipfian::new(0, 9_999);
        let mut l = SkewedLatest::new(9_999);
        for _ in 0..100_000 {
            assert!(s.next(&mut rng) < 10_000);
            let v = l.next(10_500, &mut rng);
            assert!(v <= 10_500);
        }
    }
}
