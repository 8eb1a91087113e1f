//! The report folder of one run:
//!
//! | file | contents |
//! |---|---|
//! | `history.jsonl` | every operation (see [`crate::history`]) |
//! | `results.json` | each checker's verdict, op counts, fault windows, unavailability |
//! | `latency.svg` | latency of every op over time, by outcome, fault windows shaded |
//! | `throughput.svg` | completions per second by outcome, fault windows shaded |
//! | `timeline.html` | one row per process, one bar per op; hover for details |
//! | `n*.log` | the members' logs |

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::checker::{Validity, Verdict};
use crate::history::{Counts, F, History, OpType, Pair, Process};

/// What `results.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    pub valid: Validity,
    pub workloads: Vec<String>,
    pub nemeses: Vec<String>,
    pub seed: u64,
    pub time_limit_s: f64,
    pub nodes: usize,
    pub ops: Counts,
    pub checkers: Vec<Verdict>,
    /// (start s, end s, description) of each fault.
    pub faults: Vec<(f64, f64, String)>,
    /// For each kill of the leader: seconds from the kill to the completion of the first
    /// acknowledged write invoked after it.
    pub leader_kill_unavailability_s: Vec<f64>,
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Seconds of write unavailability after each leader kill (see [`Results`]).
pub fn leader_kill_unavailability(history: &History) -> Vec<f64> {
    let pairs = history.pairs();
    let mut writes: Vec<(u64, u64)> = pairs
        .iter()
        .filter(|p| matches!(p.invoke.f, F::Write | F::Cas | F::Add | F::Grant))
        .filter(|p| p.invoke.process != Process::Nemesis && p.outcome() == OpType::Ok)
        .filter_map(|p| Some((p.invoke.time, p.end()?)))
        .collect();
    writes.sort_unstable();
    history
        .ops
        .iter()
        .filter(|o| o.process == Process::Nemesis && o.f == F::Start && o.kind == OpType::Info)
        .filter(|o| {
            o.error.is_none()
                && o.value["fault"]
                    .as_str()
                    .is_some_and(|f| f.starts_with("kill") && f.contains("(leader)"))
        })
        .filter_map(|kill| {
            writes
                .iter()
                .filter(|(inv, _)| *inv >= kill.time)
                .map(|(_, end)| *end)
                .min()
                .map(|end| secs(end - kill.time))
        })
        .collect()
}

/// Writes the history, results and plots into `dir`.
pub fn write(dir: &Path, history: &History, results: &Results) -> anyhow::Result<()> {
    history.write_jsonl(&dir.join("history.jsonl"))?;
    let json = serde_json::to_string_pretty(results).context("serializing results")?;
    std::fs::write(dir.join("results.json"), json).context("writing results.json")?;
    let windows: Vec<(f64, f64)> = results.faults.iter().map(|(s, e, _)| (*s, *e)).collect();
    latency_plot(&dir.join("latency.svg"), history, &windows)?;
    throughput_plot(&dir.join("throughput.svg"), history, &windows)?;
    timeline(&dir.join("timeline.html"), history, results)?;
    Ok(())
}

fn outcome_color(kind: OpType) -> RGBColor {
    match kind {
        OpType::Ok => RGBColor(40, 120, 200),
        OpType::Fail => RGBColor(220, 60, 40),
        _ => RGBColor(240, 170, 30),
    }
}

fn client_pairs(history: &History) -> Vec<Pair<'_>> {
    history
        .pairs()
        .into_iter()
        .filter(|p| p.invoke.process != Process::Nemesis && p.invoke.f != F::Watch)
        .collect()
}

fn latency_plot(path: &Path, history: &History, windows: &[(f64, f64)]) -> anyhow::Result<()> {
    let pairs = client_pairs(history);
    let t_max = secs(history.ops.last().map_or(1, |o| o.time)).max(1.0);
    let points: Vec<(f64, f64, OpType)> = pairs
        .iter()
        .filter_map(|p| {
            let c = p.completion?;
            Some((
                secs(p.invoke.time),
                ((c.time - p.invoke.time) as f64 / 1e6).max(0.1),
                c.kind,
            ))
        })
        .collect();
    let y_max = points.iter().map(|p| p.1).fold(10.0, f64::max) * 1.5;
    let root = SVGBackend::new(path, (1100, 450)).into_drawing_area();
    let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("latency (fault windows shaded)", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..t_max, (0.1f64..y_max).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("latency (ms)")
            .draw()?;
        chart.draw_series(windows.iter().map(|&(s, e)| {
            Rectangle::new(
                [(s, 0.1), (e, y_max)],
                RGBColor(255, 190, 190).mix(0.4).filled(),
            )
        }))?;
        for kind in [OpType::Ok, OpType::Info, OpType::Fail] {
            let color = outcome_color(kind);
            chart
                .draw_series(
                    points
                        .iter()
                        .filter(|p| p.2 == kind)
                        .map(|p| Circle::new((p.0, p.1), 2, color.filled())),
                )?
                .label(format!("{kind:?}").to_lowercase())
                .legend(move |(x, y)| Circle::new((x + 8, y), 4, color.filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("drawing {}: {e}", path.display()))
}

fn throughput_plot(path: &Path, history: &History, windows: &[(f64, f64)]) -> anyhow::Result<()> {
    let pairs = client_pairs(history);
    let seconds = (secs(history.ops.last().map_or(1, |o| o.time)).ceil() as usize).max(1);
    let mut per: BTreeMap<OpType, Vec<u32>> = BTreeMap::new();
    for kind in [OpType::Ok, OpType::Info, OpType::Fail] {
        per.insert(kind, vec![0; seconds + 1]);
    }
    for p in &pairs {
        if let Some(c) = p.completion
            && let Some(v) = per.get_mut(&c.kind)
        {
            v[(secs(c.time) as usize).min(seconds)] += 1;
        }
    }
    let y_max = per.values().flatten().copied().max().unwrap_or(1).max(1) as f64 * 1.2;
    let root = SVGBackend::new(path, (1100, 400)).into_drawing_area();
    let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "completions per second (fault windows shaded)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..seconds as f64, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("ops/s")
            .draw()?;
        chart.draw_series(windows.iter().map(|&(s, e)| {
            Rectangle::new(
                [(s, 0.0), (e, y_max)],
                RGBColor(255, 190, 190).mix(0.4).filled(),
            )
        }))?;
        for (kind, counts) in &per {
            let color = outcome_color(*kind);
            chart
                .draw_series(LineSeries::new(
                    counts
                        .iter()
                        .enumerate()
                        .map(|(s, &n)| (s as f64, n as f64)),
                    color.stroke_width(2),
                ))?
                .label(format!("{kind:?}").to_lowercase())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("drawing {}: {e}", path.display()))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Most ops drawn in the timeline; a longer run shows its first ones.
const TIMELINE_MAX_OPS: usize = 20_000;

fn timeline(path: &Path, history: &History, results: &Results) -> anyhow::Result<()> {
    let total = history.ops.last().map_or(1, |o| o.time).max(1) as f64;
    let pct = |t: u64| t as f64 / total * 100.0;
    let mut rows: BTreeMap<Process, Vec<Pair<'_>>> = BTreeMap::new();
    for p in history.pairs().into_iter().take(TIMELINE_MAX_OPS) {
        rows.entry(p.invoke.process).or_default().push(p);
    }
    let mut html = String::new();
    let _ = write!(
        html,
        "<!doctype html><meta charset=utf-8><title>skiff jepsen seed {seed}</title>\
         <style>body{{font:13px sans-serif;margin:16px}}.row{{position:relative;height:14px;\
         border-bottom:1px solid #eee}}.op{{position:absolute;height:12px;top:1px;min-width:2px}}\
         .ok{{background:#2878c8}}.fail{{background:#dc3c28}}.info{{background:#f0aa1e}}\
         .fault{{position:absolute;top:0;bottom:0;background:rgba(255,150,150,.25)}}\
         .lanes{{position:relative;margin-left:90px}}.label{{position:absolute;left:-90px;width:85px;\
         text-align:right;font-size:11px}}</style>\
         <h2>{valid} — workloads {w}, nemeses {n}, seed {seed}</h2><ul>",
        valid = match results.valid {
            Validity::True => "valid",
            Validity::False => "INVALID",
            Validity::Unknown => "unknown",
        },
        w = escape(&results.workloads.join(",")),
        n = escape(&results.nemeses.join(",")),
        seed = results.seed,
    );
    for v in &results.checkers {
        let _ = write!(
            html,
            "<li><b>{}</b>: {} — {}</li>",
            escape(&v.checker),
            serde_json::to_string(&v.valid).unwrap_or_default(),
            escape(&v.summary)
        );
    }
    html.push_str(
        "</ul><p>Bars run from invocation to completion (blue ok, red fail, orange info); \
                   shaded bands are fault windows. Hover a bar for the op.</p><div class=lanes>",
    );
    for (s, e, what) in &results.faults {
        let (s, e) = (s * 1e9, e * 1e9);
        let _ = write!(
            html,
            "<div class=fault style=\"left:{:.3}%;width:{:.3}%\" title=\"{}\"></div>",
            s / total * 100.0,
            (e - s) / total * 100.0,
            escape(what)
        );
    }
    for (process, pairs) in &rows {
        let _ = write!(html, "<div class=row><span class=label>{process}</span>");
        for p in pairs {
            let end = p.completion.map_or(total as u64, |c| c.time);
            let class = match p.outcome() {
                OpType::Ok => "ok",
                OpType::Fail => "fail",
                _ => "info",
            };
            let _ = write!(
                html,
                "<div class=\"op {class}\" style=\"left:{:.4}%;width:{:.4}%\" title=\"{}\"></div>",
                pct(p.invoke.time),
                pct(end) - pct(p.invoke.time),
                escape(&p.describe())
            );
        }
        html.push_str("</div>");
    }
    html.push_str("</div>");
    std::fs::write(path, html).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Builder;
    use serde_json::json;

    #[test]
    fn report_files_are_written() {
        let mut b = Builder::new();
        b.invoke(1, F::Write, json!({"key": "r/a", "value": 1}))
            .nemesis(F::Start, "kill n1 (leader)")
            .ok(1, F::Write, json!({"key": "r/a", "value": 1, "rev": 2}))
            .invoke(2, F::Write, json!({"key": "r/a", "value": 2}))
            .ok(2, F::Write, json!({"key": "r/a", "value": 2, "rev": 3}))
            .nemesis(F::Stop, "kill n1 (leader)")
            .invoke(3, F::Read, json!({"key": "r/a"}))
            .fail(3, F::Read, json!({"key": "r/a"}));
        let h = b.build();
        // the kill's start completes at t=2; the first write invoked after it ends at t=5
        assert_eq!(leader_kill_unavailability(&h), vec![3e-9]);
        let results = Results {
            valid: Validity::True,
            workloads: vec!["register".into()],
            nemeses: vec!["kill".into()],
            seed: 1,
            time_limit_s: 1.0,
            nodes: 3,
            ops: h.counts(),
            checkers: vec![crate::checker::revision::check(&h)],
            faults: h
                .fault_windows()
                .into_iter()
                .map(|(s, e, w)| (secs(s), secs(e), w))
                .collect(),
            leader_kill_unavailability_s: leader_kill_unavailability(&h),
        };
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), &h, &results).expect("report");
        for f in [
            "history.jsonl",
            "results.json",
            "latency.svg",
            "throughput.svg",
            "timeline.html",
        ] {
            let meta = std::fs::metadata(dir.path().join(f)).expect(f);
            assert!(meta.len() > 0, "{f} is empty");
        }
        let back: Results = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("results.json")).expect("read"),
        )
        .expect("parse");
        assert_eq!(back.valid, Validity::True);
        assert!(
            std::fs::read_to_string(dir.path().join("latency.svg"))
                .expect("svg")
                .contains("<svg")
        );
    }
}
