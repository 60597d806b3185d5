//! Branch-free `f32` exp, ln and tanh that the compiler can vectorise.
//!
//! The standard library calls libm one element at a time; these use range reduction and
//! polynomials with selects instead of branches, so a loop over them becomes AVX-512 or AVX2
//! code inside the multiversioned kernels. Accuracy is within a few ULP of the correctly
//! rounded result over the whole range (tests below compare against `f64`).

/// `e^x` for `f32`. Results below `f32::MIN_POSITIVE` flush to zero.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let xc = x.clamp(-87.3, 88.7);
    let t = xc * std::f32::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    // Cody-Waite: ln 2 split in a high part exact in f32 and a low correction.
    let r = xc - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let p =
        1.0 + r * (1.0 + r * (0.5 + r * (0.166_666_67 + r * (0.041_666_41 + r * (0.008_333_452 + r * 0.001_394_0)))));
    let ni = t.to_bits().wrapping_sub(MAGIC.to_bits());
    let y = p * f32::from_bits(ni.wrapping_add(127) << 23);
    if x > 88.722_83 {
        f32::INFINITY
    } else if x < -87.336_55 {
        0.0
    } else {
        y
    }
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

    #[test]
    fn exp_is_accurate() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            worst = worst.max(ulps(exp_f32(x), (x as f64).exp()));
            x += 0.0137;
        }
        assert!(worst < 4.0, "worst {worst} ulp");
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(100.0), f32::INFINITY);
    }

    #[test]
    fn ln_is_accurate() {
        let mut worst = 0.0f64;
        let mut x = 1e-37f32;
        while x < 1e37 {
            worst = worst.max(ulps(ln_f32(x), (x as f64).ln()));
            x *= 1.0137;
        }
        for i in 1..2000 {
            let x = 0.5 + i as f32 * 0.001;
            worst = worst.max(ulps(ln_f32(x), (x as f64).ln()));
        }
        assert!(worst < 4.0, "worst {worst} ulp");
        assert!((ln_f32(1e-40) as f64 - (1e-40f64).ln()).abs() < 1e-4);
        assert_eq!(ln_f32(0.0), f32::NEG_INFINITY);
        assert!(ln_f32(-1.0).is_nan());
        assert_eq!(ln_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(ln_f32(1.0), 0.0);
    }

    #[test]
    fn tanh_is_accurate() {
        let mut worst = 0.0f64;
        let mut x = -10.0f32;
        while x < 10.0 {
            let r = (x as f64).tanh();
            worst = worst.max(((tanh_f32(x) as f64) - r).abs() / r.abs().max(1e-30));
            x += 0.00731;
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
        assert_eq!(tanh_f32(1e-8), 1e-8);
        assert_eq!(tanh_f32(50.0), 1.0);
        assert_eq!(tanh_f32(-50.0), -1.0);
        assert!(tanh_f32(f32::NAN).is_nan());
    }
}
