//! Images written as PNG: a grid of generated MNIST digits.

use ember::{Error, Result, Tensor};
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

/// Writes the first `rows * cols` images of `images` (`[N, 784]`, values in `[-1, 1]`, the
/// generator's tanh range) as one grayscale PNG: 28x28 tiles separated by 2-pixel gaps.
pub fn save_grid(path: &Path, images: &Tensor, rows: usize, cols: usize) -> Result<()> {
    const SIDE: usize = 28;
    const GAP: usize = 2;
    let n = rows * cols;
    if images.rank() != 2 || images.shape()[1] != SIDE * SIDE || images.shape()[0] < n {
        return Err(Error::shape(
            "save_grid",
            format!("need at least {n} images of 784 pixels, got {:?}", images.shape()),
        ));
    }
    let pixels = images.narrow(0, 0, n)?.to_vec_f64()?;
    let (width, height) = (cols * (SIDE + GAP) + GAP, rows * (SIDE + GAP) + GAP);
    let mut canvas = vec![255u8; width * height];
    for (i, tile) in pixels.chunks_exact(SIDE * SIDE).enumerate() {
        let (top, left) = (GAP + (i / cols) * (SIDE + GAP), GAP + (i % cols) * (SIDE + GAP));
        for (j, v) in tile.iter().enumerate() {
            // Ink is dark on a light page: -1 (background) maps to white, 1 to black.
            let level = ((1.0 - v.clamp(-1.0, 1.0)) * 127.5).round() as u8;
            canvas[(top + j / SIDE) * width + left + j % SIDE] = level;
        }
    }
    let file = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut encoder = png::Encoder::new(BufWriter::new(file), width as u32, height as u32);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::Eight);
    let png_error = |e: png::EncodingError| Error::invalid("save_grid", format!("{}: {e}", path.display()));
    let mut writer = encoder.write_header().map_err(png_error)?;
    writer.write_image_data(&canvas).map_err(png_error)?;
    writer.finish().map_err(png_error)
}
