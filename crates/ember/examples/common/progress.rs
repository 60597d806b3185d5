//! Progress bars with the examples' one look.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps labelled `prefix` ("epoch 1/3", ...), with room for a message.
pub fn bar(len: usize, prefix: String) -> ember::Result<ProgressBar> {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:32}] {pos}/{len} {msg}")
            .map_err(|e| ember::Error::invalid("progress bar", e.to_string()))?
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix);
    Ok(bar)
}
