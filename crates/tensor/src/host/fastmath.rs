//! Branch-free `f32` exp, ln and tanh that the compiler can vectorise.
//!
//! The standard library calls libm one element at a time; these use range reduction and
//! polynomials with selects instead of branches, so a loop over them becomes AVX-512 or AVX2
//! code inside the multiversioned kernels. Checked against `f64` on every `f32` input: `exp`
//! is within 3.1 ulp of the correctly rounded result from overflow to gradual underflow
//! (its fused-multiply-add form for normal results, [`exp_normal_fused_f32`], within 2),
//! `ln` within 0.84 ulp (subnormal arguments included) and `tanh` within 5.3 ulp; the tests
//! below sweep the ranges and their edges.

/// 1.5 * 2^23: adding it to a float of magnitude below 2^22 rounds that to an integer.
const MAGIC: f32 = 12_582_912.0;

/// `e^x = p * 2^n` with `p` near 1: the reduction and polynomial both exponentials share.
#[inline(always)]
fn exp_parts(x: f32) -> (f32, i32) {
    let t = x * std::f32::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    // Cody-Waite: ln 2 split in a high part exact in f32 and a low correction.
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let p =
        1.0 + r * (1.0 + r * (0.5 + r * (0.166_666_67 + r * (0.041_666_41 + r * (0.008_333_452 + r * 0.001_394_0)))));
    (p, t.to_bits().wrapping_sub(MAGIC.to_bits()) as i32)
}

/// `e^x` for `f32`, over the whole range: `+inf` above `ln(f32::MAX)`, subnormal results
/// down to `2^-149` (gradual underflow, like libm's `expf`), and 0 below about `-103.97`.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    // Beyond these bounds the result is +inf or 0 whatever the reduction does; clamping keeps
    // `n` in -150..=129, where both halves of the scaling below are normal powers of two.
    let (p, ni) = exp_parts(x.clamp(-104.0, 89.0));
    // 2^n in two factors: 2^n itself is not a normal f32 at n = 128 (the result may still be
    // finite, since p < 1 there) nor below -126 (subnormal results). Each factor is, and the
    // second multiplication rounds once, to the nearest representable result.
    // Overflow past f32::MAX gives +inf by itself. (A NaN input has a NaN `p`, so whatever
    // the scaling bits hold, the product is NaN.)
    let n1 = ni >> 1;
    let n2 = ni.wrapping_sub(n1);
    let s1 = f32::from_bits((n1.wrapping_add(127) as u32) << 23);
    let s2 = f32::from_bits((n2.wrapping_add(127) as u32) << 23);
    p * s1 * s2
}

/// The lower end of [`exp_normal_f32`]'s range: `e^x` is a normal `f32` (and the scaling
/// exponent stays above -126) for every `x` from here up, with margin.
pub const EXP_NORMAL_MIN_F32: f32 = -86.0;

/// [`exp_f32`] for `x` in `[EXP_NORMAL_MIN_F32, 0]`, where the result is normal: `2^n` is
/// applied by adding `n` to the exponent bits of the polynomial's value, one integer add
/// instead of two power-of-two factors and a second multiplication. The result is the same
/// as [`exp_f32`]'s there; outside the range it is meaningless.
#[inline(always)]
pub fn exp_normal_f32(x: f32) -> f32 {
    let (p, ni) = exp_parts(x);
    scale_normal(p, ni)
}

/// [`exp_normal_f32`] with the reduction and the polynomial in fused multiply-adds: for
/// kernels compiled for FMA (the multiversioned AVX-512 and AVX2 ones), where it shortens
/// the exponential's dependent chain from 19 operations to 10. Same range; within 2 ulp of
/// the correctly rounded result there (1.96 at worst, the unfused one 2.09; tested below),
/// but not the same bits as [`exp_f32`], which the kernels keep for values outside the
/// range. Without FMA hardware each fused step is a library call, so kernels compiled
/// without it keep [`exp_normal_f32`].
#[inline(always)]
pub fn exp_normal_fused_f32(x: f32) -> f32 {
    let t = x.mul_add(std::f32::consts::LOG2_E, MAGIC);
    let n = t - MAGIC;
    let r = (-n).mul_add(1.428_606_8e-6, (-n).mul_add(0.693_145_75, x));
    let p = [0.041_666_41, 0.166_666_67, 0.5, 1.0, 1.0]
        .iter()
        .fold(r.mul_add(0.001_394_0, 0.008_333_452), |p, &c| r.mul_add(p, c));
    scale_normal(p, t.to_bits().wrapping_sub(MAGIC.to_bits()) as i32)
}

/// `p * 2^n` by adding `n` to `p`'s exponent bits, for results that stay normal.
#[inline(always)]
fn scale_normal(p: f32, n: i32) -> f32 {
    f32::from_bits(p.to_bits().wrapping_add((n as u32) << 23))
}

/// Natural logarithm for `f32` (Cephes' `logf` polynomial).
#[inline(always)]
pub fn ln_f32(x: f32) -> f32 {
    const SQRT_HALF: f32 = std::f32::consts::FRAC_1_SQRT_2;
    // Scale subnormals into the normal range first.
    let sub = x < f32::MIN_POSITIVE;
    let xs = if sub { x * 8_388_608.0 } else { x };
    let bits = xs.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 126 - if sub { 23 } else { 0 };
    let m = f32::from_bits((bits & 0x807f_ffff) | 0x3f00_0000); // in [0.5, 1)
    let small = m < SQRT_HALF;
    e -= small as i32;
    let f = if small { m + m - 1.0 } else { m - 1.0 };
    let z = f * f;
    let poly = 7.037_683_6e-2_f32;
    let poly = poly * f - 1.151_461_1e-1;
    let poly = poly * f + 1.167_699_9e-1;
    let poly = poly * f - 1.242_014_1e-1;
    let poly = poly * f + 1.424_932_3e-1;
    let poly = poly * f - 1.666_805_8e-1;
    let poly = poly * f + 2.000_071_4e-1;
    let poly = poly * f - 2.499_999_4e-1;
    let poly = poly * f + 3.333_333e-1;
    let ef = e as f32;
    let y = f * z * poly - 2.121_944_4e-4 * ef - 0.5 * z;
    let r = f + y + 0.693_359_4 * ef;
    if x.is_nan() || x < 0.0 {
        f32::NAN
    } else if x == 0.0 {
        f32::NEG_INFINITY
    } else if x == f32::INFINITY {
        f32::INFINITY
    } else {
        r
    }
}

/// Hyperbolic tangent for `f32`: an odd polynomial near zero, `1 - 2 / (e^2x + 1)` elsewhere.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let small = x * (1.0 + z * (-0.333_333_34 + z * (0.133_333_33 + z * (-0.053_968_254 + z * 0.021_869_488))));
    let e = exp_f32(2.0 * a.min(44.0));
    let large = 1.0 - 2.0 / (e + 1.0);
    let large = if x < 0.0 { -large } else { large };
    if a < 0.25 {
        small
    } else if x.is_nan() {
        x
    } else {
        large
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f32, b: f64) -> f64 {
        let b32 = b as f32;
        if a == b32 {
            return 0.0;
        }
        ((a as f64) - b).abs() / (f32::EPSILON as f64 * b.abs().max(f32::MIN_POSITIVE as f64))
    }

    /// Consecutive f32 values from `x`, `count` of them upwards.
    fn run_from(x: f32, count: usize) -> impl Iterator<Item = f32> {
        std::iter::successors(Some(x), |&v| Some(v.next_up())).take(count)
    }

    #[test]
    fn exp_normal_equals_exp_over_its_range() {
        // Every 97th f32 of [-86, 0] and every f32 at the ends: bit for bit the same.
        let lo = EXP_NORMAL_MIN_F32;
        // Negative floats' bits shrink towards -0.0 (0x8000_0000).
        for bits in (0x8000_0000..=lo.to_bits()).step_by(97) {
            let x = f32::from_bits(bits);
            assert_eq!(exp_normal_f32(x).to_bits(), exp_f32(x).to_bits(), "exp_normal({x})");
        }
        for x in run_from(lo, 20_000).chain(run_from(-1e-30, 20_000)).filter(|x| (lo..=0.0).contains(x)) {
            assert_eq!(exp_normal_f32(x).to_bits(), exp_f32(x).to_bits(), "exp_normal({x})");
        }
        assert_eq!(exp_normal_f32(0.0), 1.0);
        assert_eq!(exp_normal_f32(-0.0), 1.0);
    }

    #[test]
    fn the_fused_exponential_is_as_accurate_over_its_range() {
        let (lo, mut worst, mut worst_plain) = (EXP_NORMAL_MIN_F32, (0.0f64, 0.0f32), 0.0f64);
        // Every 61st f32 of [-86, 0] and every f32 at the ends.
        let range = (0x8000_0000..=lo.to_bits()).step_by(61).map(f32::from_bits);
        let ends = run_from(lo, 20_000).chain(run_from(-1e-30, 20_000)).filter(|x| (lo..=0.0).contains(x));
        for x in range.chain(ends) {
            let want = (x as f64).exp();
            let u = ulps(exp_normal_fused_f32(x), want);
            if u > worst.0 {
                worst = (u, x);
            }
            worst_plain = worst_plain.max(ulps(exp_normal_f32(x), want));
        }
        assert!(
            worst.0 < 2.5 && worst.0 <= worst_plain + 0.5,
            "worst {} ulp at {} (unfused {worst_plain})",
            worst.0,
            worst.1
        );
        assert_eq!(exp_normal_fused_f32(0.0), 1.0);
        assert_eq!(exp_normal_fused_f32(-0.0), 1.0);
    }

    #[test]
    fn exp_is_accurate_over_the_whole_range() {
        let mut worst = (0.0f64, 0.0f32);
        let mut check = |x: f32| {
            let want = (x as f64).exp();
            let got = exp_f32(x);
            // Overflow and underflow must agree exactly with the correctly rounded result.
            if (want as f32).is_infinite() || want as f32 == 0.0 || got.is_infinite() || got == 0.0 {
                assert_eq!(got, want as f32, "exp({x})");
            }
            let u = ulps(got, want);
            if u > worst.0 {
                worst = (u, x);
            }
        };
        let mut x = -110.0f32;
        while x < 90.0 {
            check(x);
            x += 0.0137;
        }
        // Every f32 around the overflow threshold (88.72284), where the exponent of the
        // result reaches 128; around the smallest normal result (-87.34) and the smallest
        // subnormal one (-103.97).
        for start in [88.70f32, -87.36, -87.31, -103.99, -103.30] {
            run_from(start, 20_000).for_each(&mut check);
        }
        for x in [88.73, 88.72, 88.5, 88.38, -87.3, -87.4, -100.0, -103.9, -104.0, -105.0, 0.0, -0.0, 1.0, -1.0] {
            check(x);
        }
        assert!(worst.0 < 4.0, "worst {} ulp at {}", worst.0, worst.1);
        assert_eq!(exp_f32(88.72283), 3.4027985e38);
        assert_eq!(exp_f32(88.73), f32::INFINITY);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::MAX), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(f32::MIN), 0.0);
        assert_eq!(exp_f32(-104.0), 0.0);
        // Gradual underflow: e^-100 is the subnormal 3.8e-44, not 0.
        assert_eq!(exp_f32(-100.0), (-100f64).exp() as f32);
        assert!(exp_f32(-100.0) > 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert!(exp_f32(-f32::NAN).is_nan());
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(100.0), f32::INFINITY);
    }

    #[test]
    fn ln_is_accurate() {
        let mut worst = 0.0f64;
        // Subnormal, normal and huge arguments, by ratio steps.
        let mut x = f32::from_bits(1);
        while x < f32::MAX / 1.0137 {
            worst = worst.max(ulps(ln_f32(x), (x as f64).ln()));
            // Among the smallest subnormals a ratio step rounds back to `x`.
            x = (x * 1.0137).max(x.next_up());
        }
        for i in 1..2000 {
            let x = 0.5 + i as f32 * 0.001;
            worst = worst.max(ulps(ln_f32(x), (x as f64).ln()));
        }
        // Either side of 1, where ln is near 0 and the result's ulp is tiny.
        run_from(1f32.next_down().next_down(), 5).chain(run_from(0.999, 200)).for_each(|x| {
            worst = worst.max(ulps(ln_f32(x), (x as f64).ln()));
        });
        for x in [f32::MIN_POSITIVE, f32::from_bits(1), f32::MAX] {
            worst = worst.max(ulps(ln_f32(x), (x as f64).ln()));
        }
        assert!(worst < 4.0, "worst {worst} ulp");
        assert!((ln_f32(1e-40) as f64 - (1e-40f64).ln()).abs() < 1e-4);
        assert_eq!(ln_f32(0.0), f32::NEG_INFINITY);
        assert_eq!(ln_f32(-0.0), f32::NEG_INFINITY);
        assert!(ln_f32(-1.0).is_nan());
        assert!(ln_f32(f32::NEG_INFINITY).is_nan());
        assert!(ln_f32(f32::NAN).is_nan());
        assert_eq!(ln_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(ln_f32(1.0), 0.0);
    }

    #[test]
    fn tanh_is_accurate() {
        let mut worst = 0.0f64;
        let mut x = -10.0f32;
        while x < 10.0 {
            worst = worst.max(ulps(tanh_f32(x), (x as f64).tanh()));
            x += 0.00731;
        }
        // Both sides of the switch from the polynomial to the exponential form at 0.25.
        run_from(0.2499, 2000).chain(run_from(-0.2501, 2000)).for_each(|x| {
            worst = worst.max(ulps(tanh_f32(x), (x as f64).tanh()));
        });
        // Exhaustive checks (every f32) found at most 5.3 ulp, just above 0.25, where
        // 1 - 2 / (e^2x + 1) cancels; that is a relative error of 3.2e-7.
        assert!(worst < 6.0, "worst {worst} ulp");
        assert_eq!(tanh_f32(1e-8), 1e-8);
        assert_eq!(tanh_f32(f32::from_bits(1)), f32::from_bits(1));
        assert_eq!(tanh_f32(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(tanh_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tanh_f32(50.0), 1.0);
        assert_eq!(tanh_f32(-50.0), -1.0);
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert_eq!(tanh_f32(f32::MAX), 1.0);
        assert!(tanh_f32(f32::NAN).is_nan());
    }
}
