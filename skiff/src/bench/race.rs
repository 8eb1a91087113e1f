//! `skiff bench plot`: the chart of a `scripts/race.sh` run, ops/s against concurrent
//! clients, one line per system.

use std::process::ExitCode;

use anyhow::{Context, bail};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The race's `results.jsonl`.
    #[arg(long)]
    results: std::path::PathBuf,
    /// Tests whose name starts with this make the points (x: clients, y: mean ops/s).
    #[arg(long, default_value = "sweep-put")]
    prefix: String,
    #[arg(long)]
    out: std::path::PathBuf,
    #[arg(
        long,
        default_value = "puts/s against concurrent clients (three members, fsync)"
    )]
    title: String,
}

/// One line per system: mean ops/s of the rounds at each client count.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    use std::collections::BTreeMap;
    let text = std::fs::read_to_string(&a.results)
        .with_context(|| format!("reading {}", a.results.display()))?;
    let mut by_system: BTreeMap<String, BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
    for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{} line {}", a.results.display(), i + 1))?;
        let name = v["name"].as_str().unwrap_or_default();
        let (Some(system), Some(clients), Some(rate)) = (
            v["system"].as_str(),
            v["report"]["clients"].as_u64(),
            v["report"]["per_second"].as_f64(),
        ) else {
            continue;
        };
        if name.starts_with(&a.prefix) {
            by_system
                .entry(system.to_string())
                .or_default()
                .entry(clients)
                .or_default()
                .push(rate);
        }
    }
    if by_system.is_empty() {
        bail!("no results named {}* in {}", a.prefix, a.results.display());
    }
    let series: Vec<crate::plot::Series> = by_system
        .into_iter()
        .map(|(system, points)| crate::plot::Series {
            label: system,
            points: points
                .into_iter()
                .map(|(c, r)| (c as f64, r.iter().sum::<f64>() / r.len() as f64))
                .collect(),
        })
        .collect();
    crate::plot::lines(
        &a.out,
        &a.title,
        "concurrent clients",
        "operations per second",
        crate::plot::XAxis::Log,
        &series,
    )?;
    println!("wrote {}", a.out.display());
    Ok(ExitCode::SUCCESS)
}
