//! Line charts as SVG (plotters), for the benchmarks: one or more series over a log-scale x.

use std::path::Path;

use anyhow::Result;

/// One line of a chart.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Writes `series` to `path` as an SVG line chart with a logarithmic x axis.
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
) -> Result<()> {
    use plotters::prelude::*;
    let all = || series.iter().flat_map(|s| s.points.iter());
    let max_y = all().map(|p| p.1).fold(0.0, f64::max) * 1.15;
    let min_x = all().map(|p| p.0).fold(f64::INFINITY, f64::min).max(1.0) * 0.8;
    let max_x = all().map(|p| p.0).fold(1.0, f64::max) * 1.25;
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((min_x..max_x).log_scale(), 0.0..max_y.max(1.0))?;
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
        chart.draw_series(
            s.points
                .iter()
                .map(|(x, y)| Circle::new((*x, *y), 4, color.filled())),
        )?;
    }
    if series.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
