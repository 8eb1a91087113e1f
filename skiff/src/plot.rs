//! Line charts as SVG (plotters), for the benchmarks: one or more series over a logarithmic x
//! (clients, nodes) or a linear one (time).

use std::path::Path;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::prelude::*;

/// One line of a chart.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// How the x axis is scaled.
#[derive(Debug, Clone, Copy)]
pub enum XAxis {
    Log,
    Linear,
}

/// Writes `series` to `path` as an SVG line chart.
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    x: XAxis,
    series: &[Series],
) -> Result<()> {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let max_y = (all().map(|p| p.1).fold(0.0, f64::max) * 1.15).max(1.0);
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    match x {
        XAxis::Log => {
            let min_x = all().map(|p| p.0).fold(f64::INFINITY, f64::min).max(1.0) * 0.8;
            let max_x = all().map(|p| p.0).fold(1.0, f64::max) * 1.25;
            let range = (min_x..max_x).log_scale();
            draw(&root, title, x_desc, y_desc, range, max_y, series, true)?;
        }
        XAxis::Linear => {
            let min_x = all().map(|p| p.0).fold(f64::INFINITY, f64::min).min(0.0);
            let max_x = all().map(|p| p.0).fold(1.0, f64::max);
            draw(
                &root,
                title,
                x_desc,
                y_desc,
                min_x..max_x,
                max_y,
                series,
                false,
            )?;
        }
    }
    root.present()?;
    Ok(())
}

/// The chart on `root` over `x` and `0..max_y`; `marks`: a dot on each point (few points).
#[allow(clippy::too_many_arguments)]
fn draw<X>(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    x: impl plotters::coord::ranged1d::AsRangedCoord<CoordDescType = X, Value = f64>,
    max_y: f64,
    series: &[Series],
    marks: bool,
) -> Result<()>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x, 0.0..max_y)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(s.points.clone(), color.stroke_width(2)))?
            .label(s.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        if marks {
            chart.draw_series(
                s.points
                    .iter()
                    .map(|(x, y)| Circle::new((*x, *y), 4, color.filled())),
            )?;
        }
    }
    if series.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}
