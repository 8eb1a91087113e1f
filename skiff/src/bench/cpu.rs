//! The CPU time of a cluster's processes on this machine, for a benchmark's CPU per operation:
//! every `skiff` process by its role (its subcommand: the members, API servers, scheduler,
//! controller manager, node agents, and `skiff up` itself), user + system time from
//! `/proc/<pid>/stat`, read before and after the measured window. A process that starts
//! inside the window counts from zero; one that ends inside it is not counted. The machine
//! should run one cluster: every `skiff` process here counts.

use std::collections::BTreeMap;

/// The subcommands whose processes are counted, in the order they are printed.
const ROLES: &[&str] = &[
    "store",
    "apiserver",
    "controller-manager",
    "scheduler",
    "node",
    "up",
];

/// `/proc/<pid>/stat`'s times are in clock ticks of USER_HZ, 100 a second on Linux.
const TICKS_PER_SECOND: f64 = 100.0;

/// Each counted process's role and CPU seconds so far, by PID.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample(BTreeMap<u32, (&'static str, f64)>);

/// CPU seconds one role spent in a window, over how many processes.
#[derive(Debug, Clone, PartialEq)]
pub struct RoleCpu {
    pub role: &'static str,
    pub seconds: f64,
    pub processes: usize,
}

/// Prints `cpu`, a window's CPU by role, in total and per pod of `pods` (nothing when no
/// process was counted).
pub fn print_per_pod(cpu: &[RoleCpu], pods: usize) {
    if cpu.is_empty() {
        return;
    }
    let total: f64 = cpu.iter().map(|c| c.seconds).sum();
    let per_pod = |s: f64| s * 1e3 / pods.max(1) as f64;
    println!(
        "  CPU until then          {total:.1} s in the cluster's processes: {:.2} ms per pod",
        per_pod(total)
    );
    for c in cpu {
        println!(
            "    {:<22}{:>7.1} s  {:>6.3} ms per pod  ({} process{})",
            c.role,
            c.seconds,
            per_pod(c.seconds),
            c.processes,
            if c.processes == 1 { "" } else { "es" }
        );
    }
}

impl Sample {
    /// The `skiff` processes running now.
    pub fn now() -> Sample {
        let mut out = BTreeMap::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Sample(out);
        };
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let path = entry.path();
            let Some(role) = std::fs::read(path.join("cmdline"))
                .ok()
                .and_then(|c| role(&c))
            else {
                continue;
            };
            if let Some(cpu) = std::fs::read_to_string(path.join("stat"))
                .ok()
                .and_then(|s| cpu_seconds(&s))
            {
                out.insert(pid, (role, cpu));
            }
        }
        Sample(out)
    }

    /// The CPU each role spent from `before` to this sample, roles in [`ROLES`]' order.
    pub fn since(&self, before: &Sample) -> Vec<RoleCpu> {
        ROLES
            .iter()
            .filter_map(|&r| {
                let (seconds, processes) = self.0.iter().filter(|(_, (role, _))| *role == r).fold(
                    (0.0, 0),
                    |(s, n), (pid, (_, now))| {
                        let then = before.0.get(pid).map_or(0.0, |(_, t)| *t);
                        (s + (now - then).max(0.0), n + 1)
                    },
                );
                (processes > 0).then_some(RoleCpu {
                    role: r,
                    seconds,
                    processes,
                })
            })
            .collect()
    }
}

/// The role of a process from its command line (NUL-separated): its subcommand, the first
/// argument past the global flags (`--log X`, `--log-format X`), when the program is `skiff`
/// and the subcommand a counted one.
fn role(cmdline: &[u8]) -> Option<&'static str> {
    let mut args = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(String::from_utf8_lossy);
    let program = args.next()?;
    let name = std::path::Path::new(program.as_ref())
        .file_name()?
        .to_str()?;
    if !name.starts_with("skiff") {
        return None;
    }
    let sub = loop {
        let arg = args.next()?;
        if arg == "--log" || arg == "--log-format" {
            args.next()?;
        } else if !arg.starts_with('-') {
            break arg;
        }
    };
    ROLES.iter().copied().find(|r| *r == sub)
}

/// User + system CPU seconds from a `/proc/<pid>/stat` line: fields 14 and 15, counted
/// after the command name's closing parenthesis (the name may hold spaces).
fn cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / TICKS_PER_SECOND)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_user_and_system_time() {
        let stat = "4242 (tokio rt) worker) S 1 4242 4242 0 -1 4194560 2412 0 0 0 \
                    250 125 0 0 20 0 9 0 12345 1000000 500 18446744073709551615";
        assert_eq!(cpu_seconds(stat), Some(3.75));
        assert_eq!(cpu_seconds("garbage"), None);
    }

    #[test]
    fn roles_come_from_skiff_subcommands() {
        let cmd = |args: &[&str]| args.join("\0").into_bytes();
        assert_eq!(
            role(&cmd(&["/usr/bin/skiff", "store", "--name", "m0"])),
            Some("store")
        );
        assert_eq!(
            role(&cmd(&["skiff-new", "--log", "info", "scheduler"])),
            Some("scheduler")
        );
        assert_eq!(role(&cmd(&["skiff", "bench", "deployment"])), None);
        assert_eq!(role(&cmd(&["skiff", "bench", "scheduler"])), None);
        assert_eq!(role(&cmd(&["etcd", "store"])), None);
        assert_eq!(role(b""), None);
    }

    #[test]
    fn a_window_counts_each_roles_processes() {
        let before = Sample(BTreeMap::from([(1, ("store", 1.0)), (2, ("store", 2.0))]));
        let after = Sample(BTreeMap::from([
            (1, ("store", 1.5)),
            (2, ("store", 3.0)),
            (3, ("scheduler", 0.25)),
        ]));
        assert_eq!(
            after.since(&before),
            [
                RoleCpu {
                    role: "store",
                    seconds: 1.5,
                    processes: 2
                },
                RoleCpu {
                    role: "scheduler",
                    seconds: 0.25,
                    processes: 1
                }
            ]
        );
    }
}
