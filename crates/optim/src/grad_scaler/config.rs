//! The settings of a [`GradScaler`], their checks, and the builder that chains them.

use super::GradScaler;
use ember_tensor::{Error, Result};

/// The settings of a [`GradScaler`]. The defaults are PyTorch's `torch.amp.GradScaler`'s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradScalerConfig {
    /// The scale before the first update (PyTorch's `init_scale`, 2^16). It is held in
    /// `f32`, as PyTorch holds it in a float32 tensor.
    pub init_scale: f64,
    /// What the scale is multiplied by after `growth_interval` steps in a row without an
    /// infinite or NaN gradient (2).
    pub growth_factor: f64,
    /// What the scale is multiplied by after a step with an infinite or NaN gradient (0.5).
    pub backoff_factor: f64,
    /// The number of steps in a row without an infinite or NaN gradient after which the
    /// scale grows (2000).
    pub growth_interval: u64,
    /// Whether the scaler scales at all; a disabled one passes everything through (true).
    pub enabled: bool,
}

impl Default for GradScalerConfig {
    fn default() -> Self {
        GradScalerConfig {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            enabled: true,
        }
    }
}

impl GradScalerConfig {
    /// PyTorch's checks (`growth_factor > 1`, `backoff_factor < 1`), and those that keep the
    /// scale a positive finite `f32`: a positive `backoff_factor`, a finite `growth_factor`,
    /// a positive `init_scale` that stays finite in `f32`, a `growth_interval` of at least 1.
    /// A disabled scaler checks nothing, as PyTorch's.
    pub(super) fn validate(&self, op: &'static str) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        scale_value(op, "init_scale", self.init_scale)?;
        growth_factor(op, self.growth_factor)?;
        backoff_factor(op, self.backoff_factor)?;
        growth_interval(op, self.growth_interval)
    }
}

/// A scale as the scaler holds it: `value` rounded to `f32`, which must be positive and
/// finite (a zero scale would make the inverse infinite).
pub(super) fn scale_value(op: &'static str, name: &str, value: f64) -> Result<f32> {
    let rounded = value as f32;
    if rounded > 0.0 && rounded.is_finite() {
        Ok(rounded)
    } else {
        Err(Error::invalid(op, format!("{name} must be a positive number that is finite in f32, got {value}")))
    }
}

/// An error unless `v` is a finite growth factor above 1.
pub(super) fn growth_factor(op: &'static str, v: f64) -> Result<()> {
    if v > 1.0 && v.is_finite() {
        Ok(())
    } else {
        Err(Error::invalid(op, format!("growth_factor must be a finite number > 1, got {v}")))
    }
}

/// An error unless `v` is a backoff factor in `(0, 1)`.
pub(super) fn backoff_factor(op: &'static str, v: f64) -> Result<()> {
    if v > 0.0 && v < 1.0 {
        Ok(())
    } else {
        Err(Error::invalid(op, format!("backoff_factor must be in (0, 1), got {v}")))
    }
}

/// An error unless `v` is at least 1.
pub(super) fn growth_interval(op: &'static str, v: u64) -> Result<()> {
    if v >= 1 { Ok(()) } else { Err(Error::invalid(op, "growth_interval must be at least 1, got 0")) }
}

/// Builds a [`GradScaler`] with chained settings; see [`GradScaler::builder`].
#[derive(Clone, Debug, Default)]
#[must_use = "call build() to make the scaler"]
pub struct GradScalerBuilder {
    config: GradScalerConfig,
}

impl GradScalerBuilder {
    /// The scale before the first update.
    pub fn init_scale(mut self, init_scale: f64) -> Self {
        self.config.init_scale = init_scale;
        self
    }

    /// The factor of growth after `growth_interval` clean steps.
    pub fn growth_factor(mut self, growth_factor: f64) -> Self {
        self.config.growth_factor = growth_factor;
        self
    }

    /// The factor of backoff after a step with an infinite or NaN gradient.
    pub fn backoff_factor(mut self, backoff_factor: f64) -> Self {
        self.config.backoff_factor = backoff_factor;
        self
    }

    /// The number of clean steps in a row after which the scale grows.
    pub fn growth_interval(mut self, growth_interval: u64) -> Self {
        self.config.growth_interval = growth_interval;
        self
    }

    /// Whether the scaler scales at all.
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.config.enabled = enabled;
        self
    }

    /// Makes the scaler; fails, naming the setting, when one is out of range (see
    /// [`GradScaler::with_config`]).
    pub fn build(self) -> Result<GradScaler> {
        GradScaler::with_config(self.config)
    }
}
