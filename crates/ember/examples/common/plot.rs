//! Curves drawn as SVG: one or more panels side by side, each with one or more labelled
//! series.

use plotters::prelude::*;
use std::path::Path;

/// One curve: its legend label, its points and its colour; `markers` adds a dot per point
/// (for curves with few points, such as one per epoch).
pub struct Series {
    /// The legend's text (empty: no legend entry).
    pub label: String,
    /// `(x, y)` points in drawing order.
    pub points: Vec<(f64, f64)>,
    /// The line's colour.
    pub color: RGBColor,
    /// Whether to mark each point with a dot.
    pub markers: bool,
}

impl Series {
    /// A plain line with a legend label.
    pub fn line(label: impl Into<String>, points: Vec<(f64, f64)>, color: RGBColor) -> Series {
        Series { label: label.into(), points, color, markers: false }
    }

    /// A line with a dot on each point.
    pub fn dotted(label: impl Into<String>, points: Vec<(f64, f64)>, color: RGBColor) -> Series {
        Series { label: label.into(), points, color, markers: true }
    }
}

/// One chart: its title, axis labels, curves, and optionally fixed y bounds (else the
/// curves' range).
pub struct Panel {
    /// The caption above the chart.
    pub title: String,
    /// The x axis' description.
    pub x_label: String,
    /// The y axis' description.
    pub y_label: String,
    /// The curves.
    pub series: Vec<Series>,
    /// Fixed y bounds, if any.
    pub y_range: Option<(f64, f64)>,
}

impl Panel {
    /// A panel whose y range fits its curves.
    pub fn new(title: &str, x_label: &str, y_label: &str, series: Vec<Series>) -> Panel {
        Panel { title: title.into(), x_label: x_label.into(), y_label: y_label.into(), series, y_range: None }
    }

    /// The same panel with fixed y bounds.
    pub fn y_range(mut self, lo: f64, hi: f64) -> Panel {
        self.y_range = Some((lo, hi));
        self
    }
}

/// Draws `panels` side by side (480 x 420 pixels each) into an SVG file at `path`.
pub fn save_svg(path: &Path, panels: &[Panel]) -> ember::Result<()> {
    draw(path, panels).map_err(|e| ember::Error::invalid("plot", format!("{}: {e}", path.display())))
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) =
        values.filter(|v| v.is_finite()).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        (0.0, 1.0)
    } else if lo == hi {
        (lo - 0.5, hi + 0.5)
    } else {
        (lo, hi)
    }
}

fn draw(path: &Path, panels: &[Panel]) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (480 * panels.len().max(1) as u32, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (panel, area) in panels.iter().zip(&areas) {
        let points = || panel.series.iter().flat_map(|s| s.points.iter());
        let (x_lo, x_hi) = bounds(points().map(|p| p.0));
        let (y_lo, y_hi) = panel.y_range.unwrap_or_else(|| {
            let (lo, hi) = bounds(points().map(|p| p.1));
            let pad = 0.05 * (hi - lo);
            (lo - pad, hi + pad)
        });
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(52)
            .build_cartesian_2d(x_lo..x_hi, y_lo..y_hi)?;
        chart.configure_mesh().x_desc(&panel.x_label).y_desc(&panel.y_label).draw()?;
        for s in &panel.series {
            let color = s.color;
            let line = chart.draw_series(LineSeries::new(s.points.iter().copied(), color))?;
            if !s.label.is_empty() {
                line.label(&s.label).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
            }
            if s.markers {
                chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
            }
        }
        if panel.series.iter().any(|s| !s.label.is_empty()) {
            chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
        }
    }
    root.present()?;
    Ok(())
}

/// Draws a CartPole agent's returns into an SVG file at `path`: each training episode's
/// return, the greedy evaluations and the target, over environment steps `0..=x_max`.
pub fn save_returns(
    path: &Path,
    title: &str,
    episodes: Vec<(f64, f64)>,
    evaluations: Vec<(f64, f64)>,
    target: f64,
    x_max: f64,
) -> ember::Result<()> {
    let light_blue = RGBColor(160, 190, 230);
    save_svg(
        path,
        &[Panel::new(
            title,
            "environment steps",
            "return",
            vec![
                Series::line("training episodes", episodes, light_blue),
                Series::dotted("greedy evaluation (mean of 100)", evaluations, RED),
                Series::line(format!("target {target}"), vec![(0.0, target), (x_max, target)], BLUE),
            ],
        )
        .y_range(0.0, 520.0)],
    )
}
