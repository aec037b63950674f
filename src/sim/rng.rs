//! The simulator's own small PRNG: xoshiro256++ seeded through SplitMix64. No global state,
//! so a simulation is a pure function of its inputs and seed, on every platform.

/// xoshiro256++ (Blackman & Vigna): fast, 256-bit state, good equidistribution.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator for `seed` and `stream`: different streams of one seed are independent, so
    /// request lengths stay the same when only the arrival process changes.
    pub fn new(seed: u64, stream: u64) -> Rng {
        let mut sm = seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Rng { s }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in (0, 1]: safe under `ln`.
    fn uniform_open0(&mut self) -> f64 {
        1.0 - self.uniform()
    }

    /// Uniform integer in `lo..=hi` (Lemire's multiply-shift; the bias is < 2^-32 for the
    /// ranges used here, which are token counts).
    pub fn int_in(&mut self, lo: u32, hi: u32) -> u32 {
        debug_assert!(lo <= hi);
        let span = u64::from(hi - lo) + 1;
        let x = self.next_u64() >> 32;
        lo + ((x * span) >> 32) as u32
    }

    /// Exponential with mean 1.
    pub fn exp1(&mut self) -> f64 {
        -self.uniform_open0().ln()
    }

    /// Standard normal (Box–Muller; one of the pair is discarded, which keeps the state
    /// simple and costs nothing that matters here).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform_open0();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Gamma with shape `k` > 0 and scale 1 (Marsaglia & Tsang; shape < 1 by the boost
    /// `G(k) = G(k + 1) · U^(1/k)`). Callers keep `k` within 1e-3..=1e3: far above, the
    /// acceptance test cancels catastrophically.
    pub fn gamma(&mut self, k: f64) -> f64 {
        if k < 1.0 {
            let u = self.uniform_open0();
            return self.gamma(k + 1.0) * u.powf(1.0 / k);
        }
        let d = k - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = 1.0 + c * x;
            if v <= 0.0 {
                continue;
            }
            let v = v * v * v;
            let u = self.uniform_open0();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_var(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let m = xs.iter().sum::<f64>() / n;
        (m, xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n)
    }

    #[test]
    fn deterministic_and_streams_differ() {
        let a: Vec<u64> = (0..8).map(|_| Rng::new(7, 0).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut x = Rng::new(7, 0);
        let mut y = Rng::new(7, 1);
        assert_ne!(x.next_u64(), y.next_u64());
    }

    #[test]
    fn distributions_have_their_moments() {
        let mut r = Rng::new(1, 2);
        let n = 200_000;
        let u: Vec<f64> = (0..n).map(|_| r.uniform()).collect();
        let (m, v) = mean_var(&u);
        assert!((m - 0.5).abs() < 0.005 && (v - 1.0 / 12.0).abs() < 0.002);
        let e: Vec<f64> = (0..n).map(|_| r.exp1()).collect();
        let (m, v) = mean_var(&e);
        assert!((m - 1.0).abs() < 0.01 && (v - 1.0).abs() < 0.03);
        for k in [0.25, 0.5, 1.0, 2.0, 7.5] {
            let g: Vec<f64> = (0..n).map(|_| r.gamma(k)).collect();
            let (m, v) = mean_var(&g);
            assert!((m / k - 1.0).abs() < 0.02, "shape {k}: mean {m}");
            assert!((v / k - 1.0).abs() < 0.06, "shape {k}: var {v}");
        }
        let mut seen = [0u32; 5];
        for _ in 0..50_000 {
            let x = r.int_in(10, 14);
            seen[(x - 10) as usize] += 1;
        }
        assert!(
            seen.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{seen:?}"
        );
        assert_eq!(r.int_in(3, 3), 3);
    }
}
