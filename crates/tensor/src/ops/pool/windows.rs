//! The geometry of pooling and resampling as a backend receives it: planes of two spatial
//! dimensions (`[N, C, h, w]`, every plane treated alike), and per dimension the input
//! positions each output position reads. The plans (`max_pool_plan` and its siblings)
//! turn PyTorch's arguments (kernel, stride, padding, adaptive sizes, interpolation modes)
//! into these.
//!
//! Two kinds of maps cover every operation:
//! - [`PoolWindows`]: a window of input positions per output position (max pooling, plain
//!   and adaptive); the kernel takes the largest value of each window and where it was.
//! - [`Resample`]: a weighted sum per output position, separable into one sparse matrix
//!   per dimension (average pooling, adaptive averages, nearest and bilinear interpolation).
//!   The adjoint of such a map (the gradient of the operation) is the same kind of map with
//!   each dimension's matrix transposed ([`Resample::transpose`]), so one kernel computes
//!   both directions.

use crate::{Error, Result};

/// The windows of one dimension: output position `o` reads the `count` input positions
/// `start + k * step` (`k < count`), all inside `0..input` (padding is never read).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AxisWindows {
    /// The input's extent along the dimension.
    pub input: usize,
    /// The distance between the taps of a window (a max pool's dilation).
    pub step: usize,
    /// `(start, count)` per output position.
    pub windows: Vec<(usize, usize)>,
}

impl AxisWindows {
    /// The number of output positions.
    pub fn output(&self) -> usize {
        self.windows.len()
    }

    fn check(&self, op: &'static str) -> Result<()> {
        let inside = self.windows.iter().all(|&(start, count)| {
            count == 0
                || (self.step > 0
                    && (count - 1)
                        .checked_mul(self.step)
                        .and_then(|r| r.checked_add(start))
                        .is_some_and(|last| last < self.input))
        });
        if !inside {
            return Err(Error::invalid(op, format!("pooling windows reach outside an input of extent {}", self.input)));
        }
        Ok(())
    }
}

/// The windows of a 2-d max pool: rows then columns. Output `(y, x)` takes the largest of
/// the input positions `rows.windows[y] x cols.windows[x]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolWindows {
    /// Along the height.
    pub rows: AxisWindows,
    /// Along the width.
    pub cols: AxisWindows,
}

impl PoolWindows {
    /// `[h, w]` of the input planes.
    pub fn input(&self) -> [usize; 2] {
        [self.rows.input, self.cols.input]
    }

    /// `[oh, ow]` of the output planes.
    pub fn output(&self) -> [usize; 2] {
        [self.rows.output(), self.cols.output()]
    }

    /// An error naming `op` unless every window lies inside the input.
    pub fn check(&self, op: &'static str) -> Result<()> {
        self.rows.check(op)?;
        self.cols.check(op)
    }
}

/// One dimension of a separable linear map, a sparse `[output, input]` matrix in compressed
/// rows: output position `o` is the sum over `k in offsets[o]..offsets[o + 1]` of
/// `weight[k]` times input position `index[k]`.
#[derive(Clone, Debug, PartialEq)]
pub struct AxisTaps {
    /// The input's extent along the dimension.
    pub input: usize,
    /// `output + 1` increasing offsets into `index` and `weight`, from 0.
    pub offsets: Vec<usize>,
    /// Input positions, each below `input`.
    pub index: Vec<usize>,
    /// The weight of each tap.
    pub weight: Vec<f64>,
}

impl AxisTaps {
    /// An empty map from `input` positions; add output positions with [`AxisTaps::push`].
    pub fn new(input: usize) -> Self {
        AxisTaps { input, offsets: vec![0], index: Vec::new(), weight: Vec::new() }
    }

    /// An empty map from `input` positions with room for `outputs` positions of `taps`
    /// taps in all, or an allocation error naming `op`: a plan's maps are as long as the
    /// output's sides, so a side the system cannot hold is refused rather than aborting.
    pub fn with_capacity(op: &'static str, input: usize, outputs: usize, taps: usize) -> Result<Self> {
        let refused = |elements| Error::Alloc { op, elements, dtype: "usize" };
        let mut map = AxisTaps::new(input);
        // `new` holds the leading 0: room for one more offset per output.
        map.offsets.try_reserve_exact(outputs).map_err(|_| refused(outputs))?;
        map.index.try_reserve_exact(taps).map_err(|_| refused(taps))?;
        map.weight.try_reserve_exact(taps).map_err(|_| Error::Alloc { op, elements: taps, dtype: "f64" })?;
        Ok(map)
    }

    /// Appends an output position reading `taps` (`(input position, weight)`).
    pub fn push(&mut self, taps: impl IntoIterator<Item = (usize, f64)>) {
        for (i, w) in taps {
            self.index.push(i);
            self.weight.push(w);
        }
        self.offsets.push(self.index.len());
    }

    /// The number of output positions.
    pub fn output(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// The taps of output position `o`.
    pub fn taps(&self, o: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        let r = self.offsets[o]..self.offsets[o + 1];
        self.index[r.clone()].iter().copied().zip(self.weight[r].iter().copied())
    }

    /// The transposed matrix: a map from this map's outputs to its inputs.
    pub fn transpose(&self) -> AxisTaps {
        let mut counts = vec![0usize; self.input + 1];
        for &i in &self.index {
            counts[i + 1] += 1;
        }
        for i in 0..self.input {
            counts[i + 1] += counts[i];
        }
        let offsets = counts.clone();
        let mut fill = counts;
        let mut index = vec![0; self.index.len()];
        let mut weight = vec![0.0; self.index.len()];
        for o in 0..self.output() {
            for (i, w) in self.taps(o) {
                index[fill[i]] = o;
                weight[fill[i]] = w;
                fill[i] += 1;
            }
        }
        AxisTaps { input: self.output(), offsets, index, weight }
    }

    fn check(&self, op: &'static str) -> Result<()> {
        let ok = self.offsets.first() == Some(&0)
            && self.offsets.windows(2).all(|p| p[0] <= p[1])
            && self.offsets.last() == Some(&self.index.len())
            && self.index.len() == self.weight.len()
            && self.index.iter().all(|&i| i < self.input);
        if !ok {
            return Err(Error::invalid(op, format!("an invalid resampling map from an extent of {}", self.input)));
        }
        Ok(())
    }
}

/// A separable linear map of 2-d planes: `out[y][x] = Σ rows[y, i] * cols[x, j] * in[i][j]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Resample {
    /// Along the height.
    pub rows: AxisTaps,
    /// Along the width.
    pub cols: AxisTaps,
}

impl Resample {
    /// `[h, w]` of the input planes.
    pub fn input(&self) -> [usize; 2] {
        [self.rows.input, self.cols.input]
    }

    /// `[oh, ow]` of the output planes.
    pub fn output(&self) -> [usize; 2] {
        [self.rows.output(), self.cols.output()]
    }

    /// The adjoint map, from this map's output planes to its input planes.
    pub fn transpose(&self) -> Resample {
        Resample { rows: self.rows.transpose(), cols: self.cols.transpose() }
    }

    /// An error naming `op` unless both dimensions are well-formed sparse matrices.
    pub fn check(&self, op: &'static str) -> Result<()> {
        self.rows.check(op)?;
        self.cols.check(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_swaps_inputs_and_outputs() {
        let mut a = AxisTaps::new(3);
        a.push([(0, 0.5), (1, 0.5)]);
        a.push([(2, 1.0)]);
        a.push([]);
        let t = a.transpose();
        assert_eq!((t.input, t.output()), (3, 3));
        assert_eq!(t.taps(0).collect::<Vec<_>>(), vec![(0, 0.5)]);
        assert_eq!(t.taps(1).collect::<Vec<_>>(), vec![(0, 0.5)]);
        assert_eq!(t.taps(2).collect::<Vec<_>>(), vec![(1, 1.0)]);
        assert_eq!(t.transpose(), a);
    }
}
